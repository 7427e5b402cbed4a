//! Regressions found while fuzzing (the cargo-fuzz targets in `fuzz/`, see docs/reliability.md),
//! replayed in the normal test suite.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use jiff::Timestamp;
use k8s_openapi::api::core::v1::NodeAddress;
use nutanix_machine_controller::plan::windows_join::csr::{
    CLIENT_SIGNER, Csr, CsrContext, CsrVerdict, MachineFacts, NODE_BOOTSTRAPPER, check_csr,
};

fn client_csr(created: Timestamp) -> Csr {
    let strings = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect();
    Csr {
        name: "csr-1".into(),
        signer_name: CLIENT_SIGNER.into(),
        username: NODE_BOOTSTRAPPER.into(),
        groups: strings(&[
            "system:serviceaccounts:openshift-machine-config-operator",
            "system:serviceaccounts",
            "system:authenticated",
        ]),
        usages: strings(&["digital signature", "client auth"]),
        created: Some(created),
        common_name: "system:node:win-abcde".into(),
        organizations: strings(&["system:nodes"]),
        ..Csr::default()
    }
}

fn machine(created: Timestamp) -> MachineFacts {
    MachineFacts {
        name: "win-abcde".into(),
        created: Some(created),
        addresses: vec![NodeAddress {
            type_: "InternalDNS".into(),
            address: "win-abcde".into(),
        }],
        node_ref: None,
    }
}

/// Found while writing the addresses_csr target (whose timestamps now include the ends of
/// jiff's range; the fuzzer itself had not reached this path in 2 × 10 minutes): a Machine
/// created within 2 h of the latest representable instant, or 10 s of the earliest, made the
/// approval window's arithmetic overflow, and jiff's operators panic on overflow.
#[test]
fn a_machine_created_at_the_ends_of_time_gets_a_verdict() {
    for (machine_created, csr_created) in [
        (Timestamp::MAX, Timestamp::MAX),
        (Timestamp::MAX, Timestamp::MIN),
        (Timestamp::MIN, Timestamp::MIN),
        (Timestamp::MIN, Timestamp::MAX),
    ] {
        let machines = [machine(machine_created)];
        let verdict = check_csr(
            &client_csr(csr_created),
            &CsrContext {
                machines: &machines,
                node_names: &[],
                recent_pending: 0,
                current_serving_cert: None,
            },
        );
        assert!(
            matches!(verdict, CsrVerdict::Pending { .. }),
            "{machine_created} / {csr_created}: {verdict:?}"
        );
    }
    // Just inside the window, at the end of time, it is still approvable.
    let machine_created = Timestamp::MAX - jiff::SignedDuration::from_hours(1);
    let machines = [machine(machine_created)];
    let verdict = check_csr(
        &client_csr(machine_created + jiff::SignedDuration::from_mins(30)),
        &CsrContext {
            machines: &machines,
            node_names: &[],
            recent_pending: 0,
            current_serving_cert: None,
        },
    );
    assert!(
        matches!(verdict, CsrVerdict::Approvable { .. }),
        "{verdict:?}"
    );
}

/// Found while reading the quantity parser for the provider_spec target (which now also feeds
/// short inputs to it; the fuzzer had not produced this input): an exponent near `i32::MIN`
/// together with a fraction overflowed `exponent - fraction_digits`, a panic in debug builds
/// and, wrapped around in release builds, "too large" for a number smaller than one byte.
#[test]
fn a_quantity_with_the_smallest_exponent_and_a_fraction_rounds_up_to_one() {
    use nutanix_machine_controller::api::quantity::parse_units;
    assert_eq!(parse_units("1.5e-2147483648"), Ok(1));
    assert_eq!(parse_units("0.0e-2147483648"), Ok(0));
    assert!(parse_units("1.5e2147483647").is_err());
}
