//! Credentials problems are explained on the Machine, and a corrected Secret is used at once,
//! without a restart and without waiting out the backoff that the failures earned.

use std::time::{Duration, Instant};

use prism_mock::MockConfig;
use serde_json::Value;

use crate::harness::{Env, PRISM_PASSWORD, TIMEOUT, credentials_json, linux_spec};

const WRONG_PASSWORD: &str = "stale-password-41c7";

/// The Machine's `MachineCreation` condition (providerStatus).
fn creation(machine: &Value) -> Option<&Value> {
    machine["status"]["providerStatus"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "MachineCreation")
}

/// Failed reconciles of a Machine so far, from the controller's log.
fn failures(env: &Env, machine: &str) -> usize {
    env.all_logs()
        .iter()
        .filter(|line| line.contains("reconcile failed") && line.contains(machine))
        .count()
}

#[tokio::test]
async fn a_refused_password_is_explained_and_its_fix_is_used_at_once() {
    let mut env = Env::start_with(MockConfig::default(), WRONG_PASSWORD).await;
    env.start_nodelink();
    let mut controller = env.controller("controller", &[]);
    env.create_machine("rotate-0", linux_spec(), false).await;

    // Prism refuses the stale password: `oc describe machine` shows why, and what to do.
    let (_, kind, note) = env
        .wait_event("rotate-0", "FailedCreate", "unauthorized (401)")
        .await;
    assert_eq!(kind, "Warning");
    assert!(
        note.contains("Fix:") && note.contains("key credentials"),
        "{note}"
    );
    assert!(env.vms_named("rotate-0").is_empty());
    // ... and `oc get machine` shows it Provisioning, its MachineCreation condition why.
    let machine = env
        .wait_machine("rotate-0", "MachineCreation CredentialsRefused", |m| {
            creation(m).is_some_and(|c| c["reason"] == "CredentialsRefused")
        })
        .await;
    assert_eq!(machine["status"]["phase"], "Provisioning");
    let condition = creation(&machine).cloned().unwrap_or_default();
    assert_eq!(condition["status"], "False");
    let message = condition["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("credentials Secret openshift-machine-api/nutanix-credentials (401)")
            && message.contains("correct key credentials"),
        "{message}"
    );
    assert!(!message.contains(WRONG_PASSWORD), "{message}");

    // Five failures: the next attempt is 16 s away (backoff 1 s, doubling).
    let deadline = Instant::now() + TIMEOUT;
    while failures(&env, "rotate-0") < 5 {
        assert!(
            Instant::now() < deadline,
            "the reconcile did not keep failing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.put_secret(
        "nutanix-credentials",
        "credentials",
        &credentials_json(PRISM_PASSWORD),
    )
    .await;
    let fixed = Instant::now();
    env.wait_phase("rotate-0", "Running").await;
    let took = fixed.elapsed();
    assert!(
        took < Duration::from_secs(12),
        "the corrected Secret waited out the backoff ({took:?}): it must be used at once"
    );
    assert_eq!(env.vms_named("rotate-0").len(), 1);
    let machine = env.machine("rotate-0").unwrap_or_default();
    assert_eq!(
        creation(&machine).map(|c| c["reason"].clone()),
        Some("MachineCreationSucceeded".into()),
        "the fixed Machine no longer shows the refusal"
    );
    assert!(controller.exited().is_none(), "no restart");
    let events = env.events_of("rotate-0");
    assert!(
        events
            .iter()
            .all(|(_, _, note)| !note.contains(WRONG_PASSWORD)),
        "{events:?}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|(reason, _, _)| reason == "FailedCreate")
            .count(),
        1,
        "the same failure is one event, its repeats counted: {events:?}"
    );
    assert!(env.event_count("rotate-0", "FailedCreate") >= 5);
    env.assert_no_secrets_logged(&[WRONG_PASSWORD.to_owned()]);
}

#[tokio::test]
async fn a_credentials_secret_without_its_key_is_explained_on_the_machine() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let _controller = env.controller("controller", &[]);
    env.put_secret(
        "broken-credentials",
        "creds",
        &credentials_json(PRISM_PASSWORD),
    )
    .await;
    let mut spec = linux_spec();
    spec["credentialsSecret"]["name"] = "broken-credentials".into();
    env.create_machine("nokey-0", spec, false).await;

    let (_, _, note) = env
        .wait_event("nokey-0", "FailedCreate", "has no key \"credentials\"")
        .await;
    assert!(
        note.contains("Fix: put the Prism Central credentials under key credentials of Secret openshift-machine-api/broken-credentials"),
        "{note}"
    );
    assert!(
        !note.contains(PRISM_PASSWORD),
        "the note names the Secret, never its content: {note}"
    );
    let machine = env
        .wait_machine("nokey-0", "MachineCreation CredentialsSecretInvalid", |m| {
            creation(m).is_some_and(|c| c["reason"] == "CredentialsSecretInvalid")
        })
        .await;
    assert_eq!(machine["status"]["phase"], "Provisioning");
    let message = creation(&machine)
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default();
    assert!(
        message.contains("openshift-machine-api/broken-credentials has no key credentials"),
        "{message}"
    );

    env.put_secret(
        "broken-credentials",
        "credentials",
        &credentials_json(PRISM_PASSWORD),
    )
    .await;
    env.wait_phase("nokey-0", "Running").await;
    assert_eq!(env.vms_named("nokey-0").len(), 1);
}

#[tokio::test]
async fn a_missing_credentials_secret_is_explained_on_the_machine() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let _controller = env.controller("controller", &[]);
    let mut spec = linux_spec();
    spec["credentialsSecret"]["name"] = "absent-credentials".into();
    env.create_machine("nosecret-0", spec, false).await;

    let (_, kind, note) = env
        .wait_event(
            "nosecret-0",
            "FailedCreate",
            "Secret openshift-machine-api/absent-credentials not found",
        )
        .await;
    assert_eq!(kind, "Warning");
    assert!(note.contains("Fix: create Secret"), "{note}");
    let machine = env
        .wait_machine(
            "nosecret-0",
            "MachineCreation CredentialsSecretMissing",
            |m| creation(m).is_some_and(|c| c["reason"] == "CredentialsSecretMissing"),
        )
        .await;
    assert_eq!(machine["status"]["phase"], "Provisioning");
    let condition = creation(&machine).cloned().unwrap_or_default();
    assert_eq!(condition["status"], "False");
    let message = condition["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("credentials Secret openshift-machine-api/absent-credentials not found")
            && message.contains("create it with key credentials"),
        "{message}"
    );

    env.put_secret(
        "absent-credentials",
        "credentials",
        &credentials_json(PRISM_PASSWORD),
    )
    .await;
    env.wait_phase("nosecret-0", "Running").await;
    assert_eq!(env.vms_named("nosecret-0").len(), 1);
}

#[tokio::test]
async fn a_service_account_api_key_is_accepted_in_place_of_a_password() {
    let mut env = Env::start().await;
    env.start_nodelink();
    // prism-go-client's shape (environment/credentials/parsecreds_test.go); prism-mock accepts
    // its configured key in `X-Ntnx-Api-Key`, as prism-go-client sends it.
    let key = env
        .mock
        .credentials()
        .api_key
        .clone()
        .expect("the mock accepts an API key");
    env.put_secret(
        "nutanix-credentials",
        "credentials",
        &format!(r#"[{{"type":"api_key","data":{{"prismCentral":{{"apiKey":"{key}"}}}}}}]"#),
    )
    .await;
    let _controller = env.controller("controller", &[]);
    env.create_machine("keyed-0", linux_spec(), false).await;
    env.wait_phase("keyed-0", "Running").await;
    assert_eq!(env.vms_named("keyed-0").len(), 1);
    env.assert_no_secrets_logged(&[key]);
}
