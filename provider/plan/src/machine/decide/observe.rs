//! Finding the Machine's VM: what the recorded task, the shared listing, a GET or the identity
//! marker say, read in that order, each read asked of the executor only when the one before it
//! left the question open.

use std::time::Duration;

use prism_types::v3::Vm;

use super::delete::forget_deploy;
use super::draft::{Ask, Draft, MachineFailure, fail, since};
use super::economy::{
    self, BeforeRead, clone_seen_by_get, deployed_in, listing, listing_before_task_read,
};
use crate::api::PendingTask;
use crate::machine::decision::FailureKind;
use crate::machine::decision::{Failure, ListingSlot, ListingSource, Next, Read};
use crate::machine::lifecycle::{INVALID_CONFIGURATION, VmObservation, VmState};
use crate::machine::provision::{
    DEPLOYED_VM_SEARCH, DeployedByName, FailureClass, TaskContext, TaskReading,
    after_transient_failure, follow_up_value, go_provider_vm, pending_follow_up, read_task,
};
use crate::machine::snapshot::VmRead;
use crate::machine::status::conditions;
use crate::vm::identity::adoptable_vm;
use crate::vm::request::FollowUpUpdate;

/// Finds the Machine's VM: a recorded task first, then the recorded UUID (the inventory for a
/// Running Machine, the shared listing for one waiting, a GET otherwise), then the identity
/// marker, then a VM the Go provider made for it ([`go_provider_vm`]).
pub(super) fn observe(d: &mut Draft<'_>) -> Result<(VmObservation, Option<Vm>), Ask> {
    let s = d.s;
    let status = &s.status;
    let deleting = d.deleting();
    if let Some(seen) = economy::delete_unread(d) {
        return Ok(seen);
    }
    economy::wait_before_delete_look(d)?;
    let recorded = status.vm_uuid.is_some()
        || status.pending_task.is_some()
        || status.deploy_request_id.is_some();
    let first_task_read = match d.environment()? {
        Ok(first_task_read) => first_task_read,
        // Nothing was ever sent to Prism for this Machine (every create records first): a
        // deletion need not wait for a Prism it cannot reach.
        Err(_) if deleting && !recorded => return Ok((VmObservation::Missing, None)),
        Err(problem) => return Err(super::environment::unavailable(d, &problem)),
    };

    if let Some(task) = &status.pending_task {
        // A task seen ended is read now, whatever its kind usually takes.
        if !d.task_end_seen() {
            economy::wait_before_task_read(d, task, first_task_read)?;
        }
        if let Some(seen) = observe_task(d, task)? {
            return Ok(seen);
        }
    }

    if let Some(uuid) = &status.vm_uuid {
        if let Some(seen) = economy::listed_vm(d, uuid)? {
            return Ok(seen);
        }
        // A deletion must see Prism as it is now; otherwise a read from the last few seconds
        // (the reconcile our own write triggered) will do.
        return match &s.seen.observe.vm {
            None => Err(Ask::Read(Read::Vm {
                uuid: uuid.clone(),
                fresh: deleting,
            })),
            Some(VmRead::Found(vm)) => Ok((
                VmObservation::Present(VmState::of(vm)),
                Some(vm.as_ref().clone()),
            )),
            Some(VmRead::Gone) => Ok((VmObservation::Missing, None)),
        };
    }
    if status.deploy_request_id.is_some() {
        // The deploy may or may not have been sent: the create step (or, for a deletion, the
        // confirmation) sends it again with the same request id, which Prism answers with the
        // same task.
        return Ok((VmObservation::DeployUnconfirmed, None));
    }
    let Some(listed) = listing(
        &s.seen.observe.marker_listing,
        ListingSlot::Marker,
        ListingSource::Inventory,
    )?
    else {
        return Ok((VmObservation::Missing, None));
    };
    if let Some(vm) = adoptable_vm(&listed.marked, &s.machine.identity, s.machine.created) {
        let uuid = vm.uuid.to_ascii_lowercase();
        d.record(|status| status.vm_uuid = Some(uuid.clone()));
        d.event(
            false,
            "Adopted",
            format!("VM {uuid} carries this Machine's identity"),
        );
        return Err(Ask::Done(Next::AwaitChange));
    }
    match go_provider_vm(
        &listed.named,
        s.machine.infra_id.as_deref(),
        s.machine.created,
    ) {
        DeployedByName::NotFound => Ok((VmObservation::Missing, None)),
        DeployedByName::One(uuid) => {
            d.record(|status| status.vm_uuid = Some(uuid.clone()));
            d.event(
                false,
                "Adopted",
                format!(
                    "VM {uuid} is named after this Machine, carries the cluster's category and was made after it: the Go provider's VM for it, whose UUID it had not recorded"
                ),
            );
            Err(Ask::Done(Next::AwaitChange))
        }
        DeployedByName::Several(uuids) => Err(ambiguous(d, &uuids)),
    }
}

/// Several VMs fit [`go_provider_vm`]: none is taken and nothing is created; the Machine says
/// which, until all but one are gone or one is recorded by hand.
fn ambiguous(d: &mut Draft<'_>, uuids: &[String]) -> Ask {
    let s = d.s;
    let message = format!(
        "{} VMs named {} carry the cluster's category and were made after the Machine ({}), and none is recorded on it: none is adopted and none created; delete the VMs that are not this Machine's in Prism, or write the right one's UUID in status.providerStatus.vmUUID",
        uuids.len(),
        s.machine.name,
        uuids.join(", ")
    );
    let (condition, reason, event) = if s.machine.state.is_provisioned() {
        (
            conditions::MACHINE_UPDATE,
            conditions::UPDATE_FAILED,
            "FailedUpdate",
        )
    } else {
        (
            conditions::MACHINE_CREATION,
            conditions::CREATION_FAILED,
            "FailedCreate",
        )
    };
    d.provider_condition(condition, false, reason, message.clone());
    d.event(true, event, message.clone());
    Ask::Done(Next::Retry(Failure::AmbiguousVm(message)))
}

/// What the recorded task says: `Some` observation (with the VM, when it was read), `None` to
/// look the VM up as if there were no task (a follow-up still running), or the reconcile's end.
fn observe_task(
    d: &mut Draft<'_>,
    task: &PendingTask,
) -> Result<Option<(VmObservation, Option<Vm>)>, Ask> {
    let s = d.s;
    // A task seen ended is read at once: a listing could only say what the read will.
    if !d.deleting() && !d.task_end_seen() {
        match listing_before_task_read(d, task)? {
            BeforeRead::ReadTask => {}
            BeforeRead::Creating => return Ok(Some((VmObservation::Creating, None))),
            BeforeRead::Ended(seen) => return Ok(Some(*seen)),
        }
        if let Some(seen) = clone_seen_by_get(d, task)? {
            return Ok(Some(seen));
        }
    }
    let Some(progress) = &s.seen.observe.task else {
        return Err(Ask::Read(Read::Task(task.clone())));
    };
    let context = TaskContext {
        recorded_vm: s.status.vm_uuid.as_deref(),
        secure_boot_customized: s.machine.spec.secure_boot_customized(),
    };
    match read_task(task, progress, context) {
        TaskReading::Running { .. } if task.operation.creates_vm() => {
            Ok(Some((VmObservation::Creating, None)))
        }
        TaskReading::Running { .. } => Ok(None),
        TaskReading::Created { vm_uuid } => {
            d.task_ended(task, true);
            if let (Some(reserved), Some(actual)) = (&s.status.vm_uuid, &vm_uuid)
                && reserved != actual
            {
                // Prism did not keep the reserved UUID: the VM it made is this Machine's;
                // creating again would make a second one.
                d.event(
                    false,
                    "Adopted",
                    format!("Prism created VM {actual} instead of the reserved UUID {reserved}"),
                );
            }
            d.record(|status| {
                status.pending_task = None;
                if vm_uuid.is_some() {
                    status.vm_uuid = vm_uuid;
                }
            });
            // The VM it made is looked at next: its end is written with what that look finds.
            d.plan_on = true;
            Err(Ask::Done(Next::AwaitChange))
        }
        TaskReading::DeployedVmUnnamed => Err(find_deployed_vm(d, task)),
        TaskReading::FollowUpApplied => {
            d.task_ended(task, true);
            d.record(|status| {
                status.pending_task = None;
                status.pending_follow_up = None;
            });
            Err(Ask::Done(Next::AwaitChange))
        }
        TaskReading::Failed { class, message } => Err(task_failed(d, task, class, message)),
    }
}

/// A template deploy succeeded without naming its VM: looks for it by name in a listing taken
/// now. The task and request id stay recorded until it is found; after [`DEPLOYED_VM_SEARCH`]
/// the Machine fails (a deletion forgets the deploy with a warning) instead of deploying again.
fn find_deployed_vm(d: &mut Draft<'_>, task: &PendingTask) -> Ask {
    let s = d.s;
    let source = ListingSource::Within(d.poll());
    let listed = match listing(&s.seen.observe.deploy_listing, ListingSlot::Deploy, source) {
        Ok(listed) => listed,
        Err(ask) => return ask,
    };
    let found = listed.map_or(DeployedByName::NotFound, |listed| deployed_in(d, listed));
    let age = task
        .started
        .as_ref()
        .map_or(Duration::ZERO, |started| since(s.now, started.0));
    match found {
        DeployedByName::One(uuid) => {
            d.task_ended(task, true);
            d.record(|status| {
                status.pending_task = None;
                status.vm_uuid = Some(uuid);
            });
            Ask::Done(Next::AwaitChange)
        }
        DeployedByName::NotFound | DeployedByName::Several(_) if age < DEPLOYED_VM_SEARCH => {
            Ask::Done(Next::Requeue(d.poll()))
        }
        DeployedByName::NotFound | DeployedByName::Several(_) => {
            let request = s.status.deploy_request_id.clone().unwrap_or_default();
            let candidates = match &found {
                DeployedByName::Several(uuids) => {
                    format!("several VMs fit ({})", uuids.join(", "))
                }
                _ => "no VM fits".to_owned(),
            };
            let message = format!(
                "template deploy task {} (request {request}) succeeded but names no VM, and {candidates} among the VMs named {} created since; find the deployed VM in Prism",
                task.id, s.machine.name
            );
            d.task_ended(task, true);
            if d.deleting() {
                return Ask::Done(forget_deploy(d, &request, &message));
            }
            d.record(|status| status.pending_task = None);
            Ask::Done(fail(
                d,
                MachineFailure::Create {
                    reason: None,
                    message,
                },
            ))
        }
    }
}

fn task_failed(d: &mut Draft<'_>, task: &PendingTask, class: FailureClass, message: String) -> Ask {
    let s = d.s;
    let creates = task.operation.creates_vm();
    let confirm = match (&s.status.vm_uuid, d.deleting(), class) {
        (Some(uuid), false, FailureClass::Transient) if creates => match &s.seen.observe.confirm {
            None => return Ask::Read(Read::Confirm { uuid: uuid.clone() }),
            Some(vm) => Some(vm),
        },
        _ => None,
    };
    d.task_ended(task, false);
    // The task is over whatever comes next (a deploy's request id goes with it).
    d.record(after_transient_failure);
    if d.deleting() {
        // Nothing fails a Machine being deleted: look its VM up again without the task.
        return Ask::Done(Next::AwaitChange);
    }
    if class == FailureClass::Invalid {
        return Ask::Done(fail(
            d,
            MachineFailure::Create {
                reason: Some(INVALID_CONFIGURATION),
                message: format!("Prism refused the VM: {message}"),
            },
        ));
    }
    match confirm {
        // Confirmed absent: the retry takes a new UUID (recorded before it is used).
        Some(VmRead::Gone) => d.record(|status| {
            status.vm_uuid = None;
            status.pending_follow_up = None;
        }),
        Some(VmRead::Found(vm)) => {
            if let VmState::Error(vm_error) = VmState::of(vm) {
                let uuid = s.status.vm_uuid.clone().unwrap_or_default();
                return Ask::Done(fail(
                    d,
                    MachineFailure::Create {
                        reason: None,
                        message: format!(
                            "creating VM {uuid} failed ({message}) and left it in state ERROR: {vm_error}"
                        ),
                    },
                ));
            }
            // The VM exists (a failed power-on, for instance): nothing would power it on, so
            // an update asks for power ON again (with backoff while it fails).
            let update = reasserted_power(pending_follow_up(&d.status), vm);
            d.record(|status| status.pending_follow_up = Some(follow_up_value(&update)));
        }
        None => {}
    }
    let (condition, reason, kind, event) = if creates {
        (
            conditions::MACHINE_CREATION,
            conditions::CREATION_FAILED,
            FailureKind::Create,
            "FailedCreate",
        )
    } else {
        (
            conditions::MACHINE_UPDATE,
            conditions::UPDATE_FAILED,
            FailureKind::Update,
            "FailedUpdate",
        )
    };
    d.provider_condition(condition, false, reason, message.clone());
    d.failure_metric(kind, "TaskFailed");
    d.event(true, event, message.clone());
    Ask::Done(Next::Retry(Failure::CreateRetry(message)))
}

/// The follow-up that powers a VM on again after its create task failed: the recorded one, if
/// any, else one that keeps the VM's description.
fn reasserted_power(recorded: Option<FollowUpUpdate>, vm: &Vm) -> FollowUpUpdate {
    let description = || {
        vm.spec
            .as_ref()
            .and_then(|spec| spec.description.clone())
            .unwrap_or_default()
    };
    let mut update = recorded.unwrap_or_else(|| FollowUpUpdate::reassert_power(description()));
    update.power_on = true;
    update.reassert_power = true;
    update
}
