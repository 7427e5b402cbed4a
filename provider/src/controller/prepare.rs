//! The I/O a create needs before [`crate::plan::machine::decide`] can plan it: the Machine's
//! user data and Administrator password Secrets, the lookups in Prism, and the VM plan; the
//! generated password's Secret, created when the protocol asks for it
//! ([`crate::plan::machine::Change::CreatePasswordSecret`]); also what `validate` runs.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use rand::RngCore;

use super::error::Error;
use super::inputs::{Environment, secret_value};
use super::shared::Shared;
use crate::actuator::Connection;
use crate::api::{AnnotatedChoices, CLUSTER_ID_LABEL, Machine, NutanixMachineProviderConfig};
use crate::plan::machine::{PasswordSecretOutcome, Prepared};
use crate::plan::vm::VmPlan;
use crate::plan::vm::errors::{ErrorClass, ValidationErrors};
use crate::plan::vm::guest::{AdminPasswordSource, admin_password_source};
use crate::plan::vm::resolve::{
    FailureDomain, RequiredLookups, ResolutionMode, ResolvedReferences,
};
use crate::plan::vm::secret::{
    AdminPassword, PASSWORD_RANDOM_BYTES, UserData, generated_password_secret,
};
use crate::plan::vm::spec::ParsedSpec;
use crate::plan::vm::unattend::PasswordValue;
use crate::plan::vm::validate::{PlanContext, UnreadUserData, plan_vm};

/// Key of the user data in its Secret.
pub const USER_DATA_KEY: &str = "userData";
/// Key of the Administrator password in `guestCustomization.adminPasswordSecret`.
pub const ADMIN_PASSWORD_KEY: &str = "password";

/// Looks up in Prism what `machine` (whose providerSpec is `spec`) refers to, through the
/// connection's caches, and plans its VM: what `validate` and `doctor` run. A Machine that is
/// wrong in itself gets only those errors, without any Prism call.
pub async fn resolve_and_plan(
    connection: &Connection,
    machine: &Machine,
    spec: &ParsedSpec,
    failure_domains: &[FailureDomain],
    user_data: Option<&UserData>,
    unread_user_data: UnreadUserData,
    password: Option<&AdminPassword>,
) -> Result<VmPlan, ValidationErrors> {
    if let Some(errors) = invalid_in_itself(machine, spec) {
        return Err(errors);
    }
    plan_with_lookups(
        connection,
        machine,
        spec,
        failure_domains,
        user_data,
        unread_user_data,
        password,
    )
    .await
}

/// The lookups and the plan of [`resolve_and_plan`], for a Machine already found not wrong in
/// itself.
async fn plan_with_lookups(
    connection: &Connection,
    machine: &Machine,
    spec: &ParsedSpec,
    failure_domains: &[FailureDomain],
    user_data: Option<&UserData>,
    unread_user_data: UnreadUserData,
    password: Option<&AdminPassword>,
) -> Result<VmPlan, ValidationErrors> {
    let infra_id = machine
        .labels()
        .get(CLUSTER_ID_LABEL)
        .cloned()
        .unwrap_or_default();
    let resolved = match spec.config() {
        Some(config) => {
            let lookups = RequiredLookups::of(config, &infra_id, Some(failure_domains));
            connection
                .lookups
                .resolve(connection.client(), &lookups, failure_domains)
                .await
        }
        None => ResolvedReferences::default(),
    };
    plan_vm(
        machine,
        spec,
        &PlanContext {
            resolved: &resolved,
            mode: ResolutionMode::Strict,
            user_data,
            unread_user_data,
            admin_password: password.map(PasswordValue::Secret),
        },
    )
}

/// The errors of a Machine that is wrong in itself (no lookup can change them), if any.
pub fn invalid_in_itself(machine: &Machine, spec: &ParsedSpec) -> Option<ValidationErrors> {
    let nothing = ResolvedReferences::default();
    let errors = plan_vm(
        machine,
        spec,
        &PlanContext {
            resolved: &nothing,
            mode: ResolutionMode::Strict,
            user_data: None,
            unread_user_data: UnreadUserData::Unresolved,
            admin_password: None,
        },
    )
    .err()?;
    let invalid: Vec<_> = errors
        .0
        .into_iter()
        .filter(|e| e.class == ErrorClass::Invalid)
        .collect();
    (!invalid.is_empty()).then_some(ValidationErrors(invalid))
}

/// A password read from a Secret: UTF-8, one trailing newline dropped (`echo` into a file).
fn password_of(bytes: &[u8]) -> Result<AdminPassword, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "the password is not UTF-8".to_owned())?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    AdminPassword::new(text).map_err(|problem| problem.to_string())
}

/// A random Administrator password for one VM (Sysprep without `adminPasswordSecret`).
pub fn random_admin_password() -> AdminPassword {
    let mut random = [0u8; PASSWORD_RANDOM_BYTES];
    rand::rng().fill_bytes(&mut random);
    AdminPassword::from_random_bytes(&random)
}

/// The Administrator password a create needs, or why there is none yet.
enum PasswordReading {
    Ready(Option<AdminPassword>),
    /// The generated password's Secret (`namespace/name`) does not exist yet.
    Missing(String),
    Unusable(String),
}

/// `generated`: the password this reconcile generated and stored, which the Secret cache may
/// not show yet.
async fn admin_password(
    shared: &Shared,
    machine: &Machine,
    config: &NutanixMachineProviderConfig,
    choices: &AnnotatedChoices,
    generated: Option<&AdminPassword>,
) -> PasswordReading {
    match admin_password_source(config, choices) {
        AdminPasswordSource::NotNeeded => PasswordReading::Ready(None),
        AdminPasswordSource::Secret { name, field } => {
            let namespace = machine.namespace().unwrap_or_default();
            let read = secret_value(&shared.secrets, &namespace, &name, ADMIN_PASSWORD_KEY)
                .map_err(|problem| format!("{field}: {problem}"))
                .and_then(|bytes| {
                    password_of(&bytes).map_err(|problem| format!("{field}: {problem}"))
                });
            match read {
                Ok(password) => PasswordReading::Ready(Some(password)),
                Err(message) => PasswordReading::Unusable(message),
            }
        }
        AdminPasswordSource::Generated => generated_admin_password(shared, machine, generated),
    }
}

/// The Secret that keeps `password`, generated for `machine`'s VM: the one kind of Secret the
/// controller creates, and all that `manifests/rbac/admission/` lets its ServiceAccount create
/// (name [`generated_password_secret`], type `Opaque`, the one key [`ADMIN_PASSWORD_KEY`], owned
/// by the Machine alone, so that it is deleted with it).
pub fn generated_password_object(machine: &Machine, password: &AdminPassword) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(generated_password_secret(&machine.name_any())),
            namespace: machine.namespace(),
            owner_references: Some(vec![OwnerReference {
                api_version: Machine::api_version(&()).into_owned(),
                kind: Machine::kind(&()).into_owned(),
                name: machine.name_any(),
                uid: machine.uid().unwrap_or_default(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        data: Some(
            [(
                ADMIN_PASSWORD_KEY.to_owned(),
                ByteString(password.expose().as_bytes().to_vec()),
            )]
            .into(),
        ),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// The password generated once for this Machine's VM, kept in its own Secret
/// ([`generated_password_secret`]): from the Secret cache, or `generated` by this reconcile.
fn generated_admin_password(
    shared: &Shared,
    machine: &Machine,
    generated: Option<&AdminPassword>,
) -> PasswordReading {
    let namespace = machine.namespace().unwrap_or_default();
    let name = generated_password_secret(&machine.name_any());
    let uid = machine.uid().unwrap_or_default();
    let what = format!("Secret {namespace}/{name} (the generated Administrator password)");
    let Some(secret) = shared
        .secrets
        .get(&ObjectRef::new(&name).within(&namespace))
    else {
        return match generated {
            Some(password) => PasswordReading::Ready(Some(password.clone())),
            None => PasswordReading::Missing(format!("{namespace}/{name}")),
        };
    };
    let owned = secret
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.uid == uid);
    if !owned {
        return PasswordReading::Unusable(format!(
            "{what} exists but is not owned by this Machine; delete or rename it"
        ));
    }
    let read = secret
        .data
        .as_ref()
        .and_then(|data| data.get(ADMIN_PASSWORD_KEY))
        .ok_or_else(|| format!("{what} has no key {ADMIN_PASSWORD_KEY}"))
        .and_then(|bytes| password_of(&bytes.0).map_err(|problem| format!("{what}: {problem}")));
    match read {
        Ok(password) => PasswordReading::Ready(Some(password)),
        Err(message) => PasswordReading::Unusable(message),
    }
}

/// Generates a password for `machine`'s VM and creates the Secret that keeps it: the change
/// [`crate::plan::machine::Change::CreatePasswordSecret`]. Returns the outcome for the plan,
/// the password when it was stored, and the error when the API server refused.
pub(super) async fn create_password_secret(
    shared: &Shared,
    machine: &Machine,
) -> (PasswordSecretOutcome, Option<AdminPassword>, Option<Error>) {
    let namespace = machine.namespace().unwrap_or_default();
    let name = generated_password_secret(&machine.name_any());
    let password = random_admin_password();
    let secret = generated_password_object(machine, &password);
    let api: Api<Secret> = Api::namespaced(shared.client.clone(), &namespace);
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            tracing::info!(machine = %machine.name_any(), secret = %name, "generated the VM's Administrator password and stored it in a Secret");
            (PasswordSecretOutcome::Created, Some(password), None)
        }
        // Made by an earlier attempt, not yet in the watch cache: used once it is there.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            (PasswordSecretOutcome::NotYetCached, None, None)
        }
        Err(error) => {
            let error = Error::kube(format!("create Secret {namespace}/{name}"), error);
            (
                PasswordSecretOutcome::Failed(error.to_string()),
                None,
                Some(error),
            )
        }
    }
}

/// What a create needs (the plan), or why it cannot be made now. `spec` is the Machine's
/// providerSpec as the reconcile read it: it is checked here once in itself (before any
/// Secret is read or made, or Prism is asked), then planned with the lookups.
pub(super) async fn prepare(
    shared: &Shared,
    machine: &Machine,
    spec: &ParsedSpec,
    environment: &Environment,
    generated_password: Option<&AdminPassword>,
) -> Prepared {
    if let Some(errors) = invalid_in_itself(machine, spec) {
        return Prepared::Refused(errors);
    }
    let failure_domains = environment
        .infrastructure
        .as_ref()
        .map(|info| info.failure_domains.clone())
        .unwrap_or_default();
    let namespace = machine.namespace().unwrap_or_default();
    let config = spec.config();
    let user_data = match config
        .and_then(|c| c.user_data_secret.as_ref())
        .filter(|s| !s.name.is_empty())
    {
        Some(secret) => {
            match secret_value(&shared.secrets, &namespace, &secret.name, USER_DATA_KEY) {
                Ok(bytes) => Some(UserData::new(bytes)),
                Err(problem) => {
                    return Prepared::Unresolved(format!("providerSpec.userDataSecret: {problem}"));
                }
            }
        }
        None => None,
    };
    let password = match config {
        Some(config) => {
            match admin_password(shared, machine, config, spec.choices(), generated_password).await
            {
                PasswordReading::Ready(password) => password,
                PasswordReading::Missing(secret) => {
                    return Prepared::PasswordSecretMissing { secret };
                }
                PasswordReading::Unusable(message) => return Prepared::Unresolved(message),
            }
        }
        None => None,
    };
    let plan = plan_with_lookups(
        &environment.connection,
        machine,
        spec,
        &failure_domains,
        user_data.as_ref(),
        UnreadUserData::Unresolved,
        password.as_ref(),
    )
    .await;
    match plan {
        Ok(plan) => {
            for warning in &plan.warnings {
                tracing::info!(machine = %machine.name_any(), %warning, "plan warning");
            }
            Prepared::Ready(Box::new(plan))
        }
        Err(errors) => Prepared::Refused(errors),
    }
}
