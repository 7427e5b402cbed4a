//! The I/O a create needs before [`crate::plan::machine::decide`] can plan it: the lookups in
//! Prism and the Secrets the Machine names, read as they are ([`read_create_inputs`]); the
//! generated password's Secret, created when the protocol asks for it
//! ([`crate::plan::machine::Change::CreatePasswordSecret`]); and the same lookups with the one
//! plan for `validate` and `doctor` ([`resolve_and_plan`]).

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use rand::RngCore;

use super::error::Error;
use super::inputs::Environment;
use super::shared::Shared;
use crate::actuator::Connection;
use crate::api::{CLUSTER_ID_LABEL, Machine};
use crate::plan::machine::{CreateInputs, PasswordSecretOutcome, SecretKey, SecretRead};
use crate::plan::vm::VmPlan;
use crate::plan::vm::errors::ValidationErrors;
use crate::plan::vm::resolve::{FailureDomain, RequiredLookups, ResolvedReferences};
pub use crate::plan::vm::secret::{ADMIN_PASSWORD_KEY, USER_DATA_KEY};
use crate::plan::vm::secret::{
    AdminPassword, PASSWORD_RANDOM_BYTES, SecretValue, UserData, generated_password_secret,
};
use crate::plan::vm::spec::ParsedSpec;
use crate::plan::vm::validate::{UnreadUserData, invalid_in_itself, plan_unclaimed};

/// Looks up in Prism what `machine` (whose providerSpec is `spec`) refers to, through the
/// connection's caches, and plans its VM with [`plan_unclaimed`] (the controller's `plan_vm`):
/// what `validate` and `doctor` run. A Machine that is wrong in itself gets only those errors,
/// without any Prism call.
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
    let resolved = lookups(connection, machine, spec, failure_domains).await;
    plan_unclaimed(
        machine,
        spec,
        &resolved,
        user_data,
        unread_user_data,
        password,
    )
}

/// The lookups in Prism of what `machine`'s providerSpec `spec` refers to.
async fn lookups(
    connection: &Connection,
    machine: &Machine,
    spec: &ParsedSpec,
    failure_domains: &[FailureDomain],
) -> ResolvedReferences {
    let infra_id = machine
        .labels()
        .get(CLUSTER_ID_LABEL)
        .cloned()
        .unwrap_or_default();
    match spec.config() {
        Some(config) => {
            let lookups = RequiredLookups::of(config, &infra_id, Some(failure_domains));
            connection
                .lookups
                .resolve(connection.client(), &lookups, failure_domains)
                .await
        }
        None => ResolvedReferences::default(),
    }
}

/// A random Administrator password for one VM (Sysprep without `adminPasswordSecret`).
pub fn random_admin_password() -> AdminPassword {
    let mut random = [0u8; PASSWORD_RANDOM_BYTES];
    rand::rng().fill_bytes(&mut random);
    AdminPassword::from_random_bytes(&random)
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

/// Generates a password for `machine`'s VM and creates the Secret that keeps it: the change
/// [`crate::plan::machine::Change::CreatePasswordSecret`]. Returns the outcome for the plan
/// (with the password when it was stored), or the error when the API server refused.
pub(super) async fn create_password_secret(
    shared: &Shared,
    machine: &Machine,
) -> Result<PasswordSecretOutcome, Error> {
    let namespace = machine.namespace().unwrap_or_default();
    let name = generated_password_secret(&machine.name_any());
    let password = random_admin_password();
    let secret = generated_password_object(machine, &password);
    let api: Api<Secret> = Api::namespaced(shared.client.clone(), &namespace);
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            tracing::info!(machine = %machine.name_any(), secret = %name, "generated the VM's Administrator password and stored it in a Secret");
            Ok(PasswordSecretOutcome::Created(password))
        }
        // Made by an earlier attempt, not yet in the watch cache: used once it is there.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            Ok(PasswordSecretOutcome::NotYetCached)
        }
        Err(error) => Err(Error::kube(
            format!("create Secret {namespace}/{name}"),
            error,
        )),
    }
}

/// What a create's plan is made from ([`Read::CreateInputs`]), as it is: the lookups in Prism of
/// what `spec` refers to, and the Secrets named, from the Secret cache. Nothing is judged here:
/// a Secret missing, without its key, or owned by another object is the plan's to decide about.
pub(super) async fn read_create_inputs(
    shared: &Shared,
    machine: &Machine,
    spec: &ParsedSpec,
    environment: &Environment,
    user_data: Option<&SecretKey>,
    admin_password: Option<&SecretKey>,
) -> CreateInputs {
    let failure_domains = environment
        .infrastructure
        .as_ref()
        .map(|info| info.failure_domains.clone())
        .unwrap_or_default();
    let namespace = machine.namespace().unwrap_or_default();
    let secret = |key: &SecretKey| secret_read(shared, &namespace, key);
    CreateInputs {
        resolved: lookups(&environment.connection, machine, spec, &failure_domains).await,
        user_data: user_data.map(secret),
        admin_password: admin_password.map(secret),
    }
}

/// One key of Secret `key.name` in `namespace`, as the Secret cache has it.
fn secret_read(shared: &Shared, namespace: &str, key: &SecretKey) -> SecretRead {
    let Some(secret) = shared
        .secrets
        .get(&ObjectRef::new(&key.name).within(namespace))
    else {
        return SecretRead::Missing;
    };
    SecretRead::Found {
        owners: secret
            .metadata
            .owner_references
            .iter()
            .flatten()
            .map(|owner| owner.uid.clone())
            .collect(),
        value: secret
            .data
            .as_ref()
            .and_then(|data| data.get(key.key))
            .map(|bytes| SecretValue::new(bytes.0.clone())),
    }
}
