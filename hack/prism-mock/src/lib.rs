//! A mock Prism Central for tests, benchmarks and the sandbox. Development tool, never shipped.
//!
//! It serves the v3 endpoints the provider uses (VMs, tasks, images, subnets, clusters, projects, hosts,
//! categories, idempotence identifiers, `users/me`) and the v4 template deploy, over HTTPS with a CA
//! generated at start, with the asynchronous behaviour and the failures real Prism Central has. See the
//! README for what it simulates and what it does not.
//!
//! The model (`store`, `seed`, `config`, `behaviour`, `faults`) knows nothing of HTTP; the HTTP layer (`app`,
//! `v3`, `v4`, `admin`, `errors`, `server`, `tls`) calls it and turns its answers and refusals into responses.
//! Imports point from the HTTP layer to the model only (README, "How it is built").
//!
//! ```no_run
//! # async fn demo() -> Result<(), prism_mock::StartError> {
//! let mock = prism_mock::MockPrism::start(prism_mock::MockConfig::default()).await?;
//! println!("{} trusts {}", mock.base_url(), mock.ca_pem().unwrap_or_default());
//! mock.shutdown().await;
//! # Ok(()) }
//! ```

mod admin;
mod app;
mod behaviour;
mod config;
mod errors;
mod faults;
mod seed;
mod server;
mod store;
mod tls;
mod v3;
mod v4;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use admin::{Admin, VmSummary, VolumeGroupSummary};
pub use behaviour::{CloneBehaviour, DeployTaskShape, GuestBehaviour, Timings};
pub use config::{Credentials, MockConfig};
pub use faults::{
    Counter, FaultKind, FaultRule, InstalledRule, RateLimit, RequestRecord, TimedRequest,
};
pub use seed::{
    CategorySeed, ClusterSeed, GpuSeed, GuestOs, HostSeed, ImageSeed, MAX_FOREIGN_VMS,
    PrismCentralSeed, ProjectSeed, Seed, SeedError, SubnetSeed, TemplateSeed, VmSeed,
};
pub use store::record::GuestCustomization;
pub use tls::TlsError;

/// Path prefix of the v3 API.
pub const V3_BASE_PATH: &str = "/api/nutanix/v3";

/// Error starting a mock.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The seed is inconsistent.
    #[error(transparent)]
    Seed(#[from] SeedError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Requested address.
        addr: SocketAddr,
        /// Underlying error.
        source: std::io::Error,
    },
    /// TLS setup failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// Entry point.
#[derive(Debug)]
pub struct MockPrism;

impl MockPrism {
    /// Builds the state from the seed, binds the listener, generates the certificates and starts serving.
    /// When this returns, the mock answers requests.
    pub async fn start(config: MockConfig) -> Result<RunningMock, StartError> {
        let store = store::Store::new(&config, Instant::now())?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| StartError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
        let (ca_pem, acceptor) = if config.tls {
            let tls = tls::generate()?;
            (
                Some(tls.ca_pem),
                Some(tokio_rustls::TlsAcceptor::from(tls.server_config)),
            )
        } else {
            (None, None)
        };
        let shared = Arc::new(app::Shared::new(
            store,
            config.credentials.clone(),
            config.tls,
        ));
        let router = server::router(shared.clone());
        let (shutdown, receiver) = watch::channel(false);
        let task = tokio::spawn(server::serve(listener, router, acceptor, receiver));
        let scheme = if config.tls { "https" } else { "http" };
        Ok(RunningMock {
            addr,
            base_url: format!("{scheme}://{addr}"),
            ca_pem,
            credentials: config.credentials,
            admin: Admin::new(shared),
            shutdown,
            task: Some(task),
        })
    }
}

/// A running mock. Dropping it stops the server too; [`RunningMock::shutdown`] also waits for it.
#[derive(Debug)]
pub struct RunningMock {
    addr: SocketAddr,
    base_url: String,
    ca_pem: Option<String>,
    credentials: Credentials,
    admin: Admin,
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl RunningMock {
    /// `https://127.0.0.1:PORT` (or `http://…` with TLS off), without a path.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// `base_url()` + `/api/nutanix/v3`.
    pub fn v3_url(&self) -> String {
        format!("{}{V3_BASE_PATH}", self.base_url)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// PEM of the CA that signed the server certificate; `None` over plain HTTP.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The accepted credentials.
    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// The admin handle.
    pub fn admin(&self) -> &Admin {
        &self.admin
    }

    /// Stops accepting, closes the open connections and waits for the server task.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for RunningMock {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
