//! A Prism connection that could not be made or was refused, as the Machine shows it: a
//! Machine not yet provisioned enters `Provisioning` (as the machine-api-operator sets it for a
//! Machine whose instance does not exist yet) and its `MachineCreation` condition says what is
//! wrong and what fixes it. The reconcile fails with the error, which the executor publishes as
//! a Warning event.

use super::draft::{Ask, Draft};
use crate::api::{CREDENTIALS_KEY, phase};
use crate::machine::decision::{Failure, Next};
use crate::machine::snapshot::EnvironmentProblem;
use crate::machine::status::{conditions, unknown_machine_condition};

/// What a reconcile without a Prism connection does: explain it on a Machine still to be
/// created, then fail (retried with backoff; a changed Secret is reconciled at once).
pub(super) fn unavailable(d: &mut Draft<'_>, problem: &EnvironmentProblem) -> Ask {
    let state = &d.s.machine.state;
    if !d.deleting() {
        // MAO: an `Exists` that fails leaves `InstanceExists` Unknown (`controller.go`,
        // `Reconcile`, "Failed to check if machine exists").
        let condition = unknown_machine_condition(
            conditions::INSTANCE_EXISTS,
            conditions::ERROR_CHECKING_PROVIDER,
            format!("Failed to check if machine exists: {}", explain(problem).1),
            &d.now(),
        );
        d.update.conditions.push(condition);
    }
    let before_create = !d.deleting()
        && !state.is_provisioned()
        && (state.phase.is_empty() || state.phase == phase::PROVISIONING);
    if before_create {
        if state.phase.is_empty() {
            d.update.phase = Some(phase::PROVISIONING);
        }
        let (reason, message) = explain(problem);
        d.provider_condition(conditions::MACHINE_CREATION, false, reason, message);
    }
    Ask::Done(Next::Retry(Failure::Environment))
}

/// The `MachineCreation` reason and message for `problem`: what is wrong, naming the Secret or
/// the endpoint, and the fix.
fn explain(problem: &EnvironmentProblem) -> (&'static str, String) {
    const AT_ONCE: &str = "the controller uses a corrected Secret at once";
    match problem {
        EnvironmentProblem::NoEndpoint => (
            conditions::PRISM_ENDPOINT_MISSING,
            "no Prism Central endpoint: set spec.platformSpec.nutanix.prismCentral in Infrastructure/cluster, or start the controller with --prism-endpoint".to_owned(),
        ),
        EnvironmentProblem::InfrastructureInvalid { detail } => (
            conditions::PRISM_ENDPOINT_MISSING,
            format!("Infrastructure/cluster cannot be read for the Prism Central endpoint ({detail}): correct spec.platformSpec.nutanix.prismCentral, or start the controller with --prism-endpoint"),
        ),
        EnvironmentProblem::CredentialsSecretMissing { secret } => (
            conditions::CREDENTIALS_SECRET_MISSING,
            format!("credentials Secret {secret} not found: create it with key {CREDENTIALS_KEY} (manifests/examples/credentials-secret.yaml), or name another Secret in providerSpec.credentialsSecret; {AT_ONCE}"),
        ),
        EnvironmentProblem::CredentialsKeyMissing { secret } => (
            conditions::CREDENTIALS_SECRET_INVALID,
            format!("credentials Secret {secret} has no key {CREDENTIALS_KEY}: put the Prism Central credentials under it (a JSON list of basic_auth entries, manifests/examples/credentials-secret.yaml); {AT_ONCE}"),
        ),
        EnvironmentProblem::CredentialsUnreadable { secret, detail } => (
            conditions::CREDENTIALS_SECRET_INVALID,
            format!("credentials Secret {secret}: {detail}: write key {CREDENTIALS_KEY} as [{{\"type\":\"basic_auth\",\"data\":{{\"prismCentral\":{{\"username\":...,\"password\":...}}}}}}]; {AT_ONCE}"),
        ),
        EnvironmentProblem::CredentialsRefused { secret } => (
            conditions::CREDENTIALS_REFUSED,
            format!("Prism Central refused the user name or password of credentials Secret {secret} (401): correct key {CREDENTIALS_KEY}; {AT_ONCE}"),
        ),
        EnvironmentProblem::ClientUnusable { detail } => (
            conditions::PRISM_CLIENT_UNUSABLE,
            format!("the Prism Central client cannot be set up: {detail}"),
        ),
        EnvironmentProblem::CertificateUntrusted { endpoint } => (
            conditions::PRISM_CERTIFICATE_UNTRUSTED,
            format!("the controller does not trust the certificate of Prism Central {endpoint}: add its CA to the trusted bundle (--prism-ca-file, or the cluster's trusted CA bundle on OpenShift)"),
        ),
        EnvironmentProblem::Unreachable { endpoint } => (
            conditions::PRISM_UNREACHABLE,
            format!("Prism Central {endpoint} cannot be reached: check that the address (Infrastructure/cluster or --prism-endpoint) is right and reachable from the controller's pod on port 9440"),
        ),
    }
}

/// The Prism connection, or the reconcile fails with its problem ([`unavailable`]).
pub(super) fn require(d: &mut Draft<'_>) -> Result<(), Ask> {
    match d.environment()? {
        Ok(_) => Ok(()),
        Err(problem) => Err(unavailable(d, &problem)),
    }
}
