//! The HTTP endpoints: `/metrics` on `--metrics-bind-address`, `/healthz` and `/readyz` on
//! `--health-addr` (one listener when both name the same address).
//!
//! A Go-style `:PORT` listens on both families, as the Go provider's `net.Listen("tcp", ":PORT")`
//! does: Go's `favoriteAddrFamily` (golang/go `src/net/ipsock_posix.go`) opens one `AF_INET6`
//! socket with `IPV6_V6ONLY=0` for a wildcard listen when the system maps IPv4 onto IPv6, and an
//! `AF_INET` socket otherwise. On an IPv6-only cluster the kubelet probes the pod's IPv6 address:
//! an IPv4-only listener fails the liveness probe and the pod restarts without end.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;

use super::cli::ListenAddress;
use crate::metrics::Metrics;

/// Connections waiting to be accepted (what std and tokio ask for too).
const BACKLOG: i32 = 1024;

/// Where the endpoints ended up listening (port 0 picks a free one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Listening {
    pub health: Option<SocketAddr>,
    pub metrics: Option<SocketAddr>,
}

fn health_routes() -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
}

fn metrics_routes(metrics: Arc<Metrics>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move {
                (
                    [("content-type", "text/plain; version=0.0.4")],
                    metrics.render(),
                )
            }
        }),
    )
}

/// One IPv6 socket on `[::]:port` that takes IPv4 connections too (as IPv4-mapped addresses).
fn bind_any_family(port: u16) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_only_v6(false)?;
    // As std and tokio do on Unix: a restarted process can bind again at once.
    socket.set_reuse_address(true)?;
    socket.bind(&SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)).into())?;
    socket.listen(BACKLOG)?;
    socket.set_nonblocking(true)?;
    TcpListener::from_std(std::net::TcpListener::from(socket))
}

/// True when a failed dual-stack listen may mean the host has no IPv6, so that IPv4 alone is
/// worth a try; not when the port is taken or not ours to use (IPv4 would fail the same way, or
/// hide the conflict).
fn may_lack_ipv6(error: &io::Error) -> bool {
    !matches!(
        error.kind(),
        io::ErrorKind::AddrInUse | io::ErrorKind::PermissionDenied
    )
}

async fn bind(address: ListenAddress) -> io::Result<TcpListener> {
    match address {
        ListenAddress::Socket(address) => TcpListener::bind(address).await,
        ListenAddress::AnyFamily(port) => match bind_any_family(port) {
            Ok(listener) => Ok(listener),
            Err(error) if may_lack_ipv6(&error) => {
                tracing::info!(%error, port, "no IPv6 socket on this host: listening on IPv4 only");
                TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).await
            }
            Err(error) => Err(error),
        },
    }
}

async fn serve(address: ListenAddress, router: Router) -> io::Result<SocketAddr> {
    let listener = bind(address).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, router).await {
            tracing::error!(%error, %bound, "HTTP endpoint stopped");
        }
    });
    Ok(bound)
}

/// Binds and serves the endpoints in the background.
pub async fn start(
    health: Option<ListenAddress>,
    metrics_address: Option<ListenAddress>,
    metrics: Arc<Metrics>,
) -> io::Result<Listening> {
    let mut listening = Listening::default();
    match (health, metrics_address) {
        (Some(health), Some(metrics_address)) if health == metrics_address => {
            let bound = serve(health, health_routes().merge(metrics_routes(metrics))).await?;
            listening.health = Some(bound);
            listening.metrics = Some(bound);
        }
        (health, metrics_address) => {
            if let Some(address) = health {
                listening.health = Some(serve(address, health_routes()).await?);
            }
            if let Some(address) = metrics_address {
                listening.metrics = Some(serve(address, metrics_routes(metrics)).await?);
            }
        }
    }
    if let Some(address) = listening.health {
        tracing::info!(%address, "health endpoints listening");
    }
    if let Some(address) = listening.metrics {
        tracing::info!(%address, "metrics listening");
    }
    Ok(listening)
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    /// `GET path` over HTTP/1.0 (the answer ends with the connection), the whole answer.
    async fn get(address: SocketAddr, path: &str) -> io::Result<String> {
        let mut stream = TcpStream::connect(address).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes())
            .await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok(answer)
    }

    fn ipv6_loopback_available() -> bool {
        std::net::TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_ok()
    }

    #[tokio::test]
    async fn a_go_style_port_answers_on_ipv6_and_ipv4_loopback() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let listening = start(Some(ListenAddress::AnyFamily(0)), None, metrics)
            .await
            .unwrap();
        let port = listening.health.unwrap().port();
        let ipv4 = get(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), "/healthz")
            .await
            .unwrap();
        assert!(
            ipv4.starts_with("HTTP/1.0 200") && ipv4.ends_with("ok"),
            "{ipv4}"
        );
        if !ipv6_loopback_available() {
            println!("skipped the [::1] half: this machine has no IPv6 loopback");
            return;
        }
        assert!(listening.health.unwrap().is_ipv6(), "{listening:?}");
        for path in ["/healthz", "/readyz"] {
            let ipv6 = get(SocketAddr::from((Ipv6Addr::LOCALHOST, port)), path)
                .await
                .unwrap();
            assert!(
                ipv6.starts_with("HTTP/1.0 200") && ipv6.ends_with("ok"),
                "{ipv6}"
            );
        }
    }

    #[tokio::test]
    async fn a_host_address_listens_there_only() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let address = ListenAddress::Socket(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
        let listening = start(Some(address), Some(address), metrics).await.unwrap();
        let bound = listening.health.unwrap();
        assert_eq!(listening.metrics, Some(bound), "one listener for both");
        assert!(bound.ip().is_loopback() && bound.is_ipv4(), "{bound}");
        let metrics = get(bound, "/metrics").await.unwrap();
        assert!(metrics.starts_with("HTTP/1.0 200"), "{metrics}");
        if ipv6_loopback_available() {
            assert!(
                get(
                    SocketAddr::from((Ipv6Addr::LOCALHOST, bound.port())),
                    "/healthz"
                )
                .await
                .is_err(),
                "127.0.0.1 does not answer on [::1]"
            );
        }
    }

    #[test]
    fn only_a_failure_that_may_mean_no_ipv6_falls_back_to_ipv4() {
        assert!(!may_lack_ipv6(&io::Error::from(io::ErrorKind::AddrInUse)));
        assert!(!may_lack_ipv6(&io::Error::from(
            io::ErrorKind::PermissionDenied
        )));
        assert!(may_lack_ipv6(&io::Error::from(
            io::ErrorKind::AddrNotAvailable
        )));
        // EAFNOSUPPORT, what creating an IPv6 socket fails with on a kernel without IPv6.
        assert!(may_lack_ipv6(&io::Error::from_raw_os_error(97)));
    }
}
