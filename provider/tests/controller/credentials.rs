//! A rotated credentials Secret is used without a restart.

use prism_mock::MockConfig;

use crate::harness::{Env, PRISM_PASSWORD, credentials_json, linux_spec};

const WRONG_PASSWORD: &str = "stale-password-41c7";

#[tokio::test]
async fn rotated_credentials_are_picked_up_without_a_restart() {
    let mut env = Env::start_with(MockConfig::default(), WRONG_PASSWORD).await;
    env.start_nodelink();
    let mut controller = env.controller("controller", &[]);
    env.create_machine("rotate-0", linux_spec(), false).await;

    // Prism refuses the stale password; the Machine waits (retried with backoff).
    let deadline = std::time::Instant::now() + crate::harness::TIMEOUT;
    while env.mock.admin().counters().iter().all(|c| c.status != 401) {
        assert!(std::time::Instant::now() < deadline, "no 401 from Prism");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    controller.wait_log("unauthorized").await;
    assert!(env.vms_named("rotate-0").is_empty());

    env.put_secret(
        "nutanix-credentials",
        "credentials",
        &credentials_json(PRISM_PASSWORD),
    )
    .await;
    env.wait_phase("rotate-0", "Running").await;
    assert_eq!(env.vms_named("rotate-0").len(), 1);
    assert!(controller.exited().is_none(), "no restart");
    env.assert_no_secrets_logged(&[WRONG_PASSWORD.to_owned()]);
}
