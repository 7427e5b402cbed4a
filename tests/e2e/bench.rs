//! The scale benchmark's library, small: 6 Linux Machines scaled 0 → 6 → 0 with prism-mock's test
//! delays. Not a measurement (the numbers are in docs/performance.md, from `sandbox bench`): it
//! checks that a run completes every phase and that what must hold whatever the timing holds:
//! each Machine's own VM costs little more than its create (waits share one listing), a restarted controller
//! writes nothing to Prism or Kubernetes, a Running Machine in steady state makes no Prism call of
//! its own, the whole create stays within issue 9's budget of 6 Prism calls per Machine (shared
//! lookups included), and each deletion sends one DELETE. Its pictures are well-formed SVG with
//! the expected lines, from what the run sampled.

use std::time::Duration;

use prism_mock::Timings;
use sandbox::bench::sampling::{CallKind, PICTURES, write_pictures};
use sandbox::bench::{self, BenchKind, BenchOptions};
use sandbox::plots::svg_texts;
use sandbox::world::{ControllerCommand, ControllerIntervals};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_benchmark_runs_every_phase_within_the_call_budget() {
    let mut options = BenchOptions::new(6, BenchKind::Image);
    options.timings = Timings::for_tests();
    options.scale_intervals = ControllerIntervals::tests();
    options.steady = Duration::from_secs(3);
    options.phase_timeout = Duration::from_secs(120);
    let controller = ControllerCommand::binary(env!("CARGO_BIN_EXE_e2e-controller"));
    let report = bench::run(&options, controller, None).await.unwrap();
    println!("{}", report.render());

    let up = &report.scale_up;
    assert_eq!(up.calls.machines, 6);
    assert!(
        up.calls.per_machine <= 6.0,
        "{} Prism calls per Machine",
        up.calls.per_machine
    );
    // One create per VM; the waits are served by the shared listing (a task is read directly
    // only when its VM has not been listed after three requeue intervals, as can happen on a
    // loaded machine).
    assert_eq!(up.calls.per_vm_min, 1, "{:?}", up.calls);
    assert!(up.calls.per_vm_max <= 3, "{:?}", up.calls);
    let restart = report.restart.as_ref().unwrap();
    assert_eq!(
        (restart.prism_writes, restart.kube_writes),
        (0, 0),
        "writes after a restart: {:?}",
        restart.kube_write_targets
    );
    let delete = report.delete.as_ref().unwrap();
    assert_eq!(delete.calls.machines, 6);
    // One DELETE per Machine, whatever the timing (how many looks Prism's delete takes to end
    // depends on it: the budget of 3 calls per deleted Machine is measured, docs/performance.md).
    let deletes = delete
        .calls
        .endpoints
        .iter()
        .find(|e| e.method == "DELETE" && e.endpoint == "/api/nutanix/v3/vms/{uuid}");
    assert_eq!(deletes.map(|e| e.total), Some(6), "{:?}", delete.calls);
    // A Running Machine in steady state is checked against the shared listing: no Prism call
    // names its VM.
    let steady = report.steady.as_ref().unwrap();
    assert_eq!(steady.calls.attributed, 0, "{:?}", steady.calls);
    assert!(
        report
            .controller_processes
            .iter()
            .all(|p| p.peak_rss_mib > 0.0),
        "{:?}",
        report.controller_processes
    );

    // The pictures, from what the run sampled: six creates and six deletes among Prism's calls,
    // the Machines Running at some point, the controller's memory and writes.
    let samples = &report.samples;
    let count = |kind: CallKind| samples.prism.iter().filter(|(_, k)| *k == kind).count();
    assert!(count(CallKind::Create) >= 6, "{:?}", samples.prism);
    assert_eq!(count(CallKind::Delete), 6);
    assert!(
        samples
            .samples
            .iter()
            .any(|s| s.phases.get("Running") == Some(&6))
    );
    assert!(samples.samples.iter().all(|s| s.at >= 0.0));
    assert!(samples.samples.iter().any(|s| s.rss_mib[0].is_some()));
    assert!(samples.samples.last().unwrap().kube_writes > 0);
    let dir = tempfile::tempdir().unwrap();
    let files = write_pictures(dir.path(), &samples.charts()).unwrap();
    assert_eq!(files.len(), PICTURES.len());
    let expected: [&[&str]; 4] = [
        &["Machines by phase", "Running"],
        &[
            "Prism calls per second by kind",
            "create",
            "read",
            "list",
            "delete",
        ],
        &["The provider's Kubernetes writes per second", "writes"],
        &["The provider's resident memory", "resident memory"],
    ];
    for (file, wanted) in files.iter().zip(expected) {
        let texts = svg_texts(&std::fs::read_to_string(file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for text in wanted.iter().chain(&["scale-up", "restart", "scale-down"]) {
            assert!(
                texts.iter().any(|t| t == text),
                "{}: no {text:?} in {texts:?}",
                file.display()
            );
        }
    }
}
