//! Regressions found by the cargo-fuzz targets in `fuzz/` (see docs/reliability.md), replayed
//! in the normal test suite.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use prism_client::{v3, v4};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Decodes `body`, serialises the value as a PUT would, and decodes that again.
fn round_trip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(body: &str) -> (T, T) {
    let first: T = serde_json::from_slice(body.as_bytes()).unwrap();
    let again: T = serde_json::from_slice(&serde_json::to_vec(&first).unwrap()).unwrap();
    (first, again)
}

/// prism_decode, crash-2e809f58: a 24-digit integer in an unknown field was parsed to an f64
/// one step off the nearest, so serialising and reading it again gave a different number: a
/// VM read, changed and PUT back would have altered a field it does not model.
#[test]
fn long_numbers_in_unknown_fields_survive_a_round_trip() {
    let body = r#"{"data": {"$objectType": 555555559555555555555555}}"#;
    let (first, again) = round_trip::<v4::Envelope<v4::Task>>(body);
    assert_eq!(first, again);

    let body = r#"{"metadata": {"kind": "vm", "uuid": "u", "spec_version": 3},
                   "spec": {"name": "m", "resources": {"num_sockets": 1, "num_vcpus_per_socket": 1, "memory_size_mib": 4096, "power_state": "ON"}, "ratio": 0.30000000000000004441, "big": 123456789012345678901234567890},
                   "weight": 1.7976931348623157e308}"#;
    let (first, again) = round_trip::<v3::Vm>(body);
    assert_eq!(first, again);
    let input = first.into_update_input().unwrap();
    let sent: serde_json::Value = serde_json::to_value(&input).unwrap();
    let read: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(sent["spec"]["ratio"], read["spec"]["ratio"]);
    assert_eq!(sent["spec"]["big"], read["spec"]["big"]);
}

/// Found by the prism_client_http target's bound on error messages (replayed by hand with a
/// long body before the fuzzer produced one): a 2xx body with a long string where a number
/// belongs became a decode error whose reason quoted the whole string, so one bad answer could
/// put kilobytes of Prism's body into a log line, an event or a Machine's status.
#[tokio::test]
async fn a_decode_error_stays_short_however_long_the_body() {
    let filler = "A".repeat(5_000);
    let body = format!(r#"{{"metadata": {{"kind": "vm", "spec_version": "{filler}"}}}}"#);
    let router = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { body }
    });
    let (addr, _) = common::serve(router).await;
    let client = prism_client::Client::new(common::http_config(addr)).unwrap();
    let error = client
        .get_vm("6f1c2a1e-3d4b-4c5d-8e9f-0a1b2c3d4e5f")
        .await
        .unwrap_err();
    assert!(
        matches!(error, prism_client::Error::Decode { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.chars().count() < 1_000,
        "{} characters",
        message.chars().count()
    );
    assert!(
        message.contains("cannot decode the response (200)"),
        "{message}"
    );
}
