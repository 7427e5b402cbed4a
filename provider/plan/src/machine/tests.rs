//! The protocol in memory: a simulated world of a few lines (the stored Machine, Prism's VMs and
//! tasks) answers every action [`decide`] asks for, as the executor would perform it, and the
//! tests assert the sequence of actions and writes of whole creates and deletes, and what a
//! controller that stopped at any point does next.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use pretty_assertions::assert_eq;
use prism_types::v3::Vm;
use prism_types::{PrismMessages, TaskEnd, TaskEntity, TaskFailure, TaskProgress};
use serde_json::{Value, json};

use super::*;
use crate::api::{Machine, NutanixMachineProviderStatus, PendingTask, TaskOperation, phase};
use crate::machine::lifecycle::{INSTANCE_MISSING_MESSAGE, Intervals};
use crate::machine::provision::DeployCandidate;
use crate::machine::status::{
    StatusUpdate, conditions, metadata_patch, provider_condition, status_patch,
};
use crate::machine::task_memory::RememberedTask;
use crate::vm::identity::{MarkedVm, identity_of};
use crate::vm::request::VmRequest;
use crate::vm::resolve::{Lookup, ResolvedReferences, SubnetIpam};
use crate::vm::secret::{AdminPassword, SecretValue};
use crate::vm::spec::ParsedSpec;
use crate::vm::validate::{PlanContext, plan_vm};

const UID: &str = "11111111-2222-4333-8444-555555555555";
const NAME: &str = "worker-0";
const CLUSTER: &str = "0005b0f1-8f43-a0f2-02b7-3cecef193712";
const SUBNET: &str = "c7938dc6-7659-453e-a688-e26020c68e43";

fn machine_json(source: &str) -> Value {
    let (kind, image) = match source {
        "template" => ("Template", "win-template"),
        "clone" => ("VM", "win-golden"),
        _ => ("", "rhcos"),
    };
    let mut value = json!({
        "apiVersion": "machine.openshift.io/v1beta1",
        "kind": "Machine",
        "metadata": {
            "name": NAME, "namespace": "openshift-machine-api", "uid": UID,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"machine.openshift.io/cluster-api-cluster": "ocp-7x2kq"}
        },
        "spec": {"providerSpec": {"value": {
            "apiVersion": "machine.openshift.io/v1",
            "kind": "NutanixMachineProviderConfig",
            "cluster": {"type": "uuid", "uuid": CLUSTER},
            "image": {"type": "name", "name": image},
            "subnets": [{"type": "uuid", "uuid": SUBNET}],
            "vcpuSockets": 2, "vcpusPerSocket": 1,
            "memorySize": "8Gi", "systemDiskSize": "120Gi",
            "credentialsSecret": {"name": "nutanix-credentials"},
            "userDataSecret": {"name": "worker-user-data"}
        }}}
    });
    if !kind.is_empty() {
        value["spec"]["providerSpec"]["value"]["imageKind"] = json!(kind);
    }
    value
}

/// What the world's Prism resolves the Machine's references to.
fn resolved() -> ResolvedReferences {
    serde_json::from_value(json!({
        "clusters": {CLUSTER: {"uuid": CLUSTER}},
        "images": {"rhcos": {"uuid": "f2a1c0de-0000-4000-8000-000000000001", "sizeBytes": 16u64 << 30}},
        "templates": {"win-template": {"uuid": "7e3b0d9a-1111-4000-8000-000000000002", "sizeBytes": 64u64 << 30, "bootType": "UEFI"}},
        "sourceVms": {"win-golden": {"uuid": "9c1d2e3f-2222-4000-8000-000000000003", "sizeBytes": 64u64 << 30}},
        "subnets": {SUBNET: {"uuid": SUBNET, "clusterUuid": CLUSTER}},
        "categories": {"kubernetes-io-cluster-ocp-7x2kq": {"owned": true}}
    }))
    .unwrap()
}

/// The password the world's API server keeps in the generated password's Secret.
const GENERATED_PASSWORD: &str = "Generated-Passw0rd!";

/// [`plan_vm`], counting the calls of each round, with the warnings a test gives in place of
/// the plan's own.
#[derive(Default)]
struct CountingPlanner {
    calls: std::cell::Cell<usize>,
    warnings: Option<Vec<String>>,
}

impl Planner for CountingPlanner {
    fn plan(
        &self,
        machine: &Machine,
        spec: &ParsedSpec,
        context: &PlanContext<'_>,
    ) -> Result<crate::vm::VmPlan, crate::vm::errors::ValidationErrors> {
        self.calls.set(self.calls.get() + 1);
        let mut plan = plan_vm(machine, spec, context)?;
        if let Some(warnings) = &self.warnings {
            plan.warnings.clone_from(warnings);
        }
        Ok(plan)
    }
}

/// How Prism answers the next create, clone or deploy.
#[derive(Clone, Debug)]
enum Answer {
    /// Accepted: the VM is made, its task runs until [`World::tick`].
    Accept,
    /// Made, but the answer is lost (a 500 after Prism accepted it).
    Lost,
    /// Refused: nothing is made.
    Refuse(SendOutcome),
    /// 409: an earlier attempt made the VM, which a GET now finds.
    ConflictWithEarlier,
}

/// Prism and the stored Machine, as the executor would meet them.
struct World {
    machine: Value,
    vms: BTreeMap<String, Value>,
    /// VMs the listing does not show yet (list lag).
    unlisted: BTreeSet<String>,
    tasks: BTreeMap<String, (TaskProgress, Option<String>)>,
    /// Deploy request id → its task (Prism answers a repeat with the first task).
    deploys: BTreeMap<String, String>,
    listing_pays: bool,
    environment: EnvironmentSeen,
    now: Timestamp,
    /// The `userData` of the Machine's user-data Secret.
    user_data_secret: Vec<u8>,
    /// Makes the plan in [`decide_with`].
    planner: CountingPlanner,
    gate: bool,
    /// `--fail-timed-out-windows-joins`.
    fail_timed_out_joins: bool,
    answers: VecDeque<Answer>,
    /// A UUID Prism gives the next VM instead of the reserved one.
    gives_uuid: Option<String>,
    /// A succeeded deploy task names no VM (only its subtask would).
    deploy_names_no_vm: bool,
    /// The next task of a create ends with this failure.
    task_fails: Option<TaskFailure>,
    /// The next drain round's outcome.
    drain: DrainProgress,
    counter: u32,
    log: Vec<String>,
    /// IP address claims by name, as the API server holds them.
    claims: BTreeMap<String, crate::api::ipam::IPAddressClaim>,
    /// Free addresses of the pool, handed out in order by [`World::bind`].
    pool: VecDeque<&'static str>,
    /// The CIDR Prism manages on the subnet (`None`: unmanaged).
    subnet_cidr: Option<ipnet::IpNet>,
    /// The addresses the creates asked Prism to assign.
    assigned: Vec<Value>,
    /// The cloud-init user data of each create, clone or deploy sent, decoded.
    user_data: Vec<String>,
    /// The pool's IPAM controller binds a claim before it is next read.
    auto_bind: bool,
    /// Sysprep with a generated password: whether its Secret exists (`None`: no such password).
    password_secret: Option<bool>,
    /// The uids of that Secret's owners, when it exists.
    password_secret_owners: Vec<String>,
    /// How the API server answers the next creation of that Secret (`None`: it is created).
    password_secret_answer: Option<PasswordSecretOutcome>,
    /// Nodes by name, as the API server (and the watch cache) hold them.
    nodes: BTreeMap<String, Value>,
    /// Nodes the watch cache does not show yet.
    nodes_uncached: BTreeSet<String>,
    /// A follow-up update is answered as Prism answers a `PUT` (202, a task; the VM `PENDING`
    /// with the new intent until the task ends: the recorded `update_vm.json`) rather than
    /// applied at once.
    follow_up_runs: bool,
    /// Detach request id → its task, and the (VM, volume group) the task detaches when it ends
    /// (Prism answers a repeated request id with the first task).
    detaches: BTreeMap<String, String>,
    detach_effects: BTreeMap<String, (String, String)>,
    /// The next detach task fails with this.
    detach_fails: Option<TaskFailure>,
    /// The create's task the executor keeps in memory; a controller that stops loses it.
    remembered: Option<RememberedTask>,
}

impl World {
    fn new(source: &str) -> Self {
        let machine = machine_json(source);
        Self {
            user_data_secret: br#"{"ignition":{"version":"3.2.0"}}"#.to_vec(),
            planner: CountingPlanner::default(),
            machine,
            vms: BTreeMap::new(),
            unlisted: BTreeSet::new(),
            tasks: BTreeMap::new(),
            deploys: BTreeMap::new(),
            listing_pays: false,
            environment: EnvironmentSeen::Ready {
                first_task_read: Duration::ZERO,
                first_delete_look: Intervals::default().poll,
                slowest_task: None,
                task_end_seen: false,
                delete_end_seen: false,
            },
            now: "2026-01-01T00:01:00Z".parse().unwrap(),
            gate: false,
            fail_timed_out_joins: false,
            answers: VecDeque::new(),
            gives_uuid: None,
            deploy_names_no_vm: false,
            task_fails: None,
            drain: DrainProgress::Done,
            counter: 0,
            log: Vec::new(),
            claims: BTreeMap::new(),
            pool: VecDeque::new(),
            subnet_cidr: Some("10.0.0.0/24".parse().unwrap()),
            assigned: Vec::new(),
            user_data: Vec::new(),
            auto_bind: false,
            password_secret: None,
            password_secret_owners: vec![UID.to_owned()],
            password_secret_answer: None,
            nodes: BTreeMap::new(),
            nodes_uncached: BTreeSet::new(),
            follow_up_runs: false,
            detaches: BTreeMap::new(),
            detach_effects: BTreeMap::new(),
            detach_fails: None,
            remembered: None,
        }
    }

    /// What the world's Prism resolves the Machine's references to, its subnet managed or not.
    fn resolved(&self) -> ResolvedReferences {
        let mut resolved = resolved();
        for lookup in resolved.subnets.values_mut() {
            if let Lookup::Found(subnet) = lookup {
                subnet.ipam = Some(match self.subnet_cidr {
                    Some(cidr) => SubnetIpam::Managed { cidr },
                    None => SubnetIpam::Unmanaged,
                });
            }
        }
        resolved
    }

    /// Makes the Machine a Windows one, with WMCO's user data.
    fn make_windows(&mut self) {
        self.machine["metadata"]["labels"]["machine.openshift.io/os-id"] = json!("Windows");
        self.machine["spec"]["providerSpec"]["value"]["userDataSecret"] =
            json!({"name": "windows-user-data"});
        self.user_data_secret = b"<powershell>\nWrite-Output wmco\n</powershell>\n".to_vec();
    }

    /// A Windows Machine customised by Sysprep with a generated Administrator password, whose
    /// Secret does not exist yet.
    fn sysprep(mut self) -> Self {
        self.make_windows();
        self.machine["metadata"]["annotations"] =
            json!({crate::api::GUEST_CUSTOMIZATION_ANNOTATION: "Sysprep"});
        self.password_secret = Some(false);
        self
    }

    /// Nutanix CSI attaches volume group `group` to VM `uuid` (hypervisor-attached): a
    /// `VOLUME_GROUP` disk in its spec and status (prism-go-client `v3/swagger.json`, `vm_disk`).
    fn attach_volume_group(&mut self, uuid: &str, group: &str) {
        let disk = json!({
            "device_properties": {"device_type": "VOLUME_GROUP",
                "disk_address": {"adapter_type": "SCSI", "device_index": 1}},
            "volume_group_reference": {"kind": "volume_group", "uuid": group}
        });
        let vm = self.vms.get_mut(uuid).unwrap();
        for part in ["spec", "status"] {
            let disks = &mut vm[part]["resources"]["disk_list"];
            if !disks.is_array() {
                *disks = json!([]);
            }
            disks.as_array_mut().unwrap().push(disk.clone());
        }
    }

    fn attached_volume_groups(&self, uuid: &str) -> Vec<String> {
        self.vm(uuid)
            .map(|vm| vm.attached_volume_groups())
            .unwrap_or_default()
    }

    /// The Machine takes its address from pool `workers`, which holds `free`.
    fn with_pool(mut self, free: &[&'static str]) -> Self {
        self.machine["metadata"]["annotations"] = json!({
            crate::api::IP_POOL_ANNOTATION: "ipam.cluster.x-k8s.io/InClusterIPPool/workers"
        });
        self.pool = free.iter().copied().collect();
        self
    }

    /// The pool's IPAM controller binds each unbound claim while it has addresses.
    fn bind(&mut self) {
        for claim in self.claims.values_mut() {
            let status = claim.status.get_or_insert_with(Default::default);
            if status.address_ref.is_none()
                && let Some(_) = self.pool.front()
            {
                status.address_ref = Some(k8s_openapi::api::core::v1::LocalObjectReference {
                    name: claim.metadata.name.clone().unwrap(),
                });
            }
        }
    }

    fn address_of(&self, name: &str) -> Option<crate::api::ipam::IPAddress> {
        let claim = self.claims.get(name)?;
        claim.status.as_ref()?.address_ref.as_ref()?;
        let ip = self.pool.front().copied()?;
        Some(crate::api::ipam::IPAddress {
            metadata: Default::default(),
            spec: crate::api::ipam::IpAddressSpec {
                claim_ref: Default::default(),
                pool_ref: claim.spec.pool_ref.clone(),
                address: ip.into(),
                prefix: 24,
                gateway: Some("10.0.0.1".into()),
                extra: Default::default(),
            },
        })
    }

    fn stored(&self) -> Machine {
        serde_json::from_value(self.machine.clone()).unwrap()
    }

    fn status(&self) -> NutanixMachineProviderStatus {
        self.stored().provider_status().unwrap()
    }

    fn phase(&self) -> String {
        self.stored().phase().to_owned()
    }

    fn next_id(&mut self, what: &str) -> String {
        self.counter += 1;
        format!("{what}-{}", self.counter)
    }

    fn vm(&self, uuid: &str) -> Option<Vm> {
        self.vms
            .get(uuid)
            .map(|vm| serde_json::from_value(vm.clone()).unwrap())
    }

    /// A VM whose create, clone or deploy was accepted: a `GET` shows it `PENDING` until the
    /// next tick ends its task (openshift/machine-api-provider-nutanix `pkg/client/state.go`
    /// waits for `COMPLETE` that way), and no listing shows it before then.
    fn make_vm(&mut self, uuid: &str, power: &str) {
        let vm = json!({
            "metadata": {"kind": "vm", "uuid": uuid, "creation_time": "2026-01-01T00:01:00Z"},
            "spec": {"name": NAME, "resources": {"nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": SUBNET}}]}},
            "status": {"state": "PENDING", "resources": {"power_state": power}}
        });
        self.vms.insert(uuid.to_owned(), vm);
        self.unlisted.insert(uuid.to_owned());
    }

    /// Time passes: running tasks end, deletes finish, listings catch up.
    fn tick(&mut self) {
        self.now += SignedDuration::from_secs(60);
        for (task, (vm, group)) in std::mem::take(&mut self.detach_effects) {
            let failure = self.detach_fails.take();
            let detached = failure.is_none();
            if let Some((progress, _)) = self.tasks.get_mut(&task) {
                *progress = match failure {
                    Some(failure) => TaskProgress::Failed(Box::new(failure)),
                    None => TaskProgress::Succeeded {
                        entities: Vec::new(),
                        unread_subtasks: Vec::new(),
                    },
                };
            }
            if detached && let Some(body) = self.vms.get_mut(&vm) {
                for part in ["spec", "status"] {
                    if let Some(disks) = body[part]["resources"]["disk_list"].as_array_mut() {
                        disks.retain(|disk| disk["volume_group_reference"]["uuid"] != json!(group));
                    }
                }
            }
        }
        for (progress, vm) in self.tasks.values_mut() {
            if let TaskProgress::Running { .. } = progress {
                *progress = match self.task_fails.take() {
                    Some(failure) => TaskProgress::Failed(Box::new(failure)),
                    None => TaskProgress::Succeeded {
                        entities: vm
                            .iter()
                            .map(|uuid| TaskEntity {
                                kind: "vm".into(),
                                uuid: uuid.clone(),
                            })
                            .collect(),
                        unread_subtasks: Vec::new(),
                    },
                };
            }
        }
        self.vms
            .retain(|_, vm| vm["status"]["state"] != json!("DELETE_PENDING"));
        for vm in self.vms.values_mut() {
            if vm["status"]["state"] == json!("PENDING") {
                vm["status"]["state"] = json!("COMPLETE");
                if vm["spec"]["resources"]["power_state"] == json!("ON") {
                    vm["status"]["resources"]["power_state"] = json!("ON");
                }
            }
        }
        self.unlisted.clear();
    }

    fn listing(
        &self,
        source: &ListingSource,
        status: &NutanixMachineProviderStatus,
    ) -> Option<Listing> {
        if matches!(source, ListingSource::ForWaiter { .. }) && !self.listing_pays {
            return None;
        }
        let listed: Vec<Vm> = self
            .vms
            .keys()
            .filter(|uuid| !self.unlisted.contains(*uuid))
            .filter_map(|uuid| self.vm(uuid))
            .collect();
        Some(Listing {
            listed_at: self.now,
            vm: status
                .vm_uuid
                .as_deref()
                .and_then(|uuid| listed.iter().find(|vm| vm.uuid() == Some(uuid)).cloned()),
            named: listed
                .iter()
                .map(|vm| DeployCandidate {
                    uuid: vm.uuid().unwrap().to_owned(),
                    created: vm
                        .metadata
                        .creation_time
                        .as_deref()
                        .map(|at| at.parse().unwrap()),
                    identity: vm
                        .spec
                        .as_ref()
                        .and_then(|spec| spec.description.as_deref())
                        .and_then(identity_of),
                    categories: vm.metadata.categories.clone().unwrap_or_default(),
                })
                .collect(),
            marked: listed
                .iter()
                .filter_map(MarkedVm::of)
                .filter(|vm| vm.identity.uid == UID)
                .collect(),
        })
    }

    fn read(&mut self, snapshot: &mut Snapshot, read: Read) {
        let seen = &mut snapshot.seen;
        // A listing that does not pay is not made: nothing to log.
        let paid = !matches!(
            &read,
            Read::Listing {
                source: ListingSource::ForWaiter { .. },
                ..
            }
        ) || self.listing_pays;
        self.log.push(match &read {
            _ if !paid => String::new(),
            Read::Environment => "env".into(),
            Read::Listing { slot, .. } => format!("list {slot:?}"),
            Read::Task(_) => "task".into(),
            Read::Vm { .. } => "GET".into(),
            Read::Confirm { .. } => "GET confirm".into(),
            Read::Node { .. } => "node".into(),
            Read::AddressContext { .. } => "addresses".into(),
            Read::CreateInputs { .. } => "inputs".into(),
            Read::Claims { .. } => "claims".into(),
        });
        self.log.retain(|step| !step.is_empty());
        match read {
            Read::Environment => seen.observe.environment = Some(self.environment.clone()),
            Read::Listing { slot, source } => {
                let listing = self.listing(&source, &snapshot.status);
                match slot {
                    ListingSlot::Task => seen.observe.task_listing = Some(listing.into()),
                    ListingSlot::Deploy => seen.observe.deploy_listing = Some(listing.into()),
                    ListingSlot::Vm => seen.observe.vm_listing = Some(listing.into()),
                    ListingSlot::Marker => seen.observe.marker_listing = Some(listing.into()),
                }
            }
            Read::Task(task) => seen.observe.task = Some(self.tasks[&task.id].0.clone()),
            Read::Vm { uuid, .. } => seen.observe.vm = Some(self.vm(&uuid).into()),
            Read::Confirm { uuid } => seen.observe.confirm = Some(self.vm(&uuid).into()),
            Read::Node { name, cached } => {
                let hidden = cached && self.nodes_uncached.contains(&name);
                seen.observe.node = Some(
                    self.nodes
                        .get(&name)
                        .filter(|_| !hidden)
                        .map(|node| serde_json::from_value(node.clone()).unwrap())
                        .into(),
                );
                seen.observe.node_fresh = !cached;
            }
            Read::AddressContext { .. } => {
                seen.update.address_context = Some(AddressContext::default())
            }
            Read::CreateInputs {
                user_data,
                admin_password,
            } => {
                seen.create.inputs = Some(CreateInputs {
                    resolved: self.resolved(),
                    user_data: user_data.map(|_| SecretRead::Found {
                        owners: Vec::new(),
                        value: Some(SecretValue::new(self.user_data_secret.clone())),
                    }),
                    admin_password: admin_password.map(|_| match self.password_secret {
                        Some(true) => SecretRead::Found {
                            owners: self.password_secret_owners.clone(),
                            value: Some(SecretValue::new(GENERATED_PASSWORD)),
                        },
                        _ => SecretRead::Missing,
                    }),
                });
            }
            Read::Claims { names } => {
                if self.auto_bind {
                    self.bind();
                }
                let readings = names
                    .iter()
                    .map(|(nic, name)| {
                        (
                            *nic,
                            crate::machine::ipam::ClaimReading {
                                claim: self.claims.get(name).cloned(),
                                address: self.address_of(name),
                                pool_usage: None,
                            },
                        )
                    })
                    .collect();
                seen.create.claims = Some(readings);
            }
        }
    }

    fn send(&mut self, snapshot: &mut Snapshot, change: Change) {
        let seen = &mut snapshot.seen;
        match change {
            Change::CreatePasswordSecret => {
                self.log.push("create password Secret".into());
                let outcome = self.password_secret_answer.take().unwrap_or_else(|| {
                    PasswordSecretOutcome::Created(AdminPassword::new(GENERATED_PASSWORD).unwrap())
                });
                if matches!(outcome, PasswordSecretOutcome::Created(_)) {
                    self.password_secret = Some(true);
                }
                seen.create.password_secret = Some(outcome);
            }
            Change::ReserveUuid => {
                self.log.push("reserve".into());
                seen.create.reserved = Some(self.next_id("vm"));
            }
            Change::Create {
                request,
                deploy_request_id,
            } => {
                self.log.push(
                    if deploy_request_id.is_some() {
                        "deploy"
                    } else {
                        "create"
                    }
                    .into(),
                );
                if let Some(task) = deploy_request_id
                    .as_ref()
                    .and_then(|id| self.deploys.get(id))
                {
                    seen.create.sent = Some(SendOutcome::Accepted {
                        task: Some(task.clone()),
                    });
                    return;
                }
                let answer = self.answers.pop_front().unwrap_or(Answer::Accept);
                if let Answer::Refuse(outcome) = answer {
                    seen.create.sent = Some(outcome);
                    return;
                }
                if let (Answer::ConflictWithEarlier, VmRequest::Create(body)) = (&answer, &*request)
                {
                    let uuid = body.metadata.uuid.clone().unwrap();
                    self.make_vm(&uuid, "ON");
                    snapshot.seen.create.sent = Some(SendOutcome::Conflict("409".into()));
                    return;
                }
                let body = request.body_json();
                let nics = body["spec"]["resources"]["nic_list"]
                    .as_array()
                    .or(body["override_spec"]["nic_list"].as_array())
                    .cloned()
                    .unwrap_or_default();
                self.assigned
                    .extend(nics.iter().map(|nic| nic["ip_endpoint_list"].clone()));
                if let Some(encoded) = body
                    .pointer("/spec/resources/guest_customization/cloud_init/user_data")
                    .and_then(Value::as_str)
                {
                    use base64::Engine as _;
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(encoded)
                        .unwrap();
                    self.user_data.push(String::from_utf8(decoded).unwrap());
                }
                // A deploy asks for its addresses per v4 NIC (`ipv4Config`).
                let deploy_nics = body["overrideVmConfigMap"]
                    .as_object()
                    .into_iter()
                    .flat_map(|map| map.values())
                    .flat_map(|overrides| {
                        overrides["nics"].as_array().cloned().unwrap_or_default()
                    });
                self.assigned.extend(deploy_nics.filter_map(|nic| {
                    nic.pointer("/networkInfo/ipv4Config/ipAddress/value")
                        .map(|ip| json!([{"ip": ip, "type": "ASSIGNED"}]))
                }));
                let requested = match &*request {
                    VmRequest::Create(body) => body.metadata.uuid.clone(),
                    VmRequest::Clone { body, .. } => {
                        body.metadata.as_ref().and_then(|m| m.uuid.clone())
                    }
                    VmRequest::Deploy { .. } => None,
                };
                let uuid = self
                    .gives_uuid
                    .take()
                    .or(requested)
                    .unwrap_or_else(|| self.next_id("deployed"));
                let power = if matches!(*request, VmRequest::Create(_)) {
                    "ON"
                } else {
                    "OFF"
                };
                self.make_vm(&uuid, power);
                let task = self.next_id("task");
                let named = (!(deploy_request_id.is_some() && self.deploy_names_no_vm))
                    .then(|| uuid.clone());
                self.tasks.insert(task.clone(), (running(), named));
                if let Some(id) = deploy_request_id {
                    self.deploys.insert(id, task.clone());
                }
                seen.create.sent = Some(match answer {
                    Answer::Lost => SendOutcome::Retry,
                    _ => SendOutcome::Accepted { task: Some(task) },
                });
            }
            Change::FollowUp { uuid, update, .. } if self.follow_up_runs => {
                self.log.push("follow-up".into());
                let task = self.next_id("task");
                if let Some(vm) = self.vms.get_mut(&uuid) {
                    vm["spec"]["description"] = json!(update.description);
                    vm["metadata"]["categories"] = json!(update.categories);
                    vm["spec"]["resources"]["power_state"] = json!("ON");
                    if let Some(mib) = update.resize_system_disk_mib {
                        vm["spec"]["resources"]["disk_list"] = json!([{
                            "device_properties": {"device_type": "DISK",
                                "disk_address": {"adapter_type": "SCSI", "device_index": 0}},
                            "disk_size_mib": mib
                        }]);
                    }
                    vm["status"]["state"] = json!("PENDING");
                }
                self.tasks.insert(task.clone(), (running(), Some(uuid)));
                seen.update.follow_up = Some(FollowUpOutcome::Task(task));
            }
            Change::FollowUp { uuid, .. } => {
                self.log.push("follow-up".into());
                if let Some(vm) = self.vms.get_mut(&uuid) {
                    vm["status"]["resources"]["power_state"] = json!("ON");
                }
                seen.update.follow_up = Some(FollowUpOutcome::Done);
            }
            Change::DeleteVm { uuid } => {
                self.log.push("DELETE".into());
                // Prism accepts the DELETE of a VM holding a volume group and its task fails: the
                // VM stays as it was (terraform-provider-nutanix#568).
                let holds_group = !self.attached_volume_groups(&uuid).is_empty();
                seen.delete.deleted = Some(match self.vms.get_mut(&uuid) {
                    Some(_) if holds_group => DeleteOutcome::Accepted,
                    Some(vm) => {
                        vm["status"]["state"] = json!("DELETE_PENDING");
                        DeleteOutcome::Accepted
                    }
                    None => DeleteOutcome::Gone,
                });
            }
            Change::DetachVolumeGroups { vm_uuid, detaches } => {
                let mut detached = Vec::new();
                for detach in detaches {
                    self.log.push(format!("detach {}", detach.volume_group));
                    let task = match self.detaches.get(&detach.request_id) {
                        Some(task) => task.clone(),
                        None => {
                            let task = self.next_id("task");
                            self.tasks.insert(task.clone(), (running(), None));
                            self.detaches.insert(detach.request_id, task.clone());
                            self.detach_effects.insert(
                                task.clone(),
                                (vm_uuid.clone(), detach.volume_group.clone()),
                            );
                            task
                        }
                    };
                    detached.push(VolumeGroupDetach {
                        volume_group: detach.volume_group,
                        task: self.tasks[&task].0.clone(),
                    });
                }
                seen.delete.detached = Some(detached);
            }
            Change::Drain { .. } => {
                self.log.push("drain".into());
                seen.delete.drain = Some(self.drain.clone());
            }
            Change::DeleteNode { .. } => {
                self.log.push("delete node".into());
                seen.delete.node_deleted = true;
            }
            Change::NodeProviderId {
                node, provider_id, ..
            } => {
                self.log.push("node providerID".into());
                if let Some(node) = self.nodes.get_mut(&node) {
                    node["spec"]["providerID"] = json!(provider_id);
                }
                seen.update.node_provider_id_set = true;
            }
            Change::CreateClaims { claims } => {
                self.log.push("create claims".into());
                for claim in claims {
                    let name = claim.metadata.name.clone().unwrap();
                    self.claims.entry(name).or_insert(claim);
                }
                seen.create.claims_created = true;
            }
            Change::AdoptClaims { adoptions } => {
                self.log.push("adopt claims".into());
                let readings = seen.create.claims.get_or_insert_default();
                for adoption in adoptions {
                    let claim = self.claims.get_mut(&adoption.name).map(|claim| {
                        claim.metadata.owner_references = Some(adoption.owner_references);
                        claim.metadata.finalizers = Some(adoption.finalizers);
                        claim.clone()
                    });
                    readings.entry(adoption.nic).or_default().claim = claim;
                }
            }
            Change::ReleaseClaims => {
                // As the executor: only the claims the Machine controls.
                self.log.push("release claims".into());
                let uid = self.machine["metadata"]["uid"].as_str().unwrap_or_default();
                self.claims.retain(|_, claim| {
                    !claim
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|owner| owner.controller == Some(true) && owner.uid == uid)
                });
                seen.delete.claims_released = true;
            }
        }
    }

    /// Writes a status change as the executor does (a merge patch), when it changes anything.
    fn write_status(&mut self, update: &StatusUpdate) {
        if let Some(patch) = status_patch(&self.stored(), update, &Time(self.now)) {
            // The API server deletes a Machine being deleted once its last finalizer is gone
            // (Kubernetes "Finalizers": the object is deleted when the list is empty): a write
            // after that is answered 404 and lost.
            assert!(
                !(self.finalized() && self.machine["metadata"]["deletionTimestamp"].is_string()),
                "a status write after the finalizer's removal is lost: {:?}",
                self.log
            );
            rounds::apply_merge_patch(&mut self.machine, &patch);
            self.log.push("write status".into());
        }
    }

    fn write_metadata(&mut self, change: &MetadataChange) {
        let machine = self.stored();
        let patch = match change {
            MetadataChange::AddFinalizer => {
                Some(json!({"metadata": {"finalizers": ["machine.machine.openshift.io"]}}))
            }
            MetadataChange::RemoveFinalizer => Some(json!({"metadata": {"finalizers": []}})),
            MetadataChange::Merge {
                labels,
                annotations,
                provider_id,
            } => metadata_patch(&machine, labels, annotations, provider_id.as_deref()),
        };
        if let Some(patch) = patch {
            rounds::apply_merge_patch(&mut self.machine, &patch);
            self.log.push("write metadata".into());
        }
    }

    /// What the next reconcile starts from.
    fn snapshot(&mut self) -> Snapshot {
        let settings = Settings {
            intervals: Intervals::default(),
            migration_gate: self.gate,
            create_backoff: None,
            new_request_id: self.next_id("request"),
            fail_timed_out_windows_joins: self.fail_timed_out_joins,
        };
        // The Machine as the executor plans on it: with the task it remembers, where it applies.
        let stored = self.stored();
        let planned = match &self.remembered {
            Some(remembered) => remembered.restored_into(&stored).unwrap_or_else(|| {
                self.remembered = None;
                stored
            }),
            None => stored,
        };
        let status = planned.provider_status().unwrap_or_default();
        Snapshot::of(
            &planned,
            ParsedSpec::of(&planned),
            status,
            self.now,
            settings,
        )
    }

    /// Reconciles a Machine being deleted (time passing between) until its finalizer is gone,
    /// at most `limit` times: never while its VM exists, and with no VM left at the end.
    fn finish_deletion(&mut self, limit: usize, case: &str) {
        for _ in 0..limit {
            if self.finalized() {
                break;
            }
            self.tick();
            self.reconcile();
            assert!(
                !self.finalized() || self.vms.is_empty(),
                "{case}: let go with the VM there: {:?}",
                self.log
            );
        }
        assert!(self.finalized(), "{case}: not finished: {:?}", self.log);
        assert!(self.vms.is_empty(), "{case}: {:?}", self.log);
    }

    /// The create's task as the executor knows it: remembered, or (a follow-up's) written.
    fn pending_task(&self) -> Option<PendingTask> {
        self.status()
            .pending_task
            .or_else(|| self.remembered.as_ref().map(|r| r.task.clone()))
    }

    /// One reconcile; `stop_after`: the controller stops after this many writes and sends.
    fn reconcile_until(&mut self, stop_after: Option<usize>) -> Outcome {
        let snapshot = self.snapshot();
        // The executor's script, as the controller runs it.
        let mut rounds = Rounds::new(snapshot);
        let mut outcome = Outcome::default();
        let mut done = 0;
        let writes_before = self.writes();
        loop {
            self.planner.calls.set(0);
            let step = rounds.next(&self.planner);
            assert!(
                self.planner.calls.get() <= 1,
                "{} plans in one round",
                self.planner.calls.get()
            );
            match step {
                Step::Read(read) => self.read(&mut rounds.snapshot, read),
                Step::Record(writes) => {
                    self.write_all(&writes);
                    done += 1;
                    if stop_after == Some(done) {
                        self.remembered = None;
                        return outcome;
                    }
                }
                Step::Send(change) => {
                    self.send(&mut rounds.snapshot, change);
                    done += 1;
                    if stop_after == Some(done) {
                        self.remembered = None;
                        return outcome;
                    }
                }
                Step::Finish(finish) => {
                    assert!(
                        !finish.exhausted,
                        "no decision after {} rounds: {:?}",
                        super::MAX_ROUNDS,
                        self.log
                    );
                    self.write_all(&finish.writes);
                    for effect in &finish.effects {
                        match effect {
                            Effect::RememberTask(task) => self.remembered = Some(task.clone()),
                            Effect::ForgetTask => self.remembered = None,
                            _ => {}
                        }
                    }
                    let wrote = self.writes() > writes_before;
                    outcome.events = finish.events(wrote).map(|event| event.reason).collect();
                    outcome.effects = finish.effects;
                    outcome.next = Some(finish.next);
                    return outcome;
                }
            }
        }
    }

    /// Performs `writes` in order, as the executor does.
    fn write_all(&mut self, writes: &[Write]) {
        for write in writes {
            match write {
                Write::Status(update) => self.write_status(update),
                Write::Metadata(change) => self.write_metadata(change),
            }
        }
    }

    fn writes(&self) -> usize {
        self.log
            .iter()
            .filter(|step| step.starts_with("write"))
            .count()
    }

    fn reconcile(&mut self) -> Outcome {
        self.reconcile_until(None)
    }

    /// The log of one reconcile.
    fn steps(&mut self) -> (Vec<String>, Outcome) {
        self.log.clear();
        let outcome = self.reconcile();
        (std::mem::take(&mut self.log), outcome)
    }

    /// Reconciles (time passing between) until `done`, at most `limit` times.
    fn run_until(&mut self, limit: usize, done: impl Fn(&World) -> bool) {
        for _ in 0..limit {
            if done(self) {
                return;
            }
            self.reconcile();
            if done(self) {
                return;
            }
            self.tick();
        }
        assert!(
            done(self),
            "not done after {limit} reconciles: {:?}",
            self.log
        );
    }

    /// nodelink links the Machine to Node `node-0`, registered without a providerID.
    fn link_node(&mut self) {
        self.machine["status"]["nodeRef"] = json!({"kind": "Node", "name": "node-0"});
        self.nodes
            .entry("node-0".into())
            .or_insert_with(|| json!({"metadata": {"name": "node-0"}, "spec": {}}));
    }

    fn delete(&mut self) {
        self.machine["metadata"]["deletionTimestamp"] = json!(self.now.to_string());
    }

    /// The finalizer is on and nothing else: the next reconcile enters phase `Provisioning`
    /// and, planning on, records and sends the create.
    fn about_to_create(&self) -> bool {
        self.machine["metadata"]["finalizers"] == json!(["machine.machine.openshift.io"])
    }

    fn finalized(&self) -> bool {
        self.machine["metadata"]["finalizers"] == json!([])
    }

    fn prism_calls(log: &[String]) -> usize {
        log.iter()
            .filter(|step| {
                [
                    "GET",
                    "GET confirm",
                    "DELETE",
                    "create",
                    "deploy",
                    "reserve",
                    "task",
                    "follow-up",
                ]
                .contains(&step.as_str())
                    || step.starts_with("detach ")
            })
            .count()
    }
}

#[derive(Debug, Default)]
struct Outcome {
    next: Option<Next>,
    events: Vec<&'static str>,
    effects: Vec<Effect>,
}

fn running() -> TaskProgress {
    TaskProgress::Running {
        status: "RUNNING".into(),
        percentage_complete: None,
    }
}

mod go_takeover;
mod validate_agrees;

fn strings(steps: &[&str]) -> Vec<String> {
    steps.iter().map(|s| (*s).to_owned()).collect()
}

fn vm_failure(detail: &str) -> TaskFailure {
    TaskFailure {
        task: "task".into(),
        end: TaskEnd::Failed,
        error_code: None,
        error_detail: Some(detail.into()),
        progress_message: None,
        messages: PrismMessages::default(),
        subtask_errors: Vec::new(),
    }
}

fn has_condition(world: &World, type_: &str, reason: &str) -> bool {
    world.machine["status"]["conditions"]
        .as_array()
        .is_some_and(|all| {
            all.iter()
                .any(|c| c["type"] == type_ && c["reason"] == reason)
        })
}

#[test]
fn a_whole_create_from_an_image_and_a_whole_delete_in_order() {
    let mut world = World::new("image");
    let (steps, _) = world.steps();
    assert_eq!(steps, strings(&["write metadata"]), "the finalizer first");
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "env",
            "list Marker",
            "env",
            "list Marker",
            "inputs",
            "reserve",
            "write status",
            "create"
        ]),
        "phase Provisioning written with the UUID, before the create is sent; its task is \
         kept in memory, not written"
    );
    assert_eq!(world.phase(), phase::PROVISIONING);
    assert_eq!(outcome.events, ["Create"]);
    let status = world.status();
    assert!(status.vm_uuid.is_some() && status.pending_task.is_none());
    assert!(
        outcome
            .effects
            .iter()
            .any(|effect| matches!(effect, Effect::RememberTask(_))),
        "{:?}",
        outcome.effects
    );
    assert!(world.pending_task().is_some());
    world.tick();
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "env",
            "task",
            "env",
            "GET",
            "addresses",
            "write metadata",
            "write status"
        ]),
        "the task's end written with what the VM it made shows"
    );
    assert!(matches!(
        outcome.effects[0],
        Effect::TaskEnded {
            succeeded: true,
            ..
        }
    ));
    assert!(outcome.events.is_empty(), "{:?}", outcome.events);
    assert_eq!(world.phase(), phase::PROVISIONED);
    world.link_node();
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "env",
            "GET",
            "addresses",
            "node",
            "node providerID",
            "write status"
        ]),
        "the Node has its providerID before the Machine is written Running"
    );
    assert_eq!(world.phase(), phase::RUNNING);
    assert_eq!(world.vms.len(), 1);

    world.delete();
    let mut deletion = Vec::new();
    while !world.finalized() {
        let (steps, _) = world.steps();
        deletion.extend(steps);
        world.tick();
    }
    assert_eq!(
        deletion,
        strings(&[
            "drain",
            "node",
            "env",
            "write status",
            "DELETE",
            "env",
            "GET",
            "delete node",
            "write metadata"
        ]),
        "phase Deleting, the drain's end and the delete's record in one write before the \
         DELETE; no GET before it; the GET that finds it gone ends the deletion"
    );
    assert!(World::prism_calls(&deletion) <= 3);
    assert!(world.vms.is_empty());
}

/// The Kubernetes writes of one Machine's life, by kind: each is a write to etcd on the
/// cluster's control plane (issue 37).
#[derive(Debug, Default, PartialEq, Eq)]
struct WriteTally {
    status: usize,
    metadata: usize,
    node: usize,
    events: Vec<&'static str>,
}

impl WriteTally {
    fn total(&self) -> usize {
        self.status + self.metadata + self.node + self.events.len()
    }
}

impl World {
    /// Reconciles (time passing between) until `done`, at most `limit` times, tallying the
    /// writes and the events published.
    fn tally_until(&mut self, limit: usize, done: impl Fn(&World) -> bool) -> WriteTally {
        let mut tally = WriteTally::default();
        for _ in 0..limit {
            if done(self) {
                break;
            }
            let (steps, outcome) = self.steps();
            let count = |name: &str| steps.iter().filter(|step| *step == name).count();
            tally.status += count("write status");
            tally.metadata += count("write metadata");
            // A drain of a schedulable Node begins with its cordon, a patch of the Node (the
            // sandbox's Nodes run no Pod to evict, so that is all of its writes there).
            tally.node += count("node providerID") + count("delete node") + count("drain");
            tally.events.extend(outcome.events);
            self.tick();
        }
        assert!(
            done(self),
            "not done after {limit} reconciles: {:?}",
            self.log
        );
        tally
    }
}

/// From create to Running: the finalizer; phase Provisioning with the reserved UUID (the
/// record before the create; the create's task is kept in memory, `task_memory`); the task's
/// end with the VM's addresses, and its labels, annotations and providerID; phase Running; the
/// Node's providerID (where no cloud controller manager set it); the `Create` event (phase
/// Running is announced by its write). A deletion: phase Deleting, the drain's end and the
/// delete's record in one status write; the cordon; the Node's deletion; the finalizer; one
/// event. A write more is a regression: fold it into the transition it belongs to.
#[test]
fn a_create_to_running_and_a_deletion_make_few_writes_each() {
    let mut world = World::new("image");
    let mut created = world.tally_until(12, |w| w.phase() == phase::PROVISIONED);
    world.link_node();
    let running = world.tally_until(4, |w| w.phase() == phase::RUNNING);
    created.status += running.status;
    created.metadata += running.metadata;
    created.node += running.node;
    created.events.extend(running.events);
    assert_eq!(
        created,
        WriteTally {
            status: 3,
            metadata: 2,
            node: 1,
            events: vec!["Create"],
        }
    );
    assert_eq!(created.total(), 7);

    // A Running Machine whose VM changed behind it is a transition worth its event; a look
    // that finds nothing changed writes nothing and announces nothing.
    let uuid = world.status().vm_uuid.unwrap();
    world.vms.get_mut(&uuid).unwrap()["status"]["resources"]["power_state"] = json!("OFF");
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps
            .iter()
            .filter(|step| step.starts_with("write"))
            .count(),
        2,
        "its power state annotation and its InstanceReady condition: {steps:?}"
    );
    assert_eq!(outcome.events, ["Update"]);
    let (steps, outcome) = world.steps();
    assert!(
        !steps.iter().any(|step| step.starts_with("write")) && outcome.events.is_empty(),
        "{steps:?} {:?}",
        outcome.events
    );

    world.delete();
    let deleted = world.tally_until(8, World::finalized);
    assert_eq!(
        deleted,
        WriteTally {
            status: 1,
            metadata: 1,
            node: 2,
            events: vec!["Delete"],
        }
    );
    assert_eq!(deleted.total(), 5);
}

/// A create's task lives in the executor's memory only: a controller restarted (or a new
/// leader) while the create runs finds the VM from what the Machine records, the reserved UUID
/// of a create or clone (a `GET`), or a deploy's request id (the deploy sent again, which Prism
/// answers with the first deploy's task), and makes no second VM.
#[test]
fn a_controller_restarted_while_its_create_runs_finds_the_vm_without_the_task() {
    for source in ["image", "clone", "template"] {
        let mut world = World::new(source);
        world.link_node();
        world.run_until(4, |w| w.pending_task().is_some());
        assert!(
            world.status().pending_task.is_none(),
            "{source}: not written"
        );
        world.remembered = None;
        world.tick();
        let (steps, _) = world.steps();
        let expected = if source == "template" {
            "deploy"
        } else {
            "GET"
        };
        assert!(
            steps.iter().any(|step| step == expected) && !steps.iter().any(|step| step == "task"),
            "{source}: {steps:?}"
        );
        world.run_until(12, |w| w.phase() == phase::RUNNING);
        assert_eq!(world.vms.len(), 1, "{source}: {:?}", world.log);
        assert_eq!(
            world.status().vm_uuid.as_deref(),
            world.vms.keys().next().map(String::as_str)
        );
    }
}

/// A Machine deleted while its create runs, by a controller that no longer remembers the
/// create's task (restarted since), still deletes the VM the create made before it lets the
/// Machine go; one that remembers it does the same.
#[test]
fn a_machine_deleted_while_its_create_runs_deletes_its_vm_with_or_without_the_task() {
    for source in ["image", "clone", "template"] {
        for forgotten in [false, true] {
            let mut world = World::new(source);
            world.link_node();
            world.run_until(4, |w| w.pending_task().is_some());
            if forgotten {
                world.remembered = None;
            }
            world.delete();
            world.finish_deletion(12, &format!("{source}, task forgotten {forgotten}"));
        }
    }
}

/// Only a Machine with nothing of a VM recorded begins a create: the executor holds back only
/// those while its create slots are taken (`controller::machine`, `CreateSlots`), so a Machine
/// on its way is never kept waiting behind Machines that wait for Prism's rate limit.
#[test]
fn only_a_machine_with_nothing_of_a_vm_recorded_starts_a_create() {
    let mut world = World::new("image");
    assert!(
        !world.snapshot().starts_a_create(),
        "a new Machine only gets its finalizer"
    );
    let (steps, _) = world.steps();
    assert_eq!(steps, strings(&["write metadata"]));
    world.run_until(4, World::about_to_create);
    assert!(world.snapshot().starts_a_create(), "its finalizer on");
    world.steps();
    assert!(world.status().vm_uuid.is_some(), "{:?}", world.log);
    assert!(
        !world.snapshot().starts_a_create(),
        "its VM's UUID recorded"
    );
    world.run_until(12, |w| w.phase() == phase::PROVISIONED);
    assert!(!world.snapshot().starts_a_create(), "provisioned");

    let mut deleted = World::new("image");
    deleted.run_until(4, World::about_to_create);
    deleted.delete();
    assert!(!deleted.snapshot().starts_a_create(), "being deleted");

    let mut failed = World::new("image");
    failed.machine["status"]["phase"] = json!(phase::FAILED);
    assert!(!failed.snapshot().starts_a_create(), "Failed");
}

/// The Node's providerID has one writer here, the protocol, on the Node the watch cache shows:
/// a Windows Machine's Node before nodelink links it (named as the Machine, with one of its
/// addresses), never a Node annotated for another Machine, never one set by another writer.
#[test]
fn the_nodes_provider_id_is_set_before_the_link_only_on_the_machines_node() {
    let registered = |world: &mut World, annotations: Value, provider_id: Option<&str>| {
        world.make_windows();
        world.run_until(12, |w| w.phase() == phase::PROVISIONED);
        // The VM reports its address, and the Machine takes it.
        let uuid = world.status().vm_uuid.unwrap();
        let address = "10.0.0.5";
        world.vms.get_mut(&uuid).unwrap()["status"]["resources"]["nic_list"] =
            json!([{"ip_endpoint_list": [{"ip": address}]}]);
        world.tick();
        world.steps();
        // Then the kubelet registers its Node, named as the Machine.
        world.nodes.insert(
            NAME.into(),
            json!({"metadata": {"name": NAME, "annotations": annotations},
                   "spec": {"providerID": provider_id},
                   "status": {"addresses": [{"type": "InternalIP", "address": address}]}}),
        );
        world.tick();
        world.steps().0
    };
    let mut world = World::new("image");
    let steps = registered(&mut world, json!({}), None);
    assert!(steps.contains(&"node providerID".to_owned()), "{steps:?}");
    let uuid = world.status().vm_uuid.unwrap();
    assert_eq!(
        world.nodes[NAME]["spec"]["providerID"],
        format!("nutanix://{uuid}")
    );

    let mut world = World::new("image");
    let other = json!({"machine.openshift.io/machine": "openshift-machine-api/someone-else"});
    let steps = registered(&mut world, other, None);
    assert!(!steps.contains(&"node providerID".to_owned()), "{steps:?}");

    let mut world = World::new("image");
    let steps = registered(&mut world, json!({}), Some("nutanix://set-by-the-ccm"));
    assert!(!steps.contains(&"node providerID".to_owned()), "{steps:?}");
    assert_eq!(
        world.nodes[NAME]["spec"]["providerID"],
        "nutanix://set-by-the-ccm"
    );
}

#[test]
fn a_machine_whose_vm_lists_no_usable_address_asks_to_be_woken_when_its_addresses_change() {
    let mut world = World::new("image");
    world.run_until(12, |w| w.phase() == phase::PROVISIONED);
    let uuid = world.status().vm_uuid.unwrap();
    let awaits = |outcome: &Outcome| {
        outcome.effects.iter().find_map(|effect| match effect {
            Effect::AwaitAddresses { vm, seen } if *vm == uuid => Some(seen.clone()),
            _ => None,
        })
    };
    // No address yet: the Machine waits for the VM to list one, whatever it lists now.
    world.tick();
    let (_, outcome) = world.steps();
    assert_eq!(awaits(&outcome), Some(Vec::new()), "{:?}", outcome.effects);

    // The VM has its address: the Machine takes it and waits for none.
    world.vms.get_mut(&uuid).unwrap()["status"]["resources"]["nic_list"] =
        json!([{"ip_endpoint_list": [{"ip": "10.0.0.5"}]}]);
    world.tick();
    let (_, outcome) = world.steps();
    assert_eq!(awaits(&outcome), None);
    assert!(
        outcome
            .effects
            .contains(&Effect::AddressesKnown { vm: uuid.clone() }),
        "{:?}",
        outcome.effects
    );
    assert_eq!(
        world.phase(),
        phase::PROVISIONED,
        "its Node is not there yet"
    );
}

#[test]
fn a_create_looked_at_late_ends_from_the_shared_listing_without_a_task_read() {
    // A busy controller's queue can hold a Machine longer than the age after which a task is
    // read directly (three requeue intervals): the listing that shows its VM created is enough.
    let old = |world: &mut World| {
        for _ in 0..=Intervals::default().requeue.as_secs() * 3 / 60 {
            world.tick();
        }
    };
    let mut world = World::new("image");
    world.listing_pays = true;
    world.run_until(3, |w| w.pending_task().is_some());
    old(&mut world);
    // The task's end is only remembered, not written: the reconcile goes on from it at once.
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "env",
            "list Task",
            "env",
            "list Vm",
            "addresses",
            "write metadata",
            "write status"
        ])
    );
    assert!(world.pending_task().is_none());
    assert_eq!(world.phase(), phase::PROVISIONED);

    // A create whose VM never shows up is still read from its task, which says why.
    let mut world = World::new("image");
    world.listing_pays = true;
    world.run_until(3, |w| w.pending_task().is_some());
    let uuid = world.status().vm_uuid.unwrap();
    old(&mut world);
    world.vms.remove(&uuid);
    let (steps, _) = world.steps();
    assert_eq!(steps[..3], strings(&["env", "list Task", "task"]));
}

#[test]
fn a_running_machine_in_steady_state_writes_nothing_and_calls_prism_for_nothing_of_its_own() {
    let mut world = World::new("image");
    world.link_node();
    world.run_until(12, |w| w.phase() == phase::RUNNING);
    world.tick();
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&["env", "list Vm", "addresses", "node"]),
        "the Node read from the watch cache already has its providerID"
    );
    assert_eq!(
        outcome.next,
        Some(Next::Requeue(Intervals::default().running))
    );
    assert!(
        outcome.events.is_empty(),
        "the Update event only follows a write"
    );
}

fn condition_of<'a>(world: &'a World, type_: &str) -> Option<&'a Value> {
    world.machine["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// MAO's `setLifecycleHookConditions` (`controller.go`): `Drainable` and `Terminable` follow the
/// hooks on every status write, at no write of their own once they are up to date.
#[test]
fn drainable_and_terminable_follow_the_lifecycle_hooks_as_mao_writes_them() {
    let mut world = World::new("image");
    world.link_node();
    world.run_until(12, |w| w.phase() == phase::RUNNING);
    for type_ in ["Drainable", "Terminable"] {
        let condition = condition_of(&world, type_).unwrap();
        assert_eq!(condition["status"], "True", "{type_}");
        assert!(condition.get("reason").is_none() && condition.get("severity").is_none());
    }
    // The etcd operator's hook (cluster-etcd-operator `pkg/operator/ceohelpers`,
    // `MachineDeletionHookName`, `MachineDeletionHookOwner`) and a pre-terminate one.
    world.machine["spec"]["lifecycleHooks"] = json!({
        "preDrain": [{"name": "EtcdQuorumOperator", "owner": "clusteroperator/etcd"}],
        "preTerminate": [{"name": "backup", "owner": "tests"}, {"name": "dns", "owner": "ops"}],
    });
    world.tick();
    world.reconcile();
    let drainable = condition_of(&world, "Drainable").unwrap();
    assert_eq!(drainable["status"], "False");
    assert_eq!(drainable["reason"], "HookPresent");
    assert_eq!(drainable["severity"], "Warning");
    assert_eq!(
        drainable["message"],
        "Drain operation currently blocked by: [{Name:EtcdQuorumOperator Owner:clusteroperator/etcd}]"
    );
    assert_eq!(
        condition_of(&world, "Terminable").unwrap()["message"],
        "Terminate operation currently blocked by: [{Name:backup Owner:tests} {Name:dns Owner:ops}]"
    );
    // Up to date: nothing more to write.
    world.tick();
    let (steps, _) = world.steps();
    assert!(!steps.iter().any(|s| s.starts_with("write")), "{steps:?}");
    // The hook goes: True again.
    world.machine["spec"]["lifecycleHooks"] = json!({});
    world.tick();
    world.reconcile();
    assert_eq!(condition_of(&world, "Drainable").unwrap()["status"], "True");
    assert_eq!(
        condition_of(&world, "Terminable").unwrap()["status"],
        "True"
    );
}

/// MAO's `InstanceExists` (`controller.go`, `Reconcile`): `False`, `InstanceNotCreated`, severity
/// Warning, from the first status write until the VM is found, then `True`; a VM gone after
/// that is `InstanceMissing` with MAO's message.
#[test]
fn instance_exists_is_not_created_until_the_vm_is_found_then_true_then_missing() {
    let mut world = World::new("image");
    world.run_until(4, |w| w.phase() == phase::PROVISIONING);
    let exists = condition_of(&world, "InstanceExists").unwrap();
    assert_eq!(exists["status"], "False");
    assert_eq!(exists["reason"], "InstanceNotCreated");
    assert_eq!(exists["severity"], "Warning");
    assert_eq!(exists["message"], "Instance has not been created");
    world.link_node();
    world.run_until(12, |w| w.phase() == phase::RUNNING);
    let exists = condition_of(&world, "InstanceExists").unwrap();
    assert_eq!(exists["status"], "True");
    assert!(exists.get("reason").is_none());
    world.vms.clear();
    world.tick();
    world.run_until(4, |w| w.phase() == phase::FAILED);
    let exists = condition_of(&world, "InstanceExists").unwrap();
    assert_eq!(exists["reason"], "InstanceMissing");
    assert_eq!(exists["message"], "Instance not found on provider");
}

/// MAO writes no status for a Failed Machine (not being deleted): nor are the hooks' conditions.
#[test]
fn a_failed_machine_gets_no_hook_conditions() {
    let mut world = World::new("image");
    world.machine["status"] = json!({"phase": "Failed", "errorMessage": "gone"});
    world.machine["metadata"]["finalizers"] = json!(["machine.machine.openshift.io"]);
    world.machine["spec"]["lifecycleHooks"] =
        json!({"preDrain": [{"name": "EtcdQuorumOperator", "owner": "clusteroperator/etcd"}]});
    let (steps, _) = world.steps();
    assert!(!steps.iter().any(|s| s.starts_with("write")), "{steps:?}");
    assert!(condition_of(&world, "Drainable").is_none());
}

#[test]
fn a_windows_join_reported_timed_out_fails_the_machine_with_the_flag_while_no_node_is_linked() {
    // A Windows Machine Provisioned, as the join reconciler finds it, with `reason` in its
    // `windowsJoin` condition (the key only that reconciler writes).
    let provisioned = |reason: &str| {
        let mut world = World::new("template");
        world.make_windows();
        world.run_until(12, |w| w.phase() == phase::PROVISIONED);
        world.machine["status"]["providerStatus"]["windowsJoin"] = json!({
            "type": "WindowsJoin", "status": "False", "reason": reason,
            "message": "no Node linked to the Machine 1h30m after its creation; CSRPending: waiting",
            "lastTransitionTime": "2026-01-01T01:30:00Z"
        });
        world.tick();
        world
    };

    let mut reported = provisioned("JoinTimedOut");
    reported.steps();
    assert_eq!(reported.phase(), phase::PROVISIONED, "without the flag");

    let mut failing = provisioned("JoinTimedOut");
    failing.fail_timed_out_joins = true;
    let (steps, outcome) = failing.steps();
    assert_eq!(
        steps,
        strings(&["env", "GET", "write metadata", "write status"])
    );
    assert_eq!(failing.phase(), phase::FAILED);
    let status = &failing.machine["status"];
    assert_eq!(status["errorReason"], "JoinTimedOut");
    let message = status["errorMessage"].as_str().unwrap();
    assert!(
        message.starts_with("Windows join timed out: no Node linked")
            && message.contains("--fail-timed-out-windows-joins"),
        "{message}"
    );
    assert_eq!(
        failing.machine["metadata"]["annotations"]["machine.openshift.io/instance-state"],
        "Unknown"
    );
    assert_eq!(outcome.events, ["JoinTimedOut"]);
    assert_eq!(outcome.next, Some(Next::AwaitChange));
    assert!(outcome.effects.contains(&Effect::Failure {
        kind: FailureKind::Update,
        reason: "JoinTimedOut",
    }));

    // A Node linked since the report ends the timeout; so does any other reason.
    let mut linked = provisioned("JoinTimedOut");
    linked.fail_timed_out_joins = true;
    linked.link_node();
    linked.steps();
    assert_eq!(linked.phase(), phase::RUNNING);
    let mut pending = provisioned("CSRPending");
    pending.fail_timed_out_joins = true;
    pending.steps();
    assert_eq!(pending.phase(), phase::PROVISIONED);

    // Only Machines the join reconciler looks after.
    let mut ignored = provisioned("JoinTimedOut");
    ignored.fail_timed_out_joins = true;
    ignored.machine["metadata"]["labels"]["windowsmachineconfig.openshift.io/ignore"] =
        json!("true");
    ignored.steps();
    assert_eq!(ignored.phase(), phase::PROVISIONED);
}

#[test]
fn a_controller_stopped_after_any_write_or_send_ends_with_one_vm() {
    for source in ["image", "clone", "template"] {
        for stop in 1..=6 {
            for reconcile in 0..6 {
                let mut world = World::new(source);
                world.link_node();
                for _ in 0..reconcile {
                    world.reconcile();
                }
                world.reconcile_until(Some(stop));
                world.tick();
                world.run_until(12, |w| w.phase() == phase::RUNNING);
                assert_eq!(
                    world.vms.len(),
                    1,
                    "{source}: stopped after {stop} writes and sends of reconcile {reconcile}"
                );
                let status = world.status();
                assert!(status.pending_task.is_none() && status.pending_follow_up.is_none());
                assert_eq!(
                    status.vm_uuid.as_deref(),
                    world.vms.keys().next().map(String::as_str)
                );
            }
        }
    }
}

#[test]
fn a_deletion_stopped_after_any_write_or_send_never_finishes_while_the_vm_exists() {
    for source in ["image", "clone", "template"] {
        for stop in 1..=4 {
            for reconcile in 0..5 {
                let mut world = World::new(source);
                world.link_node();
                world.run_until(12, |w| w.phase() == phase::RUNNING);
                world.delete();
                for _ in 0..reconcile {
                    world.reconcile();
                    assert!(!world.finalized() || world.vms.is_empty());
                }
                world.reconcile_until(Some(stop));
                assert!(!world.finalized() || world.vms.is_empty());
                world.finish_deletion(
                    8,
                    &format!("{source}: stopped after {stop} of reconcile {reconcile}"),
                );
            }
        }
    }
}

#[test]
fn a_vm_missing_from_the_listing_is_confirmed_by_a_get_not_failed() {
    let mut world = World::new("image");
    world.run_until(8, |w| w.phase() == phase::PROVISIONED);
    world.listing_pays = true;
    world.unlisted = world.vms.keys().cloned().collect();
    let (steps, _) = world.steps();
    assert_eq!(steps, strings(&["env", "list Vm", "GET", "addresses"]));
    assert_eq!(world.phase(), phase::PROVISIONED);
    world.vms.clear();
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&["env", "list Vm", "GET", "write metadata", "write status"])
    );
    assert_eq!(world.phase(), phase::FAILED);
    assert_eq!(
        world.machine["status"]["errorMessage"],
        INSTANCE_MISSING_MESSAGE
    );
    assert_eq!(outcome.events, ["FailedUpdate"]);
    assert!(outcome.effects.contains(&Effect::Failure {
        kind: FailureKind::Update,
        reason: "InstanceMissing"
    }));
    assert!(has_condition(&world, "InstanceExists", "InstanceMissing"));
}

#[test]
fn a_409_on_create_is_confirmed_by_a_get() {
    // The VM exists: an earlier create got through, and shows up once Prism answers 409.
    let mut world = World::new("image");
    world.run_until(4, World::about_to_create);
    world.reconcile_until(Some(2));
    assert!(
        world.status().vm_uuid.is_some(),
        "stopped after recording the UUID"
    );
    world.answers.push_back(Answer::ConflictWithEarlier);
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&["env", "GET", "inputs", "create", "GET confirm"])
    );
    assert_eq!(outcome.next, Some(Next::Requeue(Intervals::default().poll)));
    assert!(outcome.events.is_empty());
    world.run_until(4, |w| w.phase() == phase::PROVISIONED);
    assert_eq!(world.vms.len(), 1);

    // No VM has the UUID: a conflict of Prism's own, retried with backoff.
    let mut world = World::new("image");
    world.run_until(4, World::about_to_create);
    world
        .answers
        .push_back(Answer::Refuse(SendOutcome::Conflict("409".into())));
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "env",
            "list Marker",
            "env",
            "list Marker",
            "inputs",
            "reserve",
            "write status",
            "create",
            "GET confirm"
        ])
    );
    assert!(matches!(
        outcome.next,
        Some(Next::Retry(Failure::CreateRetry(_)))
    ));
    assert_eq!(outcome.events, ["FailedCreate"]);
    assert!(outcome.effects.contains(&Effect::Failure {
        kind: FailureKind::Create,
        reason: "PrismConflict"
    }));
    assert!(world.vms.is_empty());
}

#[test]
fn a_rejected_reservation_is_replaced_once_no_vm_has_it() {
    let mut world = World::new("image");
    world.run_until(4, World::about_to_create);
    world
        .answers
        .push_back(Answer::Refuse(SendOutcome::ReservationRejected));
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "env",
            "list Marker",
            "env",
            "list Marker",
            "inputs",
            "reserve",
            "write status",
            "create",
            "GET confirm",
            "write status"
        ])
    );
    assert_eq!(
        world.status().vm_uuid,
        None,
        "a new UUID is taken next time"
    );
    let (steps, _) = world.steps();
    assert!(steps.contains(&"reserve".to_owned()));
    world.run_until(6, |w| w.phase() == phase::PROVISIONED);
    assert_eq!(world.vms.len(), 1);
}

#[test]
fn a_create_refused_as_invalid_fails_the_machine() {
    let mut world = World::new("image");
    world.run_until(4, World::about_to_create);
    world
        .answers
        .push_back(Answer::Refuse(SendOutcome::Invalid("422: bad".into())));
    let (_, outcome) = world.steps();
    assert_eq!(world.phase(), phase::FAILED);
    assert_eq!(
        world.machine["status"]["errorReason"],
        "InvalidConfiguration"
    );
    assert_eq!(
        world.machine["metadata"]["annotations"]["machine.openshift.io/instance-state"],
        "Unknown"
    );
    assert_eq!(outcome.events, ["FailedCreate"]);
}

#[test]
fn a_500_after_prism_made_the_vm_finds_it_and_creates_no_second() {
    for source in ["image", "clone", "template"] {
        let mut world = World::new(source);
        world.run_until(4, World::about_to_create);
        world.answers.push_back(Answer::Lost);
        let (_, outcome) = world.steps();
        assert_eq!(
            outcome.next,
            Some(Next::Retry(Failure::ActionFailed)),
            "{source}"
        );
        world.tick();
        world.run_until(8, |w| w.phase() == phase::PROVISIONED);
        assert_eq!(world.vms.len(), 1, "{source}");
    }
}

/// A listed VM carrying this Machine's identity marker, named `name`, made at `created`.
fn marked_vm(world: &mut World, uuid: &str, name: &str, created: &str) {
    world.vms.insert(
        uuid.to_owned(),
        json!({
            "metadata": {"kind": "vm", "uuid": uuid, "creation_time": created},
            "spec": {"name": name,
                     "description": format!("openshift-machine: openshift-machine-api/{NAME} uid={UID}"),
                     "resources": {"nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": SUBNET}}]}},
            "status": {"state": "COMPLETE", "resources": {"power_state": "ON"}}
        }),
    );
}

#[test]
fn a_machine_without_its_uuid_adopts_only_a_vm_it_can_trust() {
    // Its own VM (made after the Machine, with its name): adopted, no second VM.
    let mut world = World::new("image");
    marked_vm(&mut world, "own", NAME, "2026-01-01T00:00:30Z");
    world.steps();
    let (_, outcome) = world.steps();
    assert_eq!(outcome.events, ["Adopted"]);
    assert_eq!(world.status().vm_uuid.as_deref(), Some("own"));

    // A VM another Prism user gave the marker: older than the Machine, or not named after it.
    for (name, created) in [
        (NAME, "2025-06-01T00:00:00Z"),
        ("someone-elses", "2026-01-01T00:00:30Z"),
    ] {
        let mut world = World::new("image");
        marked_vm(&mut world, "planted", name, created);
        world.run_until(8, |w| w.phase() == phase::PROVISIONED);
        assert_ne!(
            world.status().vm_uuid.as_deref(),
            Some("planted"),
            "{name} made {created}"
        );
        assert_eq!(world.vms.len(), 2, "its own VM is made: {name} {created}");
    }
}

#[test]
fn a_clone_that_prism_gave_another_uuid_is_recorded_with_it() {
    let mut world = World::new("clone");
    world.gives_uuid = Some("other-uuid".into());
    world.run_until(4, |w| w.pending_task().is_some());
    world.tick();
    let (_, outcome) = world.steps();
    assert_eq!(outcome.events, ["Adopted"]);
    assert_eq!(world.status().vm_uuid.as_deref(), Some("other-uuid"));
    world.run_until(6, |w| w.phase() == phase::PROVISIONED);
    assert_eq!(world.vms.len(), 1);
    assert_eq!(
        world.vms["other-uuid"]["status"]["resources"]["power_state"], "ON",
        "the follow-up powered it on"
    );
}

#[test]
fn a_clone_is_confirmed_by_the_get_that_is_its_follow_ups_base() {
    // No shared listing pays: the clone's VM is read, not its task. PENDING: still running.
    let mut world = World::new("clone");
    world.run_until(4, |w| w.pending_task().is_some());
    let (steps, outcome) = world.steps();
    assert_eq!(steps, strings(&["env", "GET"]));
    assert_eq!(outcome.next, Some(Next::Requeue(Intervals::default().poll)));
    assert!(world.pending_task().is_some());

    // COMPLETE: the clone ended, and the same read is the follow-up's base, sent at once
    // (the task forgotten on the Machine first).
    world.tick();
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&["env", "GET", "follow-up", "write status"]),
        "the clone's task forgotten in memory; the follow-up's written"
    );
    assert!(outcome.effects.iter().any(|effect| matches!(
        effect,
        Effect::TaskEnded {
            operation: TaskOperation::Clone,
            succeeded: true,
            ..
        }
    )));
    let status = world.status();
    assert!(status.pending_task.is_none() && status.pending_follow_up.is_none());
    assert_eq!(world.vms.len(), 1);
    let uuid = status.vm_uuid.unwrap();
    assert_eq!(world.vms[&uuid]["status"]["resources"]["power_state"], "ON");
}

#[test]
fn a_clone_listed_complete_sends_its_follow_up_in_the_same_reconcile() {
    let mut world = World::new("clone");
    world.listing_pays = true;
    world.run_until(4, |w| w.pending_task().is_some());
    // Not listed yet: still running, and neither the VM nor the task is read.
    let (steps, _) = world.steps();
    assert_eq!(steps, strings(&["env", "list Task"]));
    world.tick();
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&["env", "list Task", "GET", "follow-up", "write status"])
    );
    assert!(world.status().pending_follow_up.is_none());
}

/// A clone Machine whose follow-up update was sent and runs as a task, with a shared listing.
fn waiting_for_a_follow_up_task() -> World {
    let mut world = World::new("clone");
    world.listing_pays = true;
    world.follow_up_runs = true;
    world.run_until(8, |w| {
        w.status()
            .pending_task
            .as_ref()
            .is_some_and(|task| task.operation == TaskOperation::FollowUp)
    });
    world
}

/// A follow-up whose VM a later listing shows `COMPLETE` with its effects (description,
/// categories, power ON) ends without its task being read, and the same reconcile brings the
/// Machine up to date from the listed VM (addresses, phase) instead of leaving that to the
/// reconcile its own record triggers. A listing without the effects reads the task.
#[test]
fn a_follow_up_the_listing_shows_applied_ends_unread_and_goes_on_to_the_addresses() {
    let mut world = waiting_for_a_follow_up_task();
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&["env", "list Task"]),
        "PENDING: still running, nothing read"
    );
    world.tick();
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "env",
            "list Task",
            "addresses",
            "write metadata",
            "write status"
        ]),
        "no task read, and no second reconcile for the addresses"
    );
    assert!(outcome.effects.iter().any(|effect| matches!(
        effect,
        Effect::TaskEnded {
            operation: TaskOperation::FollowUp,
            succeeded: true,
            ..
        }
    )));
    let status = world.status();
    assert!(status.pending_task.is_none() && status.pending_follow_up.is_none());
    assert_eq!(world.phase(), phase::PROVISIONED);

    // Listed COMPLETE but powered off (the update did not take): the task says why.
    let mut world = waiting_for_a_follow_up_task();
    world.tick();
    let uuid = world.status().vm_uuid.unwrap();
    world.vms.get_mut(&uuid).unwrap()["status"]["resources"]["power_state"] = json!("OFF");
    let (steps, _) = world.steps();
    assert_eq!(&steps[..3], strings(&["env", "list Task", "task"]));
}

/// The generated Administrator password's Secret is a change the protocol asks for, made
/// before the create (record before send) and once: a controller stopped right after it finds
/// it and makes no second one.
#[test]
fn a_generated_password_secret_is_created_as_a_change_before_the_create_and_once() {
    let made = |w: &World| {
        w.log
            .iter()
            .filter(|step| *step == "create password Secret")
            .count()
    };
    let mut world = World::new("image").sysprep();
    world.run_until(6, |w| w.pending_task().is_some());
    assert_eq!(made(&world), 1, "{:?}", world.log);
    let secret_at = world
        .log
        .iter()
        .position(|step| step == "create password Secret");
    let create_at = world.log.iter().position(|step| step == "create");
    assert!(secret_at < create_at, "{:?}", world.log);

    // Stopped right after the Secret's creation (the first send of its reconcile): the next
    // reconcile plans with it.
    let mut world = World::new("image").sysprep();
    for _ in 0..6 {
        if world.password_secret == Some(true) {
            break;
        }
        world.reconcile_until(Some(2));
    }
    assert_eq!(world.password_secret, Some(true), "{:?}", world.log);
    assert!(world.vms.is_empty(), "stopped before any create");
    world.log.clear();
    world.run_until(6, |w| w.pending_task().is_some());
    assert_eq!(made(&world), 0, "{:?}", world.log);
}

/// A Secret an earlier attempt made but the cache has not seen is waited for: no second
/// password, no VM, a retry with the reason.
#[test]
fn a_password_secret_not_yet_cached_is_waited_for() {
    let mut world = World::new("image").sysprep();
    world.password_secret_answer = Some(PasswordSecretOutcome::NotYetCached);
    let retried = (0..4).find_map(|_| match world.reconcile().next {
        Some(Next::Retry(Failure::CreateRetry(message))) => Some(message),
        _ => None,
    });
    let message = retried.expect("a retry");
    assert!(message.contains("reach the cache"), "{message}");
    assert!(world.vms.is_empty());
    assert_eq!(world.password_secret, Some(false));
}

/// A Secret of the generated password's name that another object owns is not this Machine's
/// password: the create waits, naming it, and no second Secret or VM is made.
#[test]
fn a_password_secret_another_object_owns_is_not_used() {
    let mut world = World::new("image").sysprep();
    world.password_secret = Some(true);
    world.password_secret_owners = vec!["99999999-2222-4333-8444-555555555555".to_owned()];
    let retried = (0..4).find_map(|_| match world.reconcile().next {
        Some(Next::Retry(Failure::CreateRetry(message))) => Some(message),
        _ => None,
    });
    let message = retried.expect("a retry");
    assert!(
        message.contains("worker-0-admin-password")
            && message.contains("not owned by this Machine"),
        "{message}"
    );
    assert!(world.vms.is_empty());
    assert!(
        !world
            .log
            .iter()
            .any(|step| step == "create password Secret")
    );
}

#[test]
fn a_deploy_is_found_through_its_task_or_by_name() {
    // The task (with its subtasks, as prism-client reads them) names the VM.
    let mut world = World::new("template");
    world.run_until(4, |w| w.pending_task().is_some());
    assert!(world.status().deploy_request_id.is_some());
    world.tick();
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "env",
            "task",
            "env",
            "GET",
            "write status",
            "follow-up",
            "write status"
        ]),
        "the task's end recorded with the follow-up it leads to"
    );
    assert!(world.status().vm_uuid.is_some());

    // It names none: the VM is looked for by name in a fresh listing.
    let mut world = World::new("template");
    world.deploy_names_no_vm = true;
    world.run_until(4, |w| w.pending_task().is_some());
    world.tick();
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "env",
            "task",
            "list Deploy",
            "env",
            "GET",
            "write status",
            "follow-up",
            "write status"
        ]),
        "the VM found recorded before its follow-up is sent"
    );
    assert_eq!(
        world.status().vm_uuid.as_deref(),
        world.vms.keys().next().map(String::as_str)
    );

    // The shared listing shows it by name: recorded without reading the task.
    let mut world = World::new("template");
    world.listing_pays = true;
    world.run_until(4, |w| w.pending_task().is_some());
    world.tick();
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "env",
            "list Task",
            "env",
            "GET",
            "write status",
            "follow-up",
            "write status"
        ])
    );
    assert!(world.status().vm_uuid.is_some());
    world.run_until(6, |w| w.phase() == phase::PROVISIONED);
    assert_eq!(world.vms.len(), 1);
}

#[test]
fn a_failed_create_task_that_left_the_vm_powers_it_on_again() {
    let mut world = World::new("image");
    world.run_until(4, |w| w.pending_task().is_some());
    world.task_fails = Some(vm_failure("power on failed: host busy"));
    world.tick();
    let uuid = world.status().vm_uuid.unwrap();
    world.vms.get_mut(&uuid).unwrap()["status"]["resources"]["power_state"] = json!("OFF");
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&["env", "task", "GET confirm", "write status"])
    );
    assert!(matches!(
        outcome.next,
        Some(Next::Retry(Failure::CreateRetry(_)))
    ));
    assert_eq!(outcome.events, ["FailedCreate"]);
    let status = world.status();
    assert_eq!(
        status.vm_uuid.as_deref(),
        Some(uuid.as_str()),
        "the VM is kept"
    );
    assert!(status.pending_follow_up.is_some(), "power ON asked again");
    let (steps, _) = world.steps();
    assert_eq!(steps, strings(&["env", "GET", "follow-up", "write status"]));
    assert_eq!(world.vms[&uuid]["status"]["resources"]["power_state"], "ON");
    assert_eq!(world.vms.len(), 1);
}

#[test]
fn a_failed_create_task_without_its_vm_takes_a_new_uuid() {
    let mut world = World::new("image");
    world.run_until(4, |w| w.pending_task().is_some());
    world.task_fails = Some(vm_failure("host busy"));
    world.tick();
    world.vms.clear();
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&["env", "task", "GET confirm", "write status"])
    );
    assert_eq!(world.status().vm_uuid, None);
}

#[test]
fn a_deletion_waits_for_a_running_create_then_deletes_its_vm() {
    let mut world = World::new("image");
    world.run_until(4, |w| w.pending_task().is_some());
    world.delete();
    world.reconcile();
    world.reconcile();
    let (steps, outcome) = world.steps();
    assert_eq!(steps, strings(&["env", "task"]));
    assert_eq!(outcome.next, Some(Next::Requeue(Intervals::default().poll)));
    world.tick();
    world.run_until(6, World::finalized);
    assert!(world.vms.is_empty());
}

#[test]
fn a_delete_just_sent_is_not_looked_at_before_a_poll_interval() {
    let mut world = World::new("image");
    world.run_until(8, |w| w.phase() == phase::PROVISIONED);
    world.delete();
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&["env", "write status", "DELETE"]),
        "phase Deleting, the skipped drain and the delete's record in one write, before the DELETE"
    );
    assert!(world.status().deletion_sent.is_some());
    // The reconcile its own write triggers, at once: only the connection is looked at (for
    // how long deletes take), nothing is asked of Prism.
    let (steps, outcome) = world.steps();
    assert_eq!(steps, strings(&["env"]));
    assert_eq!(outcome.next, Some(Next::Requeue(Intervals::default().poll)));
    // Recorded in whole seconds: a second after it, the delete may be a moment old.
    world.now += SignedDuration::from_secs(1);
    let (steps, outcome) = world.steps();
    assert_eq!(steps, strings(&["env"]));
    assert_eq!(outcome.next, Some(Next::Requeue(Intervals::default().poll)));
    world.tick();
    let (steps, _) = world.steps();
    assert_eq!(steps, strings(&["env", "GET", "write metadata"]));
}

#[test]
fn a_delete_is_first_looked_at_when_deletes_on_its_prism_usually_end() {
    let mut world = World::new("image");
    world.environment = EnvironmentSeen::Ready {
        first_task_read: Duration::ZERO,
        first_delete_look: Duration::from_secs(4),
        slowest_task: None,
        task_end_seen: false,
        delete_end_seen: false,
    };
    world.run_until(8, |w| w.phase() == phase::PROVISIONED);
    world.delete();
    let (steps, _) = world.steps();
    assert_eq!(steps, strings(&["env", "write status", "DELETE"]));
    // Three seconds on (two, less the recorded time's second): no GET yet, a look in two.
    world.now += SignedDuration::from_secs(3);
    let (steps, outcome) = world.steps();
    assert_eq!(steps, strings(&["env"]));
    assert_eq!(outcome.next, Some(Next::Requeue(Duration::from_secs(2))));
    // Past the usual deletion time: the VM is read (this world's delete is still going: its
    // tasks end when time ticks on).
    world.now += SignedDuration::from_secs(2);
    let (steps, _) = world.steps();
    assert_eq!(steps, strings(&["env", "GET"]));
    world.tick();
    let (steps, _) = world.steps();
    assert_eq!(steps, strings(&["env", "GET", "write metadata"]));
    assert!(world.finalized());
}

/// The connection's shared look at the tasks in flight (issue 37, item 2): a Machine woken by it
/// at once after the task ended, long before its own first look would be due.
fn environment_seeing(task_end_seen: bool, delete_end_seen: bool) -> EnvironmentSeen {
    EnvironmentSeen::Ready {
        first_task_read: Intervals::default().poll,
        first_delete_look: Intervals::default().poll,
        slowest_task: None,
        task_end_seen,
        delete_end_seen,
    }
}

/// Ends every running task and finishes every delete without time passing.
fn end_tasks_at_once(world: &mut World) {
    let now = world.now;
    world.tick();
    world.now = now;
}

#[test]
fn a_create_the_shared_task_look_saw_end_is_read_at_once_without_a_listing() {
    let woken = |task_end_seen: bool| {
        let mut world = World::new("image");
        world.listing_pays = true;
        world.environment = environment_seeing(false, false);
        world.run_until(3, |w| w.pending_task().is_some());
        end_tasks_at_once(&mut world);
        world.environment = environment_seeing(task_end_seen, false);
        let (steps, outcome) = world.steps();
        (world, steps, outcome)
    };
    // Unseen, the task is not read before its kind usually ends.
    let (_, steps, outcome) = woken(false);
    assert_eq!(steps, strings(&["env"]));
    assert_eq!(outcome.next, Some(Next::Requeue(Intervals::default().poll)));
    // Seen, it is read now (the executor hands over the listed task), before any listing, and
    // its end recorded; the reconcile then plans on to the addresses.
    let (world, steps, _) = woken(true);
    assert_eq!(steps[..2], strings(&["env", "task"]));
    assert_eq!(world.pending_task(), None);
    assert!(world.status().vm_uuid.is_some());
}

#[test]
fn a_delete_the_shared_task_look_saw_end_is_confirmed_at_once_by_a_get() {
    let woken = |delete_end_seen: bool| {
        let mut world = World::new("image");
        world.listing_pays = true;
        world.run_until(8, |w| w.phase() == phase::PROVISIONED);
        world.environment = environment_seeing(false, false);
        world.delete();
        world.run_until(3, |w| w.log.contains(&"DELETE".to_owned()));
        end_tasks_at_once(&mut world);
        world.environment = environment_seeing(false, delete_end_seen);
        let (steps, outcome) = world.steps();
        (world, steps, outcome)
    };
    let (_, steps, outcome) = woken(false);
    assert_eq!(steps, strings(&["env"]));
    assert!(matches!(outcome.next, Some(Next::Requeue(_))));
    // Seen: no listing (one taken before the end would still show DELETE_PENDING), the GET's
    // 404 finishes the deletion.
    let (world, steps, _) = woken(true);
    assert_eq!(steps, strings(&["env", "GET", "write metadata"]));
    assert!(world.finalized());
}

#[test]
fn a_deletion_before_anything_was_recorded_needs_no_prism() {
    let mut world = World::new("image");
    world.run_until(4, World::about_to_create);
    world.environment = EnvironmentSeen::Unavailable(EnvironmentProblem::CredentialsRefused {
        secret: "ns/nutanix-credentials".into(),
    });
    world.delete();
    world.run_until(5, World::finalized);
    assert!(!world.log.contains(&"DELETE".to_owned()));
}

#[test]
fn a_deletion_whose_vm_is_already_gone_finishes_on_the_delete_404() {
    let mut world = World::new("image");
    world.run_until(8, |w| w.phase() == phase::PROVISIONED);
    world.vms.clear();
    world.delete();
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&["env", "write status", "DELETE", "write metadata"])
    );
    assert!(world.finalized());
}

fn has_provider_condition(world: &World, type_: &str, reason: &str) -> bool {
    world
        .status()
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.reason == reason)
}

#[test]
fn a_vm_holding_volume_groups_is_deleted_once_they_are_detached_and_they_are_kept() {
    let mut world = World::new("image");
    world.run_until(8, |w| w.phase() == phase::PROVISIONED);
    let uuid = world.status().vm_uuid.unwrap();
    world.attach_volume_group(&uuid, "7a1c2b3d-0000-4000-8000-00000000000a");
    world.attach_volume_group(&uuid, "7a1c2b3d-0000-4000-8000-00000000000b");
    // Its Node gone (deleted, or lost with its host): nothing reports whether CSI detached
    // the volume groups, so the VM is read for them before its DELETE.
    world.link_node();
    world.nodes.clear();
    world.delete();

    // Read, recorded, then both detached (never the VM deleted while it holds one).
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "drain",
            "node",
            "env",
            "GET",
            "write status",
            "detach 7a1c2b3d-0000-4000-8000-00000000000a",
            "detach 7a1c2b3d-0000-4000-8000-00000000000b",
        ])
    );
    assert_eq!(outcome.events, ["VolumeCheckSkipped", "DetachVolumeGroups"]);
    assert_eq!(outcome.next, Some(Next::Requeue(Intervals::default().poll)));
    assert!(has_provider_condition(
        &world,
        conditions::MACHINE_DELETION,
        conditions::DETACHING_VOLUME_GROUPS
    ));
    let request_ids: Vec<String> = world.detaches.keys().cloned().collect();
    let mut expected = vec![
        detach_request_id(&uuid, "7a1c2b3d-0000-4000-8000-00000000000a"),
        detach_request_id(&uuid, "7a1c2b3d-0000-4000-8000-00000000000b"),
    ];
    expected.sort();
    assert_eq!(request_ids, expected);

    // A look while they run (or after a restart): the same requests, answered with the same
    // tasks; nothing new is written.
    let tasks_before = world.tasks.len();
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "node",
            "env",
            "GET",
            "detach 7a1c2b3d-0000-4000-8000-00000000000a",
            "detach 7a1c2b3d-0000-4000-8000-00000000000b",
        ])
    );
    assert_eq!(world.tasks.len(), tasks_before);

    // Detached: the VM is read again, holds none, and is deleted.
    world.tick();
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&["node", "env", "GET", "write status", "DELETE"])
    );
    assert!(world.attached_volume_groups(&uuid).is_empty());
    world.tick();
    world.run_until(3, World::finalized);
    assert!(world.vms.is_empty());
    assert!(
        !world.log.iter().any(|step| step.starts_with("detach ")),
        "nothing is detached again"
    );
}

#[test]
fn a_failed_detach_is_published_and_retried_and_the_vm_is_not_deleted() {
    let mut world = World::new("image");
    world.run_until(8, |w| w.phase() == phase::PROVISIONED);
    let uuid = world.status().vm_uuid.unwrap();
    world.attach_volume_group(&uuid, "7a1c2b3d-0000-4000-8000-00000000000a");
    world.detach_fails = Some(vm_failure("volume group is in use"));
    // Its Node gone (deleted, or lost with its host): nothing reports whether CSI detached
    // the volume groups, so the VM is read for them before its DELETE.
    world.link_node();
    world.nodes.clear();
    world.delete();
    world.reconcile();
    world.reconcile();
    world.reconcile();
    world.tick();
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "node",
            "env",
            "GET",
            "detach 7a1c2b3d-0000-4000-8000-00000000000a",
            "write status"
        ])
    );
    assert!(matches!(
        outcome.next,
        Some(Next::Retry(Failure::VolumeGroupDetachFailed(ref message)))
            if message.contains("7a1c2b3d-0000-4000-8000-00000000000a")
                && message.contains("volume group is in use")
    ));
    assert_eq!(
        outcome.events,
        ["VolumeCheckSkipped", "FailedDetachVolumeGroup"]
    );
    assert!(outcome.effects.contains(&Effect::Failure {
        kind: FailureKind::Delete,
        reason: "VolumeGroupDetachFailed",
    }));
    assert!(has_provider_condition(
        &world,
        conditions::MACHINE_DELETION,
        conditions::VOLUME_GROUP_DETACH_FAILED
    ));
    assert!(!world.log.contains(&"DELETE".to_owned()));
    assert!(world.vms.contains_key(&uuid));
}

#[test]
fn a_detach_request_id_is_the_same_for_the_same_vm_and_volume_group_only() {
    const VM: &str = "5c867413-e578-4052-8499-4eda74b868b4";
    const GROUP: &str = "7a1c2b3d-0000-4000-8000-00000000000a";
    let id = detach_request_id(VM, GROUP);
    let parsed = uuid::Uuid::parse_str(&id).unwrap();
    assert_eq!(parsed.get_version_num(), 8, "{id}");
    for (vm, group, same) in [
        (VM, GROUP, true),
        ("5C867413-E578-4052-8499-4EDA74B868B4", GROUP, true),
        (VM, "7A1C2B3D-0000-4000-8000-00000000000A", true),
        (VM, "7a1c2b3d-0000-4000-8000-00000000000b", false),
        ("5c867413-e578-4052-8499-4eda74b868b5", GROUP, false),
        (GROUP, VM, false),
    ] {
        assert_eq!(detach_request_id(vm, group) == id, same, "{vm} {group}");
    }
}

#[test]
fn a_deletion_sent_by_an_older_controller_is_waited_for_not_sent_again() {
    let mut world = World::new("image");
    world.run_until(8, |w| w.phase() == phase::PROVISIONED);
    let uuid = world.status().vm_uuid.unwrap();
    world.delete();
    // An older controller recorded the delete only in its condition.
    let mut status = world.status();
    status.set_condition(provider_condition(
        conditions::MACHINE_DELETION,
        false,
        conditions::DELETION_IN_PROGRESS,
        format!("deleting VM {uuid}"),
        &Time(world.now),
    ));
    world.machine["status"]["providerStatus"] = status.to_value();
    world.vms.get_mut(&uuid).unwrap()["status"]["state"] = json!("DELETE_PENDING");
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&["env", "GET", "write status"]),
        "phase Deleting and the skipped drain written, no DELETE"
    );
    world.tick();
    let (steps, _) = world.steps();
    assert_eq!(steps, strings(&["env", "GET", "write metadata"]));
}

#[test]
fn a_recorded_deletion_names_its_vm() {
    let mut status = NutanixMachineProviderStatus::default();
    assert!(!deletion_sent(&status, "vm-1"));
    let condition = |reason: &str, message: &str| {
        provider_condition(
            conditions::MACHINE_DELETION,
            false,
            reason,
            message,
            &Time(Timestamp::now()),
        )
    };
    status.set_condition(condition(
        conditions::DELETION_IN_PROGRESS,
        "deleting VM vm-1",
    ));
    assert!(
        deletion_sent(&status, "vm-1"),
        "an older controller's condition"
    );
    assert!(!deletion_sent(&status, "vm-2"));
    status.set_condition(condition(
        conditions::DELETION_FAILED,
        "deleting VM vm-1: 500",
    ));
    assert!(
        !deletion_sent(&status, "vm-1"),
        "a failed delete was not accepted"
    );
    status.deletion_sent = Some(crate::api::DeletionSent {
        vm_uuid: "VM-2".into(),
        at: Time(Timestamp::now()),
    });
    assert!(deletion_sent(&status, "vm-2"), "the recorded field wins");
    assert!(!deletion_sent(&status, "vm-1"));
}

#[test]
fn an_unconfirmed_deploy_is_sent_again_when_deleting_and_its_vm_deleted() {
    let mut world = World::new("template");
    world.run_until(4, World::about_to_create);
    // The deploy got through but its answer was lost before the task was recorded.
    world.reconcile_until(Some(2));
    assert!(
        world.status().deploy_request_id.is_some() && world.pending_task().is_none(),
        "{:?}",
        world.log
    );
    assert_eq!(world.vms.len(), 1);
    world.delete();
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&["env", "inputs", "write status", "deploy"]),
        "the same request id: the same task"
    );
    assert_eq!(world.tasks.len(), 1);
    world.tick();
    world.run_until(8, World::finalized);
    assert!(
        world.vms.is_empty(),
        "the deployed VM is deleted, not left behind"
    );
}

#[test]
fn a_drain_blocked_by_a_budget_is_typed_and_reported_with_maos_events() {
    let mut world = World::new("image");
    world.link_node();
    world.run_until(12, |w| w.phase() == phase::RUNNING);
    world.delete();
    world.drain = DrainProgress::Blocked {
        note: "eviction blocked: default/web: budget".into(),
    };
    let (_, outcome) = world.steps();
    assert_eq!(outcome.events, ["DrainRequeued"]);
    assert_eq!(world.phase(), phase::DELETING);
    assert!(has_condition(&world, "Drained", conditions::DRAIN_BLOCKED));
    world.drain = DrainProgress::InProgress {
        note: "1 pods terminating".into(),
    };
    let (_, outcome) = world.steps();
    assert_eq!(outcome.events, ["DrainRequeued"]);
    assert!(has_condition(
        &world,
        "Drained",
        conditions::DRAIN_IN_PROGRESS
    ));
    world.drain = DrainProgress::Done;
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&["drain", "node", "env", "write status", "DELETE"]),
        "the drain's end written with the delete's record, before the DELETE"
    );
    assert_eq!(
        outcome.events,
        ["Delete"],
        "one event, naming the drained Node, not MAO's three"
    );
    assert!(has_condition(&world, "Drained", conditions::DRAINED));
}

#[test]
fn a_control_plane_drain_that_may_not_start_waits_twenty_seconds_as_maos_drain_error() {
    let mut world = World::new("image");
    world.link_node();
    world.run_until(12, |w| w.phase() == phase::RUNNING);
    world.delete();
    world.drain = DrainProgress::NotPermitted {
        other_node: "master-1".into(),
    };
    let (_, outcome) = world.steps();
    assert_eq!(outcome.events, ["DrainRequeued"]);
    assert_eq!(outcome.next, Some(Next::Requeue(Duration::from_secs(20))));
    assert!(has_condition(&world, "Drained", conditions::DRAIN_ERROR));
    assert!(world.vms.len() == 1, "the VM waits for the drain");
    world.drain = DrainProgress::Done;
    world.run_until(8, World::finalized);
}

#[test]
fn nothing_to_drain_is_maos_drain_skipped() {
    let mut world = World::new("image");
    world.link_node();
    world.run_until(12, |w| w.phase() == phase::RUNNING);
    world.machine["metadata"]["annotations"]["machine.openshift.io/exclude-node-draining"] =
        json!("");
    world.delete();
    let (_, outcome) = world.steps();
    assert_eq!(outcome.events, ["DrainSkipped", "Delete"]);
    assert!(has_condition(&world, "Drained", conditions::DRAIN_SKIPPED));
}

#[test]
fn a_paused_machine_gets_its_condition_and_nothing_else() {
    let mut world = World::new("image");
    world.gate = true;
    world.machine["spec"]["authoritativeAPI"] = json!("ClusterAPI");
    // MAO: the spec's authority is copied to the empty status, and nothing else is done.
    let (steps, outcome) = world.steps();
    assert_eq!(steps, strings(&["write status"]));
    assert_eq!(outcome.next, Some(Next::AwaitChange));
    assert_eq!(world.machine["status"]["authoritativeAPI"], "ClusterAPI");
    assert!(condition_of(&world, "Paused").is_none());
    let (steps, outcome) = world.steps();
    assert_eq!(steps, strings(&["write status"]));
    assert_eq!(outcome.next, Some(Next::AwaitChange));
    let paused = condition_of(&world, "Paused").unwrap();
    assert_eq!(paused["status"], "True");
    assert_eq!(paused["reason"], "AuthoritativeAPINotMachineAPI");
    assert_eq!(
        paused["message"],
        "The AuthoritativeAPI status is set to 'ClusterAPI'"
    );
    let (steps, _) = world.steps();
    assert!(steps.is_empty(), "written once");
    // The status decides (the migration controller changes it, not the spec alone).
    world.machine["spec"]["authoritativeAPI"] = json!("MachineAPI");
    let (steps, _) = world.steps();
    assert!(steps.is_empty(), "{steps:?}");
    world.machine["status"]["authoritativeAPI"] = json!("MachineAPI");
    world.reconcile();
    let unpaused = condition_of(&world, "Paused").unwrap();
    assert_eq!(unpaused["status"], "False");
    assert_eq!(unpaused["reason"], "AuthoritativeAPIMachineAPI");
    assert_eq!(unpaused["severity"], "Info", "MAO's severity, not Warning");
}

/// MAO writes `Paused=False` for a Machine the Machine API owns even when it was never paused.
#[test]
fn a_machine_api_machine_gets_paused_false_once_and_its_status_authority() {
    let mut world = World::new("image");
    world.gate = true;
    world.machine["spec"]["authoritativeAPI"] = json!("MachineAPI");
    world.link_node();
    world.run_until(14, |w| w.phase() == phase::RUNNING);
    assert_eq!(world.machine["status"]["authoritativeAPI"], "MachineAPI");
    let unpaused = condition_of(&world, "Paused").unwrap();
    assert_eq!(unpaused["status"], "False");
    assert_eq!(unpaused["severity"], "Info");
    assert_eq!(
        unpaused["message"],
        "The AuthoritativeAPI status is set to 'MachineAPI'"
    );
    world.tick();
    let (steps, _) = world.steps();
    assert!(!steps.iter().any(|s| s.starts_with("write")), "{steps:?}");
}

#[test]
fn a_machine_without_its_cluster_label_is_rejected_without_a_call() {
    let mut world = World::new("image");
    world.machine["metadata"]["labels"] = json!({});
    let (steps, outcome) = world.steps();
    assert!(steps.is_empty());
    assert_eq!(outcome.events, ["FailedValidate"]);
    assert!(matches!(
        outcome.next,
        Some(Next::Retry(Failure::InvalidMachine(_)))
    ));
}

/// The `MachineCreation` condition as written: status, reason, message.
fn creation_condition(world: &World) -> Option<(String, String, String)> {
    let status = world.status();
    let condition = status
        .conditions
        .iter()
        .find(|condition| condition.type_ == conditions::MACHINE_CREATION)?;
    Some((
        condition.status.clone(),
        condition.reason.clone(),
        condition.message.clone(),
    ))
}

#[test]
fn a_connection_that_cannot_be_made_is_explained_on_a_machine_to_be_created() {
    let secret = || "openshift-machine-api/nutanix-credentials".to_owned();
    let endpoint = || "https://pc.example:9440".to_owned();
    // (problem, reason, what the message names, the fix it gives)
    let table = [
        (
            EnvironmentProblem::NoEndpoint,
            "PrismEndpointMissing",
            "no Prism Central endpoint",
            "--prism-endpoint",
        ),
        (
            EnvironmentProblem::InfrastructureInvalid {
                detail: "prismCentral.port is not a number".into(),
            },
            "PrismEndpointMissing",
            "prismCentral.port is not a number",
            "--prism-endpoint",
        ),
        (
            EnvironmentProblem::CredentialsSecretMissing { secret: secret() },
            "CredentialsSecretMissing",
            "Secret openshift-machine-api/nutanix-credentials not found",
            "create it with key credentials",
        ),
        (
            EnvironmentProblem::CredentialsKeyMissing { secret: secret() },
            "CredentialsSecretInvalid",
            "openshift-machine-api/nutanix-credentials has no key credentials",
            "put the Prism Central credentials under it",
        ),
        (
            EnvironmentProblem::CredentialsUnreadable {
                secret: secret(),
                detail: "key \"credentials\" holds an empty list".into(),
            },
            "CredentialsSecretInvalid",
            "openshift-machine-api/nutanix-credentials: key \"credentials\" holds an empty list",
            "basic_auth",
        ),
        (
            EnvironmentProblem::CredentialsRefused { secret: secret() },
            "CredentialsRefused",
            "credentials Secret openshift-machine-api/nutanix-credentials (401)",
            "correct key credentials",
        ),
        (
            EnvironmentProblem::ClientUnusable {
                detail: "endpoint http://pc.example:9440 is plain http://: use https://".into(),
            },
            "PrismClientUnusable",
            "cannot be set up: endpoint http://pc.example:9440 is plain http://",
            "use https://",
        ),
        (
            EnvironmentProblem::CertificateUntrusted {
                endpoint: endpoint(),
            },
            "PrismCertificateUntrusted",
            "https://pc.example:9440",
            "--prism-ca-file",
        ),
        (
            EnvironmentProblem::Unreachable {
                endpoint: endpoint(),
            },
            "PrismUnreachable",
            "https://pc.example:9440 cannot be reached",
            "port 9440",
        ),
    ];
    for (problem, reason, names, fix) in table {
        let mut world = World::new("image");
        world.environment = EnvironmentSeen::Unavailable(problem.clone());
        world.reconcile(); // the finalizer
        let (steps, outcome) = world.steps();
        assert_eq!(steps, strings(&["env", "write status"]), "{problem:?}");
        assert_eq!(
            outcome.next,
            Some(Next::Retry(Failure::Environment)),
            "{problem:?}"
        );
        assert_eq!(world.phase(), phase::PROVISIONING, "{problem:?}");
        let (status, written_reason, message) =
            creation_condition(&world).expect("a MachineCreation condition");
        assert_eq!(
            (status.as_str(), written_reason.as_str()),
            ("False", reason),
            "{problem:?}"
        );
        assert!(
            message.contains(names) && message.contains(fix),
            "{problem:?}: {message}"
        );
        // The same problem at the next look writes nothing again.
        let (steps, _) = world.steps();
        assert_eq!(steps, strings(&["env"]), "{problem:?}");
        // Once the connection is made, the create goes on and says so.
        world.environment = EnvironmentSeen::Ready {
            first_task_read: Duration::ZERO,
            first_delete_look: Intervals::default().poll,
            slowest_task: None,
            task_end_seen: false,
            delete_end_seen: false,
        };
        world.run_until(6, |w| w.phase() == phase::PROVISIONED);
    }
}

#[test]
fn a_connection_lost_after_the_create_leaves_the_machine_as_it_is() {
    let refused = EnvironmentSeen::Unavailable(EnvironmentProblem::CredentialsRefused {
        secret: "ns/nutanix-credentials".into(),
    });
    let mut world = World::new("image");
    world.run_until(8, |w| w.phase() == phase::PROVISIONED);
    let before = creation_condition(&world);
    world.environment = refused.clone();
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&["env", "write status"]),
        "InstanceExists turns Unknown, as MAO writes it"
    );
    assert_eq!(outcome.next, Some(Next::Retry(Failure::Environment)));
    assert_eq!(world.phase(), phase::PROVISIONED);
    assert_eq!(creation_condition(&world), before);
    let exists = condition_of(&world, "InstanceExists").unwrap();
    assert_eq!(exists["status"], "Unknown");
    assert_eq!(exists["reason"], "ErrorCheckingProvider");
    assert!(exists.get("severity").is_none());
    assert!(
        exists["message"]
            .as_str()
            .unwrap()
            .starts_with("Failed to check if machine exists: Prism Central refused"),
        "{exists}"
    );
    // Still refused: nothing more to write.
    let (steps, _) = world.steps();
    assert_eq!(steps, strings(&["env"]));

    // A Machine being deleted is not shown as one being created.
    let mut world = World::new("image");
    world.reconcile();
    world.delete();
    world.environment = refused.clone();
    world.run_until(3, World::finalized);
    assert_eq!(creation_condition(&world), None);

    // A deletion whose VM exists never finishes on a Prism it cannot use, and writes nothing
    // about it: the executor tells the plan of a connection lost during a deletion as of any
    // other reconcile, and the plan decides what a deletion does with it.
    let mut world = World::new("image");
    world.run_until(8, |w| w.phase() == phase::PROVISIONED);
    let before = creation_condition(&world);
    world.delete();
    world.environment = refused;
    let mut last = None;
    for _ in 0..4 {
        last = world.reconcile().next;
        world.tick();
    }
    assert_eq!(last, Some(Next::Retry(Failure::Environment)));
    assert_eq!(creation_condition(&world), before);
    assert!(!world.finalized());
    assert_eq!(world.vms.len(), 1);
}

/// The reconcile that removes the finalizer writes its status first: once the finalizer is
/// gone the API server deletes the Machine, and a status write after it is lost (the world
/// refuses one). Here a pre-terminate hook taken away once the VM is gone turns `Terminable`
/// True in the reconcile that finishes the deletion.
#[test]
fn the_finalizer_goes_after_the_status_written_with_it() {
    let mut world = World::new("image");
    world.run_until(8, |w| w.phase() == phase::PROVISIONED);
    world.delete();
    world.run_until(12, |w| w.vms.is_empty());
    world.machine["spec"]["lifecycleHooks"] =
        json!({"preTerminate": [{"name": "backup", "owner": "tests"}]});
    world.tick();
    world.reconcile();
    assert_eq!(
        condition_of(&world, "Terminable").unwrap()["status"],
        "False"
    );
    assert!(!world.finalized());
    world.machine["spec"]["lifecycleHooks"] = json!({});
    world.tick();
    let (steps, _) = world.steps();
    assert!(world.finalized(), "{steps:?}");
    assert_eq!(
        steps[steps.len() - 2..],
        strings(&["write status", "write metadata"]),
        "{steps:?}"
    );
}

fn with_warnings(world: &mut World, warnings: &[&str]) {
    world.planner.warnings = Some(warnings.iter().map(|w| (*w).to_owned()).collect());
}

fn configuration_warning(world: &World) -> Option<(String, String, String)> {
    let status = world.status();
    let condition = status
        .conditions
        .iter()
        .find(|condition| condition.type_ == conditions::CONFIGURATION_WARNING)?;
    Some((
        condition.status.clone(),
        condition.reason.clone(),
        condition.message.clone(),
    ))
}

#[test]
fn plan_warnings_are_a_condition_and_events_before_the_vm_is_made_once_per_change() {
    let secure_boot = "Secure Boot with guest customization: check the image boots";
    let other = "a second warning";
    let mut world = World::new("image");
    with_warnings(&mut world, &[secure_boot, other]);
    world.reconcile(); // the finalizer
    // The reconcile that creates writes the warnings with the VM's UUID, before the create.
    let (steps, outcome) = world.steps();
    let first_write = steps.iter().position(|step| step == "write status");
    let create = steps.iter().position(|step| step == "create");
    assert!(
        first_write.is_some() && create.is_some() && first_write < create,
        "{steps:?}"
    );
    let warned = |events: &[&str]| {
        events
            .iter()
            .filter(|reason| **reason == conditions::CONFIGURATION_WARNING)
            .count()
    };
    assert_eq!(warned(&outcome.events), 2, "one Warning event per warning");
    assert_eq!(
        configuration_warning(&world),
        Some((
            "True".to_owned(),
            "PlanWarnings".to_owned(),
            format!("{secure_boot}; {other}")
        ))
    );
    // Later looks at the same warnings publish nothing again.
    world.tick();
    let mut later = Vec::new();
    for _ in 0..4 {
        later.extend(world.reconcile().events);
        world.tick();
    }
    assert!(
        !later.contains(&conditions::CONFIGURATION_WARNING),
        "{later:?}"
    );
}

/// A Machine about to be created whose providerStatus shows the warnings `shown`.
fn about_to_create(shown: &[&str], warnings: &[&str]) -> World {
    let mut world = World::new("image");
    world.reconcile(); // the finalizer
    let mut status = world.status();
    status.set_condition(provider_condition(
        conditions::CONFIGURATION_WARNING,
        true,
        conditions::PLAN_WARNINGS,
        shown.join("; "),
        &Time("2026-01-01T00:00:00Z".parse().unwrap()),
    ));
    world.machine["status"]["providerStatus"] = status.to_value();
    with_warnings(&mut world, warnings);
    world
}

#[test]
fn changed_plan_warnings_are_published_again_and_gone_ones_turn_the_condition_false() {
    let warned = |events: &[&str]| {
        events
            .iter()
            .filter(|reason| **reason == conditions::CONFIGURATION_WARNING)
            .count()
    };
    let mut world = about_to_create(&["first"], &["first"]);
    assert_eq!(warned(&world.reconcile().events), 0);

    let mut world = about_to_create(&["first"], &["second"]);
    assert_eq!(warned(&world.reconcile().events), 1);
    assert_eq!(
        configuration_warning(&world).map(|(_, _, message)| message),
        Some("second".to_owned())
    );

    let mut world = about_to_create(&["first"], &[]);
    assert_eq!(warned(&world.reconcile().events), 0);
    assert_eq!(
        configuration_warning(&world).map(|(status, reason, _)| (status, reason)),
        Some(("False".to_owned(), "NoPlanWarnings".to_owned()))
    );

    // No condition where there never was a warning.
    let mut world = World::new("image");
    world.run_until(8, |w| w.phase() == phase::PROVISIONED);
    assert_eq!(configuration_warning(&world), None);
}

#[test]
fn a_failed_create_is_read_at_the_first_look_once_successful_creates_have_ended() {
    // Prism failed the create at once: its VM is gone and never listed.
    let failed_at_once = |slowest_task: Option<Duration>| {
        let mut world = World::new("image");
        world.listing_pays = true;
        world.environment = EnvironmentSeen::Ready {
            first_task_read: Intervals::default().poll,
            first_delete_look: Intervals::default().poll,
            slowest_task,
            task_end_seen: false,
            delete_end_seen: false,
        };
        world.run_until(3, |w| w.pending_task().is_some());
        for (progress, _) in world.tasks.values_mut() {
            *progress = TaskProgress::Failed(Box::new(vm_failure("IP pool exhausted")));
        }
        world.vms.clear();
        world.unlisted.clear();
        world.now += SignedDuration::try_from(Intervals::default().poll).unwrap();
        world.steps()
    };
    // Recent creates on this Prism Central took at most 5 s: at the first look (a poll interval
    // on) the listing would show a created VM; it does not, so the task is read and says why.
    let (steps, outcome) = failed_at_once(Some(Duration::from_secs(5)));
    assert_eq!(steps[..3], strings(&["env", "list Task", "task"]));
    assert_eq!(outcome.events, ["FailedCreate"]);
    // Nothing known of how long creates take: the listing is trusted until the long wait.
    let (steps, outcome) = failed_at_once(None);
    assert_eq!(steps, strings(&["env", "list Task"]));
    assert_eq!(outcome.next, Some(Next::Requeue(Intervals::default().poll)));
}

fn ip_claimed(world: &World) -> Option<(String, String)> {
    world
        .status()
        .conditions
        .iter()
        .find(|c| c.type_ == "IPAddressClaimed")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

#[test]
fn a_machine_with_a_pool_claims_first_waits_for_the_bind_then_creates_with_the_address() {
    let mut world = World::new("image").with_pool(&["10.0.0.21"]);
    world.link_node();
    world.reconcile();
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "env",
            "list Marker",
            "env",
            "list Marker",
            "claims",
            "write status",
            "create claims",
            "write status"
        ]),
        "the claim comes before anything is asked of Prism for the VM"
    );
    assert_eq!(outcome.events, ["WaitingForIPAddress"]);
    assert_eq!(outcome.next, Some(Next::Requeue(Intervals::default().poll)));
    assert_eq!(world.claims.len(), 1);
    assert!(world.claims.contains_key("worker-0-claim-0-0"));
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&["env", "list Marker", "claims", "write status"])
    );
    assert_eq!(outcome.events, ["WaitingForIPAddress"]);
    let (reason, message) = ip_claimed(&world).unwrap();
    assert_eq!(reason, "WaitingForIPAddress");
    assert!(
        message.contains("worker-0-claim-0-0 is not bound yet"),
        "{message}"
    );
    let (steps, outcome) = world.steps();
    assert_eq!(
        steps,
        strings(&["env", "list Marker", "claims"]),
        "no write while it waits"
    );
    assert!(outcome.events.is_empty(), "one event per change");
    assert!(world.vms.is_empty());

    world.bind();
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "env",
            "list Marker",
            "claims",
            "inputs",
            "reserve",
            "write status",
            "create"
        ]),
        "the condition turns true with the UUID's record, before the create"
    );
    assert_eq!(
        world.assigned,
        [json!([{"ip": "10.0.0.21", "type": "ASSIGNED"}])]
    );
    assert_eq!(ip_claimed(&world).unwrap().0, "IPAddressesClaimed");
    world.tick();
    world.run_until(6, |w| w.phase() == phase::RUNNING);

    world.delete();
    world.run_until(12, World::finalized);
    assert!(world.claims.is_empty(), "the claims go with the Machine");
    let released = world.log.iter().position(|s| s == "release claims");
    let finalizer = world.log.iter().rposition(|s| s == "write metadata");
    assert!(
        released.is_some() && released < finalizer,
        "{:?}",
        world.log
    );
}

#[test]
fn an_exhausted_pool_leaves_the_machine_waiting_with_no_vm() {
    let mut world = World::new("image").with_pool(&[]);
    let mut events = Vec::new();
    for _ in 0..8 {
        world.bind();
        events.extend(world.reconcile().events);
        world.tick();
    }
    assert!(world.vms.is_empty());
    assert_eq!(world.phase(), phase::PROVISIONING);
    assert_eq!(world.claims.len(), 1);
    assert_eq!(ip_claimed(&world).unwrap().0, "WaitingForIPAddress");
    assert_eq!(events, ["WaitingForIPAddress", "WaitingForIPAddress"]);
}

#[test]
fn a_controller_stopped_after_any_write_or_send_makes_one_claim_and_one_vm() {
    for source in ["image", "clone"] {
        for stop in 1..=8 {
            for reconcile in 0..5 {
                let mut world = World::new(source).with_pool(&["10.0.0.21"]);
                world.auto_bind = true;
                world.link_node();
                for _ in 0..reconcile {
                    world.reconcile();
                }
                world.reconcile_until(Some(stop));
                world.tick();
                world.run_until(12, |w| {
                    w.phase() == phase::RUNNING && w.status().pending_follow_up.is_none()
                });
                let context = format!("{source}: stopped after {stop} of reconcile {reconcile}");
                assert_eq!(world.vms.len(), 1, "{context}");
                assert_eq!(world.claims.len(), 1, "{context}");
                assert_eq!(
                    world.assigned,
                    [json!([{"ip": "10.0.0.21", "type": "ASSIGNED"}])],
                    "{context}: one create, with the claimed address"
                );
            }
        }
    }
}

#[test]
fn a_pool_on_an_unmanaged_subnet_or_a_bad_annotation_fails_the_machine_naming_it() {
    let mut world = World::new("image").with_pool(&["10.0.0.21"]);
    world.subnet_cidr = None;
    world.auto_bind = true;
    world.run_until(6, |w| w.phase() == phase::FAILED);
    assert!(world.vms.is_empty());
    let message = world.machine["status"]["errorMessage"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains(SUBNET)
            && message.contains("no IPAM")
            && message.contains("only a Windows guest sets its own address"),
        "{message}"
    );

    let mut world = World::new("image");
    world.machine["metadata"]["annotations"] =
        json!({crate::api::IP_POOL_ANNOTATION: "InClusterIPPool/workers"});
    world.run_until(4, |w| w.phase() == phase::FAILED);
    let message = world.machine["status"]["errorMessage"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("metadata.annotations[nutanix.machine.openshift.io/ip-pool]"),
        "{message}"
    );
    assert!(world.claims.is_empty());
}

/// On a subnet Prism does not manage, a Windows Machine with cloud-init gets its claimed address
/// from its own guest: Prism is sent no address (it would refuse one), the user data runs the
/// address first, and the same body goes with every attempt.
#[test]
fn a_windows_guest_sets_its_claimed_address_on_an_unmanaged_subnet() {
    const WMCO: &[u8] = b"<powershell>\nWrite-Output wmco\n</powershell>\n";
    let windows = |nameservers: Option<&str>| {
        let mut world = World::new("image").with_pool(&["10.0.0.21"]);
        world.machine["metadata"]["labels"]["machine.openshift.io/os-id"] = json!("Windows");
        world.machine["spec"]["providerSpec"]["value"]["userDataSecret"] =
            json!({"name": "windows-user-data"});
        if let Some(servers) = nameservers {
            world.machine["metadata"]["annotations"][crate::api::NAMESERVERS_ANNOTATION] =
                json!(servers);
        }
        world.user_data_secret = WMCO.to_vec();
        world.subnet_cidr = None;
        world.auto_bind = true;
        world
    };
    let mut world = windows(Some("10.0.0.2,10.0.0.3"));
    world.run_until(8, |w| w.phase() == phase::PROVISIONED);
    assert_eq!(world.vms.len(), 1);
    assert_eq!(world.assigned, [Value::Null], "no ASSIGNED address sent");
    let [user_data] = &world.user_data[..] else {
        panic!("one create: {:?}", world.user_data);
    };
    assert!(
        user_data.starts_with("<powershell>\n# Static address of IPAddressClaim ")
            && user_data.contains("-IPAddress 10.0.0.21 -PrefixLength 24")
            && user_data.contains("-ServerAddresses @('10.0.0.2', '10.0.0.3')")
            && user_data.ends_with(std::str::from_utf8(WMCO).unwrap()),
        "{user_data}"
    );

    // Without its DNS servers the guest could not join: refused, naming the annotation.
    let mut world = windows(None);
    world.run_until(6, |w| w.phase() == phase::FAILED);
    assert!(world.vms.is_empty());
    let message = world.machine["status"]["errorMessage"].as_str().unwrap();
    assert!(
        message.contains("nutanix.machine.openshift.io/nameservers"),
        "{message}"
    );
}

/// A claim of the Machine's name that nothing controls (restored without owners, or made ahead
/// by an administrator to pin the address) is adopted before its address is used, as the
/// machine-api-operator's `AdoptOrphanClaim` does, so that it goes with the Machine instead of
/// holding its address forever. A claim of another Machine is never adopted.
#[test]
fn a_claim_no_one_controls_is_adopted_before_use_and_released_with_the_machine() {
    let mut world = World::new("image").with_pool(&["10.0.0.21"]);
    world.link_node();
    let pool = super::ipam::PoolRef {
        api_group: "ipam.cluster.x-k8s.io".into(),
        kind: "InClusterIPPool".into(),
        name: "workers".into(),
    };
    let identity = crate::vm::identity::MachineIdentity {
        namespace: "openshift-machine-api".into(),
        name: NAME.into(),
        uid: UID.into(),
    };
    let mut orphan = super::ipam::claim_object(&identity, 0, &pool);
    orphan.metadata.owner_references = None;
    orphan.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    world
        .claims
        .insert(orphan.metadata.name.clone().unwrap(), orphan);
    world.bind();

    world.run_until(4, |w| w.log.iter().any(|s| s == "create"));
    let adopted = &world.claims["worker-0-claim-0-0"];
    let owners = adopted
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default();
    assert_eq!(owners.len(), 1);
    assert_eq!(
        (owners[0].uid.as_str(), owners[0].controller),
        (UID, Some(true))
    );
    assert_eq!(
        adopted.metadata.finalizers.clone().unwrap_or_default(),
        [
            "example.com/keep",
            super::ipam::IP_CLAIM_PROTECTION_FINALIZER
        ]
    );
    let adopt = world.log.iter().position(|s| s == "adopt claims");
    let create = world.log.iter().position(|s| s == "create");
    assert!(adopt.is_some() && adopt < create, "{:?}", world.log);
    assert!(!world.log.iter().any(|s| s == "create claims"));
    assert_eq!(
        world.assigned,
        [json!([{"ip": "10.0.0.21", "type": "ASSIGNED"}])]
    );
    world.tick();
    world.run_until(6, |w| w.phase() == phase::RUNNING);

    world.delete();
    world.run_until(12, World::finalized);
    assert!(
        world.claims.is_empty(),
        "the adopted claim goes with the Machine"
    );

    // Controlled by an earlier Machine of the same name: waited for, not adopted.
    let mut world = World::new("image").with_pool(&["10.0.0.21"]);
    let earlier = crate::vm::identity::MachineIdentity {
        uid: "earlier-uid".into(),
        ..identity
    };
    world.claims.insert(
        "worker-0-claim-0-0".into(),
        super::ipam::claim_object(&earlier, 0, &pool),
    );
    world.bind();
    for _ in 0..3 {
        world.reconcile();
    }
    assert!(!world.log.iter().any(|s| s == "adopt claims"));
    assert!(world.vms.is_empty());
    assert_eq!(
        world.claims["worker-0-claim-0-0"]
            .metadata
            .owner_references
            .as_ref()
            .unwrap()[0]
            .uid,
        "earlier-uid"
    );
}

#[test]
fn a_machine_deleted_while_it_waits_for_its_address_releases_the_claim_and_makes_no_vm() {
    let mut world = World::new("image").with_pool(&[]);
    for _ in 0..4 {
        world.reconcile();
    }
    assert_eq!(world.claims.len(), 1);
    world.delete();
    world.run_until(6, World::finalized);
    assert!(world.claims.is_empty());
    assert!(world.vms.is_empty());
    assert!(
        !world.log.iter().any(|s| s == "reserve" || s == "create"),
        "{:?}",
        world.log
    );
}

/// A template deploy is given its claimed address in the v4 NIC's `ipv4Config`
/// (ntnx-vmm-py-client 4.3.2 `Ipv4Config`), as a create or clone is in its v3 `ASSIGNED`
/// endpoint.
#[test]
fn a_template_deploy_takes_its_claimed_address() {
    let mut world = World::new("template").with_pool(&["10.0.0.21"]);
    world.auto_bind = true;
    world.run_until(6, |w| !w.vms.is_empty());
    assert_ne!(world.phase(), phase::FAILED);
    assert_eq!(
        world.assigned,
        [json!([{"ip": "10.0.0.21", "type": "ASSIGNED"}])]
    );
}

/// nodelink linked a Node the controller's watch cache does not show yet: the Node is read
/// from the API server and gets its providerID in the same reconcile, not a look later.
#[test]
fn a_linked_node_the_cache_does_not_show_yet_is_read_fresh_and_gets_its_provider_id() {
    let mut world = World::new("image");
    world.run_until(8, |w| w.phase() == phase::PROVISIONED);
    world.link_node();
    world.nodes_uncached.insert("node-0".into());
    let (steps, _) = world.steps();
    assert_eq!(
        steps,
        strings(&[
            "env",
            "GET",
            "addresses",
            "node",
            "node",
            "node providerID",
            "write status"
        ])
    );
    assert_eq!(world.phase(), phase::RUNNING);
    assert!(
        world.nodes["node-0"]["spec"]["providerID"]
            .as_str()
            .is_some_and(|id| id.starts_with("nutanix://"))
    );
}
