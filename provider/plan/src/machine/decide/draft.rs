//! The decision being made, shared by every phase of [`super::decide`]: what the reconcile saw
//! ([`Draft::s`]), the providerStatus, status and metadata changes made so far, the events and
//! the effects; and the ways a decision ends early ([`Ask`]) or fails the Machine ([`fail`]).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use prism_types::v3::{PowerState, Vm};

use crate::api::{
    INSTANCE_STATE_ANNOTATION, NutanixMachineProviderStatus, PendingTask, TaskOperation, phase,
};
use crate::machine::decision::{
    Action, Change, Decision, Effect, Event, Failure, FailureKind, MetadataChange, Next, Read,
};
use crate::machine::join_report::JOIN_TIMED_OUT_ERROR;
use crate::machine::lifecycle::INSTANCE_MISSING_MESSAGE;
use crate::machine::snapshot::{EnvironmentProblem, EnvironmentSeen, Snapshot};
use crate::machine::status::{
    StatusUpdate, UNKNOWN_INSTANCE_STATE, conditions, machine_condition, provider_condition,
};
use crate::vm::VmPlan;
use crate::vm::errors::ValidationErrors;
use crate::vm::request::VmRequest;
use crate::vm::validate::PlanContext;

use super::Planner;

/// An early end of the decision: a read to make first (the draft is dropped), a send to make
/// (with the draft's changes), or the reconcile's end.
pub(super) enum Ask {
    Read(Read),
    Send(Change),
    Done(Next),
}

pub(super) type Decided = Result<Next, Ask>;

/// The decision being made.
pub(super) struct Draft<'a> {
    pub(super) s: &'a Snapshot,
    /// What makes the VM's plan ([`Draft::plan`]).
    planner: &'a dyn Planner,
    /// The providerStatus as it will be written.
    pub(super) status: NutanixMachineProviderStatus,
    pub(super) status_changed: bool,
    pub(super) update: StatusUpdate,
    pub(super) metadata: Option<MetadataChange>,
    pub(super) events: Vec<Event>,
    pub(super) effects: Vec<Effect>,
    /// [`Decision::plan_on`].
    pub(super) plan_on: bool,
}

/// How a Machine fails.
pub(super) enum MachineFailure {
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

pub(super) fn since(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(then)).unwrap_or_default()
}

pub(super) fn operation_of(request: &VmRequest) -> TaskOperation {
    match request {
        VmRequest::Create(_) => TaskOperation::Create,
        VmRequest::Clone { .. } => TaskOperation::Clone,
        VmRequest::Deploy { .. } => TaskOperation::Deploy,
    }
}

pub(super) fn power_of(vm: &Vm) -> Option<&PowerState> {
    vm.status
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.power_state.as_ref())
}

impl<'a> Draft<'a> {
    pub(super) fn new(s: &'a Snapshot, planner: &'a dyn Planner) -> Self {
        Self {
            s,
            planner,
            status: s.current_status().clone(),
            status_changed: false,
            update: StatusUpdate::default(),
            metadata: None,
            events: Vec::new(),
            effects: Vec::new(),
            plan_on: false,
        }
    }

    /// The VM's plan from `context`; a round asks for it at most once (the plan tests' world
    /// counts the calls).
    pub(super) fn plan(&self, context: &PlanContext<'_>) -> Result<VmPlan, ValidationErrors> {
        self.planner
            .plan(&self.s.machine.object, &self.s.machine.spec, context)
    }

    pub(super) fn finish(mut self, next: Next, action: Option<Action>) -> Decision {
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
            plan_on: self.plan_on,
        }
    }

    pub(super) fn now(&self) -> Time {
        Time(self.s.now)
    }

    pub(super) fn poll(&self) -> Duration {
        self.s.settings.intervals.poll
    }

    pub(super) fn requeue(&self) -> Duration {
        self.s.settings.intervals.requeue
    }

    pub(super) fn deleting(&self) -> bool {
        self.s.machine.state.deleting
    }

    pub(super) fn event(&mut self, warning: bool, reason: &'static str, note: impl Into<String>) {
        self.events.push(Event {
            warning,
            reason,
            note: note.into(),
            only_if_written: false,
        });
    }

    pub(super) fn effect(&mut self, effect: Effect) {
        self.effects.push(effect);
    }

    pub(super) fn failure_metric(&mut self, kind: FailureKind, reason: &'static str) {
        self.effect(Effect::Failure { kind, reason });
    }

    /// Changes the providerStatus to be written.
    pub(super) fn record(&mut self, change: impl FnOnce(&mut NutanixMachineProviderStatus)) {
        change(&mut self.status);
        self.status_changed = true;
    }

    pub(super) fn provider_condition(
        &mut self,
        type_: &str,
        ok: bool,
        reason: &str,
        message: String,
    ) {
        let condition = provider_condition(type_, ok, reason, message, &self.now());
        self.record(|status| status.set_condition(condition));
    }

    pub(super) fn machine_condition(
        &mut self,
        type_: &str,
        ok: bool,
        reason: Option<&str>,
        message: Option<String>,
    ) {
        let condition = machine_condition(type_, ok, reason, message, &self.now());
        self.update.conditions.push(condition);
    }

    pub(super) fn task_ended(&mut self, task: &PendingTask, succeeded: bool) {
        if let Some(started) = &task.started {
            self.effect(Effect::TaskEnded {
                operation: task.operation.clone(),
                succeeded,
                elapsed: since(self.s.now, started.0),
            });
        }
    }

    /// How soon a recorded task is first read, or why there is no Prism connection.
    pub(super) fn environment(&self) -> Result<Result<Duration, EnvironmentProblem>, Ask> {
        match &self.s.seen.observe.environment {
            None => Err(Ask::Read(Read::Environment)),
            Some(EnvironmentSeen::Ready {
                first_task_read, ..
            }) => Ok(Ok(*first_task_read)),
            Some(EnvironmentSeen::Unavailable(problem)) => Ok(Err(problem.clone())),
        }
    }

    /// The slowest recent successful task of the pending task's kind, if known.
    pub(super) fn slowest_task(&self) -> Option<Duration> {
        match &self.s.seen.observe.environment {
            Some(EnvironmentSeen::Ready { slowest_task, .. }) => *slowest_task,
            _ => None,
        }
    }

    /// Whether the connection's shared look at the tasks in flight saw the pending task end.
    pub(super) fn task_end_seen(&self) -> bool {
        matches!(
            self.s.seen.observe.environment,
            Some(EnvironmentSeen::Ready {
                task_end_seen: true,
                ..
            })
        )
    }

    /// Whether the connection's shared look at the tasks in flight saw the recorded VM's DELETE
    /// task end.
    pub(super) fn delete_end_seen(&self) -> bool {
        matches!(
            self.s.seen.observe.environment,
            Some(EnvironmentSeen::Ready {
                delete_end_seen: true,
                ..
            })
        )
    }

    /// How soon after a VM's DELETE was sent its end is first looked for: the connection's
    /// recent deletions, else the poll interval.
    pub(super) fn first_delete_look(&self) -> Result<Duration, Ask> {
        match self.s.seen.observe.environment {
            None => Err(Ask::Read(Read::Environment)),
            Some(EnvironmentSeen::Ready {
                first_delete_look, ..
            }) => Ok(first_delete_look),
            Some(EnvironmentSeen::Unavailable(_)) => Ok(self.poll()),
        }
    }
}

/// Phase Failed with the reason and message; `instance-state: Unknown`, as MAO writes.
pub(super) fn fail(d: &mut Draft<'_>, failure: MachineFailure) -> Next {
    let (reason, message) = match failure {
        MachineFailure::InstanceMissing => {
            let message = INSTANCE_MISSING_MESSAGE.to_owned();
            // MAO's condition message (`controller.go`, `Reconcile`), not its errorMessage.
            d.machine_condition(
                conditions::INSTANCE_EXISTS,
                false,
                Some(conditions::INSTANCE_MISSING),
                Some("Instance not found on provider".to_owned()),
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
pub(super) fn retry_create(d: &mut Draft<'_>, message: String) -> Next {
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
