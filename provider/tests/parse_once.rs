//! A reconcile reads a Machine's providerSpec once (issue 27): the Machine controller runs in
//! this process against kube-sim and prism-mock with a [`SpecReader`] of the test's that counts
//! the reads it makes, compared with the count of reconciles over a whole create.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

#[path = "shell/controller.rs"]
#[allow(
    dead_code,
    reason = "shared with the shell tests; this test starts it with its own reader"
)]
mod controller;
#[path = "controller/harness.rs"]
#[allow(
    dead_code,
    reason = "shared with the subprocess tests; this test uses a part of it"
)]
mod harness;
#[path = "support/rbac.rs"]
mod rbac;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use controller::InProcessController;
use harness::{Env, linux_spec};
use nutanix_machine_controller::api::Machine;
use nutanix_machine_controller::plan::vm::spec::{ParsedSpec, SpecReader};

/// Reads providerSpecs as the controller does, counting the reads.
#[derive(Debug, Default)]
struct CountingReader {
    reads: AtomicU64,
}

impl SpecReader for CountingReader {
    fn read(&self, machine: &Machine) -> ParsedSpec {
        self.reads.fetch_add(1, Ordering::Relaxed);
        ParsedSpec::of(machine)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_reads_the_provider_spec_once() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let reader = Arc::new(CountingReader::default());
    let controller =
        InProcessController::start_with(&env, "controller", controller::POLL, reader.clone()).await;
    let reads_before = reader.reads.load(Ordering::Relaxed);
    let reconciles_before = controller.reconciles();
    env.create_machine("parse-0", linux_spec(), false).await;
    env.wait_phase("parse-0", "Running").await;

    // A create from an image takes several reconciles (finalizer, UUID, create, task, Node):
    // each reads the spec once, when its snapshot is taken. A reconcile still running has
    // read it but is not counted yet, so the counts are compared between reconciles (a
    // Running Machine is looked at every 2 s, for a few milliseconds).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (reads, reconciles) = loop {
        let reads = reader.reads.load(Ordering::Relaxed) - reads_before;
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
