//! Optional HTTPS: a throw-away CA and a server certificate for `127.0.0.1` and `localhost`, made at start, so
//! clients can be tested on the same path as against a real API server (a CA bundle in the kubeconfig).
//! rustls with the ring provider, passed explicitly.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Why TLS material could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Certificate generation failed.
    #[error("cannot generate the kube-sim {what} certificate: {source}")]
    Certificate {
        /// `CA` or `server`.
        what: &'static str,
        /// Cause.
        source: rcgen::Error,
    },
    /// rustls refused the configuration.
    #[error("cannot build the TLS server configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The CA clients must trust, and the server's rustls configuration.
#[derive(Debug, Clone)]
pub struct TlsMaterial {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// The CA certificate, DER (for `kube::Config::root_cert`).
    pub ca_der: Vec<u8>,
    /// Server configuration (ALPN h2 and http/1.1).
    pub server_config: Arc<rustls::ServerConfig>,
}

/// Makes a CA and a server certificate for `127.0.0.1`, `::1` and `localhost`.
pub fn generate() -> Result<TlsMaterial, TlsError> {
    let ca_error = |source| TlsError::Certificate { what: "CA", source };
    let server_error = |source| TlsError::Certificate {
        what: "server",
        source,
    };

    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(ca_error)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "kube-sim CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().map_err(ca_error)?;
    let ca_cert = ca_params.self_signed(&ca_key).map_err(ca_error)?;

    let names = vec![
        "127.0.0.1".to_string(),
        "::1".to_string(),
        "localhost".to_string(),
    ];
    let mut server_params = CertificateParams::new(names).map_err(server_error)?;
    server_params
        .distinguished_name
        .push(DnType::CommonName, "kube-sim");
    let server_key = KeyPair::generate().map_err(server_error)?;
    let issuer = Issuer::new(ca_params, &ca_key);
    let server_cert = server_params
        .signed_by(&server_key, &issuer)
        .map_err(server_error)?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
    let chain: Vec<CertificateDer<'static>> =
        vec![server_cert.der().clone(), ca_cert.der().clone()];
    let mut server_config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    server_config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsMaterial {
        ca_pem: ca_cert.pem(),
        ca_der: ca_cert.der().to_vec(),
        server_config: Arc::new(server_config),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_a_ca_and_an_alpn_server_config() {
        let material = generate().unwrap();
        assert!(material.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(
            material.server_config.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
    }
}
