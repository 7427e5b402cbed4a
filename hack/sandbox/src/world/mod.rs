//! The simulated world the scenario runs in, reusable by tests, benchmarks and chaos runs:
//! prism-mock (HTTPS) and kube-sim in-process, the CRDs, the Infrastructure object, Secrets and
//! the examples applied, the simulated actors running, and the Nutanix machine controller as a
//! separate process that can be killed and restarted.
//!
//! ```no_run
//! # async fn demo() -> Result<(), sandbox::world::WorldError> {
//! use std::time::Duration;
//! use sandbox::world::{ControllerCommand, World, WorldOptions};
//! let world = World::start(WorldOptions::sandbox(ControllerCommand::binary("nutanix-machine-controller"))).await?;
//! world.scale("win-image", 2).await?;
//! world.wait_until("2 joined", Duration::from_secs(60), |s| s.set_joined("win-image", 2)).await?;
//! world.kill_controller().await?;
//! world.restart_controller().await?;
//! world.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! By idea: `options`, `start` (the start sequence), `sim` (kube-sim's start) and `cluster` (either
//! control plane), `seed` (the Secrets and examples given through the API), `controller` and
//! `replicas` (the controller's processes), `observe` (snapshots, history, waits), `shutdown`.

mod api_paths;
mod cluster;
mod controller;
mod error;
mod history;
mod observe;
mod openshift;
mod options;
mod replicas;
mod seed;
mod shutdown;
mod sim;
mod snapshot;
mod start;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube_sim::RunningKubeSim;
use nutanix_machine_controller::api::MachineSet;
use prism_mock::{Admin, Counter, RunningMock};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::actor::ActorHandle;
use crate::approver::ApproverHandle;
use crate::autoscaler::Autoscaler;
use crate::node_agent::NodeAgentHandle;
use cluster::Cluster;
pub use cluster::{CONTROLLER_SERVICE_ACCOUNT, ControlPlaneChoice};
pub use controller::{ControllerCommand, ControllerIntervals, Provider};
pub use controller::{ControllerLaunch, ControllerProcess};
pub use error::WorldError;
use error::{api_error, io_error};
pub use history::{History, MachineRecord};
use observe::{Observed, Sources};
pub use options::{ProgressSink, WorldOptions};
use replicas::Replicas;
pub use replicas::replica_pod_name;
pub use seed::{
    LINUX_USER_DATA_MARKER, WINDOWS_USER_DATA_MARKER, apply_examples, linux_user_data,
    windows_user_data, write_secrets,
};
pub use snapshot::{Snapshot, join_condition, machine_set_of, provider_condition, stage_label};

/// The running world. Dropping it kills the controller and stops everything, without waiting;
/// [`World::shutdown`] waits.
pub struct World {
    options: WorldOptions,
    work_dir: PathBuf,
    temp_dir: Option<tempfile::TempDir>,
    mock: RunningMock,
    cluster: Cluster,
    client: Client,
    sources: Arc<Sources>,
    observed: Arc<Mutex<Observed>>,
    observer: AbortOnDrop,
    actors: Vec<ActorHandle>,
    approver: ApproverHandle,
    autoscaler: Autoscaler,
    /// The first replica's launch (its log is `controller.log`).
    launch: ControllerLaunch,
    /// Each replica's own path to the real API server, when the options ask for them.
    api_proxies: Vec<crate::api_proxy::ApiProxy>,
    controller: tokio::sync::Mutex<Replicas>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("work_dir", &self.work_dir)
            .field("prism", &self.mock.base_url())
            .field("kube", &self.cluster.url())
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl World {
    /// The directory holding `kubeconfig`, `prism-ca.pem` and `controller.log`.
    pub fn work_dir(&self) -> &Path {
        &self.work_dir
    }

    /// A kubeconfig for kubectl (user `kube-sim-admin` on kube-sim, the administrator's client
    /// certificate on the real control plane).
    pub fn kubeconfig(&self) -> PathBuf {
        self.work_dir.join("kubeconfig")
    }

    /// The controller's log file (every start, each after a `--- sandbox: controller start #N`
    /// line).
    pub fn controller_log_file(&self) -> &Path {
        &self.launch.log_file
    }

    /// The controller's log so far.
    pub fn controller_log(&self) -> String {
        std::fs::read_to_string(&self.launch.log_file).unwrap_or_default()
    }

    /// A client for the API server (user `sandbox` in the request log).
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn namespace(&self) -> &str {
        &self.options.namespace
    }

    pub fn mock(&self) -> &RunningMock {
        &self.mock
    }

    pub fn admin(&self) -> &Admin {
        self.mock.admin()
    }

    /// kube-sim, when the world runs on it.
    pub fn sim(&self) -> Option<&RunningKubeSim> {
        self.cluster.sim()
    }

    /// The real control plane, when the world runs on it.
    pub fn control_plane(&self) -> Option<&crate::real_cluster::ControlPlane> {
        self.cluster.real()
    }

    /// Whether the world runs on the real control plane.
    pub fn on_real_control_plane(&self) -> bool {
        self.cluster.sim().is_none()
    }

    /// The API server's URL.
    pub fn api_url(&self) -> String {
        self.cluster.url()
    }

    /// Every write so far, by actor and answer: kube-sim's request log, or the real API server's
    /// audit log.
    pub fn writes(&self) -> Result<crate::writes::Tally, WorldError> {
        cluster::writes(&self.cluster)
    }

    /// Every Event so far (core/v1).
    pub async fn events(&self) -> Result<Vec<Value>, WorldError> {
        cluster::events(&self.cluster, &self.client).await
    }

    pub fn approver(&self) -> &ApproverHandle {
        &self.approver
    }

    pub fn node_agent(&self) -> &NodeAgentHandle {
        &self.sources.agent
    }

    pub fn autoscaler(&self) -> &Autoscaler {
        &self.autoscaler
    }

    /// Prism calls so far by method, endpoint and status (every endpoint; the mock counts by
    /// route template, not by VM).
    pub fn prism_counters(&self) -> Vec<Counter> {
        self.mock.admin().counters()
    }

    /// Prism calls so far, all endpoints.
    pub fn prism_calls(&self) -> u64 {
        self.prism_counters().iter().map(|c| c.count).sum()
    }

    /// Sets the MachineSet's replicas through `/scale`, as `oc scale` does.
    pub async fn scale(&self, set: &str, replicas: i32) -> Result<(), WorldError> {
        let sets: Api<MachineSet> = Api::namespaced(self.client.clone(), self.namespace());
        sets.patch_scale(
            set,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .map_err(api_error(format!("scale MachineSet {set} to {replicas}")))?;
        Ok(())
    }
}

/// A task aborted when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
