//! kube-sim: an in-memory Kubernetes API server for tests and demos. Development tool, never shipped.
//!
//! It serves plain HTTP on loopback so that kube-rs clients and the real `kubectl` can use it through a
//! kubeconfig. See the README for what it simulates and, as precisely, what it does not.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let sim = kube_sim::KubeSim::start(kube_sim::Config::default()).await?;
//! let client = sim.client()?;
//! sim.write_kubeconfig(std::path::Path::new("/tmp/kubeconfig"))?;
//! # drop(client); sim.shutdown().await; Ok(()) }
//! ```

pub mod discovery;
pub mod error;
pub mod events;
pub mod fields;
pub mod load;
pub mod meta;
pub mod openapi_v2;
pub mod patch;
pub mod protobuf;
pub mod reqlog;
pub mod resources;
pub mod schema;
pub mod selector;
pub mod server;
pub mod store;
pub mod table;
pub mod tls;
pub mod watch;
pub mod webhooks;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use error::ApiError;
pub use reqlog::{RbacCall, RequestLog, RequestRecord, TimedRequest, rbac_calls};
pub use store::{Store, StoreConfig};

/// Server settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Events kept for watches resuming from an old resourceVersion (older ones get 410 Gone).
    pub history_limit: usize,
    /// How far a watcher may fall behind before it gets 410 and is closed.
    pub broadcast_capacity: usize,
    /// Interval between BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// Longest watch when the client gives no `timeoutSeconds` (the real server picks 30-60 minutes).
    pub max_watch: Duration,
    /// How often the garbage collector runs even if nothing woke it.
    pub gc_interval: Duration,
    /// Requests kept in the request log.
    pub request_log_limit: usize,
    /// Namespaces created at start, besides default, kube-system, kube-public and kube-node-lease.
    pub namespaces: Vec<String>,
    /// Serve HTTPS with a CA made at start (the kubeconfig and `client()` trust it); plain HTTP otherwise.
    pub tls: bool,
    /// The machine-api-operator's defaulting webhooks of an OpenShift cluster on Nutanix, applied
    /// to every Machine and MachineSet created through the API; none when `None`.
    pub machine_api_webhooks: Option<webhooks::MachineApiWebhooks>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            history_limit: 10_000,
            broadcast_capacity: 65_536,
            bookmark_interval: Duration::from_secs(10),
            max_watch: Duration::from_secs(1800),
            gc_interval: Duration::from_secs(1),
            request_log_limit: 100_000,
            namespaces: Vec::new(),
            tls: false,
            machine_api_webhooks: None,
        }
    }
}

/// Why the simulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listen address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// Requested address.
        address: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// The TLS material could not be made.
    #[error(transparent)]
    Tls(#[from] k8s_semantics::pki::TlsError),
    /// A namespace from the config could not be created.
    #[error("cannot create namespace {name:?}: {source}")]
    Namespace {
        /// The namespace.
        name: String,
        /// Cause.
        source: ApiError,
    },
}

/// Why a kubeconfig or client could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Writing the kubeconfig file failed.
    #[error("cannot write kubeconfig {path}: {source}")]
    Write {
        /// Target file.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// kube-rs rejected the configuration.
    #[error("cannot build a kube client for {url}: {source}")]
    Kube {
        /// Server URL.
        url: String,
        /// Cause.
        source: Box<kube::Error>,
    },
}

/// Entry point.
#[derive(Debug)]
pub struct KubeSim;

/// A running simulator. Dropping it stops the server too; [`RunningKubeSim::shutdown`] waits for it.
#[derive(Debug)]
pub struct RunningKubeSim {
    address: SocketAddr,
    tls: Option<tls::TlsMaterial>,
    store: Arc<Store>,
    log: Arc<RequestLog>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

/// The token written into kubeconfigs: it names the user in the request log (any token is accepted).
pub const KUBECONFIG_TOKEN: &str = "user:kube-sim-admin";

impl KubeSim {
    /// Starts the server on `config.listen` and returns once it accepts connections.
    pub async fn start(config: Config) -> Result<RunningKubeSim, StartError> {
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| StartError::Bind {
                    address: config.listen,
                    source,
                })?;
        let address = listener.local_addr().map_err(|source| StartError::Bind {
            address: config.listen,
            source,
        })?;
        let store = Arc::new(Store::new(StoreConfig {
            history_limit: config.history_limit,
            broadcast_capacity: config.broadcast_capacity,
        }));
        for name in &config.namespaces {
            let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            match store.create_value(ns) {
                Ok(_) => {}
                Err(e) if e.code == 409 => {}
                Err(source) => {
                    return Err(StartError::Namespace {
                        name: name.clone(),
                        source,
                    });
                }
            }
        }
        let log = Arc::new(RequestLog::new(config.request_log_limit));
        let shutdown = CancellationToken::new();
        let shared = Arc::new(server::Shared {
            store: store.clone(),
            log: log.clone(),
            address: address.to_string(),
            bookmark_interval: config.bookmark_interval,
            max_watch: config.max_watch,
            shutdown: shutdown.clone(),
            machine_api_webhooks: config.machine_api_webhooks.clone(),
        });
        let tls = if config.tls {
            Some(tls::generate()?)
        } else {
            None
        };
        let acceptor = tls
            .as_ref()
            .map(|t| tokio_rustls::TlsAcceptor::from(t.server_config.clone()));
        let accept = tokio::spawn(accept_loop(listener, acceptor, shared, shutdown.clone()));
        let gc = tokio::spawn(gc_loop(store.clone(), config.gc_interval, shutdown.clone()));
        Ok(RunningKubeSim {
            tls,
            address,
            store,
            log,
            shutdown,
            tasks: vec![accept, gc],
        })
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<server::Shared>,
    shutdown: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else { continue };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        match acceptor.clone() {
            None => {
                tokio::spawn(serve_connection(stream, shared, shutdown));
            }
            Some(acceptor) => {
                tokio::spawn(async move {
                    match acceptor.accept(stream).await {
                        Ok(tls_stream) => serve_connection(tls_stream, shared, shutdown).await,
                        Err(error) => tracing::debug!(%error, "TLS handshake failed"),
                    }
                });
            }
        }
    }
}

async fn serve_connection<S>(stream: S, shared: Arc<server::Shared>, shutdown: CancellationToken)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request| {
        let shared = shared.clone();
        async move { Ok::<_, std::convert::Infallible>(server::handle(shared, request).await) }
    });
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        () = shutdown.cancelled() => {}
        result = connection => {
            if let Err(error) = result {
                tracing::debug!(%error, "connection ended with an error");
            }
        }
    }
}

async fn gc_loop(store: Arc<Store>, interval: Duration, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = store.gc_notified() => {}
            () = tokio::time::sleep(interval) => {}
        }
        store.collect_garbage();
    }
}

impl RunningKubeSim {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.address)
    }

    /// The CA certificate (PEM) clients must trust, when serving HTTPS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(|t| t.ca_pem.as_str())
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The store, for direct reads and writes in tests (writes produce watch events like API writes).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The request log.
    pub fn request_log(&self) -> &Arc<RequestLog> {
        &self.log
    }

    /// All requests served so far.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.log.records()
    }

    /// A kubeconfig (context `kube-sim`, namespace `default`) for kubectl and kube-rs.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_yaml(&self.url(), self.ca_pem())
    }

    /// Writes [`Self::kubeconfig_yaml`] to a file.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), ClientError> {
        std::fs::write(path, self.kubeconfig_yaml()).map_err(|source| ClientError::Write {
            path: path.display().to_string(),
            source,
        })
    }

    /// A kube-rs configuration for this server (default namespace `default`), to adjust before building a
    /// client (for example `default_retry = false`: kube-rs retries 429 answers, such as evictions blocked by a
    /// PodDisruptionBudget, up to 15 times with exponential backoff by default).
    pub fn kube_config(&self) -> kube::Config {
        // The URL is built from a socket address, so it always parses.
        let uri = http::Uri::try_from(self.url()).unwrap_or_default();
        let mut config = kube::Config::new(uri);
        config.auth_info.token = Some(KUBECONFIG_TOKEN.to_string().into());
        config.root_cert = self.tls.as_ref().map(|t| vec![t.ca_der.clone()]);
        config
    }

    /// A kube-rs client for this server, with kube-rs defaults (default namespace `default`).
    pub fn client(&self) -> Result<kube::Client, ClientError> {
        kube::Client::try_from(self.kube_config()).map_err(|source| ClientError::Kube {
            url: self.url(),
            source: Box::new(source),
        })
    }

    /// Creates an object from its `apiVersion`, `kind` and `metadata` (namespace `default` if unset).
    pub fn create(&self, object: Value) -> Result<Value, ApiError> {
        self.store.create_value(object).map(|s| (*s.value).clone())
    }

    /// Gets an object by group, plural, namespace ("" for cluster-scoped) and name.
    pub fn get(
        &self,
        group: &str,
        plural: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let def = self.def(group, plural)?;
        self.store
            .get(&def, namespace, name)
            .map(|s| (*s.value).clone())
    }

    fn def(&self, group: &str, plural: &str) -> Result<Arc<resources::ResourceDef>, ApiError> {
        self.store
            .resource(group, plural)
            .ok_or_else(|| ApiError::unknown_path(plural))
    }

    /// Lists all objects of a resource (all namespaces).
    pub fn list(&self, group: &str, plural: &str) -> Result<Vec<Value>, ApiError> {
        let def = self.def(group, plural)?;
        let result = self.store.list(&def, &store::ListParams::default())?;
        Ok(result
            .items
            .into_iter()
            .map(|s| (*s.value).clone())
            .collect())
    }

    /// Replaces the status of an object, as a controller's `/status` write would.
    pub fn set_status(
        &self,
        group: &str,
        plural: &str,
        namespace: &str,
        name: &str,
        status: Value,
    ) -> Result<Value, ApiError> {
        let def = self.def(group, plural)?;
        self.store
            .modify(
                &def,
                namespace,
                name,
                store::WriteTarget::Status,
                false,
                |current| {
                    let mut next = current.clone();
                    next["status"] = status;
                    Ok(next)
                },
            )
            .map(|s| (*s.value).clone())
    }

    /// Stops the server, ends watches and waits for the server tasks.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

impl Drop for RunningKubeSim {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A kubeconfig for a kube-sim URL: one cluster (trusting `ca_pem` for HTTPS), one user with
/// [`KUBECONFIG_TOKEN`], context `kube-sim` with namespace `default`.
pub fn kubeconfig_yaml(url: &str, ca_pem: Option<&str>) -> String {
    use base64::Engine;
    let ca = ca_pem
        .map(|pem| {
            format!(
                "\n    certificate-authority-data: {}",
                base64::engine::general_purpose::STANDARD.encode(pem)
            )
        })
        .unwrap_or_default();
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kube-sim
  cluster:
    server: \"{url}\"{ca}
users:
- name: kube-sim-admin
  user:
    token: \"{KUBECONFIG_TOKEN}\"
contexts:
- name: kube-sim
  context:
    cluster: kube-sim
    user: kube-sim-admin
    namespace: default
current-context: kube-sim
preferences: {{}}
"
    )
}
