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

pub mod faults;
pub mod invariants;
pub mod kills;
pub mod report;
pub mod tracker;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nutanix_machine_controller::api::{
    GUEST_CUSTOMIZATION_ANNOTATION, IMAGE_KIND_ANNOTATION, Machine, MachineSet, phase,
};
use prism_mock::{FaultKind, FaultRule, Timings};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::manifests::{self, LINUX_SET, WINDOWS_IMAGE_SET, WINDOWS_TEMPLATE_SET};
use crate::world::{
    self, ControllerCommand, ControllerIntervals, LINUX_USER_DATA_MARKER, ProgressSink, Snapshot,
    WINDOWS_USER_DATA_MARKER, World, WorldError, WorldOptions,
};
use faults::{FaultLabel, FaultProfile};
use invariants::{Evidence, secret_hits};
use kills::KillAim;
pub use report::{ChaosReport, KillRecord};
use tracker::{VmEvent, VmTracker};

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
    let mut soak = Soak::new(&world, &options, started);
    if let Err(error) = soak.play(&mut report).await {
        report.error = Some(error);
    }
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
}

/// prism-mock's route of a v4 template deploy (a fault rule's glob).
const DEPLOY_PATH: &str = "*/$actions/deploy";

/// How often Machines and Nodes are looked at (VMs are polled every [`VM_POLL`]).
const LOOK_EVERY: Duration = Duration::from_millis(250);
const VM_POLL: Duration = Duration::from_millis(5);

impl<'w> Soak<'w> {
    fn new(world: &'w World, options: &'w ChaosOptions, started: Instant) -> Self {
        let seed_vms = world.admin().vms().into_iter().map(|vm| vm.uuid).collect();
        Self {
            world,
            options,
            started,
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
        }
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
        let sets = machine_sets(self.options.machines);

        let step = Instant::now();
        self.world
            .set_label(format!("scale up 0 → {}", self.options.machines));
        self.scale(&sets, |n| n.div_ceil(2)).await?;
        let mut second_burst = false;
        for (index, aim) in up.iter().enumerate() {
            if index == 1 {
                self.scale(&sets, |n| n).await?;
                second_burst = true;
            }
            let kill = self.kill_at(*aim, None).await?;
            report.kills.push(kill);
        }
        if !second_burst {
            self.scale(&sets, |n| n).await?;
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
        self.world
            .set_label(format!("scale down {} → 0", self.options.machines));
        self.block_drains().await?;
        self.scale(&sets, |_| 0).await?;
        let mut released = false;
        for aim in &down {
            // The blocked drains are allowed while the delete kill is armed, so that deletes
            // are being sent when it fires.
            let release_after = if *aim == KillAim::MidDelete && !released {
                released = true;
                let (low, high) = (self.options.arm_within, self.options.arm_within * 3);
                Some(self.random_duration(low, high))
            } else {
                None
            };
            let kill = self.kill_at(*aim, release_after).await?;
            report.kills.push(kill);
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

    /// Polls prism-mock's VMs once: the tracker's events, and the Administrator password of
    /// every new Windows VM.
    fn poll_vms(&mut self) -> Vec<VmEvent> {
        let admin = self.world.admin().clone();
        let vms: Vec<_> = admin
            .vms()
            .into_iter()
            .filter(|vm| !self.seed_vms.contains(&vm.uuid))
            .collect();
        let at = self.elapsed();
        let events = self.tracker.observe(at, &vms, |uuid| {
            admin
                .vm(uuid)
                .and_then(|vm| vm["spec"]["description"].as_str().map(str::to_owned))
        });
        for event in &events {
            if let VmEvent::Appeared { uuid, name } = event
                && let Some(xml) = admin.guest_customization(uuid).and_then(|c| c.unattend_xml)
                && let Some((password, obfuscated)) = admin_password(&xml)
            {
                self.secrets
                    .push((format!("Administrator password of {name}"), password));
                self.secrets.push((
                    format!("obfuscated Administrator password of {name}"),
                    obfuscated,
                ));
            }
        }
        events
    }

    /// Looks at the world (at most every [`LOOK_EVERY`]): progress line, Failed Machines'
    /// reasons, and a controller that exited on its own (restarted, and reported).
    async fn look(&mut self, force: bool) -> Result<(), String> {
        if !force && self.last_look.is_some_and(|at| at.elapsed() < LOOK_EVERY) {
            return Ok(());
        }
        self.last_look = Some(Instant::now());
        // A wait that never holds, with no time left: one snapshot (kept), and an error saying
        // whether the controller exited on its own.
        let seen = Mutex::new(None);
        let result = self
            .world
            .wait_for("the chaos run", Duration::ZERO, |snapshot| {
                *seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(snapshot.clone());
                Err(String::new())
            })
            .await;
        if let Err(WorldError::ControllerExited {
            status, log_tail, ..
        }) = result
        {
            let at = self.elapsed().as_secs_f64();
            self.unexpected_exits.push(format!(
                "at +{at:.1}s the controller exited with {status}; last lines: {}",
                log_tail
                    .lines()
                    .rev()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" | ")
            ));
            self.world
                .restart_controller()
                .await
                .map_err(|e| e.to_string())?;
        }
        if let Some(snapshot) = seen
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            for machine in &snapshot.machines {
                if machine.phase() == phase::FAILED {
                    let status = machine.status.as_ref();
                    let text = |v: Option<&String>| v.cloned().unwrap_or_default();
                    self.failures.insert(
                        machine.name_any(),
                        (
                            text(status.and_then(|s| s.error_reason.as_ref())),
                            text(status.and_then(|s| s.error_message.as_ref())),
                        ),
                    );
                }
            }
            self.last = snapshot;
        }
        Ok(())
    }

    /// Polls until `check` holds for a snapshot, or fails after `timeout` with what is missing.
    async fn wait(
        &mut self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&Snapshot) -> Result<(), String>,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            self.poll_vms();
            self.look(false).await?;
            let missing = match check(&self.last) {
                Ok(()) => return Ok(()),
                Err(missing) => missing,
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "timed out after {}s waiting for {what}: {missing}",
                    timeout.as_secs()
                ));
            }
            tokio::time::sleep(VM_POLL).await;
        }
    }

    /// Keeps polling for `duration`.
    async fn idle(&mut self, duration: Duration) -> Result<(), String> {
        let until = Instant::now() + duration;
        while Instant::now() < until {
            self.poll_vms();
            self.look(false).await?;
            tokio::time::sleep(VM_POLL).await;
        }
        Ok(())
    }

    /// Arms a kill after a random delay, waits for its event (or its fallback time), kills the
    /// controller, acts while it is down, and starts it again. `release_drains_after` removes the
    /// drain blockers that long after arming.
    async fn kill_at(
        &mut self,
        aim: KillAim,
        release_drains_after: Option<Duration>,
    ) -> Result<KillRecord, String> {
        let arm = self.random_duration(Duration::ZERO, self.options.arm_within);
        self.idle(arm).await?;
        // The next deploys' answers are lost (Prism deploys, then answers 500), so the kill
        // finds the Machine with its deploy request id and no task: the state in which a
        // deletion must send the deploy again to find the VM.
        let lost_answers = (aim == KillAim::AfterDeployThenDelete).then(|| {
            self.world.admin().add_fault(
                FaultRule::new(Some("POST"), DEPLOY_PATH, FaultKind::CreateThen500).times(2),
            )
        });
        let armed = Instant::now();
        let random_at = armed + self.random_duration(Duration::ZERO, self.options.random_within);
        let deadline = armed + self.options.trigger_timeout;
        let mut release_at = release_drains_after.map(|after| armed + after);
        let found = loop {
            let events = self.poll_vms();
            self.look(false).await?;
            if release_at.is_some_and(|at| Instant::now() >= at) {
                release_at = None;
                self.release_drains().await?;
            }
            if let Some(found) = self.trigger(aim, &events, random_at) {
                break Some(found);
            }
            if Instant::now() >= deadline {
                break None;
            }
            tokio::time::sleep(VM_POLL).await;
        };
        self.world
            .kill_controller()
            .await
            .map_err(|e| e.to_string())?;
        let at = self.elapsed();
        if let Some(id) = lost_answers {
            self.world.admin().remove_fault(id);
        }
        let (aimed, event, target) = match found {
            Some((event, target)) => (true, event, target),
            None => (false, "killed when the wait ran out".to_owned(), None),
        };
        let machine_state = target.as_deref().and_then(|name| self.machine_record(name));
        let mut while_down = None;
        if aim == KillAim::AfterDeployThenDelete
            && let Some(name) = &target
        {
            self.delete_machine(name).await?;
            self.deleted_early.insert(
                name.clone(),
                "deleted while the controller was down, right after its template deploy was sent"
                    .to_owned(),
            );
            while_down = Some(format!("deleted Machine {name}"));
        }
        if release_at.is_some() {
            self.release_drains().await?;
        }
        let down_for = self.random_duration(self.options.down_time.0, self.options.down_time.1);
        self.idle(down_for).await?;
        self.world
            .restart_controller()
            .await
            .map_err(|e| e.to_string())?;
        Ok(KillRecord {
            aim,
            at,
            aimed,
            event,
            machine_state,
            while_down,
            down_for,
        })
    }

    /// Whether the aimed moment has come: the event and the Machine it concerns.
    fn trigger(
        &self,
        aim: KillAim,
        events: &[VmEvent],
        random_at: Instant,
    ) -> Option<(String, Option<String>)> {
        let vm_event = |wanted: &dyn Fn(&VmEvent) -> Option<String>| {
            events.iter().find_map(|event| {
                let text = wanted(event)?;
                let name = match event {
                    VmEvent::Appeared { name, .. }
                    | VmEvent::State { name, .. }
                    | VmEvent::SpecVersion { name, .. }
                    | VmEvent::Gone { name, .. } => name.clone(),
                };
                Some((text, Some(name)))
            })
        };
        match aim {
            KillAim::AfterCreate => vm_event(&|event| match event {
                VmEvent::Appeared { uuid, name } if set_of(name) != WINDOWS_TEMPLATE_SET => {
                    Some(format!("VM {uuid} of {name} appeared"))
                }
                _ => None,
            }),
            KillAim::AfterDeployThenDelete => vm_event(&|event| match event {
                VmEvent::Appeared { uuid, name } if set_of(name) == WINDOWS_TEMPLATE_SET => {
                    Some(format!("VM {uuid} of {name} appeared (deployed)"))
                }
                _ => None,
            }),
            KillAim::AfterFollowUp => vm_event(&|event| match event {
                VmEvent::SpecVersion {
                    uuid,
                    name,
                    version: 1,
                } if set_of(name) != WINDOWS_IMAGE_SET && set_of(name) != LINUX_SET => {
                    Some(format!("VM {uuid} of {name} updated (spec version 1)"))
                }
                _ => None,
            }),
            KillAim::MidDelete => vm_event(&|event| match event {
                VmEvent::State { uuid, name, state } if state == "DELETE_PENDING" => {
                    Some(format!("VM {uuid} of {name} went DELETE_PENDING"))
                }
                _ => None,
            }),
            KillAim::MidDrain => self.last.machines.iter().find_map(|machine| {
                let drained = machine
                    .status
                    .as_ref()?
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "Drained")?;
                (machine.metadata.deletion_timestamp.is_some()
                    && drained.status == "False"
                    && drained.reason.as_deref() == Some("DrainBlocked"))
                .then(|| {
                    (
                        format!(
                            "Machine {} has Drained=False (DrainBlocked)",
                            machine.name_any()
                        ),
                        Some(machine.name_any()),
                    )
                })
            }),
            KillAim::AtRandom => (Instant::now() >= random_at).then(|| {
                let machines = self.last.machines.len();
                (
                    format!(
                        "{machines} Machines, {} VMs at that moment",
                        self.last.vms.len()
                    ),
                    None,
                )
            }),
        }
    }

    /// What the Machine's providerStatus says, read straight from the API server's store.
    fn machine_record(&self, name: &str) -> Option<String> {
        let machines = self
            .world
            .sim()?
            .list("machine.openshift.io", "machines")
            .ok()?;
        let machine = machines.iter().find(|m| m["metadata"]["name"] == name)?;
        Some(describe_record(machine))
    }

    async fn delete_machine(&self, name: &str) -> Result<(), String> {
        let api: Api<Machine> =
            Api::namespaced(self.world.client().clone(), self.world.namespace());
        api.delete(name, &DeleteParams::default())
            .await
            .map(|_| ())
            .map_err(|e| format!("delete Machine {name}: {e}"))
    }

    /// Puts a pod guarded by a PodDisruptionBudget (minAvailable 1) on some Running Machines'
    /// Nodes: their drains are blocked until [`Self::release_drains`].
    async fn block_drains(&mut self) -> Result<(), String> {
        self.look(true).await?;
        let mut nodes: Vec<String> = self
            .last
            .machines
            .iter()
            .filter(|m| m.phase() == phase::RUNNING)
            .filter_map(|m| m.status.as_ref()?.node_ref.as_ref()?.name.clone())
            .collect();
        nodes.sort();
        let namespace = self.world.namespace().to_owned();
        let client = self.world.client().clone();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let budgets: Api<PodDisruptionBudget> = Api::namespaced(client, &namespace);
        for index in 0..self.options.drain_blockers.min(nodes.len()) {
            let pick = self.rng.random_range(0..nodes.len());
            let node = nodes.swap_remove(pick);
            let name = format!("chaos-drain-{index}");
            let pod: Pod = from_json(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
                "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.invalid/chaos:1"}]},
            }))?;
            pods.create(&PostParams::default(), &pod)
                .await
                .map_err(|e| format!("create pod {name}: {e}"))?;
            pods.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True"}]}})),
            )
            .await
            .map_err(|e| format!("mark pod {name} Running: {e}"))?;
            let budget: PodDisruptionBudget = from_json(json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": name}}},
            }))?;
            budgets
                .create(&PostParams::default(), &budget)
                .await
                .map_err(|e| format!("create PodDisruptionBudget {name}: {e}"))?;
            self.blockers.push(name);
        }
        Ok(())
    }

    /// Deletes the PodDisruptionBudgets: the blocked drains can finish.
    async fn release_drains(&mut self) -> Result<(), String> {
        let budgets: Api<PodDisruptionBudget> =
            Api::namespaced(self.world.client().clone(), self.world.namespace());
        for name in &self.blockers {
            match budgets.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(format!("delete PodDisruptionBudget {name}: {error}")),
            }
        }
        Ok(())
    }

    /// Final look, the invariants, the logs searched, the counts.
    async fn finish(&mut self, report: &mut ChaosReport) {
        self.poll_vms();
        let _ = self.look(true).await;
        let machines = self.world.history();
        let mut secrets = vec![
            (
                "Prism password".to_owned(),
                prism_password(self.options.seed),
            ),
            (
                "Windows user data marker".to_owned(),
                WINDOWS_USER_DATA_MARKER.to_owned(),
            ),
            (
                "Linux user data marker".to_owned(),
                LINUX_USER_DATA_MARKER.to_owned(),
            ),
            (
                "Windows user data (base64)".to_owned(),
                STANDARD.encode(world::windows_user_data()),
            ),
            (
                "Linux user data (base64)".to_owned(),
                STANDARD.encode(world::linux_user_data()),
            ),
        ];
        secrets.extend(self.secrets.iter().cloned());
        let mut hits = Vec::new();
        let mut log_lines = Vec::new();
        let mut logs = vec![("controller.log".to_owned(), self.world.controller_log())];
        if let Some(path) = &self.options.sandbox_log {
            logs.push((
                file_name(path),
                std::fs::read_to_string(path).unwrap_or_default(),
            ));
        }
        for (name, text) in &logs {
            hits.extend(secret_hits(name, text, &secrets));
            log_lines.push((name.clone(), text.lines().count()));
        }
        report.invariants = invariants::check(&Evidence {
            namespace: self.world.namespace(),
            tracker: &self.tracker,
            machines: &machines,
            failures: &self.failures,
            deleted_early: &self.deleted_early,
            last: &self.last,
            secret_hits: &hits,
            log_lines: &log_lines,
            unexpected_exits: &self.unexpected_exits,
        });
        report.faults = faults::firings(&self.world.admin().faults(), &self.fault_ids);
        report.list_lag_ms = self.options.faults.list_lag_ms;
        let counters = self.world.prism_counters();
        report.answers = faults::answers_by_status(&counters);
        report.prism_calls = counters.iter().map(|c| c.count).sum();
        report.machines_seen = machines.len();
        report.vms_seen = self.tracker.vms().count();
        report.failed = self
            .failures
            .iter()
            .map(|(name, (reason, message))| (name.clone(), reason.clone(), message.clone()))
            .collect();
        report.deleted_early = self
            .deleted_early
            .iter()
            .map(|(name, why)| (name.clone(), why.clone()))
            .collect();
    }
}

/// Noisy dependencies kept at info in the captured log.
const CAPTURE_FILTER: &str =
    "debug,hyper=info,hyper_util=info,h2=info,rustls=info,tower=info,reqwest=info";

/// Installs the process's log subscriber: every event at debug level (dependencies' chatter at
/// info) appended to `path`, which a run names as [`ChaosOptions::sandbox_log`] to have it
/// searched for secrets; and, with `stderr_filter`, a plain stderr log as well.
pub fn capture_logs(path: &Path, stderr_filter: Option<&str>) -> Result<(), String> {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, fmt};
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let to_file = fmt::layer()
        .with_writer(Mutex::new(file))
        .with_ansi(false)
        .with_filter(EnvFilter::new(CAPTURE_FILTER));
    let to_stderr = stderr_filter.map(|filter| {
        fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(EnvFilter::new(filter))
    });
    tracing_subscriber::registry()
        .with(to_file)
        .with(to_stderr)
        .try_init()
        .map_err(|e| format!("cannot install the log subscriber: {e}"))
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// Every MachineSet has its replicas of Machines not being deleted, each Running or Failed.
fn scale_up_done(
    snapshot: &Snapshot,
    sets: &[(&'static str, &'static str, usize)],
) -> Result<(), String> {
    let mut missing = Vec::new();
    for (set, _, target) in sets {
        let live: Vec<&Machine> = snapshot
            .machines_of(set)
            .into_iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .collect();
        if live.len() != *target {
            missing.push(format!("{set}: {} of {target} Machines", live.len()));
        }
        for machine in live {
            let phase = machine.phase();
            if phase != phase::RUNNING && phase != phase::FAILED {
                missing.push(format!(
                    "{} is {}",
                    machine.name_any(),
                    if phase.is_empty() { "new" } else { phase }
                ));
            }
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        let more = missing.len().saturating_sub(6);
        missing.truncate(6);
        if more > 0 {
            missing.push(format!("{more} more"));
        }
        Err(missing.join("; "))
    }
}

/// A Machine's provisioning record in a few words (`phase Provisioning; deployRequestId
/// recorded; no task recorded; no vmUUID`).
fn describe_record(machine: &Value) -> String {
    let status = &machine["status"]["providerStatus"];
    let phase = machine["status"]["phase"].as_str().unwrap_or("");
    let mut parts = vec![format!(
        "phase {}",
        if phase.is_empty() { "(none)" } else { phase }
    )];
    if status["deployRequestId"].is_string() {
        parts.push("deployRequestId recorded".to_owned());
    }
    match status["pendingTask"]["operation"].as_str() {
        Some(operation) => parts.push(format!("{operation} task recorded")),
        None => parts.push("no task recorded".to_owned()),
    }
    parts.push(if status["vmUUID"].is_string() {
        "vmUUID recorded".to_owned()
    } else {
        "no vmUUID".to_owned()
    });
    if status["pendingFollowUp"].is_object() {
        parts.push("follow-up pending".to_owned());
    }
    if machine["metadata"]["deletionTimestamp"].is_string() {
        parts.push("being deleted".to_owned());
    }
    parts.join("; ")
}

/// The Administrator password of an unattend.xml and its obfuscated form (base64 of the
/// UTF-16LE of the password followed by `AdministratorPassword`).
fn admin_password(unattend_xml: &str) -> Option<(String, String)> {
    let section = &unattend_xml[unattend_xml.find("<AdministratorPassword>")?..];
    let start = section.find("<Value>")? + "<Value>".len();
    let end = section[start..].find('<')? + start;
    let obfuscated = section[start..end].to_owned();
    let bytes = STANDARD.decode(&obfuscated).ok()?;
    let units: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|pair| u16::from_le_bytes([pair[0], pair[1]]))
        .collect();
    let text = String::from_utf16(&units).ok()?;
    let password = text.strip_suffix("AdministratorPassword")?.to_owned();
    Some((password, obfuscated))
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

    #[test]
    fn a_provisioning_record_is_described_in_a_few_words() {
        let machine = json!({
            "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Provisioning", "providerStatus": {"deployRequestId": "r1",
                "pendingFollowUp": {"powerOn": true}}},
        });
        assert_eq!(
            describe_record(&machine),
            "phase Provisioning; deployRequestId recorded; no task recorded; no vmUUID; \
             follow-up pending; being deleted"
        );
        let machine = json!({"status": {"providerStatus": {"vmUUID": "u",
            "pendingTask": {"id": "t", "operation": "Create"}}}});
        assert_eq!(
            describe_record(&machine),
            "phase (none); Create task recorded; vmUUID recorded"
        );
    }

    #[test]
    fn the_administrator_password_is_read_back_from_windows_obfuscation() {
        let units: Vec<u8> = "S3cret!AdministratorPassword"
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect();
        let encoded = STANDARD.encode(units);
        let xml = format!(
            "<x><AdministratorPassword><Value>{encoded}</Value><PlainText>false</PlainText></AdministratorPassword></x>"
        );
        assert_eq!(admin_password(&xml), Some(("S3cret!".to_owned(), encoded)));
        assert_eq!(admin_password("<x/>"), None);
    }

    #[test]
    fn scale_up_is_done_when_every_set_has_its_machines_running_or_failed() {
        let machine = |name: &str, set: &str, phase: &str| -> Machine {
            serde_json::from_value(json!({
                "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
                "metadata": {"name": name, "labels": {manifests::MACHINE_SET_LABEL: set}},
                "spec": {}, "status": {"phase": phase},
            }))
            .unwrap()
        };
        let sets = [("a", "", 2), ("b", "", 1)];
        let mut snapshot = Snapshot {
            machines: vec![
                machine("a-1", "a", "Running"),
                machine("a-2", "a", "Provisioned"),
                machine("b-1", "b", "Failed"),
            ],
            ..Snapshot::default()
        };
        assert_eq!(
            scale_up_done(&snapshot, &sets),
            Err("a-2 is Provisioned".to_owned())
        );
        snapshot.machines[1] = machine("a-2", "a", "Running");
        assert_eq!(scale_up_done(&snapshot, &sets), Ok(()));
        snapshot.machines.pop();
        assert_eq!(
            scale_up_done(&snapshot, &sets),
            Err("b: 0 of 1 Machines".to_owned())
        );
    }
}
