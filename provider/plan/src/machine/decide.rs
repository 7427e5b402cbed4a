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
//! [`crate::machine::provision`]'s.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use prism_types::v3::{EntityState, PowerState, Vm};

use super::decision::{
    Action, Change, Decision, Effect, Event, Failure, FailureKind, MetadataChange, Next, Read,
};
use super::snapshot::{
    DeleteOutcome, DrainProgress, EnvironmentProblem, EnvironmentSeen, FollowUpOutcome,
    PAUSED_CONDITION, PasswordSecretOutcome, Prepared, Seen, SendOutcome, Snapshot,
};
use crate::api::{
    DeletionSent, INSTANCE_STATE_ANNOTATION, NutanixMachineProviderStatus, PendingTask,
    TaskOperation, phase,
};
use crate::machine::addresses::{AddressInput, machine_addresses, nics_of};
use crate::machine::drain::{
    UNREACHABLE_VOLUME_WAIT, VOLUME_RECHECK, VolumeCheck, check_volumes, volume_events,
};
use crate::machine::join_report::JOIN_TIMED_OUT_ERROR;
use crate::machine::lifecycle::{
    DRAINED_CONDITION, INSTANCE_MISSING_MESSAGE, INVALID_CONFIGURATION, Step, VmObservation,
    after_validation, next_step, provider_id,
};
use crate::machine::provision::{follow_up_value, pending_follow_up};
use crate::machine::status::{
    StatusUpdate, UNKNOWN_INSTANCE_STATE, conditions, machine_condition, provider_condition,
    vm_annotations, vm_labels,
};
use crate::vm::SourcePlan;
use crate::vm::VmPlan;
use crate::vm::request::{VmRequest, build_request};

mod claims;
mod environment;
mod observe;

use observe::observe;

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
    /// Its Windows join timed out and `--fail-timed-out-windows-joins` is set: the message.
    JoinTimedOut(String),
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

    /// How soon a recorded task is first read, or why there is no Prism connection.
    fn environment(&self) -> Result<Result<Duration, EnvironmentProblem>, Ask> {
        match &self.s.seen.environment {
            None => Err(Ask::Read(Read::Environment)),
            Some(EnvironmentSeen::Ready {
                first_task_read, ..
            }) => Ok(Ok(*first_task_read)),
            Some(EnvironmentSeen::Unavailable(problem)) => Ok(Err(problem.clone())),
        }
    }

    /// The slowest recent successful task of the pending task's kind, if known.
    fn slowest_task(&self) -> Option<Duration> {
        match &self.s.seen.environment {
            Some(EnvironmentSeen::Ready { slowest_task, .. }) => *slowest_task,
            _ => None,
        }
    }

    /// How soon after a VM's DELETE was sent its end is first looked for: the connection's
    /// recent deletions, else the poll interval.
    fn first_delete_look(&self) -> Result<Duration, Ask> {
        match self.s.seen.environment {
            None => Err(Ask::Read(Read::Environment)),
            Some(EnvironmentSeen::Ready {
                first_delete_look, ..
            }) => Ok(first_delete_look),
            Some(EnvironmentSeen::Unavailable(_)) => Ok(self.poll()),
        }
    }

    /// The environment, or the reconcile fails with its error.
    fn require_environment(&mut self) -> Result<(), Ask> {
        match self.environment()? {
            Ok(_) => Ok(()),
            Err(problem) => Err(environment::unavailable(self, &problem)),
        }
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
    follow_step(d, step, vm)
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
        MachineFailure::JoinTimedOut(message) => {
            d.failure_metric(FailureKind::Update, JOIN_TIMED_OUT_ERROR);
            d.event(true, JOIN_TIMED_OUT_ERROR, message.clone());
            (Some(JOIN_TIMED_OUT_ERROR), message)
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

/// What the lifecycle's next `step` asks of this reconcile (`vm`: the VM as last observed).
fn follow_step(d: &mut Draft<'_>, step: Step, vm: Option<Vm>) -> Decided {
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
        Step::UpdateFromVm { phase } => {
            // The join reconciler reports the timeout; phase is this controller's field.
            if d.s.settings.fail_timed_out_windows_joins
                && let Some(message) = d.s.machine.join_timed_out.clone()
            {
                return Ok(fail(d, MachineFailure::JoinTimedOut(message)));
            }
            match vm {
                Some(vm) => update_from_vm(d, phase, &vm),
                None => Ok(Next::Requeue(d.requeue())),
            }
        }
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
/// gone and the deletion finishes at once (the v3 API answers `DELETE /vms/{uuid}` of a UUID it
/// does not have with 404, "Invalid UUID provided": prism-go-client `v3/swagger.json`), so the
/// VM is not read before its DELETE.
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
    claims::release(d)?;
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
    let claimed = claims::claimed(d)?;
    let plan = match readiness(&s.seen, true)? {
        Readiness::Ready(plan) => plan,
        Readiness::Invalid { reason, message } => {
            return Ok(fail(d, MachineFailure::Create { reason, message }));
        }
        Readiness::Unresolved(message) => return Ok(retry_create(d, message)),
    };
    let plan = claims::assign(d, plan, &claimed)?;
    let plan = plan.as_ref();
    plan_warnings(d, &plan.warnings);
    if let Some(outcome) = &s.seen.sent {
        return sent(d, outcome, plan);
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

/// The plan's warnings on the Machine before its VM is made: condition `ConfigurationWarning`
/// (`True`, every warning in its message) and one Warning event each, once per change of the
/// warnings; a condition whose warnings went away turns `False`.
fn plan_warnings(d: &mut Draft<'_>, warnings: &[String]) {
    let shown = d
        .status
        .conditions
        .iter()
        .find(|condition| condition.type_ == conditions::CONFIGURATION_WARNING);
    if warnings.is_empty() {
        if shown.is_some_and(|condition| condition.status == "True") {
            d.provider_condition(
                conditions::CONFIGURATION_WARNING,
                false,
                conditions::NO_PLAN_WARNINGS,
                "the Machine's configuration gives no warning".into(),
            );
        }
        return;
    }
    let message = warnings.join("; ");
    if shown.is_some_and(|condition| condition.status == "True" && condition.message == message) {
        return;
    }
    d.provider_condition(
        conditions::CONFIGURATION_WARNING,
        true,
        conditions::PLAN_WARNINGS,
        message,
    );
    // Published once the condition is written: a failed write shows them again next time.
    d.events.extend(warnings.iter().map(|warning| Event {
        warning: true,
        reason: conditions::CONFIGURATION_WARNING,
        note: warning.clone(),
        only_if_written: true,
    }));
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

/// `creating`: a create is being made, which may create the generated password's Secret (a
/// deletion never does).
fn readiness(seen: &Seen, creating: bool) -> Result<Readiness<'_>, Ask> {
    Ok(match &seen.prepared {
        None => return Err(Ask::Read(Read::Prepare)),
        Some(Prepared::PasswordSecretMissing { secret }) => match &seen.password_secret {
            None if creating => return Err(Ask::Send(Change::CreatePasswordSecret)),
            None => Readiness::Unresolved(format!(
                "Secret {secret} (the generated Administrator password) does not exist"
            )),
            // Planned again, with the password just generated.
            Some(PasswordSecretOutcome::Created) => return Err(Ask::Read(Read::Prepare)),
            Some(PasswordSecretOutcome::NotYetCached) => Readiness::Unresolved(format!(
                "waiting for Secret {secret} (the generated Administrator password) to reach the cache"
            )),
            Some(PasswordSecretOutcome::Failed(error)) => Readiness::Unresolved(format!(
                "cannot create Secret {secret} (the generated Administrator password): {error}"
            )),
        },
        Some(Prepared::Ready(plan)) => Readiness::Ready(plan),
        Some(Prepared::Refused(errors)) => match after_validation(errors) {
            Step::Fail { reason, message } => Readiness::Invalid { reason, message },
            _ => Readiness::Unresolved(errors.to_string()),
        },
        Some(Prepared::Unresolved(message)) => Readiness::Unresolved(message.clone()),
    })
}

/// What Prism's answer to the create, clone or deploy means.
fn sent(d: &mut Draft<'_>, outcome: &SendOutcome, plan: &VmPlan) -> Decided {
    let s = d.s;
    let poll = d.poll();
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
    let plan = match readiness(&s.seen, false)? {
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
    // As recorded so far: a clone that ended in this reconcile has its task forgotten.
    let status = &d.status;
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
