//! The chaos soak's small version (issue 9): 10 Machines of every kind (template deploys,
//! Windows images, clones, Linux) scaled 0 → 10 → 0 with prism-mock's faults on (5xx, 429,
//! latency, failed tasks, "created then 500", dropped connections, expired sessions) and the
//! controller killed twice at moments its protocols must survive. The invariants: no Machine
//! ever had two VMs, no VM is left without a Machine, every Machine reached Running or Failed
//! with a reason, every deletion finished, no secret in any log, the controller never exited
//! unless killed. The full soak is `sandbox chaos` (docs/reliability.md). Each run's pictures
//! (`sandbox chaos --plots DIR`) are well-formed SVG with the expected lines, and every phase,
//! kill and Kubernetes fault of the report marked on them.

use sandbox::bench::sampling::{CallKind, PICTURES};
use sandbox::chaos::kube_faults::KubeFaultKind;
use sandbox::chaos::{self, ChaosOptions, ChaosReport, KubeFaultOptions};
use sandbox::plots::svg_texts;
use sandbox::world::ControllerCommand;

use crate::support;

/// The seed (prism-mock's fault draws and UUIDs, the kill timings): `CHAOS_SEED` replays a
/// failed run's seed, printed in its report.
fn seed() -> u64 {
    std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_129)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_machines_two_kills_faults_on_every_invariant_holds() {
    let temp = tempfile::tempdir().unwrap();
    let work_dir = std::env::var_os("E2E_WORK_DIR").map_or_else(
        || temp.path().to_path_buf(),
        |dir| std::path::PathBuf::from(dir).join("chaos"),
    );
    std::fs::create_dir_all(&work_dir).unwrap();
    let controller = ControllerCommand::binary(env!("CARGO_BIN_EXE_e2e-controller"));
    let mut options = ChaosOptions::small(controller, work_dir);
    options.seed = seed();
    let report = chaos::run(options).await;
    let rendered = report.render();
    println!("{rendered}");
    assert!(report.held(), "the chaos soak broke:\n{rendered}");
    assert_eq!(report.kills.len(), 2, "both kills happened:\n{rendered}");
    check_pictures(&report, &["resident memory"]);
}

/// Issue 35's short run on the real control plane: 10 Machines, two replicas with leader
/// election (lease 15 s), one fault of each Kubernetes kind (kube-apiserver and etcd killed and
/// started again, etcd compacted, APF throttling the controller's ServiceAccount, a slow,
/// resetting and black-holed path to the API server for one replica, Prism Central unreachable),
/// besides the Prism faults and two kills. The same invariants, and every fault struck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_control_plane_two_replicas_every_kubernetes_fault_once_every_invariant_holds() {
    let Some(binaries) = support::real_control_plane() else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let work_dir = std::env::var_os("E2E_WORK_DIR").map_or_else(
        || temp.path().to_path_buf(),
        |dir| std::path::PathBuf::from(dir).join("chaos-real"),
    );
    std::fs::create_dir_all(&work_dir).unwrap();
    let controller = ControllerCommand::binary(env!("CARGO_BIN_EXE_e2e-controller"));
    let mut options = ChaosOptions::small(controller, work_dir)
        .on_real_control_plane(binaries, KubeFaultOptions::small());
    options.seed = seed();
    let report = chaos::run(options).await;
    let rendered = report.render();
    println!("{rendered}");
    assert!(report.held(), "the chaos soak broke:\n{rendered}");
    assert_eq!(report.replicas, 2);
    for kind in KubeFaultKind::ALL {
        assert_eq!(
            report.kube_faults.iter().filter(|f| f.kind == kind).count(),
            1,
            "{kind} struck once:\n{rendered}"
        );
    }
    check_pictures(&report, &["replica-0", "replica-1"]);
}

/// What `sandbox chaos --plots` writes for `report`: its JSON, with every kill and fault, and
/// the four pictures, well-formed SVG, each with its title, its lines (the memory chart's named
/// `memory_lines`) and a mark for each phase, kill (`kill`, or `kill replica-<i>` with several
/// replicas) and Kubernetes fault (its kind, and the replica whose path it cut) of the report,
/// from samples that saw the Machines Running and Prism's creates and deletes.
fn check_pictures(report: &ChaosReport, memory_lines: &[&str]) {
    let samples = &report.samples;
    let calls = |kind: CallKind| samples.prism.iter().filter(|(_, k)| *k == kind).count();
    assert!(
        calls(CallKind::Create) >= report.machines,
        "{:?}",
        samples.prism
    );
    assert!(calls(CallKind::Delete) >= report.machines - report.deleted_early.len());
    assert!(
        samples
            .samples
            .iter()
            .any(|s| s.phases.get("Running").is_some_and(|n| *n > 0))
    );
    assert!(samples.samples.last().unwrap().kube_writes > 0);

    let dir = tempfile::tempdir().unwrap();
    let files = chaos::write_plots(dir.path(), report).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("chaos.json")).unwrap())
            .unwrap();
    assert_eq!(json["held"], true);
    assert_eq!(json["kills"].as_array().unwrap().len(), report.kills.len());
    assert_eq!(
        json["kube_faults"].as_array().unwrap().len(),
        report.kube_faults.len()
    );

    let mut marks = vec!["scale-up".to_owned(), "scale-down".to_owned()];
    marks.extend(report.kills.iter().map(|kill| match kill.replica {
        Some((replica, _)) => format!("kill replica-{replica}"),
        None => "kill".to_owned(),
    }));
    marks.extend(report.kube_faults.iter().map(|fault| match fault.replica {
        Some((replica, _)) => format!("{} replica-{replica}", fault.kind.short()),
        None => fault.kind.short().to_owned(),
    }));
    let lines: [&[&str]; 4] = [
        &["Machines by phase", "Running"],
        &[
            "Prism calls per second by kind",
            "create",
            "read",
            "list",
            "delete",
        ],
        &["The provider's Kubernetes writes per second", "writes"],
        &["The provider's resident memory"],
    ];
    assert_eq!(files.len(), PICTURES.len() + 1);
    for (index, (file, wanted)) in files.iter().zip(lines).enumerate() {
        let texts = svg_texts(&std::fs::read_to_string(file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let memory = if index == 3 { memory_lines } else { &[] };
        for text in wanted
            .iter()
            .chain(memory)
            .copied()
            .chain(marks.iter().map(String::as_str))
        {
            assert!(
                texts.iter().any(|t| t == text),
                "{}: no {text:?} in {texts:?}",
                file.display()
            );
        }
    }
}
