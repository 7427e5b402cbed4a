//! A Running Machine in steady state: reconciles, on its schedule and on an unrelated change,
//! write nothing to the Machine and call Prism for nothing of its VM.

use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::controller::{InProcessController, REQUEUE, RUNNING};
use crate::harness::{Env, TIMEOUT, linux_spec};
use crate::journal::{Journal, Span};

/// How long nothing of the Machine's may happen before it counts as settled: more than one
/// look at a Running Machine.
const QUIET: Duration = Duration::from_millis(2_500);
/// How long a Running Machine may take to settle: a write or call that recurs at every look
/// never lets it, and fails the test here.
const SETTLE: Duration = Duration::from_secs(15);

/// The controller's writes to Machine `name` and the Prism calls about VM `uuid`.
fn activity<'j>(journal: &'j Journal, name: &str, uuid: &str) -> Vec<&'j dyn Span> {
    let writes = journal
        .kube
        .iter()
        .filter(|k| k.is_write() && k.0.record.resource == "machines" && k.0.record.name == name)
        .map(|k| k as &dyn Span);
    let calls = journal
        .prism
        .iter()
        .filter(|p| p.vm() == Some(uuid))
        .map(|p| p as &dyn Span);
    writes.chain(calls).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_machine_is_reconciled_without_any_write_or_prism_call_of_its_own() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let controller = InProcessController::start(&env, "controller").await;
    env.create_machine("steady-0", linux_spec(), false).await;
    let machine = env
        .wait_machine("steady-0", "Running with its Node", |m: &Value| {
            m["status"]["phase"] == "Running" && m["status"]["nodeRef"]["name"].is_string()
        })
        .await;
    let uuid = machine["status"]["providerStatus"]["vmUUID"]
        .as_str()
        .unwrap()
        .to_owned();
    let users = [controller.user.as_str()];

    // Settled: the last write or call of its own is a while ago.
    let deadline = Instant::now() + SETTLE;
    loop {
        let journal = Journal::of(&env, "steady-0", &users);
        let last = activity(&journal, "steady-0", &uuid)
            .iter()
            .map(|s| s.end())
            .max();
        if last.is_some_and(|last| last.elapsed() > QUIET) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the Running Machine kept writing or calling Prism for its VM; journal:\n{}",
            journal.render()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let since = Instant::now();
    let reconciles = controller.reconciles();
    env.machines_api()
        .patch(
            "steady-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"example.com/unrelated": "touched"}}})),
        )
        .await
        .unwrap();
    // Two looks on its schedule besides the one the label change triggers.
    let window = 2 * RUNNING + REQUEUE;
    while since.elapsed() < window || controller.reconciles() < reconciles + 3 {
        assert!(
            since.elapsed() < TIMEOUT,
            "the Machine was not reconciled again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let journal = Journal::of(&env, "steady-0", &users);
    let after: Vec<_> = activity(&journal, "steady-0", &uuid)
        .into_iter()
        .filter(|s| s.start() > since)
        .collect();
    assert!(
        after.is_empty(),
        "{} reconciles of the Running Machine wrote or called:\n{}\njournal:\n{}",
        controller.reconciles() - reconciles,
        after
            .iter()
            .map(|s| s.describe(since))
            .collect::<Vec<_>>()
            .join("\n"),
        journal.render()
    );
    controller.stop().await;
}
