//! A create: checked in itself, its addresses claimed, planned from what the executor read (the
//! lookups and Secrets; the generated password's Secret made when asked), what a retry needs
//! recorded, then the create, clone or template deploy sent, and Prism's answer to it read.

use crate::api::PendingTask;
use crate::machine::decision::{
    Change, Effect, Event, Failure, FailureKind, Next, Read, SecretKey,
};
use crate::machine::lifecycle::{INVALID_CONFIGURATION, Step, after_validation};
use crate::machine::provision::follow_up_value;
use crate::machine::snapshot::{PasswordSecretOutcome, SecretRead, SendOutcome, Snapshot, VmRead};
use crate::machine::status::conditions;
use crate::vm::errors::{ErrorClass, ValidationErrors};
use crate::vm::guest::{AdminPasswordSource, admin_password_source};
use crate::vm::request::{VmRequest, build_request};
use crate::vm::resolve::ResolutionMode;
use crate::vm::secret::{
    ADMIN_PASSWORD_KEY, AdminPassword, USER_DATA_KEY, UserData, generated_password_secret,
};
use crate::vm::unattend::PasswordValue;
use crate::vm::validate::{ClaimedAddresses, PlanContext, UnreadUserData};
use crate::vm::{SourcePlan, VmPlan};

use super::claims::{self, Claimed};
use super::draft::{Ask, Decided, Draft, MachineFailure, fail, operation_of, retry_create};

/// Validates and plans the VM, records what a retry needs, and sends the create, clone or
/// deploy.
pub(super) fn create(d: &mut Draft<'_>) -> Decided {
    let s = d.s;
    if let Some(wait) = s.settings.create_backoff {
        return Ok(Next::Requeue(wait));
    }
    let plan = match readiness(d, true)? {
        Readiness::Ready(plan) => plan,
        Readiness::Invalid { reason, message } => {
            return Ok(fail(d, MachineFailure::Create { reason, message }));
        }
        Readiness::Unresolved(message) => return Ok(retry_create(d, message)),
    };
    let plan = plan.as_ref();
    plan_warnings(d, &plan.warnings);
    if let Some(outcome) = &s.seen.create.sent {
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
    let uuid = match (d.status.vm_uuid.clone(), &s.seen.create.reserved) {
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
pub(super) enum Readiness {
    Ready(Box<VmPlan>),
    /// The Machine fails with this reason and message.
    Invalid {
        reason: Option<&'static str>,
        message: String,
    },
    /// Retry later.
    Unresolved(String),
}

impl Readiness {
    fn refused(errors: &ValidationErrors) -> Self {
        match after_validation(errors) {
            Step::Fail { reason, message } => Self::Invalid { reason, message },
            _ => Self::Unresolved(errors.to_string()),
        }
    }
}

/// The VM's plan, made once this round ([`Draft::plan`]): before anything is read for it, the
/// Machine is checked in itself; a create then has its static addresses claimed; then the plan
/// is made from what the executor read (the lookups and Secrets) and the bound addresses.
/// `creating`: a create is being made, which claims addresses and may create the generated
/// password's Secret (a deletion confirming a deploy does neither).
pub(super) fn readiness(d: &mut Draft<'_>, creating: bool) -> Result<Readiness, Ask> {
    let s = d.s;
    let Some(inputs) = &s.seen.create.inputs else {
        let in_itself = d
            .plan(&PlanContext::in_itself())
            .err()
            .and_then(|errors| errors.of_class(ErrorClass::Invalid));
        if let Some(errors) = in_itself {
            return Ok(Readiness::refused(&errors));
        }
        if creating {
            claims::claimed(d)?;
        }
        return Err(Ask::Read(inputs_read(s)));
    };
    let claimed = if creating {
        claims::claimed(d)?
    } else {
        Claimed::NoPools
    };
    let user_data = match user_data_of(s, inputs.user_data.as_ref()) {
        Ok(user_data) => user_data,
        Err(message) => return Ok(Readiness::Unresolved(message)),
    };
    let password = match admin_password_of(s, inputs.admin_password.as_ref(), creating)? {
        Ok(password) => password,
        Err(message) => return Ok(Readiness::Unresolved(message)),
    };
    let context = PlanContext {
        resolved: &inputs.resolved,
        mode: ResolutionMode::Strict,
        user_data: user_data.as_ref(),
        unread_user_data: UnreadUserData::Unresolved,
        admin_password: password.as_ref().map(PasswordValue::Secret),
        claims: match &claimed {
            Claimed::Bound(bound) => ClaimedAddresses::Bound(bound),
            Claimed::NoPools => ClaimedAddresses::NotClaimed,
        },
    };
    Ok(match d.plan(&context) {
        Ok(plan) => Readiness::Ready(Box::new(plan)),
        Err(errors) => Readiness::refused(&errors),
    })
}

/// What the executor reads for the plan: the lookups, and the Secrets the providerSpec names.
fn inputs_read(s: &Snapshot) -> Read {
    let config = s.machine.spec.config();
    let user_data = config
        .and_then(|config| config.user_data_secret.as_ref())
        .filter(|secret| !secret.name.is_empty())
        .map(|secret| SecretKey {
            name: secret.name.clone(),
            key: USER_DATA_KEY,
        });
    let admin_password = config
        .and_then(
            |config| match admin_password_source(config, s.machine.spec.choices()) {
                AdminPasswordSource::NotNeeded => None,
                AdminPasswordSource::Secret { name, .. } => Some(name),
                AdminPasswordSource::Generated => Some(generated_password_secret(&s.machine.name)),
            },
        )
        .map(|name| SecretKey {
            name,
            key: ADMIN_PASSWORD_KEY,
        });
    Read::CreateInputs {
        user_data,
        admin_password,
    }
}

/// The user data, or why it cannot be had now.
fn user_data_of(s: &Snapshot, read: Option<&SecretRead>) -> Result<Option<UserData>, String> {
    let Some(name) = s
        .machine
        .spec
        .config()
        .and_then(|config| config.user_data_secret.as_ref())
        .map(|secret| &secret.name)
        .filter(|name| !name.is_empty())
    else {
        return Ok(None);
    };
    let secret = format!("Secret {}/{name}", s.machine.identity.namespace);
    match read {
        None | Some(SecretRead::Missing) => {
            Err(format!("providerSpec.userDataSecret: {secret} not found"))
        }
        Some(SecretRead::Found { value: None, .. }) => Err(format!(
            "providerSpec.userDataSecret: {secret} has no key {USER_DATA_KEY:?}"
        )),
        Some(SecretRead::Found {
            value: Some(value), ..
        }) => Ok(Some(UserData::new(value.expose()))),
    }
}

/// The Administrator password, or why it cannot be had now; asks for the generated password's
/// Secret to be made when a create finds none (`creating`).
fn admin_password_of(
    s: &Snapshot,
    read: Option<&SecretRead>,
    creating: bool,
) -> Result<Result<Option<AdminPassword>, String>, Ask> {
    let Some(config) = s.machine.spec.config() else {
        return Ok(Ok(None));
    };
    let namespace = &s.machine.identity.namespace;
    let (what, generated) = match admin_password_source(config, s.machine.spec.choices()) {
        AdminPasswordSource::NotNeeded => return Ok(Ok(None)),
        AdminPasswordSource::Secret { name, field } => {
            (format!("{field}: Secret {namespace}/{name}"), false)
        }
        AdminPasswordSource::Generated => {
            let name = generated_password_secret(&s.machine.name);
            (
                format!("Secret {namespace}/{name} (the generated Administrator password)"),
                true,
            )
        }
    };
    Ok(match read {
        None | Some(SecretRead::Missing) if generated => match &s.seen.create.password_secret {
            None if creating => return Err(Ask::Send(Change::CreatePasswordSecret)),
            None => Err(format!("{what} does not exist")),
            Some(PasswordSecretOutcome::Created(password)) => Ok(Some(password.clone())),
            Some(PasswordSecretOutcome::NotYetCached) => {
                Err(format!("waiting for {what} to reach the cache"))
            }
            Some(PasswordSecretOutcome::Failed(error)) => {
                Err(format!("cannot create {what}: {error}"))
            }
        },
        None | Some(SecretRead::Missing) => Err(format!("{what} not found")),
        // Only the Secret made for this Machine holds its generated password.
        Some(SecretRead::Found { owners, .. })
            if generated && !owners.contains(&s.machine.identity.uid) =>
        {
            Err(format!(
                "{what} exists but is not owned by this Machine; delete or rename it"
            ))
        }
        Some(SecretRead::Found { value: None, .. }) => {
            Err(format!("{what} has no key {ADMIN_PASSWORD_KEY:?}"))
        }
        Some(SecretRead::Found {
            value: Some(value), ..
        }) => AdminPassword::from_secret(value)
            .map(Some)
            .map_err(|problem| format!("{what}: {problem}")),
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
            match &s.seen.observe.confirm {
                None => Err(Ask::Read(Read::Confirm { uuid })),
                // The VM exists already: an earlier create got through.
                Some(VmRead::Found(_)) => Ok(Next::Requeue(poll)),
                Some(VmRead::Gone) => {
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
            match &s.seen.observe.confirm {
                None => Err(Ask::Read(Read::Confirm { uuid })),
                Some(VmRead::Found(_)) => Ok(Next::Requeue(poll)),
                // The UUID reservation expired: a new one is taken.
                Some(VmRead::Gone) => {
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
