//! The rustls configuration of one client: system roots plus an optional PEM bundle, ring provider, nothing
//! process-wide.

use std::io::BufRead;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::{self, SectionKind};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::config::CaBundle;
use crate::error::ConfigError;

/// The file the system roots are read from when a client is built: `SSL_CERT_FILE`, else the
/// first bundle of the usual places that exists (rustls-native-certs reads exactly this, through
/// openssl-probe: `load_native_certs`). On OpenShift the machine-api-operator mounts the
/// cluster's trusted CA bundle there (`/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem`,
/// openshift/machine-api-operator `pkg/operator/sync.go`), and the kubelet replaces it when the
/// ConfigMap changes: whoever wants new roots watches this file and builds new clients. `None`
/// when the roots come from a directory only (`SSL_CERT_DIR`) or from nowhere.
pub fn system_roots_file() -> Option<std::path::PathBuf> {
    std::env::var_os("SSL_CERT_FILE")
        .map(std::path::PathBuf::from)
        .or_else(|| openssl_probe::probe().cert_file)
}

/// Builds the TLS configuration. With `insecure`, any server certificate is accepted (signatures are still
/// checked, so the handshake itself stays sound) and a warning is logged.
pub(crate) fn client_config(
    ca_bundle: Option<&CaBundle>,
    insecure: bool,
) -> Result<rustls::ClientConfig, ConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // Read the bundle even when insecure, so a bad file is reported rather than silently unused.
    let extra_roots = match ca_bundle {
        Some(bundle) => read_bundle(bundle)?,
        None => Vec::new(),
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| ConfigError::Tls {
            reason: error.to_string(),
        })?;
    if insecure {
        tracing::warn!(
            "TLS verification of Prism Central is disabled (insecure): any server certificate is accepted"
        );
        let verifier = AcceptAnyServerCertificate {
            algorithms: provider.signature_verification_algorithms,
        };
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth());
    }
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    if !native.errors.is_empty() {
        tracing::debug!(
            errors = native.errors.len(),
            "some system root certificates could not be loaded"
        );
    }
    let (added, ignored) = roots.add_parsable_certificates(native.certs);
    tracing::debug!(added, ignored, "system root certificates");
    let origin = ca_bundle.map(origin_of).unwrap_or_default();
    for certificate in extra_roots {
        roots
            .add(certificate)
            .map_err(|error| ConfigError::CaBundleBadCertificate {
                origin: origin.clone(),
                reason: error.to_string(),
            })?;
    }
    if roots.is_empty() {
        tracing::warn!(
            "no trusted root certificates: every TLS connection to Prism Central will fail"
        );
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

fn origin_of(bundle: &CaBundle) -> String {
    match bundle {
        CaBundle::File(path) => path.display().to_string(),
        CaBundle::Pem { origin, .. } => origin.clone(),
    }
}

/// The certificates of a PEM bundle. Any non-certificate block (a key, a CRL) is refused, as is a bundle with
/// no certificate at all.
fn read_bundle(bundle: &CaBundle) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let origin = origin_of(bundle);
    let pem_bytes = match bundle {
        CaBundle::File(path) => {
            std::fs::read(path).map_err(|source| ConfigError::CaBundleUnreadable {
                path: path.display().to_string(),
                source,
            })?
        }
        CaBundle::Pem { pem, .. } => pem.clone(),
    };
    let mut reader: &[u8] = &pem_bytes;
    let mut certificates = Vec::new();
    loop {
        let section = pem::from_buf(&mut reader as &mut dyn BufRead).map_err(|error| {
            ConfigError::CaBundleInvalid {
                origin: origin.clone(),
                reason: error.to_string(),
            }
        })?;
        match section {
            None => break,
            Some((SectionKind::Certificate, der)) => certificates.push(CertificateDer::from(der)),
            Some((kind, _)) => {
                return Err(ConfigError::CaBundleNotCertificate {
                    origin,
                    kind: pem_label(kind),
                });
            }
        }
    }
    if certificates.is_empty() {
        return Err(ConfigError::CaBundleWithoutCertificates { origin });
    }
    Ok(certificates)
}

/// The PEM label of a section kind, as written in the file.
fn pem_label(kind: SectionKind) -> String {
    match kind {
        SectionKind::Certificate => "CERTIFICATE".to_owned(),
        SectionKind::PublicKey => "PUBLIC KEY".to_owned(),
        SectionKind::RsaPrivateKey => "RSA PRIVATE KEY".to_owned(),
        SectionKind::PrivateKey => "PRIVATE KEY".to_owned(),
        SectionKind::EcPrivateKey => "EC PRIVATE KEY".to_owned(),
        SectionKind::Crl => "X509 CRL".to_owned(),
        SectionKind::Csr => "CERTIFICATE REQUEST".to_owned(),
        other => format!("{other:?}"),
    }
}

/// Accepts any certificate chain, but still checks the handshake signatures with the provider's algorithms.
#[derive(Debug)]
struct AcceptAnyServerCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AcceptAnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem_bundle(text: &str) -> CaBundle {
        CaBundle::Pem {
            origin: "test bundle".to_owned(),
            pem: text.as_bytes().to_vec(),
        }
    }

    #[test]
    fn unreadable_file_is_a_clear_error() {
        let error =
            client_config(Some(&CaBundle::File("/nonexistent/ca.pem".into())), false).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("cannot read the CA bundle /nonexistent/ca.pem"),
            "{error}"
        );
    }

    #[test]
    fn pem_without_certificates_is_refused() {
        let error = client_config(Some(&pem_bundle("just text\n")), false).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the CA bundle test bundle holds no CERTIFICATE block"
        );
        let key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        let error = client_config(Some(&pem_bundle(key)), true).unwrap_err();
        assert!(
            error.to_string().contains("holds a PRIVATE KEY block"),
            "{error}"
        );
    }

    #[test]
    fn a_generated_ca_is_accepted() {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let ca = params.self_signed(&key).unwrap();
        assert!(client_config(Some(&pem_bundle(&ca.pem())), false).is_ok());
    }
}
