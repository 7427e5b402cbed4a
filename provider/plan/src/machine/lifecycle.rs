//! The next step for a Machine, in the machine-api-operator's order.
//!
//! The machine controller the Go provider links in (MAO's `pkg/controller/machine`) reconciles a
//! Machine in this order, and [`next_step`] keeps it, one step per call: the controller performs
//! the step (patching status, calling Prism), then asks again.
//!
//! 1. With the `MachineAPIMigration` gate on, an empty `status.authoritativeAPI` is set from the
//!    spec; a Machine whose status names `ClusterAPI` or `Migrating` is paused.
//! 2. A Machine without the cluster label or without `providerSpec.value` is rejected
//!    (`FailedValidate` event) and retried.
//! 3. A Machine that is not being deleted gets the finalizer first.
//! 4. Deleting: phase `Deleting`; wait for pre-drain hooks; drain (skipped without a Node or
//!    with `exclude-node-draining`); wait for pre-terminate hooks; delete the VM once the linked
//!    Node lists no attached volume (the Go provider's check, bounded for an unreachable Node:
//!    [`super::drain::check_volumes`]) and wait until Prism no longer has it; delete the Node;
//!    remove the finalizer.
//! 5. Phase `Failed` is final.
//! 6. The VM exists: update the Machine from it; phase `Provisioned`, or `Running` once the Node
//!    is linked.
//! 7. The VM is gone but the Machine was provisioned: phase `Failed` ("Can't find created
//!    instance.").
//! 8. No phase yet: phase `Provisioning`, before anything is created.
//! 9. Create.

use std::time::Duration;

use prism_types::v3::{EntityState, Vm};

use crate::api::{
    CLUSTER_ID_LABEL, EXCLUDE_NODE_DRAINING_ANNOTATION, MACHINE_FINALIZER, Machine, phase,
};
use crate::vm::errors::{ErrorClass, ValidationErrors};

/// How long MAO waits before looking again at a Machine that is waiting on something.
pub const REQUEUE_AFTER: Duration = Duration::from_secs(30);

/// Machine condition the drain step sets when it is done (or skipped).
pub const DRAINED_CONDITION: &str = "Drained";

/// `errorReason` of a Machine whose providerSpec can never work.
pub const INVALID_CONFIGURATION: &str = "InvalidConfiguration";

/// `errorMessage` of a Machine whose VM disappeared (MAO's wording).
pub const INSTANCE_MISSING_MESSAGE: &str = "Can't find created instance.";

/// What the controller knows about a Machine, read from the object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineState {
    pub deleting: bool,
    pub has_finalizer: bool,
    pub phase: String,
    pub has_cluster_label: bool,
    pub has_provider_spec: bool,
    /// `status.authoritativeAPI` (empty: none).
    pub authoritative_api: Option<String>,
    /// `spec.authoritativeAPI` (empty: none), copied to the status while that is empty.
    pub spec_authoritative_api: Option<String>,
    pub provider_id: Option<String>,
    pub has_addresses: bool,
    /// `status.nodeRef.name`.
    pub node: Option<String>,
    pub has_pre_drain_hooks: bool,
    pub has_pre_terminate_hooks: bool,
    /// Condition `Drained` is `True`.
    pub drained: bool,
    pub exclude_node_draining: bool,
}

impl MachineState {
    /// Reads the state from a Machine.
    pub fn of(machine: &Machine) -> Self {
        let status = machine.status.as_ref();
        let meta = &machine.metadata;
        Self {
            deleting: meta.deletion_timestamp.is_some(),
            has_finalizer: meta
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == MACHINE_FINALIZER),
            phase: machine.phase().to_owned(),
            has_cluster_label: meta
                .labels
                .as_ref()
                .is_some_and(|l| l.get(CLUSTER_ID_LABEL).is_some_and(|v| !v.is_empty())),
            has_provider_spec: machine.spec.provider_spec.value.is_some(),
            authoritative_api: status
                .and_then(|s| s.authoritative_api.clone())
                .filter(|api| !api.is_empty()),
            spec_authoritative_api: machine
                .spec
                .authoritative_api
                .clone()
                .filter(|api| !api.is_empty()),
            provider_id: machine.spec.provider_id.clone().filter(|id| !id.is_empty()),
            has_addresses: status.is_some_and(|s| !s.addresses.is_empty()),
            node: status
                .and_then(|s| s.node_ref.as_ref())
                .and_then(|r| r.name.clone()),
            has_pre_drain_hooks: !machine.spec.lifecycle_hooks.pre_drain.is_empty(),
            has_pre_terminate_hooks: !machine.spec.lifecycle_hooks.pre_terminate.is_empty(),
            drained: status.is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == DRAINED_CONDITION && c.status == "True")
            }),
            exclude_node_draining: meta
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(EXCLUDE_NODE_DRAINING_ANNOTATION)),
        }
    }

    /// MAO's "provisioned": the Machine has a providerID or addresses.
    pub fn is_provisioned(&self) -> bool {
        self.provider_id.is_some() || self.has_addresses
    }
}

/// What Prism says about the Machine's VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmObservation {
    /// Not looked up yet in this reconcile.
    NotLookedUp,
    /// Prism has no VM for the Machine (by recorded UUID, then by identity).
    Missing,
    /// A template deploy is recorded (`deployRequestId`) and may have been sent, but neither its
    /// task nor its VM is known: its answer was lost (a 500 after Prism accepted it) or the
    /// controller stopped before recording the task.
    DeployUnconfirmed,
    /// A create, clone or deploy task recorded on the Machine is still running, and the VM is not
    /// visible yet (Prism lists VMs only once their create task ends).
    Creating,
    /// The VM exists.
    Present(VmState),
}

/// The VM's state (`status.state`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmState {
    /// `COMPLETE` or `PENDING`: usable, or about to be.
    Ok,
    /// `ERROR`, with Prism's messages.
    Error(String),
    /// `DELETE_PENDING`: a delete is in progress.
    Deleting,
}

impl VmState {
    /// The state of a VM as Prism reports it. A VM without a state (still being created) counts
    /// as usable-soon.
    pub fn of(vm: &Vm) -> Self {
        match vm.state() {
            Some(EntityState::Error) => {
                let messages: Vec<&str> = vm
                    .status
                    .iter()
                    .flat_map(|s| &s.message_list)
                    .filter_map(|m| m.message.as_deref().or(m.reason.as_deref()))
                    .collect();
                Self::Error(if messages.is_empty() {
                    "VM is in state ERROR".to_owned()
                } else {
                    messages.join("; ")
                })
            }
            Some(EntityState::DeletePending) => Self::Deleting,
            _ => Self::Ok,
        }
    }
}

/// `spec.providerID` of a Machine whose VM has this UUID (the CCM's format: lower case).
pub fn provider_id(vm_uuid: &str) -> String {
    format!("nutanix://{}", vm_uuid.to_ascii_lowercase())
}

/// The next thing to do for a Machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `status.authoritativeAPI` is empty: write `spec.authoritativeAPI` there and do nothing
    /// else (MAO `controller.go`, `Reconcile`, `patchStatusAuthoritativeAPI`).
    SetAuthoritativeApi(String),
    /// Another API owns the Machine: set the `Paused` condition and do nothing else.
    Paused,
    /// The Machine lacks what every Machine needs: emit `FailedValidate`, retry with backoff.
    RejectInvalidMachine {
        reason: String,
    },
    AddFinalizer,
    /// Write `status.phase` (and `lastUpdated`), then look again.
    SetPhase(&'static str),
    WaitForPreDrainHooks,
    /// Nothing to drain (no Node, or draining excluded): set `Drained=True`.
    MarkDrained,
    /// Cordon and drain the Node, then set `Drained=True`.
    Drain {
        node: String,
    },
    WaitForPreTerminateHooks,
    /// Find the VM in Prism, then ask again with the observation.
    LookUpVm,
    /// Delete the VM (its Node's volumes checked first, see [`super::drain::check_volumes`]).
    DeleteVm,
    /// Prism is deleting the VM: look again after [`Intervals::poll`].
    WaitForVmDeletion,
    /// The VM is gone: delete the Node (if linked) and remove the finalizer.
    FinishDeletion {
        node: Option<String>,
    },
    /// Phase `Failed`: nothing more is done until the Machine is deleted.
    Stop,
    /// The VM exists: set providerID, addresses, labels, annotations and provider status from
    /// it, and this phase.
    UpdateFromVm {
        phase: &'static str,
    },
    /// The VM is in `ERROR`: report it and look again after [`REQUEUE_AFTER`] (MAO treats a
    /// failed update as retryable).
    ReportVmError {
        message: String,
    },
    /// The VM is gone but the Machine was provisioned: phase `Failed` with
    /// [`INSTANCE_MISSING_MESSAGE`] and `InstanceExists=False`.
    InstanceMissing,
    /// Set phase `Failed` with this `errorReason` and `errorMessage`.
    Fail {
        reason: Option<&'static str>,
        message: String,
    },
    /// A create is running: look again after [`Intervals::poll`].
    WaitForCreate,
    /// Validate, build the request and send it.
    Create,
    /// A Machine being deleted has an unconfirmed template deploy: send it again with the
    /// recorded request id (Prism answers with the first deploy's task) so that its VM is found
    /// and deleted rather than left behind.
    ConfirmDeploy,
    /// Something the create needs is not there yet: report it and retry later.
    RetryCreate {
        message: String,
    },
}

/// How soon the controller looks again at a Machine that is waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Intervals {
    /// A Prism task or a VM deletion in progress.
    pub poll: Duration,
    /// A Machine waiting for its addresses or its Node ([`REQUEUE_AFTER`], as MAO).
    pub requeue: Duration,
    /// A Running Machine, checked against the shared VM inventory.
    pub running: Duration,
}

impl Default for Intervals {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(10),
            requeue: REQUEUE_AFTER,
            running: Duration::from_secs(60),
        }
    }
}

impl Step {
    /// When to look at the Machine again if nothing else changes; `None` when the step ends the
    /// reconcile until the Machine changes (or is a write that triggers the next reconcile).
    ///
    /// A `Provisioned` Machine is looked at every `requeue` until its Node is linked. A Running
    /// Machine is looked at every `running` (MAO leaves it to its periodic resync): that is how a
    /// VM deleted behind the controller's back is noticed, and with the shared inventory it costs
    /// no Prism call of its own.
    pub fn requeue_after(&self, intervals: &Intervals) -> Option<Duration> {
        match self {
            Self::UpdateFromVm { phase } if *phase == phase::RUNNING => Some(intervals.running),
            Self::WaitForVmDeletion | Self::WaitForCreate => Some(intervals.poll),
            Self::UpdateFromVm { .. } | Self::ReportVmError { .. } | Self::RetryCreate { .. } => {
                Some(intervals.requeue)
            }
            _ => None,
        }
    }
}

/// The next step for a Machine in `state`, given what Prism says about its VM.
/// `migration_gate` is the `MachineAPIMigration` feature gate.
pub fn next_step(state: &MachineState, vm: &VmObservation, migration_gate: bool) -> Step {
    if migration_gate {
        match (&state.authoritative_api, &state.spec_authoritative_api) {
            (None, Some(spec)) => return Step::SetAuthoritativeApi(spec.clone()),
            (Some(api), _) if matches!(api.as_str(), "ClusterAPI" | "Migrating") => {
                return Step::Paused;
            }
            _ => {}
        }
    }
    if !state.has_cluster_label {
        return Step::RejectInvalidMachine {
            reason: format!("missing label {CLUSTER_ID_LABEL}"),
        };
    }
    if !state.has_provider_spec {
        return Step::RejectInvalidMachine {
            reason: "missing spec.providerSpec.value".into(),
        };
    }
    if state.deleting {
        return deletion_step(state, vm);
    }
    if !state.has_finalizer {
        return Step::AddFinalizer;
    }
    if state.phase == phase::FAILED {
        return Step::Stop;
    }
    match vm {
        VmObservation::NotLookedUp => Step::LookUpVm,
        VmObservation::Present(VmState::Error(message)) => Step::ReportVmError {
            message: message.clone(),
        },
        VmObservation::Present(_) => Step::UpdateFromVm {
            phase: if state.node.is_some() {
                phase::RUNNING
            } else {
                phase::PROVISIONED
            },
        },
        VmObservation::Creating => Step::WaitForCreate,
        VmObservation::Missing if state.is_provisioned() => Step::InstanceMissing,
        VmObservation::Missing | VmObservation::DeployUnconfirmed if state.phase.is_empty() => {
            Step::SetPhase(phase::PROVISIONING)
        }
        VmObservation::Missing | VmObservation::DeployUnconfirmed => Step::Create,
    }
}

fn deletion_step(state: &MachineState, vm: &VmObservation) -> Step {
    if !state.has_finalizer {
        // Nothing of ours holds the Machine: Kubernetes removes it.
        return Step::Stop;
    }
    if state.phase != phase::DELETING {
        return Step::SetPhase(phase::DELETING);
    }
    if state.has_pre_drain_hooks {
        return Step::WaitForPreDrainHooks;
    }
    if !state.drained {
        return match &state.node {
            Some(node) if !state.exclude_node_draining => Step::Drain { node: node.clone() },
            _ => Step::MarkDrained,
        };
    }
    if state.has_pre_terminate_hooks {
        return Step::WaitForPreTerminateHooks;
    }
    match vm {
        VmObservation::NotLookedUp => Step::LookUpVm,
        VmObservation::Present(VmState::Deleting) => Step::WaitForVmDeletion,
        // A create still running would bring the VM back after the delete: let it end first.
        VmObservation::Creating => Step::WaitForCreate,
        VmObservation::Present(_) => Step::DeleteVm,
        VmObservation::DeployUnconfirmed => Step::ConfirmDeploy,
        VmObservation::Missing => Step::FinishDeletion {
            node: state.node.clone(),
        },
    }
}

/// The step after validation refused a create: fail the Machine for a permanent problem, retry
/// for a lookup that may succeed later.
pub fn after_validation(errors: &ValidationErrors) -> Step {
    match errors.class() {
        ErrorClass::Invalid => Step::Fail {
            reason: Some(INVALID_CONFIGURATION),
            message: errors.to_string(),
        },
        ErrorClass::Unresolved => Step::RetryCreate {
            message: errors.to_string(),
        },
    }
}

#[cfg(test)]
mod tests;
