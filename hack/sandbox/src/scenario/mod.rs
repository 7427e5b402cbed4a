//! The sandbox's scenario, step by step, on a [`World`]:
//!
//! 1. the example MachineSets carry the controller's capacity annotations, and the
//!    MachineAutoscaler's bounds survive them;
//! 2. the autoscaler scales the Windows image MachineSet from 0 to 3 (scale from zero, from the
//!    capacity annotations);
//! 3. the Windows template MachineSet is scaled 0 → 1 by hand (`/scale`, as `oc scale`);
//! 4. the Linux MachineSet 0 → 1 by hand;
//! 5. static addresses: the Linux MachineSet's template names the `InClusterIPPool` `workers`
//!    (served by the IPAM stand-in, [`crate::ipam`]) and it is scaled 1 → 2: the new Machine and
//!    its Node have the address bound to its claim;
//! 6. the autoscaler scales one Windows Node down: the annotated Machine, its VM and its Node go,
//!    the others stay;
//! 7. everything is scaled to 0: no Machine, VM, Node or IP address claim is left.
//!
//! Each scale-up step waits until every Machine of the set is Running and joined (see
//! [`Snapshot::join_gap`]). [`run`] plays them in order and returns a [`ScenarioReport`] whatever
//! happens; tests and benchmarks can call the steps one by one through [`Scenario`].

mod report;

use std::collections::BTreeSet;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use nutanix_machine_controller::api::{IP_POOL_ANNOTATION, MachineSet, phase};
use nutanix_machine_controller::plan::machineset::annotations::{
    CAPACITY_CPU, CAPACITY_LABELS, CAPACITY_MEMORY,
};
use serde_json::json;

use crate::autoscaler::{self, MAX_SIZE_ANNOTATION, MIN_SIZE_ANNOTATION, ScaleDown};
use crate::ipam::{IPAM_GROUP, POOL_KIND};
use crate::machine_autoscaler::OWNER_ANNOTATION;
use crate::manifests::{LINUX_SET, MACHINE_SETS, WINDOWS_IMAGE_SET, WINDOWS_TEMPLATE_SET};
use crate::world::{Snapshot, World};
pub use report::{ScenarioReport, StepReport};

/// Settings of a scenario run.
#[derive(Clone, Debug)]
pub struct ScenarioOptions {
    /// How long one step may take.
    pub step_timeout: Duration,
    /// Machines the autoscaler adds to the Windows image MachineSet (at least 2, so one can be
    /// scaled down with another left).
    pub windows_image_replicas: i32,
}

impl Default for ScenarioOptions {
    fn default() -> Self {
        Self {
            step_timeout: Duration::from_secs(90),
            windows_image_replicas: 3,
        }
    }
}

/// Why the scenario did not hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("step {step:?}: {reason}")]
pub struct ScenarioFailure {
    pub step: String,
    pub reason: String,
}

struct StepStart {
    name: String,
    started: Duration,
    prism_calls: u64,
}

/// A scenario being played: the steps done so far and what they did.
#[derive(Debug)]
pub struct Scenario<'w> {
    world: &'w World,
    options: ScenarioOptions,
    steps: Vec<StepReport>,
    scaled_down: Option<ScaleDown>,
}

fn annotations_ready(snapshot: &Snapshot, set: &str) -> Result<(), String> {
    let Some(machine_set) = snapshot.machine_set(set) else {
        return Err(format!("no MachineSet {set}"));
    };
    let annotations = machine_set.annotations();
    for key in [CAPACITY_CPU, CAPACITY_MEMORY, CAPACITY_LABELS] {
        if !annotations.contains_key(key) {
            return Err(format!(
                "MachineSet {set} has no {key} annotation (the controller's MachineSet controller writes it)"
            ));
        }
    }
    autoscaler::node_template(machine_set)
        .map(drop)
        .map_err(|e| format!("MachineSet {set}: the autoscaler cannot read its node: {e}"))
}

fn everything_gone(snapshot: &Snapshot) -> Result<(), String> {
    let names = |items: Vec<String>| items.join(", ");
    if !snapshot.machines.is_empty() {
        return Err(format!(
            "Machines left: {}",
            names(snapshot.machines.iter().map(|m| m.name_any()).collect())
        ));
    }
    if !snapshot.vms.is_empty() {
        return Err(format!(
            "VMs left in prism-mock: {}",
            names(snapshot.vms.iter().map(|vm| vm.name.clone()).collect())
        ));
    }
    if !snapshot.nodes.is_empty() {
        return Err(format!(
            "Nodes left: {}",
            names(snapshot.nodes.iter().map(|n| n.name_any()).collect())
        ));
    }
    Ok(())
}

fn set_joined(snapshot: &Snapshot, set: &str, replicas: usize) -> Result<(), String> {
    let machines = snapshot.machines_of(set);
    if machines.len() != replicas {
        return Err(format!(
            "MachineSet {set} has {} Machines, not {replicas}",
            machines.len()
        ));
    }
    match machines.iter().find_map(|m| snapshot.join_gap(m)) {
        Some(gap) => Err(gap),
        None => Ok(()),
    }
}

/// The Machine whose Node the scenario's autoscaler removes: the second oldest of the set, so that
/// no age-based delete policy would pick it without the autoscaler's annotation.
pub fn scale_down_candidate(snapshot: &Snapshot, set: &str) -> Option<String> {
    let mut machines = snapshot.machines_of(set);
    machines.sort_by_key(|m| (m.creation_timestamp(), m.name_any()));
    machines.get(1).map(|m| m.name_any())
}

impl<'w> Scenario<'w> {
    pub fn new(world: &'w World, options: ScenarioOptions) -> Self {
        Self {
            world,
            options,
            steps: Vec::new(),
            scaled_down: None,
        }
    }

    pub fn world(&self) -> &'w World {
        self.world
    }

    /// The steps done so far.
    pub fn steps(&self) -> &[StepReport] {
        &self.steps
    }

    /// What the autoscaler scaled down, once it did.
    pub fn scaled_down(&self) -> Option<&ScaleDown> {
        self.scaled_down.as_ref()
    }

    /// Starts a step: names it in progress lines and notes the time and the Prism calls so far.
    fn begin(&self, name: &str) -> StepStart {
        self.world.set_label(name);
        StepStart {
            name: name.to_owned(),
            started: self.world.snapshot().elapsed,
            prism_calls: self.world.prism_calls(),
        }
    }

    /// Ends a step: records its duration and the Prism calls made meanwhile.
    fn finish<T>(
        &mut self,
        start: StepStart,
        outcome: Result<T, String>,
    ) -> Result<T, ScenarioFailure> {
        self.steps.push(StepReport {
            name: start.name.clone(),
            started: start.started,
            ended: self.world.snapshot().elapsed,
            prism_calls: self.world.prism_calls().saturating_sub(start.prism_calls),
            succeeded: outcome.is_ok(),
        });
        outcome.map_err(|reason| ScenarioFailure {
            step: start.name,
            reason,
        })
    }

    async fn wait(
        &self,
        what: &str,
        check: impl Fn(&Snapshot) -> Result<(), String>,
    ) -> Result<Snapshot, String> {
        self.world
            .wait_for(what, self.options.step_timeout, check)
            .await
            .map_err(|e| e.to_string())
    }

    /// Step 1: every example MachineSet carries the controller's capacity annotations, and the
    /// MachineAutoscaler's bounds and owner annotation are still on the Windows image set.
    pub async fn machine_sets_annotated(&mut self) -> Result<(), ScenarioFailure> {
        let start = self.begin("MachineSets annotated");
        let outcome = async {
            let snapshot = self
                .wait("capacity annotations", |s| {
                    MACHINE_SETS.iter().try_for_each(|set| annotations_ready(s, set))
                })
                .await?;
            let Some(set) = snapshot.machine_set(WINDOWS_IMAGE_SET) else {
                return Err(format!("no MachineSet {WINDOWS_IMAGE_SET}"));
            };
            for key in [MIN_SIZE_ANNOTATION, MAX_SIZE_ANNOTATION, OWNER_ANNOTATION] {
                if !set.annotations().contains_key(key) {
                    return Err(format!(
                        "MachineSet {WINDOWS_IMAGE_SET} lost the MachineAutoscaler's {key} annotation"
                    ));
                }
            }
            let labels = set.annotations().get(CAPACITY_LABELS).cloned().unwrap_or_default();
            // What a Windows workload selects: the OS, and the label WMCO gives Windows nodes.
            for wanted in ["kubernetes.io/os=windows", "node.openshift.io/os_id=Windows"] {
                if !labels.split(',').any(|label| label == wanted) {
                    return Err(format!(
                        "MachineSet {WINDOWS_IMAGE_SET}: {CAPACITY_LABELS}={labels:?} lacks {wanted}"
                    ));
                }
            }
            Ok(())
        }
        .await;
        self.finish(start, outcome)
    }

    /// Scales `set` from its size to `replicas` through the autoscaler (which needs the capacity
    /// annotations at 0) and waits until all are Running and joined; returns their names.
    pub async fn autoscaler_scale_up(
        &mut self,
        set: &str,
        replicas: i32,
    ) -> Result<Vec<String>, ScenarioFailure> {
        let current = self.world.snapshot().machines_of(set).len() as i32;
        let start = self.begin(&format!("autoscaler: {set} {current} → {replicas}"));
        let outcome = async {
            self.world
                .autoscaler()
                .scale_up(set, replicas - current)
                .await
                .map_err(|e| e.to_string())?;
            self.joined(set, replicas).await
        }
        .await;
        self.finish(start, outcome)
    }

    /// Scales `set` to `replicas` through `/scale`, as `oc scale`, and waits until all are
    /// Running and joined; returns their names.
    pub async fn scale_by_hand(
        &mut self,
        set: &str,
        replicas: i32,
    ) -> Result<Vec<String>, ScenarioFailure> {
        let current = self.world.snapshot().machines_of(set).len();
        let start = self.begin(&format!("oc scale: {set} {current} → {replicas}"));
        let outcome = async {
            self.world
                .scale(set, replicas)
                .await
                .map_err(|e| e.to_string())?;
            self.joined(set, replicas).await
        }
        .await;
        self.finish(start, outcome)
    }

    async fn joined(&self, set: &str, replicas: i32) -> Result<Vec<String>, String> {
        let count = usize::try_from(replicas).unwrap_or_default();
        let snapshot = self
            .wait(&format!("{replicas} joined Machines in {set}"), |s| {
                set_joined(s, set, count)
            })
            .await?;
        Ok(snapshot
            .machines_of(set)
            .iter()
            .map(|m| m.name_any())
            .collect())
    }

    /// Static addresses: pool [`STATIC_POOL`] in the namespace, `set`'s template naming it,
    /// `set` scaled up by one; the new Machine's first InternalIP and its Node's InternalIP are
    /// the address bound to its claim. Returns the new Machine's name and address.
    pub async fn static_address(&mut self, set: &str) -> Result<(String, String), ScenarioFailure> {
        let before: BTreeSet<String> = self
            .world
            .snapshot()
            .machines_of(set)
            .iter()
            .map(|m| m.name_any())
            .collect();
        let replicas = i32::try_from(before.len() + 1).unwrap_or(i32::MAX);
        let start = self.begin(&format!(
            "static address: {set} {} → {replicas} from {POOL_KIND}/{STATIC_POOL}",
            before.len()
        ));
        let world = self.world;
        let outcome = async {
            let client = world.client().clone();
            let namespace = world.namespace();
            let pools = ipam_api(&client, namespace, "v1alpha2", POOL_KIND, "inclusterippools");
            let pool = json!({
                "apiVersion": format!("{IPAM_GROUP}/v1alpha2"), "kind": POOL_KIND,
                "metadata": {"name": STATIC_POOL, "namespace": namespace},
                // vm-network (10.40.0.0/20), outside prism-mock's DHCP range.
                "spec": {"addresses": ["10.40.0.20-10.40.0.29"], "prefix": 20, "gateway": "10.40.0.1"},
            });
            let pool: DynamicObject = serde_json::from_value(pool).map_err(|e| e.to_string())?;
            match pools.create(&PostParams::default(), &pool).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(error) => return Err(format!("create pool {STATIC_POOL}: {error}")),
            }
            let sets: Api<MachineSet> = Api::namespaced(client.clone(), namespace);
            let annotation = json!({"spec": {"template": {"metadata": {"annotations": {
                IP_POOL_ANNOTATION: format!("{IPAM_GROUP}/{POOL_KIND}/{STATIC_POOL}")
            }}}}});
            sets.patch(set, &PatchParams::default(), &Patch::Merge(&annotation))
                .await
                .map_err(|e| format!("annotate MachineSet {set}: {e}"))?;
            world.scale(set, replicas).await.map_err(|e| e.to_string())?;
            let names = self.joined(set, replicas).await?;
            let new = names
                .into_iter()
                .find(|name| !before.contains(name))
                .ok_or_else(|| format!("no new Machine in {set}"))?;
            let addresses = ipam_api(&client, namespace, "v1beta1", "IPAddress", "ipaddresses");
            let claim = format!("{new}-claim-0-0");
            let address = addresses
                .get(&claim)
                .await
                .map_err(|e| format!("read IPAddress {claim}: {e}"))?;
            let claimed = address.data["spec"]["address"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let snapshot = world.snapshot();
            let machine = snapshot
                .machine(&new)
                .ok_or_else(|| format!("Machine {new} is gone"))?;
            let machine_ip = machine
                .status
                .as_ref()
                .and_then(|s| s.addresses.iter().find(|a| a.type_ == "InternalIP"))
                .map(|a| a.address.clone());
            let node_ip = machine
                .status
                .as_ref()
                .and_then(|s| s.node_ref.as_ref())
                .and_then(|r| r.name.as_deref())
                .and_then(|name| snapshot.node(name))
                .and_then(|node| node.status.as_ref()?.addresses.as_ref()?.iter().find(|a| a.type_ == "InternalIP").map(|a| a.address.clone()));
            if machine_ip.as_deref() != Some(claimed.as_str()) || node_ip.as_deref() != Some(claimed.as_str()) {
                return Err(format!(
                    "Machine {new}: claimed {claimed}, first InternalIP {machine_ip:?}, its Node's {node_ip:?}"
                ));
            }
            Ok((new, claimed))
        }
        .await;
        self.finish(start, outcome)
    }

    /// The autoscaler removes the Node of one Machine of `set` (the second oldest): the Machine is
    /// annotated and deleted (drained first), its VM and Node disappear, the others stay.
    pub async fn autoscaler_scale_down(&mut self, set: &str) -> Result<ScaleDown, ScenarioFailure> {
        let start = self.begin(&format!("autoscaler: scale down one Node of {set}"));
        let world = self.world;
        let outcome = async {
            let before = world.snapshot();
            let victim_name = scale_down_candidate(&before, set).ok_or_else(|| {
                format!("MachineSet {set} has fewer than 2 Machines to scale down")
            })?;
            let machines = before.machines_of(set);
            let Some(victim) = machines.iter().find(|m| m.name_any() == victim_name) else {
                return Err(format!("no Machine {victim_name}"));
            };
            let node = victim
                .status
                .as_ref()
                .and_then(|s| s.node_ref.as_ref())
                .and_then(|r| r.name.clone())
                .ok_or_else(|| format!("Machine {victim_name} has no Node"))?;
            let vm = before
                .vm(&victim_name)
                .map(|vm| vm.uuid.clone())
                .ok_or_else(|| format!("Machine {victim_name} has no VM"))?;
            let others: BTreeSet<String> = machines
                .iter()
                .map(|m| m.name_any())
                .filter(|n| *n != victim_name)
                .collect();
            let scaled = world
                .autoscaler()
                .scale_down_node(&node)
                .await
                .map_err(|e| e.to_string())?;
            if scaled.machine != victim_name {
                return Err(format!(
                    "the autoscaler annotated Machine {}, not {victim_name} (the Machine of Node {node})",
                    scaled.machine
                ));
            }
            self.wait(&format!("Machine {victim_name}, its VM and Node gone"), |s| {
                if s.machine(&victim_name).is_some() {
                    return Err(format!("Machine {victim_name} still exists"));
                }
                if s.vms.iter().any(|v| v.uuid == vm) {
                    return Err(format!("VM {vm} of Machine {victim_name} still exists"));
                }
                if s.node(&node).is_some() {
                    return Err(format!("Node {node} still exists"));
                }
                let left: BTreeSet<String> =
                    s.machines_of(set).iter().map(|m| m.name_any()).collect();
                if left != others {
                    return Err(format!(
                        "MachineSet {set} has {left:?}, expected the untouched {others:?}"
                    ));
                }
                set_joined(s, set, others.len())
            })
            .await?;
            Ok(scaled)
        }
        .await;
        let scaled = self.finish(start, outcome)?;
        self.scaled_down = Some(scaled.clone());
        Ok(scaled)
    }

    /// Scales every example MachineSet to 0 by hand and waits until no Machine, VM or Node is
    /// left.
    pub async fn everything_to_zero(&mut self) -> Result<(), ScenarioFailure> {
        let start = self.begin("oc scale: everything → 0");
        let outcome = async {
            for set in MACHINE_SETS {
                self.world.scale(set, 0).await.map_err(|e| e.to_string())?;
            }
            self.wait("no Machine, VM or Node left", everything_gone)
                .await?;
            // Every claim released with its Machine.
            let claims = ipam_api(
                self.world.client(),
                self.world.namespace(),
                "v1beta1",
                "IPAddressClaim",
                "ipaddressclaims",
            );
            let deadline = tokio::time::Instant::now() + self.options.step_timeout;
            loop {
                let left: Vec<String> = match claims.list(&ListParams::default()).await {
                    Ok(list) => list.items.iter().map(ResourceExt::name_any).collect(),
                    // No IPAM kinds served: no claim.
                    Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
                    Err(error) => return Err(format!("list IPAddressClaims: {error}")),
                };
                if left.is_empty() {
                    return Ok(());
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(format!("IPAddressClaims left: {left:?}"));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        .await;
        self.finish(start, outcome)
    }

    /// Checks the whole run from the recorded history: the expected number of Machines were
    /// created (no replacements), each reached Running and joined, and each is gone, never
    /// before its VM.
    pub fn final_checks(&self, expected_machines: usize) -> Result<(), ScenarioFailure> {
        let failure = |reason: String| ScenarioFailure {
            step: "final checks".to_owned(),
            reason,
        };
        let history = self.world.history();
        if history.len() != expected_machines {
            let names: Vec<&str> = history.iter().map(|m| m.name.as_str()).collect();
            return Err(failure(format!(
                "{} Machines were created, expected {expected_machines}: {names:?}",
                history.len()
            )));
        }
        for record in &history {
            if record.reached(phase::RUNNING).is_none() {
                return Err(failure(format!(
                    "Machine {} never reached Running",
                    record.name
                )));
            }
            if record.reached(phase::FAILED).is_some() {
                return Err(failure(format!(
                    "Machine {} was Failed at some point",
                    record.name
                )));
            }
            if record.joined.is_none() {
                return Err(failure(format!("Machine {} never joined", record.name)));
            }
            if record.gone.is_none() {
                return Err(failure(format!("Machine {} still exists", record.name)));
            }
            if record.vm_outlived_machine {
                return Err(failure(format!(
                    "Machine {} disappeared while its VM still existed",
                    record.name
                )));
            }
        }
        if let Some(scaled) = &self.scaled_down {
            let record = history.iter().find(|r| r.name == scaled.machine);
            let first_gone = history
                .iter()
                .filter_map(|r| r.gone.map(|at| (at, r.name.clone())))
                .min();
            if record.is_none() || first_gone.map(|(_, name)| name) != Some(scaled.machine.clone())
            {
                let gone: Vec<String> = history
                    .iter()
                    .map(|r| format!("{} gone {:?}", r.name, r.gone))
                    .collect();
                return Err(failure(format!(
                    "the scaled-down Machine {} was not the first one deleted: {}",
                    scaled.machine,
                    gone.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// The report of what was played so far, with the final outcome.
    pub fn report(self, outcome: Result<(), ScenarioFailure>) -> ScenarioReport {
        let counters = self.world.prism_counters();
        ScenarioReport::new(self.steps, self.world.history(), &counters, outcome)
    }
}

/// The pool of the static-address step.
pub const STATIC_POOL: &str = "workers";

fn ipam_api(
    client: &kube::Client,
    namespace: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(IPAM_GROUP, version, kind),
        plural,
    );
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Plays the whole scenario and reports, whether it held or not.
pub async fn run(world: &World, options: ScenarioOptions) -> ScenarioReport {
    let windows_replicas = options.windows_image_replicas;
    let mut scenario = Scenario::new(world, options);
    let outcome = async {
        scenario.machine_sets_annotated().await?;
        scenario
            .autoscaler_scale_up(WINDOWS_IMAGE_SET, windows_replicas)
            .await?;
        scenario.scale_by_hand(WINDOWS_TEMPLATE_SET, 1).await?;
        scenario.scale_by_hand(LINUX_SET, 1).await?;
        scenario.static_address(LINUX_SET).await?;
        scenario.autoscaler_scale_down(WINDOWS_IMAGE_SET).await?;
        scenario.everything_to_zero().await?;
        let expected = usize::try_from(windows_replicas).unwrap_or_default() + 3;
        scenario.final_checks(expected)
    }
    .await;
    world.set_label("done");
    scenario.report(outcome)
}
