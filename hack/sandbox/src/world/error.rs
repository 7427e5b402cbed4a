//! Why the world could not start, or a wait or an action on it failed.

use std::time::Duration;

use crate::machine_autoscaler::MachineAutoscalerError;
use crate::manifests::ManifestError;

/// Why the world could not start, or a wait or an action failed.
#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("prism-mock: {0}")]
    Mock(Box<prism_mock::StartError>),
    #[error("kube-sim: {0}")]
    KubeSim(Box<kube_sim::StartError>),
    #[error("kube-sim client: {0}")]
    KubeClient(Box<kube_sim::ClientError>),
    #[error("real control plane: {0}")]
    RealCluster(Box<crate::real_cluster::RealClusterError>),
    #[error(transparent)]
    AuditLog(#[from] crate::writes::AuditLogError),
    #[error(transparent)]
    Seed(#[from] crate::cluster_objects::SeedError),
    #[error("kube-sim: {what}: {message}")]
    Store { what: String, message: String },
    #[error("manifest {0}")]
    Manifest(#[from] ManifestError),
    #[error("{action}: {source}")]
    Api {
        action: String,
        source: Box<kube::Error>,
    },
    #[error("no controller replica {index}: the world runs {count}")]
    NoSuchReplica { index: usize, count: usize },
    #[error(transparent)]
    MachineAutoscaler(#[from] MachineAutoscalerError),
    #[error("{0}")]
    Autoscaler(#[from] crate::autoscaler::AutoscalerError),
    #[error("timed out after {after:?} waiting for {what}; {detail}; now: {state}")]
    Timeout {
        what: String,
        after: Duration,
        detail: String,
        state: String,
    },
    #[error(
        "controller replica {replica} (pid {pid:?}) exited with {status} while waiting for {what}; last log lines:\n{log_tail}"
    )]
    ControllerExited {
        what: String,
        replica: usize,
        pid: Option<u32>,
        status: String,
        /// The exit code, when the process exited (not killed by a signal).
        code: Option<i32>,
        log_tail: String,
    },
}

impl From<prism_mock::StartError> for WorldError {
    fn from(error: prism_mock::StartError) -> Self {
        Self::Mock(Box::new(error))
    }
}

impl From<kube_sim::StartError> for WorldError {
    fn from(error: kube_sim::StartError) -> Self {
        Self::KubeSim(Box::new(error))
    }
}

impl From<kube_sim::ClientError> for WorldError {
    fn from(error: kube_sim::ClientError) -> Self {
        Self::KubeClient(Box::new(error))
    }
}

pub(super) fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> WorldError {
    let what = what.into();
    move |source| WorldError::Io { what, source }
}

pub(super) fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> WorldError {
    let action = action.into();
    move |source| WorldError::Api {
        action,
        source: Box::new(source),
    }
}
