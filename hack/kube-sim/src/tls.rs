//! Optional HTTPS: a throw-away CA and a server certificate for `127.0.0.1`, `::1` and
//! `localhost`, made at start, so clients can be tested on the same path as against a real API
//! server (a CA bundle in the kubeconfig).

use std::sync::Arc;

pub use k8s_semantics::pki::TlsError;
use k8s_semantics::pki::{Ca, LOOPBACK_NAMES};

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
    let ca = Ca::generate("kube-sim CA")?;
    let server = ca.serving("kube-sim", &LOOPBACK_NAMES)?;
    Ok(TlsMaterial {
        ca_pem: ca.pem(),
        ca_der: ca.der().to_vec(),
        server_config: ca.server_config(&server)?,
    })
}
