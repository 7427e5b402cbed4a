//! Why the real control plane could not be started, or an action on it failed.

use std::path::PathBuf;

/// Why the real control plane could not be started.
#[derive(Debug, thiserror::Error)]
pub enum RealClusterError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Certificate(#[from] k8s_semantics::pki::CertificateError),
    #[error("{program} is not in {dir} (run hack/real-cluster/build.sh)")]
    MissingProgram { program: &'static str, dir: PathBuf },
    #[error("{program} exited during start ({status}); its log {log} ends:\n{log_tail}")]
    Exited {
        program: &'static str,
        status: std::process::ExitStatus,
        log: PathBuf,
        log_tail: String,
    },
    #[error("no free port in {start}..{end} on loopback")]
    NoFreePort { start: u16, end: u16 },
    #[error("{what} not ready within {seconds} s; logs in {dir}")]
    NotReady {
        what: String,
        seconds: u64,
        dir: PathBuf,
    },
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("{action}: {source}")]
    Api { action: String, source: kube::Error },
    #[error("manifest {path}: {message}")]
    Manifest { path: PathBuf, message: String },
    #[error("kubectl apply -k {dir} exited with {status}: {stderr}")]
    Kubectl {
        dir: PathBuf,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("the TokenRequest for ServiceAccount {service_account} answered no status.token")]
    NoToken { service_account: String },
    #[error("no program {program} was started on the control plane")]
    UnknownProgram { program: String },
    #[error("etcd: {action}: {message}")]
    Etcd { action: String, message: String },
    #[error(transparent)]
    Seed(#[from] crate::cluster_objects::SeedError),
}

pub(super) fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RealClusterError {
    let what = what.into();
    move |source| RealClusterError::Io { what, source }
}

pub(super) fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> RealClusterError {
    let action = action.into();
    move |source| RealClusterError::Api { action, source }
}
