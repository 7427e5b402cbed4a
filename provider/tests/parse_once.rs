//! A reconcile reads a Machine's providerSpec once (issue 27): the Machine controller runs in
//! this process against kube-sim and prism-mock, and the process-wide count of providerSpec
//! reads is compared with the count of reconciles over a whole create. A test binary of its
//! own, so that no other test's reads are counted.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

#[path = "shell/controller.rs"]
mod controller;
#[path = "controller/harness.rs"]
#[allow(
    dead_code,
    reason = "shared with the subprocess tests; this test uses a part of it"
)]
mod harness;
#[path = "support/rbac.rs"]
mod rbac;

use controller::InProcessController;
use harness::{Env, linux_spec};
use nutanix_machine_controller::api::provider_spec_reads;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_reads_the_provider_spec_once() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let controller = InProcessController::start(&env, "controller").await;
    let reads_before = provider_spec_reads();
    let reconciles_before = controller.reconciles();
    env.create_machine("parse-0", linux_spec(), false).await;
    env.wait_phase("parse-0", "Running").await;

    // A create from an image takes several reconciles (finalizer, UUID, create, task, Node):
    // each reads the spec once, when its snapshot is taken. A reconcile still running has
    // read it but is not counted yet, so the counts are compared between reconciles (a
    // Running Machine is looked at every 2 s, for a few milliseconds).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (reads, reconciles) = loop {
        let reads = provider_spec_reads() - reads_before;
        let reconciles = controller.reconciles() - reconciles_before;
        if reads == reconciles || std::time::Instant::now() > deadline {
            break (reads, reconciles);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    env.assert_permissions(&controller.user);
    controller.stop().await;
    assert!(
        reconciles >= 3,
        "only {reconciles} reconciles for a whole create"
    );
    assert_eq!(
        reads, reconciles,
        "reads of the providerSpec, against reconciles"
    );
}
