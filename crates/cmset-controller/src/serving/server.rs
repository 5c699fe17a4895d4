//! The HTTP endpoints: `/metrics` (Prometheus text format), `/healthz` (the process serves) and
//! `/readyz` (caches are synced, or this replica is a standby ready to take over; never once it drains,
//! see [`crate::serving::drain`]).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::serving::drain::Readiness;
use crate::serving::http::Stop;

#[derive(Clone)]
pub struct Health {
    pub ready: Arc<Readiness>,
    pub registry: Arc<Registry>,
}

async fn metrics(State(health): State<Health>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &health.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            String::new(),
        ),
    }
}

async fn readyz(State(health): State<Health>) -> StatusCode {
    if health.ready.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

pub fn router(health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(health)
}

/// Binds the endpoints' address. Done before anything else starts, so that a taken port stops the
/// process with a clear error instead of leaving a replica that runs with no probe to answer.
pub async fn bind(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(address).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot serve /metrics, /healthz and /readyz on {address}: {e}"),
        )
    })
}

/// Serves the endpoints until `stopped` resolves (at the end of the drain: the kubelet meanwhile sees
/// the replica not ready, and alive).
pub async fn serve(
    listener: tokio::net::TcpListener,
    health: Health,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let draining = health.ready.draining();
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "serving /metrics, /healthz and /readyz");
    }
    crate::serving::http::serve(
        listener,
        None,
        router(health),
        crate::serving::http::Limits::PLAIN,
        Stop { draining, stopped },
    )
    .await;
}
