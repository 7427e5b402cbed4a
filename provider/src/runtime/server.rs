//! The HTTP endpoints: `/metrics` on `--metrics-bind-address`, `/healthz` and `/readyz` on
//! `--health-addr` (one listener when both name the same address).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

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

async fn serve(address: SocketAddr, router: Router) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(address).await?;
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
    health: Option<SocketAddr>,
    metrics_address: Option<SocketAddr>,
    metrics: Arc<Metrics>,
) -> std::io::Result<Listening> {
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
