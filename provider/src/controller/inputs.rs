//! What a reconcile reads besides the Machine: Secrets (from the watched store, so a rotated
//! Secret is seen without a restart), and the Prism connection they and `Infrastructure/cluster`
//! ([`super::cluster_config`]) lead to.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use super::error::{Error, SecretProblem};
use super::shared::Shared;
use crate::actuator::Connection;
use crate::actuator::credentials::{CREDENTIALS_KEY, PrismCredentials};
use crate::actuator::infrastructure::{InfrastructureInfo, prism_endpoint};
use crate::api::Machine;
use crate::plan::machine::EnvironmentProblem;
use crate::plan::vm::spec::ParsedSpec;

/// Credentials Secret name when the providerSpec names none (the machine-api webhook's default).
pub const DEFAULT_CREDENTIALS_SECRET: &str = "nutanix-credentials";

/// The value of `key` in Secret `namespace/name`, from the watched store.
pub fn secret_value(
    secrets: &Store<Secret>,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<Vec<u8>, SecretProblem> {
    let secret = secrets
        .get(&ObjectRef::new(name).within(namespace))
        .ok_or_else(|| SecretProblem::NotFound {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })?;
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .map(|bytes| bytes.0.clone())
        .ok_or_else(|| SecretProblem::MissingKey {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key: key.to_owned(),
        })
}

/// The name of the credentials Secret a Machine whose providerSpec is `spec` uses (its
/// namespace's).
pub fn credentials_secret_of(spec: &ParsedSpec) -> String {
    spec.credentials_secret()
        .unwrap_or(DEFAULT_CREDENTIALS_SECRET)
        .to_owned()
}

/// The Secrets a Machine whose providerSpec is `spec` reads (credentials, user data,
/// Administrator password), by name in its namespace: a change to one of them is reconciled at
/// once.
pub fn secrets_named_by(spec: &ParsedSpec) -> Vec<String> {
    std::iter::once(credentials_secret_of(spec))
        .chain(spec.data_secrets().into_iter().map(str::to_owned))
        .collect()
}

/// The Prism side of a Machine: its connection and Infrastructure's settings.
#[derive(Debug)]
pub struct Environment {
    pub connection: Arc<Connection>,
    pub infrastructure: Option<InfrastructureInfo>,
}

/// Builds the Prism connection for `machine`, whose providerSpec is `spec`: endpoint from
/// `--prism-endpoint` or Infrastructure, credentials from the Machine's credentials Secret.
pub async fn environment(
    shared: &Shared,
    machine: &Machine,
    spec: &ParsedSpec,
) -> Result<Environment, Error> {
    let infrastructure = shared.infrastructure.get().await?;
    let endpoint = prism_endpoint(
        shared.settings.prism_endpoint.as_deref(),
        infrastructure.as_ref(),
    )
    .ok_or(Error::NoPrismEndpoint)?;
    let secret_name = credentials_secret_of(spec);
    let namespace = machine.namespace().unwrap_or_default();
    let bytes = secret_value(&shared.secrets, &namespace, &secret_name, CREDENTIALS_KEY)
        .map_err(Error::CredentialsSecret)?;
    let credentials = PrismCredentials::parse(&bytes).map_err(|source| Error::Credentials {
        namespace: namespace.clone(),
        name: secret_name.clone(),
        source,
    })?;
    let source = format!("{namespace}/{secret_name}");
    let connection = shared
        .actuator
        .connection(&endpoint, &source, &credentials)?;
    Ok(Environment {
        connection,
        infrastructure,
    })
}

/// What the plan is told of a failure of [`environment`]; `None` where the API server could not
/// be read, which is no fault of the Machine's environment (the reconcile fails and retries).
pub fn environment_problem(error: &Error) -> Option<EnvironmentProblem> {
    Some(match error {
        Error::NoPrismEndpoint => EnvironmentProblem::NoEndpoint,
        Error::Infrastructure(source) => EnvironmentProblem::InfrastructureInvalid {
            detail: source.to_string(),
        },
        Error::CredentialsSecret(SecretProblem::NotFound { namespace, name }) => {
            EnvironmentProblem::CredentialsSecretMissing {
                secret: format!("{namespace}/{name}"),
            }
        }
        Error::CredentialsSecret(SecretProblem::MissingKey {
            namespace, name, ..
        }) => EnvironmentProblem::CredentialsKeyMissing {
            secret: format!("{namespace}/{name}"),
        },
        Error::Credentials {
            namespace,
            name,
            source,
        } => EnvironmentProblem::CredentialsUnreadable {
            secret: format!("{namespace}/{name}"),
            detail: source.to_string(),
        },
        Error::PrismConfig(source) => EnvironmentProblem::ClientUnusable {
            detail: source.to_string(),
        },
        _ => return None,
    })
}

/// What the plan is told of a Prism call that failed for every call on the connection of
/// `machine` (whose providerSpec is `spec`) to `endpoint`: credentials refused (401), a
/// certificate not trusted, Prism Central not reached. `None` for any other failure (it
/// concerns this call only).
pub fn connection_problem(
    error: &Error,
    machine: &Machine,
    spec: &ParsedSpec,
    endpoint: &str,
) -> Option<EnvironmentProblem> {
    use prism_client::{Error as Prism, TransportKind};
    let Error::Prism(error) = error else {
        return None;
    };
    Some(match error {
        Prism::Unauthorized { .. } => EnvironmentProblem::CredentialsRefused {
            secret: format!(
                "{}/{}",
                machine.namespace().unwrap_or_default(),
                credentials_secret_of(spec)
            ),
        },
        Prism::Transport {
            kind: TransportKind::Tls,
            ..
        } => EnvironmentProblem::CertificateUntrusted {
            endpoint: endpoint.to_owned(),
        },
        Prism::Transport {
            kind: TransportKind::Connect | TransportKind::Timeout,
            ..
        } => EnvironmentProblem::Unreachable {
            endpoint: endpoint.to_owned(),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use prism_client::TransportKind;
    use serde_json::json;

    use super::*;

    fn machine(credentials: Option<&str>) -> Machine {
        let mut value = json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"providerSpec": {"value": {}}},
        });
        if let Some(name) = credentials {
            value["spec"]["providerSpec"]["value"]["credentialsSecret"] = json!({"name": name});
        }
        serde_json::from_value(value).unwrap()
    }

    fn transport(kind: TransportKind) -> Error {
        Error::Prism(prism_client::Error::Transport {
            endpoint: "vms/list",
            kind,
            detail: "failed".to_owned(),
        })
    }

    #[test]
    fn environment_failures_are_told_to_the_plan_by_cause() {
        let not_found = Error::CredentialsSecret(SecretProblem::NotFound {
            namespace: "ns".into(),
            name: "creds".into(),
        });
        let no_key = Error::CredentialsSecret(SecretProblem::MissingKey {
            namespace: "ns".into(),
            name: "creds".into(),
            key: CREDENTIALS_KEY.into(),
        });
        let table = [
            (Error::NoPrismEndpoint, Some(EnvironmentProblem::NoEndpoint)),
            (
                not_found,
                Some(EnvironmentProblem::CredentialsSecretMissing {
                    secret: "ns/creds".into(),
                }),
            ),
            (
                no_key,
                Some(EnvironmentProblem::CredentialsKeyMissing {
                    secret: "ns/creds".into(),
                }),
            ),
            // Reading the API server failed: no fault of the Machine's environment.
            (Error::Configuration("read".into()), None),
        ];
        for (error, problem) in table {
            assert_eq!(environment_problem(&error), problem, "{error}");
        }
    }

    #[test]
    fn prism_failures_of_the_whole_connection_are_told_to_the_plan_by_cause() {
        let endpoint = "https://pc:9440";
        let refused = Error::Prism(prism_client::Error::Unauthorized {
            endpoint: "vms/list",
        });
        let table = [
            (
                &refused,
                machine(None),
                Some(EnvironmentProblem::CredentialsRefused {
                    secret: format!("ns/{DEFAULT_CREDENTIALS_SECRET}"),
                }),
            ),
            (
                &refused,
                machine(Some("mine")),
                Some(EnvironmentProblem::CredentialsRefused {
                    secret: "ns/mine".into(),
                }),
            ),
            (
                &transport(TransportKind::Tls),
                machine(None),
                Some(EnvironmentProblem::CertificateUntrusted {
                    endpoint: endpoint.into(),
                }),
            ),
            (
                &transport(TransportKind::Connect),
                machine(None),
                Some(EnvironmentProblem::Unreachable {
                    endpoint: endpoint.into(),
                }),
            ),
            (
                &transport(TransportKind::Timeout),
                machine(None),
                Some(EnvironmentProblem::Unreachable {
                    endpoint: endpoint.into(),
                }),
            ),
            // A connection reset concerns one call, not the connection.
            (&transport(TransportKind::Other), machine(None), None),
        ];
        for (error, machine, problem) in table {
            assert_eq!(
                connection_problem(error, &machine, &ParsedSpec::of(&machine), endpoint),
                problem,
                "{error}"
            );
        }
    }
}
