//! The control plane's key material, made at start and written into its work directory: one CA
//! (it signs the API server's and the webhook server's serving certificates, the admin client
//! certificate, and, through kube-controller-manager, the kubelets' approved CSRs), and the
//! service-account signing key. Names and flags follow the Kubernetes documentation "PKI
//! certificates and requirements" (kube-apiserver's `--client-ca-file`, `--tls-cert-file`,
//! `--service-account-key-file`, `--service-account-signing-key-file`; kube-controller-manager's
//! `--cluster-signing-cert-file`).

use std::path::{Path, PathBuf};

use k8s_semantics::pki::{Ca, LOOPBACK_NAMES, key_pair};

use super::RealClusterError;

/// Paths of what [`write`] made.
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub ca_pem: String,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// `tls.crt` and `tls.key` in the directory controller-runtime's webhook server reads.
    pub webhook_dir: PathBuf,
    pub admin_cert_pem: String,
    pub admin_key_pem: String,
    pub service_account_public: PathBuf,
    pub service_account_private: PathBuf,
}

fn write_file(path: &Path, text: &str) -> Result<(), RealClusterError> {
    std::fs::write(path, text).map_err(|source| RealClusterError::Io {
        what: format!("write {}", path.display()),
        source,
    })
}

/// Makes the CA, the serving certificates for the loopback addresses, the admin client
/// certificate (group `system:masters`) and the service-account key, under `dir`.
pub fn write(dir: &Path) -> Result<Pki, RealClusterError> {
    let ca = Ca::generate("real-cluster CA")?;
    let server = ca.serving("kube-apiserver", &LOOPBACK_NAMES)?;
    let webhook = ca.serving("machine-api-webhooks", &LOOPBACK_NAMES)?;
    // The API server maps a client certificate's organisations to groups: `system:masters` is
    // bound to cluster-admin by the bootstrap RBAC policy.
    let admin = ca.client(super::ADMIN_USER, &["system:masters"])?;
    let service_account = key_pair("service-account")?;

    let webhook_dir = dir.join("webhook-tls");
    std::fs::create_dir_all(&webhook_dir).map_err(|source| RealClusterError::Io {
        what: format!("create {}", webhook_dir.display()),
        source,
    })?;
    let pki = Pki {
        ca_cert: dir.join("ca.crt"),
        ca_key: dir.join("ca.key"),
        ca_pem: ca.pem(),
        server_cert: dir.join("apiserver.crt"),
        server_key: dir.join("apiserver.key"),
        webhook_dir,
        admin_cert_pem: admin.certificate.pem(),
        admin_key_pem: admin.key_pem(),
        service_account_public: dir.join("sa.pub"),
        service_account_private: dir.join("sa.key"),
    };
    write_file(&pki.ca_cert, &pki.ca_pem)?;
    write_file(&pki.ca_key, &ca.key_pem())?;
    write_file(&pki.server_cert, &server.certificate.pem())?;
    write_file(&pki.server_key, &server.key_pem())?;
    write_file(&pki.webhook_dir.join("tls.crt"), &webhook.certificate.pem())?;
    write_file(&pki.webhook_dir.join("tls.key"), &webhook.key_pem())?;
    write_file(
        &pki.service_account_public,
        &service_account.public_key_pem(),
    )?;
    write_file(
        &pki.service_account_private,
        &service_account.serialize_pem(),
    )?;
    Ok(pki)
}
