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

mod api_paths;
mod cluster;
mod controller;
mod history;
pub mod openshift;
mod replicas;
mod snapshot;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kube_sim::{KubeSim, RunningKubeSim};
use nutanix_machine_controller::api::MachineSet;
use prism_mock::{Admin, Counter, GuestBehaviour, MockConfig, MockPrism, RunningMock, Timings};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::actor::ActorHandle;
use crate::approver::{self, ApproverConfig, ApproverHandle};
use crate::autoscaler::Autoscaler;
use crate::machine_autoscaler::{self, MachineAutoscalerError};
use crate::machineset::{self, MachineSetControllerConfig};
use crate::manifests::{self, ManifestError};
use crate::node_agent::{self, NodeAgentConfig, NodeAgentHandle};
use crate::nodelink::{self, NodeLinkConfig};
use crate::writes::CONTROLLER_USER;
pub use cluster::{CONTROLLER_SERVICE_ACCOUNT, ControlPlaneChoice};
use cluster::{Cluster, Objects};
pub use controller::{ControllerCommand, ControllerIntervals, Provider};
pub use controller::{ControllerLaunch, ControllerProcess};
pub use history::{History, MachineRecord};
use replicas::Replicas;
pub use replicas::replica_pod_name;
pub use snapshot::{Snapshot, join_condition, machine_set_of, provider_condition, stage_label};

/// A distinctive part of the Windows user data (the sandbox WMCO's key): it must never show in a
/// log line.
pub const WINDOWS_USER_DATA_MARKER: &str = "AAAAIOQr8h6wG4CauqEpRnpW+n7iAaX7cGSguySTwhq1I9Yt";
/// Marker inside the stand-in Linux user data.
pub const LINUX_USER_DATA_MARKER: &str = "sandbox-linux-user-data-8b2c";
/// Networks whose addresses the controller never reports: OpenShift's default cluster and
/// service networks, and OVN-Kubernetes' hybrid overlay (prism-mock's default).
pub const EXCLUDED_CIDRS: [&str; 3] = ["10.128.0.0/14", "172.30.0.0/16", "10.132.0.0/14"];

/// WMCO's `windows-user-data`, as the node agent's WMCO generates it for Nutanix.
pub fn windows_user_data() -> String {
    node_agent::wmco::user_data(node_agent::wmco::SANDBOX_PUBLIC_KEY)
}

/// The stand-in for the installer's `worker-user-data` (an Ignition config).
pub fn linux_user_data() -> String {
    json!({"ignition": {"version": "3.2.0"}, "storage": {"files": [{
        "path": "/etc/sandbox-marker", "mode": 420,
        "contents": {"source": format!("data:,{LINUX_USER_DATA_MARKER}")},
    }]}})
    .to_string()
}

/// Prints progress lines (the sandbox binary prints them on stdout).
pub type ProgressSink = Arc<dyn Fn(&str) + Send + Sync>;

/// How to build the world.
#[derive(Clone)]
pub struct WorldOptions {
    /// kube-sim with the stand-ins (the default), or the real control plane.
    pub control_plane: ControlPlaneChoice,
    /// Namespace of the machine API objects.
    pub namespace: String,
    /// prism-mock's delays.
    pub mock_timings: Timings,
    /// prism-mock's guest misbehaviours (APIPA first, late hybrid-overlay address).
    pub guest_behaviour: GuestBehaviour,
    /// Seed of prism-mock's random-number generator (UUIDs, fault draws); 0 when `None`.
    pub mock_rng_seed: Option<u64>,
    /// What prism-mock holds at start (its built-in seed, which the examples name, by default).
    pub mock_seed: prism_mock::Seed,
    /// The Prism password prism-mock accepts and the credentials Secret carries (prism-mock's
    /// default when `None`); a distinctive one makes a search of the logs for it meaningful.
    pub prism_password: Option<String>,
    pub controller: ControllerCommand,
    pub intervals: ControllerIntervals,
    /// The controller's `--v`.
    pub controller_verbosity: u8,
    /// Extra controller flags, after the sandbox's.
    pub controller_args: Vec<String>,
    /// How many replicas of the controller run (1; more only make sense with `--leader-elect`
    /// in `controller_args`).
    pub controller_replicas: usize,
    /// Each replica reaches the real API server through a proxy of its own
    /// ([`crate::api_proxy`]), which a run can slow down, reset or black-hole; the other actors go
    /// direct. Ignored on kube-sim.
    pub controller_api_proxies: bool,
    /// The node agent (its namespace is set to `namespace`).
    pub node_agent: NodeAgentConfig,
    /// Where kubeconfigs, the CA and the controller's log go; a temporary directory (deleted at
    /// shutdown) when `None`.
    pub work_dir: Option<PathBuf>,
    /// Where progress lines go while waiting; none when `None`.
    pub progress: Option<ProgressSink>,
    /// How often the background task takes a snapshot for the history (each lists every
    /// Machine, Node and VM: a benchmark with a thousand Machines looks less often).
    pub observe_every: Duration,
}

impl std::fmt::Debug for WorldOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorldOptions")
            .field("control_plane", &self.control_plane)
            .field("namespace", &self.namespace)
            .field("mock_timings", &self.mock_timings)
            .field("guest_behaviour", &self.guest_behaviour)
            .field("controller", &self.controller)
            .field("intervals", &self.intervals)
            .field("work_dir", &self.work_dir)
            .finish_non_exhaustive()
    }
}

impl WorldOptions {
    /// prism-mock's "shortened" delays (tasks 1.5 s, addresses 2 s after power-on), as the sandbox
    /// command runs.
    pub fn sandbox(controller: ControllerCommand) -> Self {
        Self {
            control_plane: ControlPlaneChoice::KubeSim,
            namespace: crate::MACHINE_API_NAMESPACE.to_owned(),
            mock_timings: Timings::sandbox(),
            guest_behaviour: GuestBehaviour::default(),
            mock_rng_seed: None,
            mock_seed: prism_mock::Seed::default(),
            prism_password: None,
            controller,
            intervals: ControllerIntervals::sandbox(),
            controller_verbosity: 2,
            controller_args: Vec::new(),
            controller_replicas: 1,
            controller_api_proxies: false,
            node_agent: NodeAgentConfig::default(),
            work_dir: None,
            progress: None,
            observe_every: OBSERVE_EVERY,
        }
    }

    /// prism-mock's test delays (tens of milliseconds), for the end-to-end tests.
    pub fn tests(controller: ControllerCommand) -> Self {
        Self {
            mock_timings: Timings::for_tests(),
            intervals: ControllerIntervals::tests(),
            // Trace level, so that a secrets check over the log sees everything logged.
            controller_verbosity: 6,
            ..Self::sandbox(controller)
        }
    }
}

/// Why the world could not start, or a wait or an action failed.
#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("prism-mock: {0}")]
    Mock(Box<prism_mock::StartError>),
    #[error("kube-sim: {0}")]
    KubeSim(Box<kube_sim::StartError>),
    #[error("kube-sim client: {0}")]
    KubeClient(Box<kube_sim::ClientError>),
    #[error("real control plane: {0}")]
    RealCluster(Box<crate::real_cluster::RealClusterError>),
    #[error(transparent)]
    AuditLog(#[from] crate::writes::AuditLogError),
    #[error("kube-sim: {what}: {message}")]
    Store { what: String, message: String },
    #[error("manifest {0}")]
    Manifest(#[from] ManifestError),
    #[error("{action}: {source}")]
    Api {
        action: String,
        source: Box<kube::Error>,
    },
    #[error("no controller replica {index}: the world runs {count}")]
    NoSuchReplica { index: usize, count: usize },
    #[error(transparent)]
    MachineAutoscaler(#[from] MachineAutoscalerError),
    #[error("{0}")]
    Autoscaler(#[from] crate::autoscaler::AutoscalerError),
    #[error("timed out after {after:?} waiting for {what}; {detail}; now: {state}")]
    Timeout {
        what: String,
        after: Duration,
        detail: String,
        state: String,
    },
    #[error(
        "controller replica {replica} (pid {pid:?}) exited with {status} while waiting for {what}; last log lines:\n{log_tail}"
    )]
    ControllerExited {
        what: String,
        replica: usize,
        pid: Option<u32>,
        status: String,
        /// The exit code, when the process exited (not killed by a signal).
        code: Option<i32>,
        log_tail: String,
    },
}

impl From<prism_mock::StartError> for WorldError {
    fn from(error: prism_mock::StartError) -> Self {
        Self::Mock(Box::new(error))
    }
}

impl From<kube_sim::StartError> for WorldError {
    fn from(error: kube_sim::StartError) -> Self {
        Self::KubeSim(Box::new(error))
    }
}

impl From<kube_sim::ClientError> for WorldError {
    fn from(error: kube_sim::ClientError) -> Self {
        Self::KubeClient(Box::new(error))
    }
}

fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> WorldError {
    let what = what.into();
    move |source| WorldError::Io { what, source }
}

fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> WorldError {
    let action = action.into();
    move |source| WorldError::Api {
        action,
        source: Box::new(source),
    }
}

/// What the snapshots read, shared with the task that records the history.
struct Sources {
    objects: Objects,
    admin: Admin,
    agent: Arc<NodeAgentHandle>,
    seed_vms: BTreeSet<String>,
    started: Instant,
}

impl Sources {
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            elapsed: self.started.elapsed(),
            machine_sets: self.objects.machine_sets(),
            machines: self.objects.machines(),
            nodes: self.objects.nodes(),
            vms: self
                .admin
                .vms()
                .into_iter()
                .filter(|vm| !self.seed_vms.contains(&vm.uuid))
                .collect(),
            joins: self.agent.joins(),
        }
    }
}

struct Observed {
    history: History,
    label: String,
    last_line: String,
    last_print: Option<Instant>,
}

/// Takes a snapshot and records it, under the lock: snapshots are recorded in the order they are
/// taken (a Machine created between two snapshots recorded out of order would look gone).
fn observe(sources: &Sources, observed: &Mutex<Observed>) -> Snapshot {
    let mut observed = lock(observed);
    let snapshot = sources.snapshot();
    observed.history.observe(&snapshot);
    snapshot
}

/// How often the history task looks.
const OBSERVE_EVERY: Duration = Duration::from_millis(100);
/// An unchanged progress line is printed again after this long.
const PROGRESS_HEARTBEAT: Duration = Duration::from_secs(10);

fn client_as(sim: &RunningKubeSim, user: &str) -> Result<Client, WorldError> {
    let mut config = sim.kube_config();
    config.auth_info.token = Some(format!("user:{user}").into());
    Client::try_from(config).map_err(api_error(format!("kube client for {user}")))
}

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
    /// Starts everything, applies the CRDs, the Infrastructure object, the Secrets and the
    /// examples (MachineSets at 0 replicas), plays the cluster-autoscaler-operator for the
    /// MachineAutoscaler, then starts the actors and the controller.
    pub async fn start(options: WorldOptions) -> Result<Self, WorldError> {
        let (work_dir, temp_dir) = match &options.work_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(io_error(format!("create {}", dir.display())))?;
                (dir.clone(), None)
            }
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("sandbox-")
                    .tempdir()
                    .map_err(io_error("create a temporary directory"))?;
                (temp.path().to_path_buf(), Some(temp))
            }
        };

        let mut mock_config = MockConfig {
            timings: options.mock_timings.clone(),
            guest: options.guest_behaviour.clone(),
            rng_seed: options.mock_rng_seed,
            seed: options.mock_seed.clone(),
            ..MockConfig::default()
        };
        if let Some(password) = &options.prism_password {
            mock_config.credentials.password = password.clone();
        }
        let mock = MockPrism::start(mock_config).await?;
        let seed_vms = mock.admin().vms().into_iter().map(|vm| vm.uuid).collect();
        let prism_ca_file = work_dir.join("prism-ca.pem");
        std::fs::write(&prism_ca_file, mock.ca_pem().unwrap_or_default())
            .map_err(io_error(format!("write {}", prism_ca_file.display())))?;

        let kubeconfig = work_dir.join("kubeconfig");
        let controller_kubeconfig = work_dir.join("kubeconfig-controller");
        let namespace = options.namespace.clone();
        let (cluster, client) = match &options.control_plane {
            ControlPlaneChoice::KubeSim => {
                let sim = start_kube_sim(&options, &kubeconfig, &controller_kubeconfig).await?;
                create_infrastructure(&sim, mock.addr().port())?;
                create_networks(&sim)?;
                let cluster = Cluster::Sim(sim);
                let client = cluster.actor_client("sandbox").await?;
                (cluster, client)
            }
            ControlPlaneChoice::Real(binaries) => {
                Cluster::start_real(
                    binaries.clone(),
                    &work_dir,
                    &namespace,
                    manifests::INFRASTRUCTURE_ID,
                    mock.addr().port(),
                    &kubeconfig,
                    &controller_kubeconfig,
                )
                .await?
            }
        };
        if options.controller.provider == Provider::Go {
            // The Go provider's roles are not in `manifests/`: it runs as the administrator.
            std::fs::copy(&kubeconfig, &controller_kubeconfig).map_err(io_error(format!(
                "write {}",
                controller_kubeconfig.display()
            )))?;
        }
        write_secrets(&client, &options.namespace, &mock).await?;
        openshift::write_cloud_private_key(&client).await?;
        if let Cluster::Sim(sim) = &cluster {
            openshift::create_cluster_version_and_wmco(sim)?;
        }
        apply_examples(&client, &options.namespace).await?;
        machine_autoscaler::apply_machine_autoscalers(&client, &options.namespace).await?;

        // On the real control plane the machine-api-operator's own MachineSet controller and
        // nodelink run (`real_cluster`); their stand-ins only on kube-sim.
        let actors = match &cluster {
            Cluster::Sim(_) => vec![
                machineset::start(
                    cluster.actor_client("machineset-controller").await?,
                    MachineSetControllerConfig {
                        namespace: namespace.clone(),
                        ..MachineSetControllerConfig::default()
                    },
                ),
                nodelink::start(
                    cluster.actor_client("nodelink").await?,
                    NodeLinkConfig {
                        namespace: namespace.clone(),
                        ..NodeLinkConfig::default()
                    },
                ),
            ],
            Cluster::Real(_) => Vec::new(),
        };
        // The pool's IPAM controller: stood in for on either control plane (nothing of it is
        // built here).
        let mut actors = actors;
        actors.push(crate::ipam::start(
            cluster.actor_client("ipam").await?,
            crate::ipam::IpamConfig {
                namespace: namespace.clone(),
                ..crate::ipam::IpamConfig::default()
            },
        ));
        let approver = approver::start(
            cluster.actor_client("approver").await?,
            ApproverConfig {
                namespace: namespace.clone(),
                ..ApproverConfig::default()
            },
        );
        let agent = Arc::new(node_agent::start(
            cluster.actor_client("node-agent").await?,
            mock.admin().clone(),
            NodeAgentConfig {
                namespace: namespace.clone(),
                identities: cluster.kubelet_identities().await?,
                ..options.node_agent.clone()
            },
        ));
        let autoscaler = Autoscaler::new(cluster.actor_client("autoscaler").await?, &namespace);
        let objects = match &cluster {
            Cluster::Sim(sim) => Objects::Store(sim.store().clone()),
            Cluster::Real(_) => Objects::watch(&client, &namespace).await?,
        };

        let launch = ControllerLaunch {
            command: options.controller.clone(),
            kubeconfig: controller_kubeconfig,
            prism_ca_file,
            namespace,
            intervals: options.intervals,
            // Read from the cluster's Network objects (create_networks), as on OpenShift, where
            // the machine-api-operator passes no such flag.
            excluded_cidrs: Vec::new(),
            verbosity: options.controller_verbosity,
            extra_args: options.controller_args.clone(),
            log_file: work_dir.join("controller.log"),
        };
        let mut replicas = Replicas::new(&launch, options.controller_replicas);
        let mut api_proxies = Vec::new();
        if options.controller_api_proxies && matches!(cluster, Cluster::Real(_)) {
            let paths =
                api_paths::start(&cluster.url(), &launch.kubeconfig, replicas.replicas.len())
                    .await?;
            for (replica, (proxy, kubeconfig)) in replicas.replicas.iter_mut().zip(paths) {
                replica.launch.kubeconfig = kubeconfig;
                api_proxies.push(proxy);
            }
        }
        for index in 0..replicas.replicas.len() {
            replicas.start(index, None).await?;
        }

        let sources = Arc::new(Sources {
            objects,
            admin: mock.admin().clone(),
            agent,
            seed_vms,
            started: Instant::now(),
        });
        let observed = Arc::new(Mutex::new(Observed {
            history: History::default(),
            label: "starting".to_owned(),
            last_line: String::new(),
            last_print: None,
        }));
        let observer = {
            let (sources, observed) = (sources.clone(), observed.clone());
            let every = options.observe_every;
            AbortOnDrop(tokio::spawn(async move {
                loop {
                    observe(&sources, &observed);
                    tokio::time::sleep(every).await;
                }
            }))
        };
        Ok(Self {
            options,
            work_dir,
            temp_dir,
            mock,
            cluster,
            client,
            sources,
            observed,
            observer,
            actors,
            approver,
            autoscaler,
            launch,
            api_proxies,
            controller: tokio::sync::Mutex::new(replicas),
        })
    }

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

    /// The world now (also recorded in the history).
    pub fn snapshot(&self) -> Snapshot {
        observe(&self.sources, &self.observed)
    }

    /// Every Machine seen so far.
    pub fn history(&self) -> Vec<MachineRecord> {
        lock(&self.observed).history.machines()
    }

    /// Names the current step in progress lines.
    pub fn set_label(&self, label: impl Into<String>) {
        lock(&self.observed).label = label.into();
    }

    /// Sends a progress line to the sink when it changed (or every 10 s).
    pub fn print_progress(&self, snapshot: &Snapshot) {
        let Some(sink) = &self.options.progress else {
            return;
        };
        let line = {
            let mut observed = lock(&self.observed);
            let line = snapshot.progress_line(&observed.label);
            // The time prefix changes all the time; compare what follows it.
            let body = line
                .split_once(']')
                .map_or(line.as_str(), |(_, b)| b)
                .to_owned();
            let due = observed
                .last_print
                .is_none_or(|at| at.elapsed() >= PROGRESS_HEARTBEAT);
            if body == observed.last_line && !due {
                return;
            }
            observed.last_line = body;
            observed.last_print = Some(Instant::now());
            line
        };
        sink(&line);
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

    /// Polls (every 100 ms) until `done` holds for a snapshot, printing progress; fails after
    /// `timeout` with the last state, or at once when the controller exits on its own.
    pub async fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Snapshot) -> bool,
    ) -> Result<Snapshot, WorldError> {
        self.wait_for(what, timeout, |s| {
            if done(s) { Ok(()) } else { Err(String::new()) }
        })
        .await
    }

    /// Like [`World::wait_until`], with `check` saying what is missing (shown on a timeout).
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&Snapshot) -> Result<(), String>,
    ) -> Result<Snapshot, WorldError> {
        let deadline = Instant::now() + timeout;
        loop {
            let snapshot = self.snapshot();
            self.print_progress(&snapshot);
            let missing = match check(&snapshot) {
                Ok(()) => return Ok(snapshot),
                Err(missing) => missing,
            };
            self.check_controller(what).await?;
            if Instant::now() >= deadline {
                let label = lock(&self.observed).label.clone();
                return Err(WorldError::Timeout {
                    what: what.to_owned(),
                    after: timeout,
                    detail: if missing.is_empty() {
                        "condition not met".to_owned()
                    } else {
                        missing
                    },
                    state: snapshot.progress_line(&label),
                });
            }
            tokio::time::sleep(OBSERVE_EVERY).await;
        }
    }

    /// Stops the controller, the actors and the servers, and waits for them. The work directory
    /// is deleted unless it was given in the options.
    pub async fn shutdown(self) {
        let _ = self.kill_controller().await;
        drop(self.observer);
        for actor in self.actors {
            actor.stop().await;
        }
        self.approver.stop().await;
        if let Ok(sources) = Arc::try_unwrap(self.sources)
            && let Ok(agent) = Arc::try_unwrap(sources.agent)
        {
            agent.stop().await;
        }
        self.cluster.shutdown().await;
        self.mock.shutdown().await;
        drop(self.temp_dir);
    }

    /// Keeps the work directory after the world is gone (for `--keep`-like uses with a
    /// temporary directory); returns its path.
    pub fn keep_work_dir(&mut self) -> PathBuf {
        if let Some(temp) = self.temp_dir.take() {
            let _ = temp.keep();
        }
        self.work_dir.clone()
    }
}

/// A task aborted when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// kube-sim with the machine-api-operator's webhooks, its CRDs and the sandbox's, an admin
/// kubeconfig at `kubeconfig` and the controller's (user `nutanix-machine-controller`) at
/// `controller_kubeconfig`.
async fn start_kube_sim(
    options: &WorldOptions,
    kubeconfig: &Path,
    controller_kubeconfig: &Path,
) -> Result<RunningKubeSim, WorldError> {
    let sim = KubeSim::start(kube_sim::Config {
        namespaces: vec![options.namespace.clone()],
        // An OpenShift cluster on Nutanix: every Machine and MachineSet goes through the
        // machine-api-operator's defaulting when it is created.
        machine_api_webhooks: Some(kube_sim::webhooks::MachineApiWebhooks {
            infrastructure_name: manifests::INFRASTRUCTURE_ID.to_owned(),
        }),
        ..kube_sim::Config::default()
    })
    .await?;
    sim.write_kubeconfig(kubeconfig)?;
    std::fs::write(
        controller_kubeconfig,
        sim.kubeconfig_yaml().replace(
            kube_sim::KUBECONFIG_TOKEN,
            &format!("user:{CONTROLLER_USER}"),
        ),
    )
    .map_err(io_error(format!(
        "write {}",
        controller_kubeconfig.display()
    )))?;
    for crd in manifests::objects(&manifests::MACHINE_API_CRDS)?
        .into_iter()
        .chain(manifests::objects(&manifests::SANDBOX_CRDS)?)
        .chain(manifests::objects(&manifests::IPAM_CRDS)?)
    {
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        sim.create(crd).map_err(|e| WorldError::Store {
            what: format!("create CRD {name}"),
            message: e.to_string(),
        })?;
    }
    Ok(sim)
}

fn create_infrastructure(sim: &RunningKubeSim, prism_port: u16) -> Result<(), WorldError> {
    let store_error = |what: &str| {
        let what = what.to_owned();
        move |e: kube_sim::ApiError| WorldError::Store {
            what,
            message: e.to_string(),
        }
    };
    sim.create(json!({
        "apiVersion": "config.openshift.io/v1", "kind": "Infrastructure",
        "metadata": {"name": "cluster"},
        "spec": {"platformSpec": {"type": "Nutanix", "nutanix": {
            "prismCentral": {"address": "127.0.0.1", "port": prism_port},
            "prismElements": [{"name": "pe-1", "endpoint": {"address": "127.0.0.1", "port": prism_port}}],
        }}},
    }))
    .map_err(store_error("create Infrastructure/cluster"))?;
    sim.set_status(
        "config.openshift.io",
        "infrastructures",
        "",
        "cluster",
        json!({
            "infrastructureName": manifests::INFRASTRUCTURE_ID,
            "platform": "Nutanix",
            "platformStatus": {"type": "Nutanix"},
        }),
    )
    .map_err(store_error("write Infrastructure/cluster status"))?;
    Ok(())
}

/// `Network.config.openshift.io/cluster` and `Network.operator.openshift.io/cluster` as an
/// OVN-Kubernetes cluster with the hybrid overlay that WMCO requires has them (openshift/api
/// `config/v1/types_network.go`, `operator/v1/types_network.go`; WMCO refuses a cluster without
/// `hybridClusterNetwork`, openshift/windows-machine-config-operator `pkg/cluster/config.go`):
/// the controller reads the networks whose addresses are never a Machine's from them.
fn create_networks(sim: &RunningKubeSim) -> Result<(), WorldError> {
    let store_error = |what: &str| {
        let what = what.to_owned();
        move |e: kube_sim::ApiError| WorldError::Store {
            what,
            message: e.to_string(),
        }
    };
    let [cluster, service, hybrid] = EXCLUDED_CIDRS;
    let networks = json!({
        "clusterNetwork": [{"cidr": cluster, "hostPrefix": 23}],
        "serviceNetwork": [service],
        "networkType": "OVNKubernetes",
    });
    sim.create(json!({
        "apiVersion": "config.openshift.io/v1", "kind": "Network",
        "metadata": {"name": "cluster"},
        "spec": networks,
    }))
    .map_err(store_error("create Network.config.openshift.io/cluster"))?;
    sim.set_status("config.openshift.io", "networks", "", "cluster", networks)
        .map_err(store_error(
            "write Network.config.openshift.io/cluster status",
        ))?;
    sim.create(json!({
        "apiVersion": "operator.openshift.io/v1", "kind": "Network",
        "metadata": {"name": "cluster"},
        "spec": {"defaultNetwork": {"type": "OVNKubernetes", "ovnKubernetesConfig": {
            "hybridOverlayConfig": {"hybridClusterNetwork": [{"cidr": hybrid, "hostPrefix": 23}]}}}},
    }))
    .map_err(store_error("create Network.operator.openshift.io/cluster"))?;
    Ok(())
}

/// The credentials Secret of the example, as an administrator applies it (`stringData`, which the
/// API server folds into `data`) with the mock's user name and password, and stand-ins for the
/// user-data Secrets of WMCO and the installer.
pub async fn write_secrets(
    client: &Client,
    namespace: &str,
    mock: &RunningMock,
) -> Result<(), WorldError> {
    let mut example = manifests::example("Secret", manifests::CREDENTIALS_SECRET)?;
    let mut credentials: Value = example["stringData"]["credentials"]
        .as_str()
        .and_then(|text| serde_json::from_str(text).ok())
        .ok_or(ManifestError {
            path: "manifests/examples/credentials-secret.yaml",
            message: "stringData.credentials is not a JSON list".to_owned(),
        })?;
    let prism_central = &mut credentials[0]["data"]["prismCentral"];
    if !prism_central.is_object() {
        return Err(ManifestError {
            path: "manifests/examples/credentials-secret.yaml",
            message: "credentials[0].data.prismCentral is not an object".to_owned(),
        }
        .into());
    }
    prism_central["username"] = json!(mock.credentials().username);
    prism_central["password"] = json!(mock.credentials().password);
    example["stringData"]["credentials"] = json!(credentials.to_string());
    example["metadata"]["namespace"] = json!(namespace);
    let user_data = [
        (manifests::WINDOWS_USER_DATA_SECRET, windows_user_data()),
        (manifests::LINUX_USER_DATA_SECRET, linux_user_data()),
    ]
    .map(|(name, value)| {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque",
            "data": {"userData": base64::engine::general_purpose::STANDARD.encode(value)},
        })
    });
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for object in std::iter::once(example).chain(user_data) {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let secret: Secret = serde_json::from_value(object).map_err(|e| WorldError::Store {
            what: format!("build Secret {name}"),
            message: e.to_string(),
        })?;
        api.create(&PostParams::default(), &secret)
            .await
            .map_err(api_error(format!("create Secret {name}")))?;
    }
    Ok(())
}

/// Server-side applies the example MachineSets (at 0 replicas) and MachineAutoscaler with strict
/// field validation, as `kubectl apply --server-side` would: a misspelt field fails.
pub async fn apply_examples(client: &Client, namespace: &str) -> Result<(), WorldError> {
    for mut object in manifests::objects(&manifests::EXAMPLES)? {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        if kind == "Secret" {
            continue;
        }
        if kind == "MachineSet" {
            object["spec"]["replicas"] = json!(0);
        }
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, &kind);
        let (resource, _) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(api_error(format!("discover {api_version} {kind}")))?;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let applied = api
            .patch(
                &name,
                &PatchParams::apply("sandbox").validation_strict(),
                &Patch::Apply(&object),
            )
            .await
            .map_err(api_error(format!("apply {kind} {name}")))?;
        tracing::debug!(%kind, name = %applied.name_any(), "applied example");
    }
    Ok(())
}
