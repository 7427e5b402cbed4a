//! One Prism Central, several credentials: a client made with other credentials sends them, and
//! shares the first client's rate limit.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use prism_client::{AuthMode, Client, Credentials};

use common::{PASSWORD, USERNAME, base64_encode, http_config, serve, vm_json};

#[tokio::test]
async fn a_client_with_other_credentials_sends_them_and_shares_the_rate_limit() {
    // Prism throttles one user's calls: the 429 slows every client of this Prism Central.
    let router = Router::new().route(
        "/api/nutanix/v3/vms/{uuid}",
        get(|headers: HeaderMap| async move {
            let user = headers
                .get("authorization")
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            if user == format!("Basic {}", base64_encode("other:secret")) {
                (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "0")], "").into_response()
            } else {
                axum::Json(vm_json("u1", "vm")).into_response()
            }
        }),
    );
    let (addr, seen) = serve(router).await;
    let first = Client::new(http_config(addr)).unwrap();
    let other = first
        .with_credentials(&Credentials::basic("other", "secret"), AuthMode::PerRequest)
        .unwrap();
    let before = first.rate_limit_per_second();
    assert!(other.get_vm("u1").await.is_err(), "throttled");
    assert!(
        first.rate_limit_per_second() < before,
        "the first client slowed down too: {} then {}",
        before,
        first.rate_limit_per_second()
    );
    assert_eq!(first.rate_limit_per_second(), other.rate_limit_per_second());
    first.get_vm("u1").await.unwrap();
    let senders: Vec<String> = seen
        .to("GET", "/api/nutanix/v3/vms/u1")
        .iter()
        .map(|request| {
            request
                .header("authorization")
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert!(senders.len() >= 2);
    assert_eq!(
        senders.last().unwrap(),
        &format!("Basic {}", base64_encode(&format!("{USERNAME}:{PASSWORD}")))
    );
    assert!(senders.contains(&format!("Basic {}", base64_encode("other:secret"))));
}
