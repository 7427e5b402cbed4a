//! Local test servers for the HTTP tests: plain HTTP and HTTPS (with a CA generated here), both on 127.0.0.1:0,
//! recording every request they receive.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test support: a panic is the failure report

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::get;
use prism_client::{ClientConfig, Credentials, ProxyConfig, RateLimit, RetryPolicy};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};

pub const USERNAME: &str = "admin";
pub const PASSWORD: &str = "S3cret-Pa55word-xyzzy";

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

#[derive(Debug, Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<Seen>>>);

impl Recorder {
    pub fn all(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }

    /// Requests to `method path`.
    pub fn to(&self, method: &str, path: &str) -> Vec<Seen> {
        self.all()
            .into_iter()
            .filter(|seen| seen.method == method && seen.path == path)
            .collect()
    }
}

async fn record(State(recorder): State<Recorder>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 16 << 20).await.unwrap();
    recorder.0.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.to_string(),
                    value.to_str().unwrap_or("<binary>").to_owned(),
                )
            })
            .collect(),
        body: bytes.to_vec(),
        at: Instant::now(),
    });
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Serves `router` over plain HTTP; returns its address and what it records.
pub async fn serve(router: Router) -> (SocketAddr, Recorder) {
    let recorder = Recorder::default();
    let app = router.layer(middleware::from_fn_with_state(recorder.clone(), record));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, recorder)
}

/// A test CA and a server certificate it signed for `localhost` and `127.0.0.1`.
pub struct TestPki {
    pub ca_pem: String,
    pub server_config: Arc<rustls::ServerConfig>,
}

pub fn test_pki() -> TestPki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "prism-client test CA");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);

    let server_key = rcgen::KeyPair::generate().unwrap();
    let mut server_params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    server_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "prism test server");
    let server_cert = server_params.signed_by(&server_key, &issuer).unwrap();

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server_config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![server_cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
        )
        .unwrap();
    TestPki {
        ca_pem: ca_cert.pem(),
        server_config: Arc::new(server_config),
    }
}

/// A TCP listener that completes a TLS handshake before handing a connection to axum; failed handshakes (a
/// client that refuses our certificate) are dropped.
struct TlsListener {
    tcp: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, addr)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(Ok(tls)) =
                tokio::time::timeout(Duration::from_secs(10), self.acceptor.accept(stream)).await
            {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// Serves `router` over HTTPS with `server_config`.
pub async fn serve_tls(
    router: Router,
    server_config: Arc<rustls::ServerConfig>,
) -> (SocketAddr, Recorder) {
    let recorder = Recorder::default();
    let app = router.layer(middleware::from_fn_with_state(recorder.clone(), record));
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let listener = TlsListener {
        tcp,
        acceptor: tokio_rustls::TlsAcceptor::from(server_config),
    };
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, recorder)
}

/// A configuration for a local server: fast retries, no proxy, a generous rate limit.
pub fn config(endpoint: &str) -> ClientConfig {
    let mut config = ClientConfig::new(endpoint, Credentials::basic(USERNAME, PASSWORD)).unwrap();
    config.proxy = ProxyConfig::Direct;
    config.retry = RetryPolicy {
        max_attempts: 3,
        min_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        max_elapsed: Duration::from_secs(20),
    };
    config.rate_limit = RateLimit {
        requests_per_second: 1000.0,
        burst: 1000,
    };
    config.connect_timeout = Duration::from_secs(5);
    config.request_timeout = Duration::from_secs(20);
    config
}

/// [`config`] for a plain HTTP test server (`allow_plain_http`).
pub fn http_config(addr: SocketAddr) -> ClientConfig {
    let mut config = config(&format!("http://{addr}"));
    config.allow_plain_http = true;
    config
}

/// A minimal VM body as GET returns it.
pub fn vm_json(uuid: &str, name: &str) -> serde_json::Value {
    serde_json::json!({
        "api_version": "3.1",
        "metadata": {"kind": "vm", "uuid": uuid, "spec_version": 1},
        "spec": {"name": name, "resources": {"num_sockets": 1, "num_vcpus_per_socket": 1, "memory_size_mib": 2048,
                                             "power_state": "ON"}},
        "status": {"state": "COMPLETE", "name": name, "execution_context": {"task_uuid": ["t"]}}
    })
}

/// A server with sessions: `GET /users/me` with the right basic auth sets a new cookie; other calls accept only
/// the current cookie; `expire` invalidates it.
#[derive(Clone, Default)]
pub struct Sessions {
    pub current: Arc<Mutex<Option<String>>>,
    pub logins: Arc<AtomicUsize>,
}

impl Sessions {
    pub fn router(&self) -> Router {
        let login = self.clone();
        let check = self.clone();
        Router::new()
            .route(
                "/api/nutanix/v3/users/me",
                get(move |headers: HeaderMap| {
                    let sessions = login.clone();
                    async move {
                        let expected = format!(
                            "Basic {}",
                            base64_encode(&format!("{}:{}", USERNAME, PASSWORD))
                        );
                        if headers.get("authorization").and_then(|v| v.to_str().ok())
                            != Some(expected.as_str())
                        {
                            // Like Prism: a valid session cookie is enough too (and sets no new cookie).
                            if sessions.cookie_is_current(&headers) {
                                return Json(json!({"status": {"name": "admin"}})).into_response();
                            }
                            return (StatusCode::UNAUTHORIZED, "<html>401</html>").into_response();
                        }
                        let number = sessions.logins.fetch_add(1, Ordering::SeqCst) + 1;
                        let cookie = format!("session-{number}-Zq9");
                        *sessions.current.lock().unwrap() = Some(cookie.clone());
                        (
                            [(
                                "set-cookie",
                                format!("NTNX_IGW_SESSION={cookie}; Path=/; Secure; HttpOnly"),
                            )],
                            Json(json!({"status": {"name": "admin"}})),
                        )
                            .into_response()
                    }
                }),
            )
            .route(
                "/api/nutanix/v3/vms/{uuid}",
                get(move |Path(uuid): Path<String>, headers: HeaderMap| {
                    let sessions = check.clone();
                    async move {
                        if sessions.cookie_is_current(&headers) {
                            Json(vm_json(&uuid, "vm")).into_response()
                        } else {
                            (StatusCode::UNAUTHORIZED, "<html>session expired</html>")
                                .into_response()
                        }
                    }
                }),
            )
    }

    fn cookie_is_current(&self, headers: &HeaderMap) -> bool {
        let current = self.current.lock().unwrap().clone();
        let sent = headers.get("cookie").and_then(|v| v.to_str().ok());
        current.is_some_and(|cookie| sent == Some(format!("NTNX_IGW_SESSION={cookie}").as_str()))
    }

    pub fn expire(&self) {
        *self.current.lock().unwrap() = None;
    }
}

pub fn base64_encode(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}
