//! A create: validated and planned (the Secrets and lookups read, the generated password's
//! Secret made when asked), what a retry needs recorded, then the create, clone or template
//! deploy sent, and Prism's answer to it read.

use crate::api::PendingTask;
use crate::machine::decision::{Change, Effect, Event, Failure, FailureKind, Next, Read};
use crate::machine::lifecycle::{INVALID_CONFIGURATION, Step, after_validation};
use crate::machine::provision::follow_up_value;
use crate::machine::snapshot::{PasswordSecretOutcome, Prepared, Seen, SendOutcome};
use crate::machine::status::conditions;
use crate::vm::request::{VmRequest, build_request};
use crate::vm::{SourcePlan, VmPlan};

use super::claims;
use super::draft::{Ask, Decided, Draft, MachineFailure, fail, operation_of, retry_create};

/// Validates and plans the VM, records what a retry needs, and sends the create, clone or
/// deploy.
pub(super) fn create(d: &mut Draft<'_>) -> Decided {
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
pub(super) enum Readiness<'p> {
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
pub(super) fn readiness(seen: &Seen, creating: bool) -> Result<Readiness<'_>, Ask> {
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
