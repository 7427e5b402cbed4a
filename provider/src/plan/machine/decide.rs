//! [`decide`]: the whole create / observe / delete protocol of one Machine, one step at a time.
//!
//! Each call looks at the [`Snapshot`] and either asks for one more read (nothing else: a read
//! round carries no change, so that asking again never repeats a change), or decides: the
//! status and metadata changes, at most one change in Prism or Kubernetes (written after the
//! status change that makes a retry safe), the events and the requeue. The executor performs
//! the action, puts the result in the snapshot and calls again; a round that follows a send
//! only handles the send's outcome.
//!
//! The order is the machine-api-operator's ([`next_step`]); what each Prism answer means is
//! [`crate::plan::provision`]'s.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use prism_client::v3::{EntityState, PowerState, Vm};

use super::decision::{
    Action, Change, Decision, Effect, Event, Failure, FailureKind, ListingSlot, ListingSource,
    MetadataChange, Next, Read,
};
use super::snapshot::{
    DeleteOutcome, DrainProgress, EnvironmentSeen, FollowUpOutcome, Listing, PAUSED_CONDITION,
    Prepared, SendOutcome, Snapshot,
};
use crate::api::{
    DeletionSent, INSTANCE_STATE_ANNOTATION, NutanixMachineProviderStatus, PendingTask,
    TaskOperation, phase,
};
use crate::plan::VmPlan;
use crate::plan::addresses::{AddressInput, machine_addresses, nics_of};
use crate::plan::drain::{
    UNREACHABLE_VOLUME_WAIT, VOLUME_RECHECK, VolumeCheck, check_volumes, volume_events,
};
use crate::plan::lifecycle::{
    DRAINED_CONDITION, INSTANCE_MISSING_MESSAGE, INVALID_CONFIGURATION, Step, VmObservation,
    VmState, after_validation, next_step, provider_id,
};
use crate::plan::machine_status::{
    StatusUpdate, UNKNOWN_INSTANCE_STATE, conditions, machine_condition, provider_condition,
    vm_annotations, vm_labels,
};
use crate::plan::provision::{
    DEPLOYED_VM_SEARCH, DeployedByName, FailureClass, ListingSays, ListingView, TaskContext,
    TaskReading, after_transient_failure, deployed_vm_by_name, follow_up_value, listed_after,
    listing_says, pending_follow_up, read_task, task_read_directly,
};
use crate::plan::request::{FollowUpUpdate, VmRequest, build_request};
use crate::plan::vm_plan::SourcePlan;

/// How long a deletion keeps retrying to confirm a template deploy whose plan cannot be made
/// (a lookup failing) before it forgets the deploy and finishes.
pub const DEPLOY_CONFIRM_PATIENCE: Duration = Duration::from_secs(600);

/// How soon a follow-up refused for a changed VM is tried again (with the VM read again).
pub const FOLLOW_UP_CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// The next step of the reconcile `snapshot` describes.
pub fn decide(snapshot: &Snapshot) -> Decision {
    let mut draft = Draft::new(snapshot);
    match decide_into(&mut draft) {
        Ok(next) => draft.finish(next, None),
        Err(Ask::Read(read)) => Decision {
            action: Some(Action::Read(read)),
            ..Decision::default()
        },
        Err(Ask::Send(change)) => draft.finish(Next::AwaitChange, Some(Action::Send(change))),
        Err(Ask::Done(next)) => draft.finish(next, None),
    }
}

/// An early end of the decision: a read to make first (the draft is dropped), a send to make
/// (with the draft's changes), or the reconcile's end.
enum Ask {
    Read(Read),
    Send(Change),
    Done(Next),
}

type Decided = Result<Next, Ask>;

/// The decision being made.
struct Draft<'a> {
    s: &'a Snapshot,
    /// The providerStatus as it will be written.
    status: NutanixMachineProviderStatus,
    status_changed: bool,
    update: StatusUpdate,
    metadata: Option<MetadataChange>,
    events: Vec<Event>,
    effects: Vec<Effect>,
}

/// Whether a Machine's deletion has sent the delete of VM `uuid`: the recorded
/// `deletionSent`, or, as a controller before it wrote it, a `MachineDeletion` condition
/// "in progress" naming the UUID.
pub fn deletion_sent(status: &NutanixMachineProviderStatus, uuid: &str) -> bool {
    if let Some(sent) = &status.deletion_sent {
        return sent.vm_uuid.eq_ignore_ascii_case(uuid);
    }
    status.conditions.iter().any(|condition| {
        condition.type_ == conditions::MACHINE_DELETION
            && condition.reason == conditions::DELETION_IN_PROGRESS
            && condition.message.contains(uuid)
    })
}

/// How a Machine fails.
enum MachineFailure {
    /// Its VM is gone after it was provisioned (MAO's `InstanceMissing`).
    InstanceMissing,
    /// Its create cannot succeed.
    Create {
        reason: Option<&'static str>,
        message: String,
    },
}

fn since(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(then)).unwrap_or_default()
}

fn operation_of(request: &VmRequest) -> TaskOperation {
    match request {
        VmRequest::Create(_) => TaskOperation::Create,
        VmRequest::Clone { .. } => TaskOperation::Clone,
        VmRequest::Deploy { .. } => TaskOperation::Deploy,
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

/// The readiness rule: the VM is `COMPLETE` and powered `ON`.
pub fn vm_ready(vm: &Vm) -> bool {
    vm.state() == Some(&EntityState::Complete) && power_of(vm) == Some(&PowerState::On)
}

fn power_of(vm: &Vm) -> Option<&PowerState> {
    vm.status
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.power_state.as_ref())
}

impl<'a> Draft<'a> {
    fn new(s: &'a Snapshot) -> Self {
        Self {
            s,
            status: s.current_status().clone(),
            status_changed: false,
            update: StatusUpdate::default(),
            metadata: None,
            events: Vec::new(),
            effects: Vec::new(),
        }
    }

    fn finish(mut self, next: Next, action: Option<Action>) -> Decision {
        if self.status_changed {
            self.update.provider_status = Some(self.status.clone());
        }
        if let Some(phase) = self.update.phase
            && phase != self.s.machine.state.phase
            && let Some(created) = self.s.machine.created
        {
            self.effects.push(Effect::PhaseEntered {
                phase,
                age: since(self.s.now, created),
            });
        }
        Decision {
            status: self.update,
            metadata: self.metadata,
            action,
            events: self.events,
            effects: self.effects,
            next,
        }
    }

    fn now(&self) -> Time {
        Time(self.s.now)
    }

    fn poll(&self) -> Duration {
        self.s.settings.intervals.poll
    }

    fn requeue(&self) -> Duration {
        self.s.settings.intervals.requeue
    }

    fn deleting(&self) -> bool {
        self.s.machine.state.deleting
    }

    fn event(&mut self, warning: bool, reason: &'static str, note: impl Into<String>) {
        self.events.push(Event {
            warning,
            reason,
            note: note.into(),
            only_if_written: false,
        });
    }

    fn effect(&mut self, effect: Effect) {
        self.effects.push(effect);
    }

    fn failure_metric(&mut self, kind: FailureKind, reason: &'static str) {
        self.effect(Effect::Failure { kind, reason });
    }

    /// Changes the providerStatus to be written.
    fn record(&mut self, change: impl FnOnce(&mut NutanixMachineProviderStatus)) {
        change(&mut self.status);
        self.status_changed = true;
    }

    fn provider_condition(&mut self, type_: &str, ok: bool, reason: &str, message: String) {
        let condition = provider_condition(type_, ok, reason, message, &self.now());
        self.record(|status| status.set_condition(condition));
    }

    fn machine_condition(
        &mut self,
        type_: &str,
        ok: bool,
        reason: Option<&str>,
        message: Option<String>,
    ) {
        let condition = machine_condition(type_, ok, reason, message, &self.now());
        self.update.conditions.push(condition);
    }

    fn task_ended(&mut self, task: &PendingTask, succeeded: bool) {
        if let Some(started) = &task.started {
            self.effect(Effect::TaskEnded {
                operation: task.operation.clone(),
                succeeded,
                elapsed: since(self.s.now, started.0),
            });
        }
    }

    fn environment(&self) -> Result<Option<Duration>, Ask> {
        match self.s.seen.environment {
            None => Err(Ask::Read(Read::Environment)),
            Some(EnvironmentSeen::Ready { first_task_read }) => Ok(Some(first_task_read)),
            Some(EnvironmentSeen::Unavailable) => Ok(None),
        }
    }

    /// The environment, or the reconcile fails with its error.
    fn require_environment(&self) -> Result<(), Ask> {
        match self.environment()? {
            Some(_) => Ok(()),
            None => Err(Ask::Done(Next::Retry(Failure::Environment))),
        }
    }
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

fn decide_into(d: &mut Draft<'_>) -> Decided {
    let s = d.s;
    let state = &s.machine.state;
    let gate = s.settings.migration_gate;
    let mut vm = None;
    let mut observation = VmObservation::NotLookedUp;
    if next_step(state, &observation, gate) == Step::LookUpVm {
        let (seen, found) = observe(d)?;
        observation = seen;
        vm = found;
    }
    let step = next_step(state, &observation, gate);
    if gate && step != Step::Paused && s.machine.paused {
        d.machine_condition(
            PAUSED_CONDITION,
            false,
            Some("AuthoritativeAPIMachineAPI"),
            Some("the Machine API owns the Machine".into()),
        );
    }
    perform(d, step, vm)
}

/// Finds the Machine's VM: a recorded task first, then the recorded UUID (the inventory for a
/// Running Machine, the shared listing for one waiting, a GET otherwise), then the identity
/// marker.
fn observe(d: &mut Draft<'_>) -> Result<(VmObservation, Option<Vm>), Ask> {
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
    let recorded = status.vm_uuid.is_some()
        || status.pending_task.is_some()
        || status.deploy_request_id.is_some();
    let Some(first_task_read) = d.environment()? else {
        // Nothing was ever sent to Prism for this Machine (every create records first): a
        // deletion need not wait for a Prism it cannot reach.
        if deleting && !recorded {
            return Ok((VmObservation::Missing, None));
        }
        return Err(Ask::Done(Next::Retry(Failure::Environment)));
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
        if let Some(observation) = observe_task(d, task)? {
            return Ok((observation, None));
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
    .and_then(|listed| listed.of_machine.clone());
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

/// What the recorded task says: `Some` observation, `None` to look the VM up as if there were
/// no task (a follow-up still running), or the reconcile's end.
fn observe_task(d: &mut Draft<'_>, task: &PendingTask) -> Result<Option<VmObservation>, Ask> {
    let s = d.s;
    if !d.deleting() {
        match listing_before_task_read(d, task)? {
            BeforeRead::ReadTask => {}
            BeforeRead::Creating => return Ok(Some(VmObservation::Creating)),
        }
    }
    let Some(progress) = &s.seen.task else {
        return Err(Ask::Read(Read::Task(task.clone())));
    };
    let context = TaskContext {
        recorded_vm: s.status.vm_uuid.as_deref(),
        secure_boot_customized: s.machine.secure_boot_customized,
    };
    match read_task(task, progress, context) {
        TaskReading::Running { .. } if task.operation.creates_vm() => {
            Ok(Some(VmObservation::Creating))
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
    if task_read_directly(age, requeue) {
        // An old deploy is read directly, unless the listing shows its VM by name already.
        if unnamed_deploy
            && let Some(listed) = listing(
                &s.seen.task_listing,
                ListingSlot::Task,
                for_waiter(&s.machine.name),
            )?
        {
            deployed_by_name(d, task, listed)?;
        }
        return Ok(BeforeRead::ReadTask);
    }
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
    };
    match listing_says(&task.operation, age, requeue, view) {
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

/// Phase Failed with the reason and message; `instance-state: Unknown`, as MAO writes.
fn fail(d: &mut Draft<'_>, failure: MachineFailure) -> Next {
    let (reason, message) = match failure {
        MachineFailure::InstanceMissing => {
            let message = INSTANCE_MISSING_MESSAGE.to_owned();
            d.machine_condition(
                conditions::INSTANCE_EXISTS,
                false,
                Some(conditions::INSTANCE_MISSING),
                Some(message.clone()),
            );
            d.failure_metric(FailureKind::Update, "InstanceMissing");
            d.event(true, "FailedUpdate", message.clone());
            (None, message)
        }
        MachineFailure::Create { reason, message } => {
            d.provider_condition(
                conditions::MACHINE_CREATION,
                false,
                conditions::CREATION_FAILED,
                message.clone(),
            );
            d.failure_metric(FailureKind::Create, reason.unwrap_or("Failed"));
            d.event(true, "FailedCreate", message.clone());
            (reason, message)
        }
    };
    d.metadata = Some(MetadataChange::Merge {
        labels: Default::default(),
        annotations: [(
            INSTANCE_STATE_ANNOTATION.to_owned(),
            UNKNOWN_INSTANCE_STATE.to_owned(),
        )]
        .into(),
        provider_id: None,
    });
    d.update.phase = Some(phase::FAILED);
    d.update.error = Some((reason.map(str::to_owned), message));
    Next::AwaitChange
}

/// A create that cannot be made now: condition, event, metric, and a retry with backoff.
fn retry_create(d: &mut Draft<'_>, message: String) -> Next {
    d.provider_condition(
        conditions::MACHINE_CREATION,
        false,
        conditions::CREATION_FAILED,
        message.clone(),
    );
    d.failure_metric(FailureKind::Create, "Unresolved");
    d.event(true, "FailedCreate", message.clone());
    Next::Retry(Failure::CreateRetry(message))
}

fn perform(d: &mut Draft<'_>, step: Step, vm: Option<Vm>) -> Decided {
    let poll = d.poll();
    let intervals = d.s.settings.intervals;
    match step {
        Step::Paused => {
            d.machine_condition(
                PAUSED_CONDITION,
                true,
                Some("AuthoritativeAPINotMachineAPI"),
                Some("the Machine is owned by another API".into()),
            );
            Ok(Next::AwaitChange)
        }
        Step::RejectInvalidMachine { reason } => {
            d.event(true, "FailedValidate", reason.clone());
            Ok(Next::Retry(Failure::InvalidMachine(reason)))
        }
        Step::AddFinalizer => {
            d.metadata = Some(MetadataChange::AddFinalizer);
            Ok(Next::AwaitChange)
        }
        Step::SetPhase(phase) => {
            d.update.phase = Some(phase);
            Ok(Next::AwaitChange)
        }
        Step::WaitForPreDrainHooks | Step::WaitForPreTerminateHooks | Step::Stop => {
            Ok(Next::AwaitChange)
        }
        Step::MarkDrained => {
            let why = if d.s.machine.state.exclude_node_draining {
                "draining excluded by annotation"
            } else {
                "no Node to drain"
            };
            d.machine_condition(
                DRAINED_CONDITION,
                true,
                Some(conditions::DRAIN_SKIPPED),
                Some(why.into()),
            );
            Ok(Next::AwaitChange)
        }
        Step::Drain { node } => drain(d, node),
        Step::DeleteVm => delete_vm(d),
        Step::WaitForVmDeletion | Step::WaitForCreate => Ok(Next::Requeue(
            step.requeue_after(&intervals).unwrap_or(poll),
        )),
        Step::FinishDeletion { node } => finish_deletion(d, node),
        Step::UpdateFromVm { phase } => match vm {
            Some(vm) => update_from_vm(d, phase, &vm),
            None => Ok(Next::Requeue(d.requeue())),
        },
        Step::ReportVmError { message } => {
            d.provider_condition(
                conditions::MACHINE_UPDATE,
                false,
                conditions::UPDATE_FAILED,
                message.clone(),
            );
            d.failure_metric(FailureKind::Update, "VmError");
            d.event(true, "FailedUpdate", message.clone());
            Ok(Next::Retry(Failure::VmError(message)))
        }
        Step::InstanceMissing => Ok(fail(d, MachineFailure::InstanceMissing)),
        Step::Fail { reason, message } => Ok(fail(d, MachineFailure::Create { reason, message })),
        Step::Create => create(d),
        Step::ConfirmDeploy => confirm_deploy(d),
        // Only `observe` answers this; reaching here would be a bug: look later.
        Step::LookUpVm => Ok(Next::Requeue(poll)),
        Step::RetryCreate { message } => Ok(retry_create(d, message)),
    }
}

fn drain(d: &mut Draft<'_>, node: String) -> Decided {
    let Some(progress) = &d.s.seen.drain else {
        return Err(Ask::Send(Change::Drain { node }));
    };
    match progress {
        DrainProgress::Done => {
            let note = format!("Node {node} drained");
            d.machine_condition(
                DRAINED_CONDITION,
                true,
                Some(conditions::DRAINED),
                Some(note.clone()),
            );
            d.event(false, "Drained", note);
            Ok(Next::AwaitChange)
        }
        DrainProgress::InProgress { note } => {
            d.machine_condition(
                DRAINED_CONDITION,
                false,
                Some(conditions::DRAIN_IN_PROGRESS),
                Some(note.clone()),
            );
            Ok(Next::Requeue(d.poll()))
        }
        DrainProgress::Blocked { note } => {
            d.machine_condition(
                DRAINED_CONDITION,
                false,
                Some(conditions::DRAIN_BLOCKED),
                Some(note.clone()),
            );
            d.event(true, "FailedDrain", format!("Node {node}: {note}"));
            Ok(Next::Requeue(d.poll()))
        }
    }
}

/// Deletes the VM once its Node lists no attached volume ([`check_volumes`]); a 404 says it is
/// gone and the deletion finishes at once.
fn delete_vm(d: &mut Draft<'_>) -> Decided {
    let s = d.s;
    let Some(uuid) = s.status.vm_uuid.clone() else {
        return Ok(Next::Requeue(d.poll()));
    };
    match &s.seen.deleted {
        None => {}
        Some(DeleteOutcome::Gone) => return finish_deletion(d, s.machine.state.node.clone()),
        Some(DeleteOutcome::Accepted) => {
            let message = format!("deleting VM {uuid}");
            let sent = DeletionSent {
                vm_uuid: uuid.clone(),
                at: d.now(),
            };
            d.record(|status| status.deletion_sent = Some(sent));
            d.provider_condition(
                conditions::MACHINE_DELETION,
                false,
                conditions::DELETION_IN_PROGRESS,
                message.clone(),
            );
            d.event(false, "Delete", message);
            return Ok(Next::Requeue(d.poll()));
        }
        Some(DeleteOutcome::Failed(message)) => {
            d.provider_condition(
                conditions::MACHINE_DELETION,
                false,
                conditions::DELETION_FAILED,
                message.clone(),
            );
            d.failure_metric(FailureKind::Delete, "PrismError");
            // The event is the reconcile wrapper's, with the fix.
            return Ok(Next::Retry(Failure::ActionFailed));
        }
    }
    if let Some(node_name) = &s.machine.state.node {
        let Some(node) = &s.seen.node else {
            return Err(Ask::Read(Read::Node(node_name.clone())));
        };
        match check_volumes(node_name, node.as_ref(), s.machine.drained_at, s.now) {
            VolumeCheck::Clear => {}
            VolumeCheck::NodeGone { node } => d.event(
                false,
                volume_events::NODE_GONE,
                format!(
                    "Node {node} is gone: nothing reports its attached volumes any more; deleting the VM"
                ),
            ),
            VolumeCheck::Wait {
                node,
                volumes,
                unreachable_until,
            } => {
                let volumes = volumes.join(", ");
                let message = match unreachable_until {
                    None => format!(
                        "Node {node} still lists attached volumes ({volumes}): the VM is deleted once they are detached"
                    ),
                    Some(until) => format!(
                        "Node {node} is unreachable and still lists attached volumes ({volumes}): the VM is deleted once they are detached, or at {until}"
                    ),
                };
                d.provider_condition(
                    conditions::MACHINE_DELETION,
                    false,
                    volume_events::WAITING,
                    message.clone(),
                );
                d.event(false, volume_events::WAITING, message);
                return Ok(Next::Requeue(VOLUME_RECHECK));
            }
            VolumeCheck::GiveUp {
                node,
                volumes,
                unreachable_since,
            } => d.event(
                true,
                volume_events::TIMED_OUT,
                format!(
                    "Node {node} has been unreachable since {unreachable_since} and still lists attached volumes ({}): deleting the VM without waiting longer (the attach/detach controller force-detaches the volumes of a Node that is not Ready after {:#})",
                    volumes.join(", "),
                    UNREACHABLE_VOLUME_WAIT
                ),
            ),
        }
    }
    d.require_environment()?;
    Err(Ask::Send(Change::DeleteVm { uuid }))
}

fn finish_deletion(d: &mut Draft<'_>, node: Option<String>) -> Decided {
    if let Some(node) = node
        && !d.s.seen.node_deleted
    {
        return Err(Ask::Send(Change::DeleteNode { node }));
    }
    d.metadata = Some(MetadataChange::RemoveFinalizer);
    d.effect(Effect::ResetBackoff);
    d.effect(Effect::Finished);
    Ok(Next::AwaitChange)
}

/// Validates and plans the VM, records what a retry needs, and sends the create, clone or
/// deploy.
fn create(d: &mut Draft<'_>) -> Decided {
    let s = d.s;
    if let Some(wait) = s.settings.create_backoff {
        return Ok(Next::Requeue(wait));
    }
    let plan = match readiness(&s.seen.prepared)? {
        Readiness::Ready(plan) => plan,
        Readiness::Invalid { reason, message } => {
            return Ok(fail(d, MachineFailure::Create { reason, message }));
        }
        Readiness::Unresolved(message) => return Ok(retry_create(d, message)),
    };
    if let Some(outcome) = &s.seen.sent {
        return sent(d, outcome);
    }
    if matches!(plan.source, SourcePlan::Template { .. }) {
        let request = build_request(plan, "");
        let request_id = match d.status.deploy_request_id.clone() {
            Some(id) => id,
            None => {
                let id = s.settings.new_request_id.clone();
                let follow_up = request.follow_up().map(follow_up_value);
                d.record(|status| {
                    status.deploy_request_id = Some(id.clone());
                    status.pending_follow_up = follow_up;
                });
                d.provider_condition(
                    conditions::MACHINE_CREATION,
                    false,
                    conditions::CREATION_IN_PROGRESS,
                    "deploying the template".into(),
                );
                id
            }
        };
        return Err(Ask::Send(Change::Create {
            request: Box::new(request),
            deploy_request_id: Some(request_id),
        }));
    }
    let uuid = match (d.status.vm_uuid.clone(), &s.seen.reserved) {
        (Some(uuid), _) => uuid,
        (None, None) => return Err(Ask::Send(Change::ReserveUuid)),
        (None, Some(uuid)) => {
            let follow_up = build_request(plan, uuid).follow_up().map(follow_up_value);
            d.record(|status| {
                status.vm_uuid = Some(uuid.clone());
                status.pending_follow_up = follow_up;
            });
            d.provider_condition(
                conditions::MACHINE_CREATION,
                false,
                conditions::CREATION_IN_PROGRESS,
                format!("creating VM {uuid}"),
            );
            uuid.clone()
        }
    };
    Err(Ask::Send(Change::Create {
        request: Box::new(build_request(plan, &uuid)),
        deploy_request_id: None,
    }))
}

/// Whether a create can be made: the plan, or why not.
enum Readiness<'p> {
    Ready(&'p VmPlan),
    /// The Machine fails with this reason and message.
    Invalid {
        reason: Option<&'static str>,
        message: String,
    },
    /// Retry later.
    Unresolved(String),
}

fn readiness(prepared: &Option<Prepared>) -> Result<Readiness<'_>, Ask> {
    Ok(match prepared {
        None => return Err(Ask::Read(Read::Prepare)),
        Some(Prepared::Ready(plan)) => Readiness::Ready(plan),
        Some(Prepared::Refused(errors)) => match after_validation(errors) {
            Step::Fail { reason, message } => Readiness::Invalid { reason, message },
            _ => Readiness::Unresolved(errors.to_string()),
        },
        Some(Prepared::Unresolved(message)) => Readiness::Unresolved(message.clone()),
    })
}

/// What Prism's answer to the create, clone or deploy means.
fn sent(d: &mut Draft<'_>, outcome: &SendOutcome) -> Decided {
    let s = d.s;
    let poll = d.poll();
    let Some(Prepared::Ready(plan)) = &s.seen.prepared else {
        return Ok(Next::Requeue(poll));
    };
    let uuid = d.status.vm_uuid.clone();
    let request = build_request(plan, uuid.as_deref().unwrap_or_default());
    match outcome {
        SendOutcome::Accepted { task } => {
            let operation = operation_of(&request);
            let what = match &uuid {
                Some(uuid) => format!("VM {uuid}"),
                None => "VM from the template".to_owned(),
            };
            if let Some(task) = task {
                let pending = PendingTask {
                    id: task.clone(),
                    operation: operation.clone(),
                    started: Some(d.now()),
                    source_vm: match &request {
                        VmRequest::Clone { source_vm, .. } => Some(source_vm.clone()),
                        _ => None,
                    },
                };
                d.record(|status| status.pending_task = Some(pending));
            }
            d.event(false, "Create", format!("{operation} requested for {what}"));
            Ok(Next::Requeue(poll))
        }
        SendOutcome::Conflict(error) => {
            let Some(uuid) = uuid else {
                return Ok(Next::Retry(Failure::ActionFailed));
            };
            match &s.seen.confirm {
                None => Err(Ask::Read(Read::Confirm { uuid })),
                // The VM exists already: an earlier create got through.
                Some(Some(_)) => Ok(Next::Requeue(poll)),
                Some(None) => {
                    // No VM has the UUID: the 409 is a conflict of Prism's own; retrying at
                    // once would meet it again.
                    d.failure_metric(FailureKind::Create, "PrismConflict");
                    let message = format!(
                        "Prism refused the create of VM {uuid} for a conflict, and no VM has that UUID; retrying: {error}"
                    );
                    d.event(true, "FailedCreate", message.clone());
                    Ok(Next::Retry(Failure::CreateRetry(message)))
                }
            }
        }
        SendOutcome::ReservationRejected => {
            let Some(uuid) = uuid else {
                return Ok(Next::Retry(Failure::ActionFailed));
            };
            match &s.seen.confirm {
                None => Err(Ask::Read(Read::Confirm { uuid })),
                Some(Some(_)) => Ok(Next::Requeue(poll)),
                // The UUID reservation expired: a new one is taken.
                Some(None) => {
                    d.record(|status| {
                        status.vm_uuid = None;
                        status.pending_follow_up = None;
                    });
                    Ok(Next::Requeue(poll))
                }
            }
        }
        SendOutcome::Invalid(message) => Ok(fail(
            d,
            MachineFailure::Create {
                reason: Some(INVALID_CONFIGURATION),
                message: format!("Prism refused the VM: {message}"),
            },
        )),
        SendOutcome::SourceMissing(message) => {
            d.effect(Effect::InvalidateLookups);
            Ok(retry_create(d, message.clone()))
        }
        SendOutcome::Retry => {
            d.failure_metric(FailureKind::Create, "PrismError");
            // The event is the reconcile wrapper's, with the fix where the cause tells.
            Ok(Next::Retry(Failure::ActionFailed))
        }
    }
}

/// Deleting a Machine whose template deploy is unconfirmed (its request id recorded, its task
/// not: the answer was lost, or the controller stopped before recording it): sends the deploy
/// again with the same request id. Prism answers a repeat with the first deploy's task, whose
/// VM the deletion then finds and deletes; a deploy that never got through is made now and
/// deleted the same way. Without this, the deletion would find no VM and finish, leaving the
/// deployed VM behind.
///
/// When the deploy cannot be planned any more, the request is forgotten (with a warning naming
/// it) so that the deletion can finish: at once for a providerSpec that can never deploy, after
/// [`DEPLOY_CONFIRM_PATIENCE`] of deletion for a lookup that keeps failing.
fn confirm_deploy(d: &mut Draft<'_>) -> Decided {
    let s = d.s;
    let Some(request_id) = d.status.deploy_request_id.clone() else {
        return Ok(Next::Requeue(Duration::ZERO));
    };
    let plan = match readiness(&s.seen.prepared)? {
        Readiness::Ready(plan) if matches!(plan.source, SourcePlan::Template { .. }) => plan,
        Readiness::Ready(_) => {
            let why = "the providerSpec no longer deploys a template";
            return Ok(forget_deploy(d, &request_id, why));
        }
        Readiness::Invalid { message, .. } => {
            return Ok(forget_deploy(d, &request_id, &message));
        }
        Readiness::Unresolved(message) => {
            let deleting_for = s
                .machine
                .deletion_started
                .map_or(Duration::ZERO, |started| since(s.now, started));
            if deleting_for >= DEPLOY_CONFIRM_PATIENCE {
                return Ok(forget_deploy(d, &request_id, &message));
            }
            let message = format!("cannot confirm template deploy request {request_id}: {message}");
            d.event(true, "FailedDelete", message.clone());
            return Ok(Next::Retry(Failure::DeployUnconfirmed(message)));
        }
    };
    match &s.seen.sent {
        None => Err(Ask::Send(Change::Create {
            request: Box::new(build_request(plan, "")),
            deploy_request_id: Some(request_id),
        })),
        Some(SendOutcome::Accepted { task }) => {
            if let Some(task) = task {
                let pending = PendingTask {
                    id: task.clone(),
                    operation: TaskOperation::Deploy,
                    started: Some(d.now()),
                    source_vm: None,
                };
                d.record(|status| status.pending_task = Some(pending));
            }
            Ok(Next::Requeue(d.poll()))
        }
        Some(SendOutcome::Invalid(message) | SendOutcome::SourceMissing(message)) => {
            Ok(forget_deploy(d, &request_id, message))
        }
        Some(_) => Ok(Next::Retry(Failure::ActionFailed)),
    }
}

/// Gives up confirming a template deploy: the deletion goes on as if nothing was deployed, and
/// a warning names the request and the VM name to look for.
fn forget_deploy(d: &mut Draft<'_>, request_id: &str, why: &str) -> Next {
    let message = format!(
        "template deploy request {request_id} cannot be confirmed ({why}); if it made a VM named {}, delete that VM in Prism",
        d.s.machine.name
    );
    d.record(|status| {
        status.deploy_request_id = None;
        status.pending_follow_up = None;
    });
    d.event(true, "DeployUnconfirmed", message);
    Next::AwaitChange
}

/// Applies the pending follow-up of a clone or deploy; `None` when there is none to apply now.
fn follow_up(d: &mut Draft<'_>, vm: &Vm) -> Result<Option<Next>, Ask> {
    let s = d.s;
    let status = &s.status;
    if status.pending_follow_up.is_none() || status.pending_task.is_some() {
        return Ok(None);
    }
    let uuid = vm.uuid().unwrap_or_default().to_owned();
    let Some(update) = pending_follow_up(status) else {
        d.record(|status| status.pending_follow_up = None);
        return Ok(Some(Next::AwaitChange));
    };
    let Some(outcome) = &s.seen.follow_up else {
        return Err(Ask::Send(Change::FollowUp {
            uuid,
            update: Box::new(update),
            vm: Box::new(vm.clone()),
        }));
    };
    Ok(Some(match outcome {
        FollowUpOutcome::Task(task) => {
            let pending = PendingTask {
                id: task.clone(),
                operation: TaskOperation::FollowUp,
                started: Some(d.now()),
                source_vm: None,
            };
            d.record(|status| status.pending_task = Some(pending));
            Next::Requeue(d.poll())
        }
        FollowUpOutcome::Done => {
            d.record(|status| status.pending_follow_up = None);
            Next::AwaitChange
        }
        FollowUpOutcome::Conflict => {
            d.effect(Effect::ForgetRead(uuid));
            Next::Requeue(FOLLOW_UP_CONFLICT_RETRY)
        }
        FollowUpOutcome::Invalid(message) => fail(
            d,
            MachineFailure::Create {
                reason: Some(INVALID_CONFIGURATION),
                message: format!("Prism refused the follow-up update: {message}"),
            },
        ),
        FollowUpOutcome::Impossible(message) => fail(
            d,
            MachineFailure::Create {
                reason: Some(INVALID_CONFIGURATION),
                message: message.clone(),
            },
        ),
        FollowUpOutcome::Retry => Next::Retry(Failure::ActionFailed),
    }))
}

/// Updates the Machine from its VM (providerID, addresses, labels, annotations, provider
/// status) and sets `phase`; nothing changes in Prism except a pending follow-up.
fn update_from_vm(d: &mut Draft<'_>, phase: &'static str, vm: &Vm) -> Decided {
    let s = d.s;
    if let Some(next) = follow_up(d, vm)? {
        return Ok(next);
    }
    let wait = Step::UpdateFromVm { phase }
        .requeue_after(&s.settings.intervals)
        .unwrap_or(d.requeue());
    if s.seen.node_provider_id_set {
        // The round before this one decided everything else.
        return Ok(Next::Requeue(wait));
    }
    let subnet_order: Vec<String> = vm
        .spec
        .iter()
        .flat_map(|spec| &spec.resources.nic_list)
        .filter_map(|nic| nic.subnet_reference.as_ref().map(|r| r.uuid.clone()))
        .collect();
    let Some(context) = &s.seen.address_context else {
        return Err(Ask::Read(Read::AddressContext {
            primary_subnet: subnet_order.first().cloned(),
        }));
    };
    let uuid = vm.uuid().unwrap_or_default().to_ascii_lowercase();
    let nics = nics_of(vm);
    // `--excluded-address-cidrs` overrides the cluster's own networks.
    let excluded = if context.excluded_flag.is_empty() {
        &context.cluster_networks
    } else {
        &context.excluded_flag
    };
    let addresses = machine_addresses(&AddressInput {
        machine_name: &s.machine.name,
        nics: &nics,
        subnet_order: &subnet_order,
        primary_cidr: context.primary_cidr,
        excluded,
        ipv6_primary: context.ipv6_primary,
        previous: &s.machine.addresses,
    });
    let provider_id = provider_id(&uuid);
    let state = vm
        .state()
        .map(|s| s.as_str().to_owned())
        .unwrap_or_default();
    let power = power_of(vm)
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let ready = vm_ready(vm);
    d.provider_condition(
        conditions::MACHINE_CREATION,
        true,
        conditions::CREATION_SUCCEEDED,
        String::new(),
    );
    d.provider_condition(
        conditions::MACHINE_UPDATE,
        true,
        conditions::UPDATE_SUCCEEDED,
        String::new(),
    );
    d.provider_condition(
        conditions::MACHINE_INSTANCE_READY,
        ready,
        if ready {
            conditions::INSTANCE_READY
        } else {
            conditions::INSTANCE_NOT_READY
        },
        format!("VM state {state}, power {power}"),
    );
    d.metadata = Some(MetadataChange::Merge {
        labels: vm_labels(vm, context.region.as_deref()),
        annotations: vm_annotations(vm),
        provider_id: Some(provider_id.clone()),
    });
    d.update.phase = Some(phase);
    d.update.addresses = Some(addresses);
    d.machine_condition(conditions::INSTANCE_EXISTS, true, None, None);
    d.events.push(Event {
        warning: false,
        reason: "Update",
        note: format!("Updated Machine {} from VM {uuid}", s.machine.name),
        only_if_written: true,
    });
    d.effect(Effect::ResetBackoff);
    if phase == phase::RUNNING
        && let Some(node) = &s.machine.state.node
    {
        return Err(Ask::Send(Change::NodeProviderId {
            node: node.clone(),
            provider_id,
        }));
    }
    Ok(Next::Requeue(wait))
}
