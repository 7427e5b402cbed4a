//! What [`super::decide`] decides on: the Machine parsed once, what this reconcile has observed
//! and sent so far, and the clock. Everything is a typed value the executor filled in; nothing
//! here is a Prism or Kubernetes error.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeAddress};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use prism_types::TaskProgress;
use prism_types::v3::Vm;

use crate::api::{LifecycleHooks, Machine, NutanixMachineProviderStatus};
use crate::machine::drain::drained_at;
use crate::machine::ipam::{ClaimReading, IpPoolError, PoolRef, machine_ip_pools};
use crate::machine::join_report::{applies_to, timed_out_join};
use crate::machine::lifecycle::{Intervals, MachineState};
use crate::machine::provision::{CreateCallOutcome, DeployCandidate, classify_create_error};
use crate::vm::identity::{MachineIdentity, MarkedVm};
use crate::vm::resolve::ResolvedReferences;
use crate::vm::secret::{AdminPassword, SecretValue};
use crate::vm::spec::ParsedSpec;

/// Machine condition of a paused Machine (migration to the Cluster API).
pub const PAUSED_CONDITION: &str = "Paused";

/// One Machine at one moment of one reconcile.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub machine: MachineFacts,
    /// The providerStatus as the reconcile read it: what the VM is looked up by.
    pub status: NutanixMachineProviderStatus,
    /// The providerStatus as this reconcile has changed it so far (`None`: unchanged).
    pub recorded: Option<NutanixMachineProviderStatus>,
    pub seen: Seen,
    pub now: Timestamp,
    pub settings: Settings,
}

impl Snapshot {
    /// A snapshot of `machine`, whose providerSpec reads as `spec` (read once for the whole
    /// reconcile) and providerStatus as `status`, before anything is observed.
    pub fn of(
        machine: &Machine,
        spec: ParsedSpec,
        status: NutanixMachineProviderStatus,
        now: Timestamp,
        settings: Settings,
    ) -> Self {
        Self {
            machine: MachineFacts::of(machine, spec, &status),
            status,
            recorded: None,
            seen: Seen::default(),
            now,
            settings,
        }
    }

    /// The providerStatus with this reconcile's changes.
    pub fn current_status(&self) -> &NutanixMachineProviderStatus {
        self.recorded.as_ref().unwrap_or(&self.status)
    }

    /// Whether this reconcile would begin a create: a Machine with the finalizer on, not being
    /// deleted, not `Failed`, not provisioned, with no VM, deploy or task of its own recorded.
    /// Such a reconcile spends most of its time waiting for Prism's rate limit, so the executor
    /// lets only so many run at once and keeps its other workers for the Machines already on
    /// their way. A Machine without the finalizer only gets it this reconcile (the lifecycle's
    /// first step), a write and no Prism call: holding it back too made each Machine wait for
    /// its turn twice (measured on the real control plane at 200 Machines: medians of 0.35 and
    /// 0.42 s between the finalizer's write and the create's record for the 40 Machines in the
    /// busiest seconds). A wrong answer changes only when a reconcile runs, never what it does.
    pub fn starts_a_create(&self) -> bool {
        let state = &self.machine.state;
        let status = &self.status;
        state.has_finalizer
            && !state.deleting
            && state.phase != crate::api::phase::FAILED
            && !state.is_provisioned()
            && status.vm_uuid.is_none()
            && status.deploy_request_id.is_none()
            && status.pending_task.is_none()
    }
}

/// What the protocol reads of the Machine object, parsed once.
#[derive(Clone, Debug)]
pub struct MachineFacts {
    pub state: MachineState,
    pub name: String,
    pub identity: MachineIdentity,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// `metadata.deletionTimestamp`.
    pub deletion_started: Option<Timestamp>,
    /// When the `Drained` condition became true.
    pub drained_at: Option<Timestamp>,
    /// Condition `Paused` is `True`.
    pub paused: bool,
    /// `spec.lifecycleHooks`.
    pub lifecycle_hooks: LifecycleHooks,
    /// `status.addresses`.
    pub addresses: Vec<NodeAddress>,
    /// The providerSpec, read once: what the executor's reads and the plan of the VM use.
    pub spec: ParsedSpec,
    /// The Machine as the reconcile read it: what its VM is planned from (with `spec`).
    pub object: Machine,
    /// The `errorMessage` for a Windows join the join reconciler reported timed out
    /// ([`timed_out_join`]).
    pub join_timed_out: Option<String>,
    /// The Windows join reconciler looks after it ([`crate::machine::join_report::applies_to`]):
    /// its Node's providerID may be set before nodelink links them.
    pub windows_join: bool,
    /// The IP pools of its NICs ([`crate::api::IP_POOL_ANNOTATION`]); `None` without the
    /// annotation.
    pub ip_pools: Option<Result<Vec<Option<PoolRef>>, IpPoolError>>,
    /// The cluster's infrastructure ID, from the Machine's label
    /// ([`crate::api::CLUSTER_ID_LABEL`]), as the Go provider reads it (`getClusterID`).
    pub infra_id: Option<String>,
}

impl MachineFacts {
    pub fn of(
        machine: &Machine,
        spec: ParsedSpec,
        provider_status: &NutanixMachineProviderStatus,
    ) -> Self {
        let status = machine.status.as_ref();
        Self {
            state: MachineState::of(machine),
            name: machine.name_any(),
            identity: MachineIdentity {
                namespace: machine.namespace().unwrap_or_default(),
                name: machine.name_any(),
                uid: machine.uid().unwrap_or_default(),
            },
            created: machine.metadata.creation_timestamp.as_ref().map(|t| t.0),
            deletion_started: machine.metadata.deletion_timestamp.as_ref().map(|t| t.0),
            drained_at: drained_at(machine),
            paused: status.is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == PAUSED_CONDITION && c.status == "True")
            }),
            addresses: status.map(|s| s.addresses.clone()).unwrap_or_default(),
            lifecycle_hooks: machine.spec.lifecycle_hooks.clone(),
            spec,
            object: machine.clone(),
            join_timed_out: timed_out_join(machine, provider_status),
            windows_join: applies_to(machine),
            ip_pools: machine_ip_pools(machine),
            infra_id: machine
                .labels()
                .get(crate::api::CLUSTER_ID_LABEL)
                .filter(|id| !id.is_empty())
                .cloned(),
        }
    }
}

/// What the executor knows beyond the Machine.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    pub intervals: Intervals,
    /// The `MachineAPIMigration` feature gate.
    pub migration_gate: bool,
    /// How long the per-Machine backoff still holds a create back.
    pub create_backoff: Option<Duration>,
    /// A request id for a template deploy, should one be recorded now.
    pub new_request_id: String,
    /// `--fail-timed-out-windows-joins`.
    pub fail_timed_out_windows_joins: bool,
}

/// What this reconcile has observed and sent so far, by the phase of [`super::decide`] that
/// asks for it; each slot is filled by the executor performing the action asked for.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub observe: ObserveSeen,
    pub create: CreateSeen,
    pub update: UpdateSeen,
    pub delete: DeleteSeen,
}

/// Finding the Machine's VM and its Node (`decide/observe.rs`, `decide/economy.rs`).
#[derive(Clone, Debug, Default)]
pub struct ObserveSeen {
    pub environment: Option<EnvironmentSeen>,
    /// The shared listing looked at before reading the pending task.
    pub task_listing: Option<ListingRead>,
    pub task: Option<TaskProgress>,
    /// A fresh listing, looked through for a deployed VM by name.
    pub deploy_listing: Option<ListingRead>,
    /// The listing the recorded VM is looked for in.
    pub vm_listing: Option<ListingRead>,
    /// `GET /vms/{uuid}` of the recorded VM.
    pub vm: Option<VmRead>,
    /// The listing a VM carrying the Machine's identity marker is looked for in.
    pub marker_listing: Option<ListingRead>,
    /// `GET /vms/{uuid}` confirming what a send or a failed task left.
    pub confirm: Option<VmRead>,
    /// The Node asked for.
    pub node: Option<NodeRead>,
    /// `node` was read from the API server, not the watch cache.
    pub node_fresh: bool,
}

/// A create (`decide/create.rs`, `decide/claims.rs`).
#[derive(Clone, Debug, Default)]
pub struct CreateSeen {
    /// What the plan is made from, as the executor read it.
    pub inputs: Option<CreateInputs>,
    pub password_secret: Option<PasswordSecretOutcome>,
    /// The Machine's IP address claims by NIC index, each with its bound address.
    pub claims: Option<BTreeMap<usize, ClaimReading>>,
    /// The missing claims were created (or found made by an earlier attempt).
    pub claims_created: bool,
    /// A UUID reserved for the create.
    pub reserved: Option<String>,
    pub sent: Option<SendOutcome>,
}

/// The Machine brought up to date from its VM (`decide/update.rs`).
#[derive(Clone, Debug, Default)]
pub struct UpdateSeen {
    pub follow_up: Option<FollowUpOutcome>,
    pub address_context: Option<AddressContext>,
    pub node_provider_id_set: bool,
}

/// A deletion (`decide/delete.rs`, `decide/drain.rs`).
#[derive(Clone, Debug, Default)]
pub struct DeleteSeen {
    pub drain: Option<DrainProgress>,
    /// How each detach of the VM's volume groups went, in the order asked.
    pub detached: Option<Vec<VolumeGroupDetach>>,
    pub deleted: Option<DeleteOutcome>,
    pub node_deleted: bool,
    /// The Machine's claims were released.
    pub claims_released: bool,
}

/// A `GET /vms/{uuid}` as Prism answered it.
#[derive(Clone, Debug)]
pub enum VmRead {
    Found(Box<Vm>),
    /// 404: no VM has the UUID.
    Gone,
}

impl VmRead {
    pub fn found(&self) -> Option<&Vm> {
        match self {
            Self::Found(vm) => Some(vm),
            Self::Gone => None,
        }
    }
}

impl From<Option<Vm>> for VmRead {
    fn from(vm: Option<Vm>) -> Self {
        vm.map_or(Self::Gone, |vm| Self::Found(Box::new(vm)))
    }
}

/// A VM listing looked at, or none made.
#[derive(Clone, Debug)]
pub enum ListingRead {
    Listed(Box<Listing>),
    /// Too few Machines wait for the shared listing to pay: none was made.
    NotMade,
}

impl ListingRead {
    pub fn listed(&self) -> Option<&Listing> {
        match self {
            Self::Listed(listing) => Some(listing),
            Self::NotMade => None,
        }
    }
}

impl From<Option<Listing>> for ListingRead {
    fn from(listing: Option<Listing>) -> Self {
        listing.map_or(Self::NotMade, |listing| Self::Listed(Box::new(listing)))
    }
}

/// A Node asked for by name.
#[derive(Clone, Debug)]
pub enum NodeRead {
    Found(Box<Node>),
    /// There is no Node of that name.
    Absent,
}

impl NodeRead {
    pub fn found(&self) -> Option<&Node> {
        match self {
            Self::Found(node) => Some(node),
            Self::Absent => None,
        }
    }
}

impl From<Option<Node>> for NodeRead {
    fn from(node: Option<Node>) -> Self {
        node.map_or(Self::Absent, |node| Self::Found(Box::new(node)))
    }
}

/// Whether the Prism connection (credentials, endpoint) could be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvironmentSeen {
    /// `first_task_read`: how soon after being recorded the pending task is first read (the
    /// connection's recent task durations), if there is one; `first_delete_look`: how soon
    /// after a VM's DELETE was sent its end is first looked for (the connection's recent
    /// deletions, from the DELETE to the 404 that confirmed it); `slowest_task`: the longest
    /// that recent successful tasks of the pending task's kind took on this Prism Central
    /// (`None`: no task pending, or none of its kind succeeded yet); `task_end_seen`: the
    /// connection's shared look at the tasks in flight saw the pending task end;
    /// `delete_end_seen`: it saw the task of the recorded VM's DELETE end.
    Ready {
        first_task_read: Duration,
        first_delete_look: Duration,
        slowest_task: Option<Duration>,
        task_end_seen: bool,
        delete_end_seen: bool,
    },
    Unavailable(EnvironmentProblem),
}

/// Why the Prism connection could not be made, or was refused, as the executor saw it. Names
/// Secrets and endpoints, never a Secret's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvironmentProblem {
    /// Neither `--prism-endpoint` nor `Infrastructure/cluster` names a Prism Central.
    NoEndpoint,
    /// `Infrastructure/cluster` cannot be read as OpenShift writes it (`detail`: why).
    InfrastructureInvalid { detail: String },
    /// The credentials Secret (`namespace/name`) does not exist.
    CredentialsSecretMissing { secret: String },
    /// The credentials Secret has no key [`crate::api::CREDENTIALS_KEY`].
    CredentialsKeyMissing { secret: String },
    /// The credentials Secret's key holds no usable credentials (`detail`: why, never the content).
    CredentialsUnreadable { secret: String, detail: String },
    /// Prism Central answered 401 to the credentials of the Secret.
    CredentialsRefused { secret: String },
    /// The Prism client cannot be set up (`detail`: why, naming the endpoint or file at fault: a
    /// plain `http://` endpoint, an unreadable CA bundle).
    ClientUnusable { detail: String },
    /// The TLS handshake with Prism Central failed: its certificate is not trusted.
    CertificateUntrusted { endpoint: String },
    /// Prism Central could not be connected to, or did not answer in time.
    Unreachable { endpoint: String },
}

/// What a VM listing shows about this Machine.
#[derive(Clone, Debug)]
pub struct Listing {
    pub listed_at: Timestamp,
    /// The VM with the recorded UUID.
    pub vm: Option<Vm>,
    /// VMs with the Machine's name.
    pub named: Vec<DeployCandidate>,
    /// VMs carrying the Machine's uid in their identity marker.
    pub marked: Vec<MarkedVm>,
}

/// What the executor read for a create, as it found it: it judges none of it (the plan does).
#[derive(Clone, Debug)]
pub struct CreateInputs {
    /// The lookups in Prism of what the providerSpec refers to.
    pub resolved: ResolvedReferences,
    /// The user-data Secret the providerSpec names (`None`: it names none).
    pub user_data: Option<SecretRead>,
    /// The Secret of the Administrator password, named or generated (`None`: none is needed).
    pub admin_password: Option<SecretRead>,
}

/// One key of a Secret in the Machine's namespace, as the executor's Secret cache has it.
#[derive(Clone, Debug)]
pub enum SecretRead {
    /// There is no Secret of that name.
    Missing,
    Found {
        /// The uids of the Secret's owners.
        owners: Vec<String>,
        /// The key's value (`None`: the Secret has no such key).
        value: Option<SecretValue>,
    },
}

/// How the creation of the generated Administrator password's Secret went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PasswordSecretOutcome {
    /// Created, with the password generated (which the Secret cache may not show yet).
    Created(AdminPassword),
    /// It exists already (made by an earlier attempt) but the Secret cache has not seen it
    /// yet: wait for it, never generate a second password.
    NotYetCached,
    /// The API server refused it; its words (the executor keeps the error).
    Failed(String),
}

/// How Prism answered a create, clone or template deploy
/// ([`crate::machine::provision::classify_create_error`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendOutcome {
    Accepted {
        task: Option<String>,
    },
    /// 409 to a request with the reserved UUID; Prism's words.
    Conflict(String),
    ReservationRejected,
    Invalid(String),
    SourceMissing(String),
    /// The create may or may not have happened (the executor keeps the error).
    Retry,
}

impl SendOutcome {
    /// What Prism's error to a create, clone or template deploy tells the protocol
    /// ([`classify_create_error`]); `reserved_uuid` as there.
    pub fn of_error(error: &prism_types::Error, reserved_uuid: bool) -> Self {
        match classify_create_error(error, reserved_uuid) {
            CreateCallOutcome::Conflict => Self::Conflict(error.to_string()),
            CreateCallOutcome::ReservationRejected => Self::ReservationRejected,
            CreateCallOutcome::Invalid(message) => Self::Invalid(message),
            CreateCallOutcome::SourceMissing(message) => Self::SourceMissing(message),
            CreateCallOutcome::Retry => Self::Retry,
        }
    }
}

/// How Prism answered the follow-up update of a clone or deploy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FollowUpOutcome {
    Task(String),
    /// Applied without a task, or nothing was left to change.
    Done,
    /// The VM changed since it was read.
    Conflict,
    /// Prism refused the update as invalid.
    Invalid(String),
    /// The update cannot be applied to this VM.
    Impossible(String),
    /// Anything else (the executor keeps the error).
    Retry,
}

impl FollowUpOutcome {
    /// What Prism's error to the follow-up update tells the protocol: a 409 is a VM that
    /// changed since it was read (read it again and redo the update); a request refused as
    /// invalid fails the Machine, as for a create; anything else is retried.
    pub fn of_error(error: &prism_types::Error) -> Self {
        if error.is_conflict() {
            return Self::Conflict;
        }
        match classify_create_error(error, false) {
            CreateCallOutcome::Invalid(message) => Self::Invalid(message),
            _ => Self::Retry,
        }
    }
}

/// How Prism answered `DELETE /vms/{uuid}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    Accepted,
    /// 404: no VM has the UUID.
    Gone,
    /// Anything else, with Prism's words (the executor keeps the error).
    Failed(String),
}

/// One volume group's detach from the VM: its task as read once right after it was sent (or sent again: the
/// same request id answers the same task).
#[derive(Clone, Debug)]
pub struct VolumeGroupDetach {
    pub volume_group: String,
    pub task: TaskProgress,
}

/// How a drain round ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrainProgress {
    /// Nothing left on the Node but pods that are never evicted (or the Node is gone).
    Done,
    /// Pods are going; what remains, in one line.
    InProgress { note: String },
    /// An eviction was refused (a PodDisruptionBudget); what blocks, in one line.
    Blocked { note: String },
    /// The drain may not start: another control-plane Node is cordoned (nothing was done to
    /// this one; [`crate::machine::drain::drain_permission`]).
    NotPermitted { other_node: String },
}

/// What the Machine's addresses and labels are computed with besides the VM.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressContext {
    /// The primary subnet's CIDR, when Prism manages its addresses.
    pub primary_cidr: Option<ipnet::IpNet>,
    /// The cluster's own networks.
    pub cluster_networks: Vec<ipnet::IpNet>,
    /// `--excluded-address-cidrs`, which overrides them when given.
    pub excluded_flag: Vec<ipnet::IpNet>,
    pub ipv6_primary: bool,
    /// The Prism Central's name (the region label).
    pub region: Option<String>,
}
