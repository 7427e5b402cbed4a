//! A create's task, kept in the controller's memory rather than on the Machine.
//!
//! What makes a create safe to repeat is recorded before it is sent: the reserved UUID
//! (`vmUUID`) of a create or clone, the request id (`deployRequestId`) of a template deploy.
//! The task Prism answers with only says sooner how the create went, so writing it to the
//! Machine cost a status write per create (issue 37) and made nothing safer: a controller that
//! restarted without it finds the VM by its UUID (a `GET` shows a VM still being created; a 404
//! sends the create again with that UUID, which Prism answers 409 if the first got through), or
//! sends the deploy again with its request id, which Prism answers with the first deploy's task.
//!
//! So the task of a create, clone or deploy stays in memory ([`RememberedTask`]): the script
//! takes it out of the status it writes ([`super::Rounds`], [`super::Effect::RememberTask`]), and
//! the executor puts it back into the Machine the next reconcile plans on
//! ([`RememberedTask::restored_into`]) while the Machine still records what it was sent for.
//! A follow-up's task is still written: it is rare (clones and deploys only), and its record
//! (`pendingFollowUp`) is written with it anyway.

use serde_json::Value;

use crate::api::{Machine, NutanixMachineProviderStatus, PendingTask, TaskOperation};
use crate::machine::lifecycle::MachineState;

/// What a create's task was sent for, as the Machine records it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum SentFor {
    /// `vmUUID`: a create or clone carries it as `metadata.uuid`.
    Vm(String),
    /// `deployRequestId`: a template deploy carries it as `NTNX-Request-Id`.
    Deploy(String),
}

/// The task of a create, clone or deploy, and what the Machine records it was sent for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RememberedTask {
    sent_for: SentFor,
    pub task: PendingTask,
}

impl RememberedTask {
    /// The create's task `status` holds, with what it was sent for; `None` when `status` holds
    /// no task, a follow-up's, or one whose record is missing (such a task stays written).
    pub fn of(status: &NutanixMachineProviderStatus) -> Option<Self> {
        let task = status.pending_task.as_ref()?;
        let sent_for = match task.operation {
            TaskOperation::Create | TaskOperation::Clone => {
                SentFor::Vm(status.vm_uuid.clone()?.to_ascii_lowercase())
            }
            TaskOperation::Deploy => SentFor::Deploy(status.deploy_request_id.clone()?),
            _ => return None,
        };
        Some(Self {
            sent_for,
            task: task.clone(),
        })
    }

    /// Whether `status` is still waiting for this task: it records no task of its own and what
    /// the task was sent for, and (a deploy) no VM yet.
    fn applies_to(&self, status: &NutanixMachineProviderStatus) -> bool {
        if status.pending_task.is_some() {
            return false;
        }
        match &self.sent_for {
            SentFor::Vm(uuid) => status
                .vm_uuid
                .as_deref()
                .is_some_and(|recorded| recorded.eq_ignore_ascii_case(uuid)),
            SentFor::Deploy(request) => {
                status.vm_uuid.is_none() && status.deploy_request_id.as_ref() == Some(request)
            }
        }
    }

    /// `machine` as the reconcile plans on it: with the task put back into its providerStatus,
    /// where the Machine is not provisioned and still records what the task was sent for;
    /// `None` when the task no longer applies (the executor then forgets it).
    pub fn restored_into(&self, machine: &Machine) -> Option<Machine> {
        if MachineState::of(machine).is_provisioned() {
            return None;
        }
        let status = machine.provider_status().ok()?;
        if !self.applies_to(&status) {
            return None;
        }
        let task = serde_json::to_value(&self.task).ok()?;
        let mut restored = machine.clone();
        let provider_status = restored
            .status
            .get_or_insert_with(Default::default)
            .provider_status
            .get_or_insert_with(|| Value::Object(Default::default()));
        provider_status
            .as_object_mut()?
            .insert("pendingTask".to_owned(), task);
        Some(restored)
    }
}

/// Takes a create's task out of `status` (what is written), returning it to be remembered.
pub(super) fn take_create_task(
    status: &mut NutanixMachineProviderStatus,
) -> Option<RememberedTask> {
    let remembered = RememberedTask::of(status)?;
    status.pending_task = None;
    Some(remembered)
}
