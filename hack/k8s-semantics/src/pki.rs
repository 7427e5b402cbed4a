//! A throw-away certificate authority made at start, and the certificates it signs for the
//! stand-ins: serving certificates for the loopback addresses (kube-sim, prism-mock, the real
//! control plane's API and webhook servers) and client certificates whose organisations the API
//! server reads as groups. Profiles follow the Kubernetes documentation "PKI certificates and
//! requirements". ECDSA P-256 keys (rcgen's default); rustls with the ring provider, passed
//! explicitly.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, CertifiedIssuer, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// The names a stand-in on this machine is reached by.
pub const LOOPBACK_NAMES: [&str; 3] = ["127.0.0.1", "::1", "localhost"];

/// Why a key or certificate could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot generate the {what} certificate: {source}")]
pub struct CertificateError {
    /// Which certificate (its common name) or key.
    pub what: String,
    /// Cause.
    pub source: rcgen::Error,
}

/// Why a server's TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate could not be made.
    #[error(transparent)]
    Certificate(#[from] CertificateError),
    /// rustls refused the configuration.
    #[error("cannot build the TLS server configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// A key pair freshly generated, its failure named after `what`.
pub fn key_pair(what: &str) -> Result<KeyPair, CertificateError> {
    KeyPair::generate().map_err(error(what))
}

fn error(what: &str) -> impl FnOnce(rcgen::Error) -> CertificateError {
    let what = what.to_owned();
    move |source| CertificateError { what, source }
}

/// A self-signed CA that may sign anything (no path length limit).
#[derive(Debug)]
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate the CA signed, with its private key.
#[derive(Debug)]
pub struct Issued {
    pub certificate: Certificate,
    pub key: KeyPair,
}

impl Issued {
    /// The private key, PKCS#8 PEM.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }
}

impl Ca {
    /// A new CA named `common_name`.
    pub fn generate(common_name: &str) -> Result<Self, CertificateError> {
        let fail = || error(common_name);
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(fail())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = key_pair(common_name)?;
        let issuer = CertifiedIssuer::self_signed(params, key).map_err(fail())?;
        Ok(Self { issuer })
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA certificate, DER.
    pub fn der(&self) -> &[u8] {
        self.issuer.der()
    }

    /// The CA's private key, PKCS#8 PEM (kube-controller-manager signs with it).
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// A serving certificate for `names` (DNS names or IP addresses), server auth only.
    pub fn serving(&self, common_name: &str, names: &[&str]) -> Result<Issued, CertificateError> {
        let sans: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        let mut params = CertificateParams::new(sans).map_err(error(common_name))?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        self.sign(common_name, params)
    }

    /// A client certificate for user `common_name` in the groups `organizations`.
    pub fn client(
        &self,
        common_name: &str,
        organizations: &[&str],
    ) -> Result<Issued, CertificateError> {
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(error(common_name))?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        for organization in organizations {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *organization);
        }
        self.sign(common_name, params)
    }

    fn sign(&self, what: &str, params: CertificateParams) -> Result<Issued, CertificateError> {
        let key = key_pair(what)?;
        let certificate = params.signed_by(&key, &self.issuer).map_err(error(what))?;
        Ok(Issued { certificate, key })
    }

    /// The rustls configuration of a server presenting `serving` (its chain up to this CA),
    /// offering HTTP/2 and HTTP/1.1 by ALPN as an API server does.
    pub fn server_config(&self, serving: &Issued) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(serving.key.serialize_der()));
        let chain = vec![serving.certificate.der().clone(), self.issuer.der().clone()];
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_a_ca_and_an_alpn_server_config() {
        let ca = Ca::generate("test CA").unwrap();
        assert!(ca.pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let serving = ca.serving("test", &LOOPBACK_NAMES).unwrap();
        let config = ca.server_config(&serving).unwrap();
        assert_eq!(
            config.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
    }

    #[test]
    fn client_certificates_carry_their_groups() {
        let ca = Ca::generate("test CA").unwrap();
        let admin = ca.client("admin", &["system:masters"]).unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(admin.certificate.der()).unwrap();
        let subject = parsed.subject();
        let text = |a: &x509_parser::x509::AttributeTypeAndValue<'_>| {
            a.as_str().unwrap_or_default().to_owned()
        };
        assert_eq!(
            subject.iter_common_name().map(text).collect::<Vec<_>>(),
            ["admin"]
        );
        assert_eq!(
            subject.iter_organization().map(text).collect::<Vec<_>>(),
            ["system:masters"]
        );
        assert_eq!(
            parsed
                .issuer()
                .iter_common_name()
                .map(text)
                .collect::<Vec<_>>(),
            ["test CA"]
        );
    }
}
