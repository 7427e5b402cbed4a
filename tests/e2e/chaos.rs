//! The chaos soak's small version (issue 9): 10 Machines of every kind (template deploys,
//! Windows images, clones, Linux) scaled 0 → 10 → 0 with prism-mock's faults on (5xx, 429,
//! latency, failed tasks, "created then 500", dropped connections, expired sessions) and the
//! controller killed twice at moments its protocols must survive. The invariants: no Machine
//! ever had two VMs, no VM is left without a Machine, every Machine reached Running or Failed
//! with a reason, every deletion finished, no secret in any log, the controller never exited
//! unless killed. The full soak is `sandbox chaos` (docs/reliability.md).

use sandbox::chaos::kube_faults::KubeFaultKind;
use sandbox::chaos::{self, ChaosOptions, KubeFaultOptions};
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
}
