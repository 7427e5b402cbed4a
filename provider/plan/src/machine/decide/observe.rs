//! Finding the Machine's VM: what the recorded task, the shared listing, a GET or the identity
//! marker say, read in that order, each read asked of the executor only when the one before it
//! left the question open.

use std::time::Duration;

use prism_types::v3::{EntityState, PowerState, Vm};

use super::{Ask, Draft, MachineFailure, fail, forget_deploy, power_of, since};
use crate::api::{PendingTask, TaskOperation, phase};
use crate::machine::decision::FailureKind;
use crate::machine::decision::{Failure, ListingSlot, ListingSource, Next, Read};
use crate::machine::deletion_sent;
use crate::machine::lifecycle::{INVALID_CONFIGURATION, VmObservation, VmState};
use crate::machine::provision::{
    DEPLOYED_VM_SEARCH, DeployedByName, FailureClass, ListingSays, ListingView, TaskContext,
    TaskReading, after_transient_failure, deployed_vm_by_name, follow_up_value, listed_after,
    listing_says, past_usual_end, pending_follow_up, read_task,
};
use crate::machine::snapshot::Listing;
use crate::machine::status::conditions;
use crate::vm::identity::adoptable_vm;
use crate::vm::request::FollowUpUpdate;

/// How much later than its recorded time (whole seconds) something was sent.
const RECORDED_TIME_SLACK: Duration = Duration::from_secs(1);

/// Finds the Machine's VM: a recorded task first, then the recorded UUID (the inventory for a
/// Running Machine, the shared listing for one waiting, a GET otherwise), then the identity
/// marker.
pub(super) fn observe(d: &mut Draft<'_>) -> Result<(VmObservation, Option<Vm>), Ask> {
    let s = d.s;
    let status = &s.status;
    let deleting = d.deleting();
    if deleting
        && let Some(uuid) = &status.vm_uuid
        && status.pending_task.is_none()
        && !deletion_sent(status, uuid)
    {
        // The delete itself says whether the VM exists (404: gone), so it is not read first.
        return Ok((VmObservation::Present(VmState::Ok), None));
    }
    if deleting
        && status.pending_task.is_none()
        && let Some(sent) = &status.deletion_sent
        && status.vm_uuid.as_deref() == Some(sent.vm_uuid.as_str())
    {
        // A delete sent moments ago (the reconcile its own write triggered) is not looked at
        // before deletes on this Prism Central usually end (at least a poll interval): it is
        // still going, and each look is a GET. The recorded time went through the Machine's
        // status, which keeps whole seconds: the delete was sent up to a second later.
        let first_look = d.first_delete_look()?;
        let age = since(s.now, sent.at.0).saturating_sub(RECORDED_TIME_SLACK);
        if age < first_look {
            return Err(Ask::Done(Next::Requeue(first_look - age)));
        }
    }
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
        if let Some(started) = &task.started {
            // A task recorded moments ago (the reconcile its own write triggered) is not read:
            // no create ends that fast.
            let age = since(s.now, started.0);
            if age < first_task_read {
                return Err(Ask::Done(Next::Requeue(first_task_read - age)));
            }
        }
        if let Some(seen) = observe_task(d, task)? {
            return Ok(seen);
        }
    }

    if let Some(uuid) = &status.vm_uuid {
        let running = s.machine.state.phase == phase::RUNNING;
        if running && !deleting {
            if let Some(listed) = listing(
                &s.seen.vm_listing,
                ListingSlot::Vm,
                ListingSource::Inventory,
            )? && let Some(vm) = &listed.vm
            {
                return Ok((VmObservation::Present(VmState::of(vm)), Some(vm.clone())));
            }
            // Absent from the listing proves nothing (list lag): confirm with a GET.
        } else if !deleting && status.pending_follow_up.is_none() {
            // Waiting for addresses or the Node: one listing serves every waiting Machine.
            let source = ListingSource::ForWaiter {
                waiter: uuid.clone(),
                window: d.requeue() * 2,
                max_age: d.requeue() / 2,
            };
            if let Some(listed) = listing(&s.seen.vm_listing, ListingSlot::Vm, source)?
                && let Some(vm) = &listed.vm
            {
                return Ok((VmObservation::Present(VmState::of(vm)), Some(vm.clone())));
            }
        }
        if deleting {
            // Waiting for Prism to finish the delete this controller sent: the shared listing
            // says whether it is still going (every other answer is confirmed by a GET).
            let source = ListingSource::ForWaiter {
                waiter: uuid.clone(),
                window: d.requeue() * 2,
                max_age: d.poll(),
            };
            if let Some(listed) = listing(&s.seen.vm_listing, ListingSlot::Vm, source)?
                && let Some(vm) = &listed.vm
                && vm.state() == Some(&EntityState::DeletePending)
            {
                return Ok((VmObservation::Present(VmState::Deleting), Some(vm.clone())));
            }
        }
        // A deletion must see Prism as it is now; otherwise a read from the last few seconds
        // (the reconcile our own write triggered) will do.
        return match &s.seen.vm {
            None => Err(Ask::Read(Read::Vm {
                uuid: uuid.clone(),
                fresh: deleting,
            })),
            Some(Some(vm)) => Ok((VmObservation::Present(VmState::of(vm)), Some(vm.clone()))),
            Some(None) => Ok((VmObservation::Missing, None)),
        };
    }
    if status.deploy_request_id.is_some() {
        // The deploy may or may not have been sent: the create step (or, for a deletion, the
        // confirmation) sends it again with the same request id, which Prism answers with the
        // same task.
        return Ok((VmObservation::DeployUnconfirmed, None));
    }
    let marked = listing(
        &s.seen.marker_listing,
        ListingSlot::Marker,
        ListingSource::Inventory,
    )?
    .and_then(|listed| adoptable_vm(&listed.marked, &s.machine.identity, s.machine.created))
    .map(|vm| vm.uuid.clone());
    if let Some(uuid) = marked {
        let uuid = uuid.to_ascii_lowercase();
        d.record(|status| status.vm_uuid = Some(uuid.clone()));
        d.event(
            false,
            "Adopted",
            format!("VM {uuid} carries this Machine's identity"),
        );
        return Err(Ask::Done(Next::AwaitChange));
    }
    Ok((VmObservation::Missing, None))
}

/// What the recorded task says: `Some` observation (with the VM, when it was read), `None` to
/// look the VM up as if there were no task (a follow-up still running), or the reconcile's end.
fn observe_task(
    d: &mut Draft<'_>,
    task: &PendingTask,
) -> Result<Option<(VmObservation, Option<Vm>)>, Ask> {
    let s = d.s;
    if !d.deleting() {
        match listing_before_task_read(d, task)? {
            BeforeRead::ReadTask => {}
            BeforeRead::Creating => return Ok(Some((VmObservation::Creating, None))),
            BeforeRead::Ended(seen) => return Ok(Some(*seen)),
        }
        if let Some(seen) = clone_seen_by_get(d, task)? {
            return Ok(Some(seen));
        }
    }
    let Some(progress) = &s.seen.task else {
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

enum BeforeRead {
    ReadTask,
    Creating,
    /// A clone ended, and its VM was read as the follow-up's base.
    Ended(Box<(VmObservation, Option<Vm>)>),
}

/// What a `GET` of a cloned VM says of its clone, once the listing no longer does (the task is
/// old: [`task_read_directly`]): `COMPLETE`, the clone ended and the same read is the
/// follow-up's base; `PENDING`, it is still running. A v3 VM reads `PENDING` until the task that
/// makes it ends, then `COMPLETE` (openshift/machine-api-provider-nutanix `pkg/client/state.go`,
/// `WaitForGetVMComplete`, which the shipped provider called until its 9df9b5f2 of October 2024
/// and now waits for the create task instead; nutanix-cloud-native/packer-plugin-nutanix
/// `builder/nutanix/driver.go` `Create` polled the v3 `GET` for `COMPLETE` up to daf8428, before
/// its move to v4 in February 2026). Any other answer (404, `ERROR`) is the task's to explain: it
/// is read.
///
/// [`task_read_directly`]: crate::machine::provision::task_read_directly
fn clone_seen_by_get(
    d: &mut Draft<'_>,
    task: &PendingTask,
) -> Result<Option<(VmObservation, Option<Vm>)>, Ask> {
    let s = d.s;
    let Some(uuid) = &s.status.vm_uuid else {
        return Ok(None);
    };
    if task.operation != TaskOperation::Clone {
        return Ok(None);
    }
    let vm = match &s.seen.vm {
        None => {
            return Err(Ask::Read(Read::Vm {
                uuid: uuid.clone(),
                fresh: true,
            }));
        }
        Some(vm) => vm.as_ref(),
    };
    match vm.and_then(|vm| vm.state().map(|state| (vm, state))) {
        Some((vm, EntityState::Complete)) => Ok(Some(clone_ended(d, task, vm))),
        Some((_, EntityState::Pending)) => Ok(Some((VmObservation::Creating, None))),
        _ => Ok(None),
    }
}

/// The clone ended and `vm` was read since: the task is forgotten and the VM goes on to its
/// follow-up in this reconcile.
fn clone_ended(d: &mut Draft<'_>, task: &PendingTask, vm: &Vm) -> (VmObservation, Option<Vm>) {
    d.task_ended(task, true);
    d.record(|status| status.pending_task = None);
    (VmObservation::Present(VmState::of(vm)), Some(vm.clone()))
}

/// The shared listing looked at before a task is read, when enough Machines wait for one
/// listing to serve them all; what it means is [`listing_says`]'s decision.
fn listing_before_task_read(d: &mut Draft<'_>, task: &PendingTask) -> Result<BeforeRead, Ask> {
    let s = d.s;
    let status = &s.status;
    let (poll, requeue) = (d.poll(), d.requeue());
    let started = task.started.as_ref().map(|time| time.0);
    let age = started.map_or(Duration::MAX, |started| since(s.now, started));
    let unnamed_deploy = task.operation == TaskOperation::Deploy && status.vm_uuid.is_none();
    let for_waiter = |waiter: &str| ListingSource::ForWaiter {
        waiter: waiter.to_owned(),
        window: requeue * 2,
        max_age: poll,
    };
    let waiter = match (&status.vm_uuid, &task.operation) {
        (Some(uuid), _) => uuid.clone(),
        (None, TaskOperation::Deploy) => s.machine.name.clone(),
        (None, _) => return Ok(BeforeRead::ReadTask),
    };
    let Some(listed) = listing(&s.seen.task_listing, ListingSlot::Task, for_waiter(&waiter))?
    else {
        return Ok(BeforeRead::ReadTask);
    };
    let vm = listed.vm.as_ref();
    let view = ListingView {
        listed: vm.map(Vm::state),
        powered_on: vm.is_some_and(|vm| power_of(vm) == Some(&PowerState::On)),
        named: !listed.named.is_empty(),
        after_start: listed_after(listed.listed_at, started),
        past_usual_end: past_usual_end(listed.listed_at, started, d.slowest_task()),
    };
    match listing_says(&task.operation, age, requeue, view) {
        // A clone listed COMPLETE goes on to its follow-up in this reconcile: the follow-up's
        // base is a GET (the listing leaves out fields a PUT must send back), read now rather
        // than in the reconcile this record would trigger.
        ListingSays::Created
            if task.operation == TaskOperation::Clone && status.pending_follow_up.is_some() =>
        {
            match &s.seen.vm {
                None => Err(Ask::Read(Read::Vm {
                    uuid: waiter,
                    fresh: false,
                })),
                Some(Some(vm)) => Ok(BeforeRead::Ended(Box::new(clone_ended(d, task, vm)))),
                Some(None) => {
                    d.task_ended(task, true);
                    d.record(|status| status.pending_task = None);
                    Err(Ask::Done(Next::AwaitChange))
                }
            }
        }
        ListingSays::Created => {
            d.task_ended(task, true);
            d.record(|status| status.pending_task = None);
            Err(Ask::Done(Next::AwaitChange))
        }
        ListingSays::Running if task.operation.creates_vm() => Ok(BeforeRead::Creating),
        ListingSays::Running => Err(Ask::Done(Next::Requeue(poll))),
        // A deploy whose VM the listing shows by name (created since the Machine, no other
        // Machine's marker) is recorded without reading the task and its subtask, which is
        // where a real deploy task names its VM. Should the deploy fail after all, the VM's
        // absence later sends the deploy again with the recorded request id.
        ListingSays::ReadTask if unnamed_deploy => {
            deployed_by_name(d, task, listed)?;
            Ok(BeforeRead::ReadTask)
        }
        ListingSays::ReadTask => Ok(BeforeRead::ReadTask),
    }
}

/// The VM the Machine's template deploy made, in `listed` ([`deployed_vm_by_name`]).
fn deployed_in(d: &Draft<'_>, listed: &Listing) -> DeployedByName {
    deployed_vm_by_name(&listed.named, &d.s.machine.identity, d.s.machine.created)
}

/// Records the deployed VM `listed` shows by name and ends the reconcile; returns when there
/// is no one such VM.
fn deployed_by_name(d: &mut Draft<'_>, task: &PendingTask, listed: &Listing) -> Result<(), Ask> {
    let DeployedByName::One(uuid) = deployed_in(d, listed) else {
        return Ok(());
    };
    d.task_ended(task, true);
    d.record(|status| {
        status.pending_task = None;
        status.vm_uuid = Some(uuid);
    });
    Err(Ask::Done(Next::AwaitChange))
}

/// A template deploy succeeded without naming its VM: looks for it by name in a listing taken
/// now. The task and request id stay recorded until it is found; after [`DEPLOYED_VM_SEARCH`]
/// the Machine fails (a deletion forgets the deploy with a warning) instead of deploying again.
fn find_deployed_vm(d: &mut Draft<'_>, task: &PendingTask) -> Ask {
    let s = d.s;
    let source = ListingSource::Within(d.poll());
    let listed = match listing(&s.seen.deploy_listing, ListingSlot::Deploy, source) {
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
        (Some(uuid), false, FailureClass::Transient) if creates => match &s.seen.confirm {
            None => return Ask::Read(Read::Confirm { uuid: uuid.clone() }),
            Some(vm) => Some(vm.as_ref()),
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
        Some(None) => d.record(|status| {
            status.vm_uuid = None;
            status.pending_follow_up = None;
        }),
        Some(Some(vm)) => {
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

fn listing(
    slot: &Option<Option<Listing>>,
    read: ListingSlot,
    source: ListingSource,
) -> Result<Option<&Listing>, Ask> {
    match slot {
        None => Err(Ask::Read(Read::Listing { slot: read, source })),
        Some(listing) => Ok(listing.as_ref()),
    }
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
