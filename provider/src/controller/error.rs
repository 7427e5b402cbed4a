//! Why a reconcile failed. Every failure is retried with per-Machine backoff; none carries a
//! secret (Prism and Kubernetes errors quote no credentials, validation messages quote no user
//! data, and Secret problems name the Secret and key, never the content).

use std::time::Duration;

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
    /// Something the controller needs is missing or unusable (an endpoint, a Secret).
    #[error("{0}")]
    Configuration(String),
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
    /// The VM reported an error state.
    #[error("{0}")]
    VmError(String),
    /// The Node cannot be drained yet (an eviction is blocked); the drain retries.
    #[error("drain: {0}")]
    Drain(String),
}

impl Error {
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

    /// A short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Kube { .. } => "Kubernetes",
            Self::Prism(_) | Self::PrismConfig(_) => "Prism",
            Self::Configuration(_) => "Configuration",
            Self::InvalidMachine(_) => "InvalidMachine",
            Self::CreateRetry(_) => "CreateRetry",
            Self::DeployUnconfirmed(_) => "DeployUnconfirmed",
            Self::VmError(_) => "VmError",
            Self::Drain(_) => "Drain",
        }
    }
}
