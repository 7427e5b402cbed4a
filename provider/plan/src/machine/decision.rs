//! What [`super::decide`] returns: the changes to write, at most one Prism (or Kubernetes)
//! action, the events, the metrics and when to look again.

use std::collections::BTreeMap;
use std::time::Duration;

use prism_types::v3::Vm;

use crate::api::TaskOperation;
use crate::machine::status::StatusUpdate;
use crate::machine::task_memory::RememberedTask;
use crate::vm::request::{FollowUpUpdate, VmRequest};

/// One step of a reconcile.
#[derive(Clone, Debug, Default)]
pub struct Decision {
    /// The status change (empty: none).
    pub status: StatusUpdate,
    pub metadata: Option<MetadataChange>,
    /// What the executor does next and feeds back; `None` ends the reconcile.
    pub action: Option<Action>,
    pub events: Vec<Event>,
    pub effects: Vec<Effect>,
    pub next: Next,
    /// The reconcile plans on at once on the Machine as this decision's changes leave it,
    /// instead of ending and waiting for their write to trigger the next ([`super::Rounds`]):
    /// set where the next step follows from the change alone (a phase entered, a task ended,
    /// a drain done), so that the changes of one transition are written together.
    pub plan_on: bool,
}

/// A change to the Machine's metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetadataChange {
    AddFinalizer,
    RemoveFinalizer,
    /// Labels, annotations and providerID, merged.
    Merge {
        labels: BTreeMap<String, String>,
        annotations: BTreeMap<String, String>,
        provider_id: Option<String>,
    },
}

impl MetadataChange {
    /// Whether this change is written after the reconcile's status change, not before: once
    /// the finalizer is gone the API server may delete the Machine, and a status write after
    /// that would be answered 404 and lost. Every other change goes first, so that the status
    /// it accompanies (a phase, the addresses) is never seen without it.
    pub fn written_after_status(&self) -> bool {
        *self == Self::RemoveFinalizer
    }
}

/// What the executor does, then calls [`super::decide`] again with the result.
#[derive(Clone, Debug)]
pub enum Action {
    Read(Read),
    /// Changes something; the status change of the same decision is written first.
    Send(Change),
}

impl Action {
    /// What the action is, for logs: no request body (user data and passwords stay out).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Read(read) => read.name(),
            Self::Send(change) => change.name(),
        }
    }
}

impl Read {
    /// What the read is, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Environment => "read the environment",
            Self::Listing { .. } => "read a listing",
            Self::Task(_) => "read the task",
            Self::Vm { .. } => "read the VM",
            Self::Confirm { .. } => "read the VM to confirm",
            Self::Node { .. } => "read the Node",
            Self::AddressContext { .. } => "read the address context",
            Self::CreateInputs { .. } => "read what the VM is planned from",
            Self::Claims { .. } => "read the IP address claims",
        }
    }
}

impl Change {
    /// What the change is, for logs: no request body (user data and passwords stay out).
    pub fn name(&self) -> &'static str {
        match self {
            Self::CreateClaims { .. } => "create IP address claims",
            Self::AdoptClaims { .. } => "adopt IP address claims",
            Self::ReleaseClaims => "release the IP address claims",
            Self::ReserveUuid => "reserve a UUID",
            Self::CreatePasswordSecret => "create the Administrator password Secret",
            Self::Create { .. } => "send the create",
            Self::FollowUp { .. } => "send the follow-up",
            Self::DeleteVm { .. } => "delete the VM",
            Self::DetachVolumeGroups { .. } => "detach the VM's volume groups",
            Self::Drain { .. } => "drain",
            Self::DeleteNode { .. } => "delete the Node",
            Self::NodeProviderId { .. } => "set the Node's providerID",
        }
    }
}

/// How many times one reconcile asks [`super::decide`] at most: a bound against a loop, above
/// the longest path. A reconcile plans on after a change it only writes ([`super::Rounds`]), so
/// a Machine's first reconcile goes from the finalizer to the create sent: the finalizer (1 ask),
/// phase `Provisioning` (environment, identity marker, then the decision: 3), then a create with
/// static addresses whose claim is adopted (environment, identity marker, claims, adoption, the
/// plan's inputs, UUID, create, a GET after a 409, then the outcome: 9), 13 in all; a deletion
/// from phase `Deleting` to the VM's DELETE sent fewer. The executor stops there and looks again
/// later.
pub const MAX_ROUNDS: usize = 24;

/// A read; its result fills the [`super::Seen`] slot named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    /// Credentials and Prism connection → `environment`.
    Environment,
    Listing {
        slot: ListingSlot,
        source: ListingSource,
    },
    /// The pending task → `task`.
    Task(crate::api::PendingTask),
    /// `GET` of the recorded VM → `vm`; `fresh`: Prism as it is now, else a read of the last
    /// few seconds will do.
    Vm { uuid: String, fresh: bool },
    /// `GET` now → `confirm`.
    Confirm { uuid: String },
    /// A Node → `node`: as the API server has it now (`cached: false`; the attached volumes a
    /// deletion waits for), or as the watch cache last saw it (its providerID).
    Node { name: String, cached: bool },
    /// Subnet CIDR, networks, region → `address_context`.
    AddressContext { primary_subnet: Option<String> },
    /// The lookups in Prism of what the providerSpec refers to, and the Secrets named here (in
    /// the Machine's namespace), each as it is → `create_inputs`.
    CreateInputs {
        user_data: Option<SecretKey>,
        admin_password: Option<SecretKey>,
    },
    /// The claims named (by NIC index), each with the `IPAddress` it is bound to → `claims`.
    Claims { names: BTreeMap<usize, String> },
}

/// One key of a Secret in the Machine's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretKey {
    pub name: String,
    pub key: &'static str,
}

/// Which slot a listing fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListingSlot {
    Task,
    Deploy,
    Vm,
    Marker,
}

/// Which listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListingSource {
    /// The shared inventory as it is.
    Inventory,
    /// The shared inventory, no older than this.
    Within(Duration),
    /// The shared listing for a Machine waiting on `waiter` (counted within `window`), no
    /// older than `max_age`, when enough Machines wait for it to pay; otherwise none.
    ForWaiter {
        waiter: String,
        window: Duration,
        max_age: Duration,
    },
}

/// A change in Prism or Kubernetes.
#[derive(Clone, Debug)]
pub enum Change {
    ReserveUuid,
    /// Generates the VM's Administrator password and creates the Secret that keeps it, owned
    /// by the Machine → `password_secret`.
    CreatePasswordSecret,
    /// The create, clone or deploy (`deploy_request_id` for a deploy) → `sent`.
    Create {
        request: Box<VmRequest>,
        deploy_request_id: Option<String>,
    },
    /// → `follow_up`.
    FollowUp {
        uuid: String,
        update: Box<FollowUpUpdate>,
        vm: Box<Vm>,
    },
    /// → `deleted`.
    DeleteVm {
        uuid: String,
    },
    /// Detaches VM `vm_uuid` from each volume group (the groups stay), each with its request id, and reads each
    /// detach's task once → `detached`.
    DetachVolumeGroups {
        vm_uuid: String,
        detaches: Vec<DetachRequest>,
    },
    /// One drain round → `drain`.
    Drain {
        node: String,
    },
    /// → `node_deleted` (a Node already gone is success).
    DeleteNode {
        node: String,
    },
    /// The Node's `spec.providerID`, decided where the Node has none → `node_provider_id_set`.
    /// Written without a resourceVersion: the API server itself refuses to change a providerID
    /// once set ([`crate::machine::node_link`]), so a precondition would add nothing but 409s
    /// from the Node's other writers (nodelink's annotation, the kubelet).
    NodeProviderId {
        node: String,
        provider_id: String,
    },
    /// Creates these claims; one that exists already is success → `claims_created`.
    CreateClaims {
        claims: Vec<crate::api::ipam::IPAddressClaim>,
    },
    /// Makes the Machine the controller of these claims; each claim as the API server answers
    /// replaces its reading in `claims` (a claim gone meanwhile: none).
    AdoptClaims {
        adoptions: Vec<crate::machine::ipam::ClaimAdoption>,
    },
    /// Deletes the claims the Machine controls and removes their protection finalizer →
    /// `claims_released`.
    ReleaseClaims,
}

impl Change {
    /// Whether what was decided so far is written to the Machine before this change is sent
    /// (record before send: a retry after a crash finds on the Machine what was sent). The
    /// changes that need no record go without one, so that the status they follow is written
    /// once with what comes after them: reserving a UUID (one never used costs nothing; the
    /// record before the create carries it), setting a Node's providerID (a retry reads the Node
    /// again; and it goes first so that a Machine is never seen `Running` with its Node still
    /// lacking the providerID the same reconcile is about to set), a drain round (cordon and
    /// evictions, which a retry repeats harmlessly) and the Node's deletion (a Node already
    /// gone is success).
    pub fn records_first(&self) -> bool {
        !matches!(
            self,
            Self::NodeProviderId { .. }
                | Self::Drain { .. }
                | Self::DeleteNode { .. }
                | Self::ReserveUuid
        )
    }
}

/// One volume group to detach, with the `NTNX-Request-Id` its detach is sent with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetachRequest {
    pub volume_group: String,
    pub request_id: String,
}

/// An event on the Machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
    /// Published only when this reconcile wrote the Machine.
    pub only_if_written: bool,
}

/// Bookkeeping the executor does: metrics and its caches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// A `mapi_instance_*_failed` counter.
    Failure {
        kind: FailureKind,
        reason: &'static str,
    },
    /// A recorded task ended: its metric, and (succeeded) how soon the next is first read.
    TaskEnded {
        operation: TaskOperation,
        succeeded: bool,
        elapsed: Duration,
    },
    /// `mapi_machine_phase_transition_seconds`, once the status is written.
    PhaseEntered {
        phase: &'static str,
        age: Duration,
    },
    /// The VM is known to have changed: drop its recent read.
    ForgetRead(String),
    /// The Machine is not Running and its VM lists no address it can use: have the shared
    /// look at waiting VMs wake it when the VM lists addresses other than `seen` (every
    /// address its NICs list, usable or not), rather than wait for its requeue.
    AwaitAddresses {
        vm: String,
        seen: Vec<String>,
    },
    /// The Machine waits for no address of VM `vm` (it has one, or is Running).
    AddressesKnown {
        vm: String,
    },
    /// A source or cluster is gone: drop the cached lookups.
    InvalidateLookups,
    /// Keep this create's task in memory, not on the Machine ([`super::task_memory`]).
    RememberTask(RememberedTask),
    /// The Machine was written without a create's task: forget any remembered.
    ForgetTask,
    ResetBackoff,
    /// The Machine is gone: forget what the executor remembers of it.
    Finished,
}

/// Which `mapi_instance_*_failed` counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    Create,
    Update,
    Delete,
}

/// How the reconcile ends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Next {
    /// Until the Machine changes (a write of this reconcile triggers the next).
    #[default]
    AwaitChange,
    Requeue(Duration),
    /// Failed: retried with backoff.
    Retry(Failure),
}

/// Why a reconcile failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A create cannot be made now; published (condition, event).
    CreateRetry(String),
    /// The Machine lacks what every Machine needs; published.
    InvalidMachine(String),
    /// The VM is in state ERROR; published.
    VmError(String),
    /// A deletion cannot confirm a template deploy yet; published.
    DeployUnconfirmed(String),
    /// Several VMs could be the Machine's unrecorded VM; none is taken; published.
    AmbiguousVm(String),
    /// Prism failed to detach a volume group from the VM being deleted; published.
    VolumeGroupDetachFailed(String),
    /// The Prism connection could not be made (the executor's error).
    Environment,
    /// The action just sent failed (the executor's error).
    ActionFailed,
}
