//! The chaos soak (issue 9): Machines of every kind scaled 0 → N → 0 with prism-mock's faults
//! on and the controller killed (SIGKILL) at the moments its protocols must survive, then the
//! invariants checked.
//!
//! ```no_run
//! # async fn demo() {
//! use sandbox::chaos::{self, ChaosOptions};
//! use sandbox::world::ControllerCommand;
//! let dir = std::path::PathBuf::from("/tmp/chaos");
//! let options = ChaosOptions::soak(ControllerCommand::binary("nutanix-machine-controller"), dir);
//! let report = chaos::run(options).await;
//! println!("{}", report.render());
//! assert!(report.held());
//! # }
//! ```
//!
//! What runs: the sandbox's world (prism-mock, kube-sim, the actors, the controller as a
//! process) with a fourth MachineSet cloning a source VM, so Machines come from an image
//! (Windows and Linux with cloud-init), a template (Windows with Sysprep) and a source VM
//! (Windows with Sysprep). prism-mock's fault rules ([`faults`]) stay on for the whole run. A tracker polls
//! prism-mock every few milliseconds for every VM that ever exists ([`tracker`]).
//!
//! 1. Scale-up in two bursts (half of each MachineSet, then the rest), with the scale-up kills
//!    ([`kills`]) between and after them; wait until every Machine is Running or Failed.
//! 2. A pod guarded by a PodDisruptionBudget on some Nodes (their drains block), scale every
//!    MachineSet to 0, the scale-down kills (mid-drain, then the budgets are removed and a kill
//!    right after a VM delete); wait until no Machine, Node or VM is left.
//! 3. The invariants ([`invariants`]) over everything recorded, and the logs (the controller's,
//!    and the sandbox's own when captured) searched for every secret.
//!
//! On the real control plane ([`ChaosOptions::on_real_control_plane`], issue 35) two replicas run
//! with leader election, each through its own proxy to kube-apiserver, and Kubernetes' own faults
//! ([`kube_faults`]) strike at the kills' moments: kube-apiserver and etcd killed and started
//! again, etcd compacted, APF throttling, one replica's path slowed, reset or black-holed, Prism
//! Central unreachable. The invariants add the lease check (no Prism write outside its sender's
//! lease, from prism-mock's log and the Lease's history) and the recovery after each fault (from
//! the audit log, [`recovery`]).

pub mod faults;
pub mod invariants;
pub mod kills;
pub mod kube_faults;
pub mod recovery;
pub mod report;
pub mod tracker;

mod drains;
mod finish;
mod killing;
mod observe;
mod paths;
mod striking;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kube::api::{Api, PostParams};
use nutanix_machine_controller::api::{
    GUEST_CUSTOMIZATION_ANNOTATION, IMAGE_KIND_ANNOTATION, MachineSet,
};
use prism_mock::Timings;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::bench::sampling::Sampler;
use crate::leadership::LeaseHistory;
use crate::manifests::{self, LINUX_SET, WINDOWS_IMAGE_SET, WINDOWS_TEMPLATE_SET};
use crate::world::{
    ControlPlaneChoice, ControllerCommand, ControllerIntervals, ProgressSink, Snapshot, World,
    WorldError, WorldOptions,
};
use faults::{FaultLabel, FaultProfile};
pub use finish::capture_logs;
use kills::KillAim;
use kube_faults::{FaultMoment, KubeFaultKind};
use observe::scale_up_done;
pub use report::{ChaosReport, KillRecord, write_plots};
use tracker::VmTracker;

/// The MachineSet the chaos run adds: Windows Machines cloned from prism-mock's powered-off
/// source VM `windows-golden`, with Sysprep and a larger disk (a follow-up update resizes it).
pub const WINDOWS_CLONE_SET: &str = "win-clone";

/// How to run the soak.
#[derive(Clone)]
pub struct ChaosOptions {
    /// Machines at the top, spread over the four MachineSets.
    pub machines: usize,
    /// Controller kills ([`kills::plan`]).
    pub kills: usize,
    /// Seeds prism-mock (UUIDs, fault draws) and the run's own choices (when to arm a kill, how
    /// long the controller stays down, which Nodes get a drain blocker).
    pub seed: u64,
    pub controller: ControllerCommand,
    pub mock_timings: Timings,
    pub intervals: ControllerIntervals,
    pub faults: FaultProfile,
    /// The controller's `--v` (6, trace, makes the secrets search see everything).
    pub controller_verbosity: u8,
    pub controller_args: Vec<String>,
    /// Holds `controller.log`, the kubeconfigs and prism-mock's CA.
    pub work_dir: PathBuf,
    /// The sandbox's own log (the caller captures it), searched for secrets too.
    pub sandbox_log: Option<PathBuf>,
    pub progress: Option<ProgressSink>,
    /// How long the scale-up, and the scale-down, may take.
    pub phase_timeout: Duration,
    /// How long an armed kill waits for its event before it kills anyway.
    pub trigger_timeout: Duration,
    /// A kill is armed this long (at most, drawn at random) after the previous step.
    pub arm_within: Duration,
    /// A random kill comes within this long after it is armed.
    pub random_within: Duration,
    /// The controller stays down between these (drawn at random).
    pub down_time: (Duration, Duration),
    /// Nodes whose drain a PodDisruptionBudget blocks until the run removes it.
    pub drain_blockers: usize,
    /// kube-sim (the default) or the real control plane.
    pub control_plane: ControlPlaneChoice,
    /// Replicas of the controller; with more than one, each runs with `--leader-elect` and
    /// `--leader-elect-lease-duration` of [`KubeFaultOptions::lease_duration`].
    pub replicas: usize,
    /// Kubernetes' own faults and Prism Central's outage (none by default).
    pub k8s: KubeFaultOptions,
}

/// Kubernetes' own faults in a run (issue 35), and Prism Central unreachable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeFaultOptions {
    /// The kinds struck, each `per_kind` times.
    pub kinds: Vec<KubeFaultKind>,
    pub per_kind: usize,
    /// kube-apiserver or etcd stays down between these (drawn at random).
    pub down_time: (Duration, Duration),
    /// How long an APF squeeze, a slow path or a resetting path lasts (a black hole lasts the
    /// lease duration more).
    pub window: Duration,
    /// How long the controller's connections are reset after a compaction.
    pub reset_for: Duration,
    /// The controllers' `--leader-elect-lease-duration`.
    pub lease_duration: Duration,
    /// How long Prism Central is unreachable.
    pub prism_outage: Duration,
    /// How long each Prism call is held before its connection is dropped, during an outage
    /// (past the controller's 60 s request timeout).
    pub prism_call_hang: Duration,
}

impl KubeFaultOptions {
    /// No Kubernetes fault (the soak on kube-sim).
    pub fn none() -> Self {
        Self {
            kinds: Vec::new(),
            per_kind: 0,
            ..Self::soak()
        }
    }

    /// Issue 35's soak: two of every kind; kube-apiserver and etcd down 3 to 30 s; windows of
    /// 20 s; a lease of 15 s; Prism Central unreachable for a minute.
    pub fn soak() -> Self {
        Self {
            kinds: KubeFaultKind::ALL.to_vec(),
            per_kind: 2,
            down_time: (Duration::from_secs(3), Duration::from_secs(30)),
            window: Duration::from_secs(20),
            reset_for: Duration::from_secs(2),
            lease_duration: Duration::from_secs(15),
            prism_outage: Duration::from_secs(60),
            prism_call_hang: Duration::from_secs(65),
        }
    }

    /// The test suite's version: one of every kind, shorter outages.
    pub fn small() -> Self {
        Self {
            per_kind: 1,
            down_time: (Duration::from_secs(2), Duration::from_secs(8)),
            window: Duration::from_secs(8),
            prism_outage: Duration::from_secs(20),
            ..Self::soak()
        }
    }
}

impl std::fmt::Debug for ChaosOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChaosOptions")
            .field("machines", &self.machines)
            .field("kills", &self.kills)
            .field("seed", &self.seed)
            .field("mock_timings", &self.mock_timings)
            .field("work_dir", &self.work_dir)
            .finish_non_exhaustive()
    }
}

impl ChaosOptions {
    /// Issue 9's soak: 50 Machines, 5 kills, prism-mock's sandbox delays (tasks 1.5 s).
    pub fn soak(controller: ControllerCommand, work_dir: PathBuf) -> Self {
        Self {
            machines: 50,
            kills: 5,
            seed: 1,
            controller,
            mock_timings: Timings::sandbox(),
            intervals: ControllerIntervals::sandbox(),
            faults: FaultProfile::soak(150),
            controller_verbosity: 6,
            controller_args: Vec::new(),
            work_dir,
            sandbox_log: None,
            progress: None,
            phase_timeout: Duration::from_secs(900),
            trigger_timeout: Duration::from_secs(30),
            arm_within: Duration::from_secs(1),
            random_within: Duration::from_secs(10),
            down_time: (Duration::from_millis(500), Duration::from_secs(3)),
            drain_blockers: 3,
            control_plane: ControlPlaneChoice::KubeSim,
            replicas: 1,
            k8s: KubeFaultOptions::none(),
        }
    }

    /// On the real control plane, with two replicas and Kubernetes' own faults (`k8s`) besides
    /// the Prism faults and kills of these options.
    pub fn on_real_control_plane(
        self,
        binaries: crate::real_cluster::Binaries,
        k8s: KubeFaultOptions,
    ) -> Self {
        Self {
            control_plane: ControlPlaneChoice::Real(binaries),
            replicas: 2,
            k8s,
            ..self
        }
    }

    /// The test suite's version: 10 Machines, 2 kills, short delays.
    pub fn small(controller: ControllerCommand, work_dir: PathBuf) -> Self {
        Self {
            machines: 10,
            kills: 2,
            mock_timings: Timings {
                task_queued_ms: 50,
                task_running_ms: 150,
                boot_to_address_ms: 100,
            },
            intervals: ControllerIntervals::tests(),
            faults: FaultProfile::soak(40),
            phase_timeout: Duration::from_secs(180),
            trigger_timeout: Duration::from_secs(20),
            arm_within: Duration::from_millis(300),
            random_within: Duration::from_secs(2),
            down_time: (Duration::from_millis(300), Duration::from_secs(1)),
            drain_blockers: 1,
            ..Self::soak(controller, work_dir)
        }
    }
}

/// Machines per MachineSet for `n` at the top, with what each creates: 30 % template deploys
/// (the path with the most steps), 25 % Windows images, 20 % clones, the rest Linux.
pub fn machine_sets(n: usize) -> Vec<(&'static str, &'static str, usize)> {
    let template = n * 3 / 10;
    let image = n / 4;
    let clone = n / 5;
    vec![
        (WINDOWS_TEMPLATE_SET, "Windows, template deploy", template),
        (WINDOWS_IMAGE_SET, "Windows, image, cloud-init", image),
        (WINDOWS_CLONE_SET, "Windows, clone of a VM", clone),
        (
            LINUX_SET,
            "Linux, image, cloud-init",
            n - template - image - clone,
        ),
    ]
}

/// The MachineSet a Machine or VM name belongs to (`<set>-<5 characters>`).
fn set_of(name: &str) -> &str {
    name.rsplit_once('-').map_or(name, |(set, _)| set)
}

/// A distinctive Prism password per seed: searching the logs for it finds nothing by chance.
fn prism_password(seed: u64) -> String {
    format!(
        "chaos-pw-{:016x}",
        seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed
    )
}

/// Runs the soak and checks the invariants. Never panics: problems are in the report.
pub async fn run(options: ChaosOptions) -> ChaosReport {
    let started = Instant::now();
    let mut report = ChaosReport {
        seed: options.seed,
        machines: options.machines,
        sets: machine_sets(options.machines)
            .into_iter()
            .map(|(set, kind, n)| (set.to_owned(), kind, n))
            .collect(),
        ..ChaosReport::default()
    };
    let mut world_options = WorldOptions::sandbox(options.controller.clone());
    world_options.mock_timings = options.mock_timings.clone();
    world_options.intervals = options.intervals;
    world_options.controller_verbosity = options.controller_verbosity;
    world_options.controller_args = options.controller_args.clone();
    world_options.control_plane = options.control_plane.clone();
    world_options.controller_replicas = options.replicas.max(1);
    if options.replicas > 1 {
        world_options.controller_args.extend([
            "--leader-elect".to_owned(),
            format!(
                "--leader-elect-lease-duration={}s",
                options.k8s.lease_duration.as_secs()
            ),
        ]);
    }
    world_options.controller_api_proxies =
        matches!(options.control_plane, ControlPlaneChoice::Real(_));
    world_options.work_dir = Some(options.work_dir.clone());
    world_options.progress = options.progress.clone();
    world_options.mock_rng_seed = Some(options.seed);
    world_options.prism_password = Some(prism_password(options.seed));
    let world = match World::start(world_options).await {
        Ok(world) => world,
        Err(error) => {
            report.error = Some(format!("the world did not start: {error}"));
            return report;
        }
    };
    // The pictures' samples: every 2 s on the real control plane (its audit log is read whole
    // each time), every second on kube-sim.
    let every = if world.on_real_control_plane() {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(1)
    };
    let pictures = Sampler::new(&world, every);
    let mut soak = Soak::new(&world, &options, started, &pictures);
    let (played, samples) = pictures.run(&world, soak.play(&mut report)).await;
    if let Err(error) = played {
        report.error = Some(error);
    }
    report.samples = samples;
    soak.finish(&mut report).await;
    report.total = started.elapsed();
    world.shutdown().await;
    report
}

/// The run in progress.
struct Soak<'w> {
    world: &'w World,
    options: &'w ChaosOptions,
    started: Instant,
    /// When the run started, by the wall clock (the audit log's).
    started_wall: std::time::SystemTime,
    rng: StdRng,
    seed_vms: BTreeSet<String>,
    tracker: VmTracker,
    /// Administrator passwords (and their obfuscated form) of every Windows VM, as labelled
    /// secrets.
    secrets: Vec<(String, String)>,
    failures: BTreeMap<String, (String, String)>,
    deleted_early: BTreeMap<String, String>,
    unexpected_exits: Vec<String>,
    fault_ids: Vec<(u64, FaultLabel)>,
    last_look: Option<Instant>,
    last: Snapshot,
    blockers: Vec<String>,
    /// When the drain blockers are due to go (set while an aim is awaited).
    drains_due: Option<Instant>,
    /// The step's progress label (a fault names itself while it lasts).
    phase_label: String,
    /// Replicas that exited after giving their Lease up.
    lease_exits: Vec<String>,
    /// The Lease's states, read all along (with several replicas).
    lease_history: Option<LeaseHistory>,
    /// Control-plane programs that exited on their own and were started again.
    plane_restarts: Vec<String>,
    /// Samples the run for its pictures; each phase, kill and fault is marked on it.
    pictures: &'w Sampler,
}

/// prism-mock's route of a v4 template deploy (a fault rule's glob).
const DEPLOY_PATH: &str = "*/$actions/deploy";

/// How often the Lease is read: well under the shortest renew interval the soak gives the
/// replicas (a sixth of a 15 s lease), so that no renewal is missed.
const LEASE_READ_EVERY: Duration = Duration::from_millis(200);

/// How often Machines and Nodes are looked at (VMs are polled every [`VM_POLL`]).
const LOOK_EVERY: Duration = Duration::from_millis(250);
const VM_POLL: Duration = Duration::from_millis(5);

impl<'w> Soak<'w> {
    fn new(
        world: &'w World,
        options: &'w ChaosOptions,
        started: Instant,
        pictures: &'w Sampler,
    ) -> Self {
        let seed_vms = world.admin().vms().into_iter().map(|vm| vm.uuid).collect();
        Self {
            world,
            options,
            started,
            started_wall: std::time::SystemTime::now() - started.elapsed(),
            rng: StdRng::seed_from_u64(options.seed),
            seed_vms,
            tracker: VmTracker::new(world.namespace()),
            secrets: Vec::new(),
            failures: BTreeMap::new(),
            deleted_early: BTreeMap::new(),
            unexpected_exits: Vec::new(),
            fault_ids: Vec::new(),
            last_look: None,
            last: Snapshot::default(),
            blockers: Vec::new(),
            drains_due: None,
            phase_label: "setup".to_owned(),
            lease_exits: Vec::new(),
            lease_history: (world.replica_count() > 1).then(|| {
                LeaseHistory::record(
                    Api::namespaced(world.client().clone(), world.namespace()),
                    striking::LEASE_NAME,
                    LEASE_READ_EVERY,
                )
            }),
            plane_restarts: Vec::new(),
            pictures,
        }
    }

    fn set_phase(&mut self, label: String) {
        self.world.set_label(label.clone());
        self.phase_label = label;
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    fn random_duration(&mut self, low: Duration, high: Duration) -> Duration {
        if high <= low {
            return low;
        }
        let millis = self
            .rng
            .random_range(low.as_millis() as u64..=high.as_millis() as u64);
        Duration::from_millis(millis)
    }

    async fn play(&mut self, report: &mut ChaosReport) -> Result<(), String> {
        self.world.set_label("setup");
        self.create_clone_set().await.map_err(|e| e.to_string())?;
        self.world
            .admin()
            .set_list_lag(Duration::from_millis(self.options.faults.list_lag_ms));
        self.world
            .admin()
            .set_read_lag(Duration::from_millis(self.options.faults.read_lag_ms));
        for (label, rule) in faults::rules(&self.options.faults) {
            let id = self.world.admin().add_fault(rule);
            self.fault_ids.push((id, label));
        }
        let (up, down) = kills::plan(self.options.kills);
        let kinds: Vec<KubeFaultKind> = self
            .options
            .k8s
            .kinds
            .iter()
            .copied()
            .filter(|kind| self.world.on_real_control_plane() || !kind.needs_real_control_plane())
            .collect();
        let (up_faults, down_faults) =
            kube_faults::plan(&kinds, self.options.k8s.per_kind, &up, &down, &mut self.rng);
        let sets = machine_sets(self.options.machines);

        let step = Instant::now();
        self.pictures.mark("scale-up");
        self.set_phase(format!("scale up 0 → {}", self.options.machines));
        self.scale(&sets, |n| n.div_ceil(2)).await?;
        let mut up_faults = up_faults.into_iter().peekable();
        let mut second_burst = false;
        for (index, aim) in up.iter().enumerate() {
            if index == 1 {
                self.scale(&sets, |n| n).await?;
                second_burst = true;
            }
            let kill = self.kill_at(*aim, None).await?;
            report.kills.push(kill);
            if let Some(record) = self.strike_after_kill(&mut up_faults).await? {
                report.kube_faults.push(record);
            }
        }
        if !second_burst {
            self.scale(&sets, |n| n).await?;
        }
        for (kind, moment) in up_faults {
            let record = self.fault_at(kind, moment, None).await?;
            report.kube_faults.push(record);
        }
        let expected = sets.clone();
        self.wait(
            "every Machine Running or Failed",
            self.options.phase_timeout,
            move |s| scale_up_done(s, &expected),
        )
        .await?;
        report.steps.push((
            format!(
                "scale up 0 → {} (two bursts), every Machine Running or Failed",
                self.options.machines
            ),
            step.elapsed(),
        ));

        let step = Instant::now();
        self.pictures.mark("scale-down");
        self.set_phase(format!("scale down {} → 0", self.options.machines));
        self.block_drains().await?;
        self.scale(&sets, |_| 0).await?;
        let (mid_drain, rest): (Vec<_>, Vec<_>) = down_faults
            .into_iter()
            .partition(|(_, m)| *m == FaultMoment::At(KillAim::MidDrain));
        for (kind, moment) in mid_drain {
            let record = self.fault_at(kind, moment, None).await?;
            report.kube_faults.push(record);
        }
        let mut rest = rest.into_iter().peekable();
        let mut released = false;
        for aim in &down {
            // The blocked drains are allowed while the delete kill is armed, so that deletes
            // are being sent when it fires.
            let release_after = self.release_when(*aim == KillAim::MidDelete, &mut released);
            let kill = self.kill_at(*aim, release_after).await?;
            report.kills.push(kill);
            if let Some(record) = self.strike_after_kill(&mut rest).await? {
                report.kube_faults.push(record);
            }
        }
        for (kind, moment) in rest {
            let release_after = self.release_when(true, &mut released);
            let record = self.fault_at(kind, moment, release_after).await?;
            report.kube_faults.push(record);
        }
        if !released {
            self.release_drains().await?;
        }
        self.wait(
            "no Machine, Node or VM left",
            self.options.phase_timeout,
            |s| {
                if s.machines.is_empty() && s.nodes.is_empty() && s.vms.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "{} Machines, {} Nodes, {} VMs left",
                        s.machines.len(),
                        s.nodes.len(),
                        s.vms.len()
                    ))
                }
            },
        )
        .await?;
        report.steps.push((
            format!(
                "scale down {} → 0 (drains blocked on {} Nodes, then allowed), nothing left",
                self.options.machines,
                self.blockers.len()
            ),
            step.elapsed(),
        ));
        Ok(())
    }

    /// The delay after arming at which the drain blockers go, for the first strike aimed at VM
    /// deletes (`deletes`): drawn once, then `None`.
    fn release_when(&mut self, deletes: bool, released: &mut bool) -> Option<Duration> {
        if !deletes || *released {
            return None;
        }
        *released = true;
        let (low, high) = (self.options.arm_within, self.options.arm_within * 3);
        Some(self.random_duration(low, high))
    }

    /// Adds `win-clone`: the example Windows image MachineSet, cloning `windows-golden`.
    async fn create_clone_set(&self) -> Result<(), WorldError> {
        let mut set = manifests::example("MachineSet", WINDOWS_IMAGE_SET)?;
        set["metadata"]["name"] = json!(WINDOWS_CLONE_SET);
        set["spec"]["replicas"] = json!(0);
        set["spec"]["selector"]["matchLabels"][manifests::MACHINE_SET_LABEL] =
            json!(WINDOWS_CLONE_SET);
        set["spec"]["template"]["metadata"]["labels"][manifests::MACHINE_SET_LABEL] =
            json!(WINDOWS_CLONE_SET);
        manifests::annotate_template(&mut set, IMAGE_KIND_ANNOTATION, "VM");
        manifests::annotate_template(&mut set, GUEST_CUSTOMIZATION_ANNOTATION, "Sysprep");
        let value = &mut set["spec"]["template"]["spec"]["providerSpec"]["value"];
        value["image"] = json!({"type": "name", "name": "windows-golden"});
        // A clone keeps its source's boot configuration (UEFI).
        value["bootType"] = json!("");
        value["systemDiskSize"] = json!("140Gi");
        let set: MachineSet = serde_json::from_value(set).map_err(|e| WorldError::Store {
            what: format!("build MachineSet {WINDOWS_CLONE_SET}"),
            message: e.to_string(),
        })?;
        let api: Api<MachineSet> =
            Api::namespaced(self.world.client().clone(), self.world.namespace());
        api.create(&PostParams::default(), &set)
            .await
            .map_err(|e| WorldError::Api {
                action: format!("create MachineSet {WINDOWS_CLONE_SET}"),
                source: Box::new(e),
            })?;
        Ok(())
    }

    async fn scale(
        &mut self,
        sets: &[(&'static str, &'static str, usize)],
        replicas: impl Fn(usize) -> usize,
    ) -> Result<(), String> {
        for (set, _, n) in sets {
            let target = i32::try_from(replicas(*n)).unwrap_or(i32::MAX);
            self.world
                .scale(set, target)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_sets_split_the_total_over_every_kind() {
        let sets = machine_sets(50);
        assert_eq!(sets.iter().map(|(_, _, n)| n).sum::<usize>(), 50);
        assert_eq!(
            sets.iter().map(|(s, _, n)| (*s, *n)).collect::<Vec<_>>(),
            [
                (WINDOWS_TEMPLATE_SET, 15),
                (WINDOWS_IMAGE_SET, 12),
                (WINDOWS_CLONE_SET, 10),
                (LINUX_SET, 13)
            ]
        );
        let small = machine_sets(10);
        assert!(small.iter().all(|(_, _, n)| *n >= 2), "{small:?}");
    }

    #[test]
    fn names_map_to_their_machine_set() {
        assert_eq!(set_of("sandbox-worker-x7k2p"), LINUX_SET);
        assert_eq!(set_of("win-tmpl-abcde"), WINDOWS_TEMPLATE_SET);
    }

    #[test]
    fn the_password_is_distinctive_per_seed() {
        assert_ne!(prism_password(1), prism_password(2));
        assert!(prism_password(1).starts_with("chaos-pw-"));
    }
}
