//! Why a reconcile failed. Every failure is retried with per-Machine backoff; none carries a
//! secret (Prism and Kubernetes errors quote no credentials, validation messages quote no user
//! data, and Secret problems name the Secret and key, never the content).

use std::time::Duration;

use crate::actuator::credentials::{CREDENTIALS_KEY, CredentialsError};
use crate::actuator::infrastructure::InfrastructureError;

/// A failed reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    #[error("Prism Central: {0}")]
    Prism(#[from] prism_client::Error),
    #[error("Prism Central client: {0}")]
    PrismConfig(#[from] prism_client::ConfigError),
    /// Something the controller needs is missing or unusable.
    #[error("{0}")]
    Configuration(String),
    /// `Infrastructure/cluster` holds Nutanix settings that cannot be read.
    #[error("Infrastructure/cluster: {0}")]
    Infrastructure(#[from] InfrastructureError),
    #[error(
        "no Prism Central endpoint: Infrastructure/cluster has no spec.platformSpec.nutanix.prismCentral and --prism-endpoint is not set"
    )]
    NoPrismEndpoint,
    /// The Machine's credentials Secret (or its key) is missing.
    #[error("credentials: {0}")]
    CredentialsSecret(SecretProblem),
    /// The credentials Secret's content cannot be used.
    #[error("credentials Secret {namespace}/{name}: {source}")]
    Credentials {
        namespace: String,
        name: String,
        #[source]
        source: CredentialsError,
    },
    /// The Machine lacks what every Machine needs (cluster label, providerSpec).
    #[error("invalid Machine: {0}")]
    InvalidMachine(String),
    /// A create could not be made now (unresolved references, a failed task that will be
    /// retried); the message is also in the condition and the event.
    #[error("{0}")]
    CreateRetry(String),
    /// A deletion cannot yet confirm whether a template deploy made a VM (its plan needs a
    /// lookup that failed); the deletion retries.
    #[error("{0}")]
    DeployUnconfirmed(String),
    /// Several VMs could be the Machine's unrecorded VM; none is taken.
    #[error("{0}")]
    AmbiguousVm(String),
    /// The VM reported an error state.
    #[error("{0}")]
    VmError(String),
    /// The Machine's providerStatus cannot be used (its recorded VM would be lost): the
    /// Machine is left as it is until it is corrected.
    #[error("Machine {machine}: {source}")]
    ProviderStatus {
        machine: String,
        #[source]
        source: crate::api::ProviderStatusError,
    },
    /// Prism failed to detach a volume group from the VM being deleted (the message names the
    /// VM, the volume group and Prism's error); the deletion retries.
    #[error("{0}")]
    VolumeGroupDetachFailed(String),
    /// A write to the Machine was answered 404: another writer removed its last finalizer and
    /// the API server removed it. The reconcile ends there ([`crate::controller::machine`]).
    #[error("Machine {machine} is gone: {action} was answered 404")]
    MachineGone { machine: String, action: String },
}

/// Why a Secret value could not be read; names the Secret and key, never the content.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretProblem {
    #[error("Secret {namespace}/{name} not found")]
    NotFound { namespace: String, name: String },
    #[error("Secret {namespace}/{name} has no key {key:?}")]
    MissingKey {
        namespace: String,
        name: String,
        key: String,
    },
}

impl Error {
    /// Whether the reconcile that failed published this failure on the Machine already (a
    /// condition and an event where it happened); every other failure is published as an event
    /// by the reconcile wrapper.
    pub fn published(&self) -> bool {
        matches!(
            self,
            Self::CreateRetry(_)
                | Self::DeployUnconfirmed(_)
                | Self::InvalidMachine(_)
                | Self::VmError(_)
                | Self::AmbiguousVm(_)
                | Self::VolumeGroupDetachFailed(_)
        )
    }

    /// What an administrator does about this failure, where the cause tells.
    pub fn advice(&self) -> Option<String> {
        let credentials_fix = "the controller uses a corrected Secret at once";
        Some(match self {
            Self::NoPrismEndpoint => "set spec.platformSpec.nutanix.prismCentral in Infrastructure/cluster, or start the controller with --prism-endpoint".to_owned(),
            Self::CredentialsSecret(SecretProblem::NotFound { namespace, name }) => format!(
                "create Secret {namespace}/{name} with key {CREDENTIALS_KEY} (manifests/examples/credentials-secret.yaml), or name another Secret in providerSpec.credentialsSecret; {credentials_fix}"
            ),
            Self::CredentialsSecret(SecretProblem::MissingKey { namespace, name, .. }) => format!(
                "put the Prism Central credentials under key {CREDENTIALS_KEY} of Secret {namespace}/{name} (a JSON list of basic_auth entries, manifests/examples/credentials-secret.yaml); {credentials_fix}"
            ),
            Self::Credentials { namespace, name, .. } => format!(
                "write key {CREDENTIALS_KEY} of Secret {namespace}/{name} as [{{\"type\":\"basic_auth\",\"data\":{{\"prismCentral\":{{\"username\":...,\"password\":...}}}}}}]; {credentials_fix}"
            ),
            Self::Prism(prism_client::Error::Unauthorized { .. }) => format!(
                "Prism Central refused the user name or password of the Machine's credentials Secret (providerSpec.credentialsSecret, else nutanix-credentials): correct key {CREDENTIALS_KEY}; {credentials_fix}"
            ),
            Self::PrismConfig(prism_client::ConfigError::PlainHttpRefused { .. }) => "use an https:// endpoint (Prism Central serves HTTPS on port 9440), or, for a lab whose Prism serves no TLS, start the controller with --prism-allow-plain-http".to_owned(),
            Self::Prism(prism_client::Error::Forbidden { .. }) => "the Prism Central user lacks a permission this operation needs: grant it a role that manages VMs (and reads images, subnets, clusters and categories)".to_owned(),
            Self::Prism(prism_client::Error::Transport {
                kind: prism_client::TransportKind::Tls,
                ..
            }) => "the controller does not trust Prism Central's certificate: add its CA to the trusted bundle (--prism-ca-file, or the cluster's trusted CA bundle on OpenShift)".to_owned(),
            Self::Prism(prism_client::Error::Transport {
                kind: prism_client::TransportKind::Connect | prism_client::TransportKind::Timeout,
                ..
            }) => "check that Prism Central's address (Infrastructure/cluster or --prism-endpoint) is right and reachable from the controller's pod on port 9440".to_owned(),
            Self::ProviderStatus { .. } => "write status.providerStatus.vmUUID as the VM's UUID (a string, as in the Machine's providerID) with a status patch; nothing is done to the Machine or its VM until then".to_owned(),
            _ => return None,
        })
    }

    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube {
            action: action.into(),
            source,
        }
    }

    /// How long Prism asked to wait, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Prism(error) => error.retry_after(),
            _ => None,
        }
    }

    /// Whether a Kubernetes write lost a race: its resourceVersion precondition failed because
    /// another writer changed the object since it was read (answer 409 with reason `Conflict`,
    /// not `AlreadyExists`). On a cluster this is routine: nodelink writes the same Machines.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Kube { source: kube::Error::Api(status), .. }
            if status.code == 409 && status.reason == "Conflict")
    }

    /// A short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            _ if self.is_conflict() => "Conflict",
            Self::Kube { .. } => "Kubernetes",
            Self::Prism(_) | Self::PrismConfig(_) => "Prism",
            Self::Configuration(_) => "Configuration",
            Self::NoPrismEndpoint => "NoPrismEndpoint",
            Self::Infrastructure(_) => "Infrastructure",
            Self::CredentialsSecret(_) | Self::Credentials { .. } => "Credentials",
            Self::InvalidMachine(_) => "InvalidMachine",
            Self::CreateRetry(_) => "CreateRetry",
            Self::DeployUnconfirmed(_) => "DeployUnconfirmed",
            Self::VmError(_) => "VmError",
            Self::AmbiguousVm(_) => "AmbiguousVm",
            Self::ProviderStatus { .. } => "ProviderStatus",
            Self::VolumeGroupDetachFailed(_) => "VolumeGroupDetachFailed",
            Self::MachineGone { .. } => "MachineGone",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(code: u16, reason: &str) -> Error {
        Error::kube(
            "patch status of Machine m",
            kube::Error::Api(Box::new(kube::core::Status {
                message: "the object has been modified".to_owned(),
                reason: reason.to_owned(),
                code,
                ..kube::core::Status::default()
            })),
        )
    }

    #[test]
    fn only_a_failed_precondition_is_a_conflict() {
        let conflict = answered(409, "Conflict");
        assert!(conflict.is_conflict());
        assert_eq!(conflict.reason(), "Conflict");
        for other in [answered(409, "AlreadyExists"), answered(404, "NotFound")] {
            assert!(!other.is_conflict(), "{other}");
            assert_eq!(other.reason(), "Kubernetes");
        }
    }

    #[test]
    fn a_refused_plain_http_endpoint_names_the_flag_that_allows_it() {
        let error = Error::PrismConfig(prism_client::ConfigError::PlainHttpRefused {
            endpoint: "http://pc:9440".to_owned(),
        });
        let advice = error.advice().unwrap_or_default();
        assert!(advice.contains("--prism-allow-plain-http"), "{advice}");
        assert!(error.to_string().contains("http://pc:9440"), "{error}");
    }
}
