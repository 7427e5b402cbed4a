//! A CA and a server certificate generated at start (SANs 127.0.0.1, ::1, localhost), and the
//! rustls config.

use std::sync::Arc;

pub use k8s_semantics::pki::TlsError;
use k8s_semantics::pki::{Ca, LOOPBACK_NAMES};
use rustls::ServerConfig;

/// Generated TLS material.
pub(crate) struct Tls {
    pub(crate) ca_pem: String,
    pub(crate) server_config: Arc<ServerConfig>,
}

pub(crate) fn generate() -> Result<Tls, TlsError> {
    let ca = Ca::generate("prism-mock test CA")?;
    let server = ca.serving("prism-mock", &LOOPBACK_NAMES)?;
    Ok(Tls {
        ca_pem: ca.pem(),
        server_config: ca.server_config(&server)?,
    })
}
