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
//!
//! This file holds the entry and the dispatch: the VM is observed when the lifecycle needs it,
//! then the step the lifecycle names is followed. The rules are cut by phase, each working on
//! the one shared [`draft::Draft`]:
//! - [`observe`]: finding the Machine's VM (the recorded task, the recorded UUID, the identity
//!   marker), with the Prism-call [`economy`] (a listing instead of a read, first-look delays,
//!   a `GET` instead of a task read), each of whose rules says what it saves and why it is safe;
//! - [`create`]: checked in itself, its inputs read, planned (once a round), recorded, sent,
//!   and Prism's answer read;
//! - [`update`]: the pending follow-up, then the Machine brought up to date from its VM;
//! - [`delete`]: drain, volumes, the VM's volume groups detached, the VM's DELETE, the Node, an
//!   unconfirmed deploy;
//! - [`claims`] (static addresses) and [`environment`] (no Prism connection), used by them.

use std::time::Duration;

use prism_types::v3::{EntityState, PowerState, Vm};

use super::decision::{Action, Decision, Failure, FailureKind, MetadataChange, Next};
use super::snapshot::{PAUSED_CONDITION, Snapshot};
use crate::api::{Machine, phase};
use crate::machine::lifecycle::{DRAINED_CONDITION, Step, VmObservation, next_step};
use crate::machine::status::{conditions, lifecycle_hook_conditions, machine_condition};
use crate::vm::VmPlan;
use crate::vm::errors::ValidationErrors;
use crate::vm::spec::ParsedSpec;
use crate::vm::validate::{PlanContext, plan_vm};

mod claims;
mod create;
mod delete;
mod draft;
mod drain;
mod economy;
mod environment;
mod observe;
mod update;

pub use delete::{deletion_sent, detach_request_id};
use draft::{Ask, Decided, Draft, MachineFailure, fail, power_of, retry_create};
use observe::observe;

/// How long a deletion keeps retrying to confirm a template deploy whose plan cannot be made
/// (a lookup failing) before it forgets the deploy and finishes.
pub const DEPLOY_CONFIRM_PATIENCE: Duration = Duration::from_secs(600);

/// How soon a follow-up refused for a changed VM is tried again (with the VM read again).
pub const FOLLOW_UP_CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// Makes the VM's plan for [`decide`]: [`plan_vm`] itself ([`PlanVm`]), or a test's stand-in
/// that counts the calls (a round makes at most one).
pub trait Planner {
    fn plan(
        &self,
        machine: &Machine,
        spec: &ParsedSpec,
        context: &PlanContext<'_>,
    ) -> Result<VmPlan, ValidationErrors>;
}

/// [`plan_vm`].
#[derive(Debug)]
pub struct PlanVm;

impl Planner for PlanVm {
    fn plan(
        &self,
        machine: &Machine,
        spec: &ParsedSpec,
        context: &PlanContext<'_>,
    ) -> Result<VmPlan, ValidationErrors> {
        plan_vm(machine, spec, context)
    }
}

/// The next step of the reconcile `snapshot` describes.
pub fn decide(snapshot: &Snapshot) -> Decision {
    decide_with(snapshot, &PlanVm)
}

/// [`decide`], with the VM's plan made by `planner`.
pub fn decide_with(snapshot: &Snapshot, planner: &dyn Planner) -> Decision {
    let mut draft = Draft::new(snapshot, planner);
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

/// The readiness rule: the VM is `COMPLETE` and powered `ON`.
pub fn vm_ready(vm: &Vm) -> bool {
    vm.state() == Some(&EntityState::Complete) && power_of(vm) == Some(&PowerState::On)
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
    // MAO brings these up to date on every status write (`updateStatus`), which every path of
    // its reconcile reaches but a paused or invalid Machine, the finalizer's addition and a
    // Failed Machine not being deleted; written only when they change.
    let writes_status = !matches!(
        step,
        Step::SetAuthoritativeApi(_)
            | Step::Paused
            | Step::RejectInvalidMachine { .. }
            | Step::AddFinalizer
    ) && (step != Step::Stop || state.deleting);
    // MAO (`controller.go`, `Reconcile`): `InstanceExists=False`, `InstanceNotCreated`, for a
    // Machine whose instance does not exist and was never provisioned, from before its phase
    // `Provisioning` until the VM is found (then `True`, [`update`]).
    let not_created = matches!(
        observation,
        VmObservation::Missing | VmObservation::DeployUnconfirmed | VmObservation::Creating
    );
    if not_created && !state.deleting && !state.is_provisioned() && state.phase != phase::FAILED {
        d.machine_condition(
            conditions::INSTANCE_EXISTS,
            false,
            Some(conditions::INSTANCE_NOT_CREATED),
            Some("Instance has not been created".into()),
        );
    }
    if writes_status {
        let now = d.now();
        d.update
            .conditions
            .extend(lifecycle_hook_conditions(&s.machine.lifecycle_hooks, &now));
    }
    // MAO writes `Paused=False`, severity Info, whenever the status names the Machine API
    // (`controller.go`, `Reconcile`, `ensureUpdatedPausedCondition`): written once, then kept.
    if gate && state.authoritative_api.as_deref() == Some("MachineAPI") {
        let mut condition = machine_condition(
            PAUSED_CONDITION,
            false,
            Some("AuthoritativeAPIMachineAPI"),
            Some(authority_message("MachineAPI")),
            &d.now(),
        );
        condition.severity = Some("Info".to_owned());
        d.update.conditions.push(condition);
    }
    follow_step(d, step, vm)
}

/// MAO's message of the `Paused` condition.
fn authority_message(api: &str) -> String {
    format!("The AuthoritativeAPI status is set to '{api}'")
}

/// What the lifecycle's next `step` asks of this reconcile (`vm`: the VM as last observed).
fn follow_step(d: &mut Draft<'_>, step: Step, vm: Option<Vm>) -> Decided {
    let poll = d.poll();
    let intervals = d.s.settings.intervals;
    match step {
        Step::SetAuthoritativeApi(api) => {
            d.update.authoritative_api = Some(api);
            Ok(Next::AwaitChange)
        }
        Step::Paused => {
            let api =
                d.s.machine
                    .state
                    .authoritative_api
                    .clone()
                    .unwrap_or_default();
            d.machine_condition(
                PAUSED_CONDITION,
                true,
                Some("AuthoritativeAPINotMachineAPI"),
                Some(authority_message(&api)),
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
            // The create, or the deletion, follows from the phase alone: written with it.
            d.plan_on = true;
            Ok(Next::AwaitChange)
        }
        Step::WaitForPreDrainHooks => {
            // MAO announces the hold only where it would drain (a Node, not excluded, not
            // drained yet: `drain_controller.go`, `Reconcile`).
            let state = &d.s.machine.state;
            if state.node.is_some() && !state.exclude_node_draining && !state.drained {
                d.event(
                    false,
                    drain::events::BLOCKED,
                    "Drain blocked by pre-drain hook",
                );
            }
            Ok(Next::AwaitChange)
        }
        Step::WaitForPreTerminateHooks | Step::Stop => Ok(Next::AwaitChange),
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
            d.event(false, drain::events::SKIPPED, "Node drain skipped");
            d.plan_on = true;
            Ok(Next::AwaitChange)
        }
        Step::Drain { node } => drain::drain(d, node),
        Step::DeleteVm => delete::delete_vm(d),
        Step::WaitForVmDeletion | Step::WaitForCreate => Ok(Next::Requeue(
            step.requeue_after(&intervals).unwrap_or(poll),
        )),
        Step::FinishDeletion { node } => delete::finish_deletion(d, node),
        Step::UpdateFromVm { phase } => {
            // The join reconciler reports the timeout; phase is this controller's field.
            if d.s.settings.fail_timed_out_windows_joins
                && let Some(message) = d.s.machine.join_timed_out.clone()
            {
                return Ok(fail(d, MachineFailure::JoinTimedOut(message)));
            }
            match vm {
                Some(vm) => update::update_from_vm(d, phase, &vm),
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
        Step::Create => create::create(d),
        Step::ConfirmDeploy => delete::confirm_deploy(d),
        // Only `observe` answers this; reaching here would be a bug: look later.
        Step::LookUpVm => Ok(Next::Requeue(poll)),
        Step::RetryCreate { message } => Ok(retry_create(d, message)),
    }
}
