//! The Prism-call economy of [`super::observe`]: the rules that answer a question about the
//! Machine's VM with a cheaper read than the obvious one, or with none. Each says what it saves
//! and why the answer is as good as the read it replaces; [`super::observe`] asks them first
//! and falls back to the obvious read (the task, a `GET`) whenever a rule leaves the question
//! open.

use std::time::Duration;

use prism_types::v3::{EntityState, PowerState, Vm};

use crate::api::{PendingTask, TaskOperation, phase};
use crate::machine::decision::{ListingSlot, ListingSource, Next, Read};
use crate::machine::deletion_sent;
use crate::machine::lifecycle::{VmObservation, VmState};
use crate::machine::provision::{
    DeployedByName, ListingSays, ListingView, deployed_vm_by_name, listed_after, listing_says,
    past_usual_end, pending_follow_up,
};
use crate::machine::snapshot::{Listing, ListingRead, VmRead};

use super::draft::{Ask, Draft, power_of, since};

/// How much later than its recorded time (whole seconds) something was sent.
const RECORDED_TIME_SLACK: Duration = Duration::from_secs(1);

/// A deletion whose VM's DELETE is not sent yet takes the VM as present without reading it here.
///
/// Saves: a second `GET` before the DELETE: the delete step reads the VM itself, once, just
/// before the DELETE (for the volume groups it must detach first), after the Node's volumes are
/// checked, and a 404 there finishes the deletion as the lookup's would. A recorded task is
/// looked at first all the same (a create still running).
pub(super) fn delete_unread(d: &Draft<'_>) -> Option<(VmObservation, Option<Vm>)> {
    let status = &d.s.status;
    let uuid = status.vm_uuid.as_ref()?;
    (d.deleting() && status.pending_task.is_none() && !deletion_sent(status, uuid))
        .then_some((VmObservation::Present(VmState::Ok), None))
}

/// A DELETE sent moments ago is not looked at before deletes on this Prism Central usually end
/// (at least a poll interval), unless the connection's shared look at the tasks in flight saw
/// the DELETE's task end.
///
/// Saves: the `GET`s of a VM whose delete is still going, beginning with the one in the
/// reconcile the delete's own record triggers. Safe: the delete is recorded
/// (`deletionSent`) before this wait, so a restart loses nothing; the wait ends the reconcile
/// with a requeue, never with a decision. The recorded time went through the Machine's status,
/// which keeps whole seconds: the delete was sent up to a second later.
pub(super) fn wait_before_delete_look(d: &Draft<'_>) -> Result<(), Ask> {
    let s = d.s;
    let status = &s.status;
    let Some(sent) = &status.deletion_sent else {
        return Ok(());
    };
    if !d.deleting()
        || status.pending_task.is_some()
        || status.vm_uuid.as_deref() != Some(sent.vm_uuid.as_str())
        || d.delete_end_seen()
    {
        return Ok(());
    }
    let first_look = d.first_delete_look()?;
    let age = since(s.now, sent.at.0).saturating_sub(RECORDED_TIME_SLACK);
    if age < first_look {
        return Err(Ask::Done(Next::Requeue(first_look - age)));
    }
    Ok(())
}

/// A task recorded moments ago is not read before tasks of its kind on this Prism Central
/// usually end (`first_task_read`, from the connection's recent tasks); [`super::observe`] skips
/// this wait for a task the connection's shared look at the tasks in flight saw end.
///
/// Saves: the task read in the reconcile the task's own record triggers, and the reads of a
/// task that cannot have ended yet. Safe: the task is recorded, so a restart loses nothing;
/// no create ends that fast; the wait ends the reconcile with a requeue.
pub(super) fn wait_before_task_read(
    d: &Draft<'_>,
    task: &PendingTask,
    first_task_read: Duration,
) -> Result<(), Ask> {
    let Some(started) = &task.started else {
        return Ok(());
    };
    let age = since(d.s.now, started.0);
    if age < first_task_read {
        return Err(Ask::Done(Next::Requeue(first_task_read - age)));
    }
    Ok(())
}

/// The recorded VM as a listing shows it, where a listing can stand in for its `GET`: the
/// inventory for a Running Machine; the listing shared by every Machine waiting for its
/// addresses or its Node; for a deletion, the shared listing showing the VM `DELETE_PENDING`.
/// `None`: the listing leaves the question open, and the VM is read.
///
/// Saves: one `GET` per Machine per look (a steady Running Machine makes no call of its own;
/// waiting Machines share one listing). Safe: a VM listed is the VM as Prism has it at the
/// listing's time (no older than the slot's bound); a VM absent from a listing proves nothing
/// (list lag), so absence always falls back to the `GET`; a Machine with a pending follow-up
/// reads the VM, since the follow-up's base must be a `GET` (the listing leaves out fields a
/// `PUT` must send back); a deletion trusts a listing only for `DELETE_PENDING`, every other
/// state being confirmed by a `GET`.
pub(super) fn listed_vm(
    d: &Draft<'_>,
    uuid: &str,
) -> Result<Option<(VmObservation, Option<Vm>)>, Ask> {
    let s = d.s;
    let status = &s.status;
    let deleting = d.deleting();
    let present = |vm: &Vm| Some((VmObservation::Present(VmState::of(vm)), Some(vm.clone())));
    // The DELETE's task was seen ended: a listing taken before its end would still show the VM
    // DELETE_PENDING, so the VM is read.
    if deleting && d.delete_end_seen() {
        return Ok(None);
    }
    if deleting {
        let source = ListingSource::ForWaiter {
            waiter: uuid.to_owned(),
            window: d.requeue() * 2,
            max_age: d.poll(),
        };
        let listed = listing(&s.seen.observe.vm_listing, ListingSlot::Vm, source)?;
        return Ok(listed
            .and_then(|listed| listed.vm.as_ref())
            .filter(|vm| vm.state() == Some(&EntityState::DeletePending))
            .map(|vm| (VmObservation::Present(VmState::Deleting), Some(vm.clone()))));
    }
    let source = if s.machine.state.phase == phase::RUNNING {
        ListingSource::Inventory
    } else if status.pending_follow_up.is_none() {
        ListingSource::ForWaiter {
            waiter: uuid.to_owned(),
            window: d.requeue() * 2,
            max_age: d.requeue() / 2,
        }
    } else {
        return Ok(None);
    };
    let listed = listing(&s.seen.observe.vm_listing, ListingSlot::Vm, source)?;
    Ok(listed
        .and_then(|listed| listed.vm.as_ref())
        .and_then(present))
}

/// What the shared listing says before a task is read ([`listing_before_task_read`]).
pub(super) enum BeforeRead {
    ReadTask,
    Creating,
    /// A clone ended, and its VM was read as the follow-up's base; or a follow-up ended, and
    /// its VM is as listed.
    Ended(Box<(VmObservation, Option<Vm>)>),
}

/// What a `GET` of a cloned VM says of its clone, once the listing no longer does (the task is
/// old: [`task_read_directly`]): `COMPLETE`, the clone ended and the same read is the
/// follow-up's base; `PENDING`, it is still running.
///
/// Saves: the task read (the `GET` is needed anyway, as the follow-up's base). Safe: as
/// follows. A v3 VM reads `PENDING` until the task that
/// makes it ends, then `COMPLETE` (openshift/machine-api-provider-nutanix `pkg/client/state.go`,
/// `WaitForGetVMComplete`, which the shipped provider called until its 9df9b5f2 of October 2024
/// and now waits for the create task instead; nutanix-cloud-native/packer-plugin-nutanix
/// `builder/nutanix/driver.go` `Create` polled the v3 `GET` for `COMPLETE` up to daf8428, before
/// its move to v4 in February 2026). Any other answer (404, `ERROR`) is the task's to explain: it
/// is read.
///
/// [`task_read_directly`]: crate::machine::provision::task_read_directly
pub(super) fn clone_seen_by_get(
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
    let vm = match &s.seen.observe.vm {
        None => {
            return Err(Ask::Read(Read::Vm {
                uuid: uuid.clone(),
                fresh: true,
            }));
        }
        Some(vm) => vm.found(),
    };
    match vm.and_then(|vm| vm.state().map(|state| (vm, state))) {
        Some((vm, EntityState::Complete)) => Ok(Some(clone_ended(d, task, vm))),
        Some((_, EntityState::Pending)) => Ok(Some((VmObservation::Creating, None))),
        _ => Ok(None),
    }
}

/// The shared listing looked at before a task is read, when enough Machines wait for one
/// listing to serve them all; what it means is [`listing_says`]'s decision.
///
/// Saves: one task read per waiting Machine per look (one listing serves them all), for a
/// template deploy the read of its task and subtask that would name the VM, and for a
/// follow-up update its task read and the reconcile after it. Safe: a listing ends a task only
/// where it shows what the task's end would (the VM `COMPLETE` and powered on, listed after
/// the task started, and for a follow-up every effect of the update; `listing_says` has the
/// rules and their sources); every other case reads the task.
pub(super) fn listing_before_task_read(
    d: &mut Draft<'_>,
    task: &PendingTask,
) -> Result<BeforeRead, Ask> {
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
    let Some(listed) = listing(
        &s.seen.observe.task_listing,
        ListingSlot::Task,
        for_waiter(&waiter),
    )?
    else {
        return Ok(BeforeRead::ReadTask);
    };
    let vm = listed.vm.as_ref();
    let follow_up = pending_follow_up(status);
    let view = ListingView {
        listed: vm.map(Vm::state),
        powered_on: vm.is_some_and(|vm| power_of(vm) == Some(&PowerState::On)),
        follow_up_shown: vm
            .zip(follow_up.as_ref())
            .is_some_and(|(vm, update)| update.shown_by(vm)),
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
            match &s.seen.observe.vm {
                None => Err(Ask::Read(Read::Vm {
                    uuid: waiter,
                    fresh: false,
                })),
                Some(VmRead::Found(vm)) => {
                    Ok(BeforeRead::Ended(Box::new(clone_ended(d, task, vm))))
                }
                Some(VmRead::Gone) => {
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
        // The follow-up ended: the listed VM, which shows its effects, is what the Machine is
        // brought up to date from in this reconcile (addresses, phase), instead of in the one
        // this record would trigger.
        ListingSays::Applied => {
            d.task_ended(task, true);
            d.record(|status| {
                status.pending_task = None;
                status.pending_follow_up = None;
            });
            match vm {
                Some(vm) => Ok(BeforeRead::Ended(Box::new((
                    VmObservation::Present(VmState::of(vm)),
                    Some(vm.clone()),
                )))),
                None => Err(Ask::Done(Next::AwaitChange)),
            }
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

/// The listing in `slot`, or the read that fills it (`None` inside: no listing was made, as
/// too few Machines wait for one to pay).
pub(super) fn listing(
    slot: &Option<ListingRead>,
    read: ListingSlot,
    source: ListingSource,
) -> Result<Option<&Listing>, Ask> {
    match slot {
        None => Err(Ask::Read(Read::Listing { slot: read, source })),
        Some(listing) => Ok(listing.listed()),
    }
}

/// The clone ended and `vm` was read since: the task is forgotten and the VM goes on to its
/// follow-up in this reconcile.
fn clone_ended(d: &mut Draft<'_>, task: &PendingTask, vm: &Vm) -> (VmObservation, Option<Vm>) {
    d.task_ended(task, true);
    d.record(|status| status.pending_task = None);
    (VmObservation::Present(VmState::of(vm)), Some(vm.clone()))
}

/// The VM the Machine's template deploy made, in `listed` ([`deployed_vm_by_name`]).
pub(super) fn deployed_in(d: &Draft<'_>, listed: &Listing) -> DeployedByName {
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
