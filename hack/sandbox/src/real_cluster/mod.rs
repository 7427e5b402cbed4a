//! A real control plane on loopback: etcd, kube-apiserver and kube-controller-manager from
//! `k8s.io/kubernetes`, and the machine-api-operator's own `machineset` (the MachineSet
//! controller, serving the Machine and MachineSet webhooks), `nodelink-controller` and
//! `machine-healthcheck`, all built by `hack/real-cluster/build.sh` at pinned versions. The
//! CRDs are openshift/api's own manifests, copied unedited by the build from the module cache.
//!
//! What has no real counterpart here (kubelets and their CSRs, WMCO, Prism Central, the
//! cluster-machine-approver, which the Go module proxy does not serve) stays simulated and talks
//! to this API server like any client.
//!
//! Every process binds to `127.0.0.1` where it has a flag for it, and is killed when the
//! [`ControlPlane`] is dropped (also when a test fails).
//!
//! By idea: `start` (the start sequence), `process` (each program supervised, with its log),
//! `ports`, `pki`, `clients` (kubeconfigs, identities), `apply` (CRDs, objects, kustomizations),
//! `webhooks` (MAO's, registered), `seed` (the objects the cluster starts with), `faults` (the
//! control plane's own failures, on demand).

mod apply;
mod binaries;
mod clients;
mod error;
mod faults;
mod pki;
mod ports;
mod process;
mod seed;
mod start;
mod webhooks;

use std::path::PathBuf;

pub use apply::create;
pub use binaries::Binaries;
pub use clients::{client_of, client_of_identity};
pub use error::RealClusterError;
use error::{api_error, io_error};
pub use faults::THROTTLE_NAME;
pub use pki::Pki;
use process::Process;
pub use seed::{NODE_BOOTSTRAPPER, NODE_BOOTSTRAPPER_NAMESPACE, STAND_IN_USERS};

/// The administrator's user name (its client certificate's CommonName, in `system:masters`).
pub const ADMIN_USER: &str = "real-cluster-admin";

/// The environment variable naming the build's cache directory (what `build.sh` prints).
pub const DIR_VARIABLE: &str = "REAL_CLUSTER_DIR";

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The running control plane. Dropping it kills every process.
#[derive(Debug)]
pub struct ControlPlane {
    /// Behind a lock so that [`ControlPlane::check_running`] works through `&self`.
    processes: std::sync::Mutex<Vec<Process>>,
    dir: PathBuf,
    url: String,
    /// etcd's client URL (plain HTTP on loopback).
    etcd_url: String,
    pki: Pki,
    admin_kubeconfig: PathBuf,
    binaries: Binaries,
    namespace: String,
}
