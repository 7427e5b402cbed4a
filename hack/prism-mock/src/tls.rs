//! A CA and a server certificate generated at start (SANs 127.0.0.1, localhost, ::1), and the rustls config.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// Error setting up TLS.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Certificate generation failed.
    #[error("generating the {what} certificate: {source}")]
    Generate {
        /// CA or server.
        what: &'static str,
        /// Underlying error.
        source: rcgen::Error,
    },
    /// rustls refused the configuration.
    #[error("building the TLS server configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// Generated TLS material.
pub(crate) struct Tls {
    pub(crate) ca_pem: String,
    pub(crate) server_config: Arc<ServerConfig>,
}

pub(crate) fn generate() -> Result<Tls, TlsError> {
    let ca_err = |source| TlsError::Generate { what: "CA", source };
    let server_err = |source| TlsError::Generate {
        what: "server",
        source,
    };
    let ca_key = KeyPair::generate().map_err(ca_err)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(ca_err)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "prism-mock test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(ca_err)?;

    let server_key = KeyPair::generate().map_err(server_err)?;
    let sans = vec![
        "127.0.0.1".to_owned(),
        "localhost".to_owned(),
        "::1".to_owned(),
    ];
    let mut params = CertificateParams::new(sans).map_err(server_err)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "prism-mock");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let server_cert = params.signed_by(&server_key, &ca).map_err(server_err)?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![server_cert.der().clone(), ca.der().clone()], key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Tls {
        ca_pem: ca.pem(),
        server_config: Arc::new(config),
    })
}
