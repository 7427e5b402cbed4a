//! The control plane's key material, made at start and written into its work directory: one CA
//! (it signs the API server's and the webhook server's serving certificates, the admin client
//! certificate, and, through kube-controller-manager, the kubelets' approved CSRs), and the
//! service-account signing key. Names and flags follow the Kubernetes documentation "PKI
//! certificates and requirements" (kube-apiserver's `--client-ca-file`, `--tls-cert-file`,
//! `--service-account-key-file`, `--service-account-signing-key-file`; kube-controller-manager's
//! `--cluster-signing-cert-file`).

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

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

fn pki_error(what: &'static str) -> impl FnOnce(rcgen::Error) -> RealClusterError {
    move |source| RealClusterError::Certificate { what, source }
}

fn write_file(path: &Path, text: &str) -> Result<(), RealClusterError> {
    std::fs::write(path, text).map_err(|source| RealClusterError::Io {
        what: format!("write {}", path.display()),
        source,
    })
}

/// Makes the CA, the serving certificates for `127.0.0.1` and `localhost`, the admin client
/// certificate (group `system:masters`) and the service-account key, under `dir`.
pub fn write(dir: &Path) -> Result<Pki, RealClusterError> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(pki_error("CA"))?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "real-cluster CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().map_err(pki_error("CA"))?;
    let ca_cert = ca_params.self_signed(&ca_key).map_err(pki_error("CA"))?;
    let issuer = Issuer::new(ca_params, &ca_key);

    let serving = |common_name: &str, what: &'static str| {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .map_err(pki_error(what))?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let key = KeyPair::generate().map_err(pki_error(what))?;
        let cert = params.signed_by(&key, &issuer).map_err(pki_error(what))?;
        Ok::<_, RealClusterError>((cert.pem(), key.serialize_pem()))
    };
    let (server_pem, server_key_pem) = serving("kube-apiserver", "API server")?;
    let (webhook_pem, webhook_key_pem) = serving("machine-api-webhooks", "webhook server")?;

    // The API server maps a client certificate's organisations to groups: `system:masters` is
    // bound to cluster-admin by the bootstrap RBAC policy.
    let mut admin_params =
        CertificateParams::new(Vec::<String>::new()).map_err(pki_error("admin"))?;
    admin_params
        .distinguished_name
        .push(DnType::CommonName, super::ADMIN_USER);
    admin_params
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    let admin_key = KeyPair::generate().map_err(pki_error("admin"))?;
    let admin_cert = admin_params
        .signed_by(&admin_key, &issuer)
        .map_err(pki_error("admin"))?;

    let service_account = KeyPair::generate().map_err(pki_error("service-account"))?;

    let webhook_dir = dir.join("webhook-tls");
    std::fs::create_dir_all(&webhook_dir).map_err(|source| RealClusterError::Io {
        what: format!("create {}", webhook_dir.display()),
        source,
    })?;
    let pki = Pki {
        ca_cert: dir.join("ca.crt"),
        ca_key: dir.join("ca.key"),
        ca_pem: ca_cert.pem(),
        server_cert: dir.join("apiserver.crt"),
        server_key: dir.join("apiserver.key"),
        webhook_dir,
        admin_cert_pem: admin_cert.pem(),
        admin_key_pem: admin_key.serialize_pem(),
        service_account_public: dir.join("sa.pub"),
        service_account_private: dir.join("sa.key"),
    };
    write_file(&pki.ca_cert, &pki.ca_pem)?;
    write_file(&pki.ca_key, &ca_key.serialize_pem())?;
    write_file(&pki.server_cert, &server_pem)?;
    write_file(&pki.server_key, &server_key_pem)?;
    write_file(&pki.webhook_dir.join("tls.crt"), &webhook_pem)?;
    write_file(&pki.webhook_dir.join("tls.key"), &webhook_key_pem)?;
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
