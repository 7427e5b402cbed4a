//! The router (Prism's paths behind the middleware, the admin paths) and the accept loop: HTTP/1.1 and
//! HTTP/2, over TLS or plain TCP, with per-connection kill switches.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::middleware;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use crate::app::{self, App, ConnectionKill};
use crate::errors::ApiError;
use crate::{admin, v3, v4};

const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The full router: Prism paths behind the middleware, `/mock/` admin paths without it.
pub(crate) fn router(app: App) -> Router {
    let prism = v3::routes()
        .merge(v4::routes())
        .fallback(|| async { ApiError::not_found("", "no such endpoint in prism-mock") })
        .layer(middleware::from_fn_with_state(
            app.clone(),
            app::prism_layer,
        ));
    Router::new()
        .nest("/mock", admin::routes())
        .merge(prism)
        .with_state(app)
}

/// Serves until `shutdown` turns true, then aborts the open connections.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsAcceptor>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    break;
                }
            }
            accepted = listener.accept() => {
                match accepted {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        connections.spawn(serve_connection(stream, router.clone(), tls.clone()));
                    }
                    Err(error) => {
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.abort_all();
}

async fn serve_connection(stream: tokio::net::TcpStream, router: Router, tls: Option<TlsAcceptor>) {
    let kill = Arc::new(Notify::new());
    let service_kill = kill.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request
            .extensions_mut()
            .insert(ConnectionKill(service_kill.clone()));
        router.clone().oneshot(request)
    });
    let builder = Builder::new(TokioExecutor::new());
    match tls {
        Some(acceptor) => {
            let Ok(Ok(stream)) =
                tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
            else {
                return;
            };
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = connection => {}
                _ = kill.notified() => {}
            }
        }
        None => {
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = connection => {}
                _ = kill.notified() => {}
            }
        }
    }
}
