//! Serving the operator's HTTP endpoints (the webhook over TLS, metrics and probes in the clear) with
//! bounds, so that slow or abusive clients cannot exhaust the process that also runs the controllers:
//! a cap on open connections, on requests handled at once, on header and body size, and deadlines for
//! the TLS handshake and for a request's headers.
//!
//! The header deadline also closes idle keep-alive connections. It is longer than the 90 s after which
//! the API server's HTTP client drops an idle connection itself, so the client, not cmset, closes them:
//! the API server does not retry a POST sent on a connection the server closed at the same moment.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::IntoResponse;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::limit::GlobalConcurrencyLimitLayer;
use tracing::{debug, warn};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; more wait in the listen backlog.
    pub connections: usize,
    /// Requests handled at once; more wait for a slot (and their bodies stay unread meanwhile).
    pub in_flight: usize,
    pub body_bytes: usize,
    /// Bounds the request line and headers (hyper's read buffer; at least 8 KiB).
    pub header_bytes: usize,
    pub handshake: Duration,
    pub header_read: Duration,
    /// From the headers to the response, body included: a client trickling its body is cut off.
    pub request: Duration,
}

impl Limits {
    /// Admission: AdmissionReviews of an update carry the object twice, each up to etcd's 1.5 MiB.
    pub const WEBHOOK: Limits = Limits {
        connections: 256,
        in_flight: 16,
        body_bytes: 6 * 1024 * 1024,
        header_bytes: 64 * 1024,
        handshake: Duration::from_secs(10),
        header_read: Duration::from_secs(100),
        // The API server waits 5 s at most (the registration's timeoutSeconds).
        request: Duration::from_secs(10),
    };

    /// Metrics and probes: small GETs from Prometheus and the kubelet.
    pub const PLAIN: Limits = Limits {
        connections: 64,
        in_flight: 8,
        body_bytes: 64 * 1024,
        header_bytes: 16 * 1024,
        handshake: Duration::from_secs(10),
        header_read: Duration::from_secs(100),
        request: Duration::from_secs(10),
    };
}

/// The router with the per-request bounds (body size, duration, requests at once).
pub fn bounded(router: Router, limits: &Limits) -> Router {
    let deadline = limits.request;
    router
        .layer(DefaultBodyLimit::max(limits.body_bytes))
        .layer(axum::middleware::from_fn(move |request, next: Next| async move {
            tokio::time::timeout(deadline, next.run(request))
                .await
                .unwrap_or_else(|_| StatusCode::REQUEST_TIMEOUT.into_response())
        }))
        // One limit shared by every route (a plain ConcurrencyLimitLayer would give each route its own).
        .layer(GlobalConcurrencyLimitLayer::new(limits.in_flight))
}

/// Serves `router` (bounded by [`bounded`]) on `listener`, over TLS when `tls` is given, until
/// `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    router: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let app = bounded(router, &limits);
    let connections = Arc::new(Semaphore::new(limits.connections));
    tokio::pin!(shutdown);
    loop {
        // Wait for a free slot before accepting: the backlog holds the rest.
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = &mut shutdown => return,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    // Out of file descriptors and the like: do not spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => return,
        };
        let (tls, app) = (tls.clone(), app.clone());
        tokio::spawn(async move {
            let _permit = permit;
            match tls {
                Some(acceptor) => match tokio::time::timeout(limits.handshake, acceptor.accept(stream)).await
                {
                    Ok(Ok(stream)) => serve_connection(stream, app, &limits, peer).await,
                    Ok(Err(e)) => debug!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => debug!(%peer, "TLS handshake timed out"),
                },
                None => serve_connection(stream, app, &limits, peer).await,
            }
        });
    }
}

async fn serve_connection<S>(stream: S, app: Router, limits: &Limits, peer: SocketAddr)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(app);
    let result = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .max_buf_size(limits.header_bytes.max(8192))
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(e) = result {
        debug!(%peer, error = %e, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::{get, post};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    const TIGHT: Limits = Limits {
        connections: 2,
        in_flight: 1,
        body_bytes: 1024,
        header_bytes: 8192,
        handshake: Duration::from_millis(300),
        header_read: Duration::from_millis(300),
        request: Duration::from_millis(300),
    };

    async fn start() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new()
            .route(
                "/echo",
                post(|body: String| async move { body.len().to_string() }),
            )
            .route("/ok", get(|| async { "ok" }));
        tokio::spawn(serve(listener, None, router, TIGHT, futures::future::pending()));
        address
    }

    /// Sends raw bytes, returns what the server answered until it closed (or `None` on timeout).
    async fn exchange(address: SocketAddr, request: &[u8]) -> Option<String> {
        let mut s = TcpStream::connect(address).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
            .await
            .ok()?
            .ok()?;
        Some(String::from_utf8_lossy(&out).into_owned())
    }

    fn status(response: &str) -> &str {
        response.split_whitespace().nth(1).unwrap_or("")
    }

    #[tokio::test]
    async fn requests_within_bounds_are_served() {
        let address = start().await;
        let r = exchange(
            address,
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
        )
        .await;
        assert_eq!(status(&r.unwrap()), "200");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused() {
        let address = start().await;
        let body = "x".repeat(2048);
        let request = format!(
            "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2048\r\nConnection: close\r\n\r\n{body}"
        );
        assert_eq!(
            status(&exchange(address, request.as_bytes()).await.unwrap()),
            "413"
        );
    }

    #[tokio::test]
    async fn oversized_headers_are_refused() {
        let address = start().await;
        let request = format!(
            "GET /ok HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "y".repeat(20_000)
        );
        let answer = exchange(address, request.as_bytes()).await.unwrap();
        assert!(answer.is_empty() || status(&answer) == "431", "{answer}");
    }

    #[tokio::test]
    async fn a_client_that_sends_nothing_is_cut_off_and_frees_its_slot() {
        let address = start().await;
        // Two silent clients take both slots; each is closed after the header deadline.
        let silent = [exchange(address, b""), exchange(address, b"")];
        let started = tokio::time::Instant::now();
        let [a, b] = silent;
        let (a, b) = tokio::join!(a, b);
        assert_eq!(
            (a.as_deref(), b.as_deref()),
            (Some(""), Some("")),
            "closed by the server"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        // And the slots are free again.
        let r = exchange(
            address,
            b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(status(&r.unwrap()), "200");
    }

    #[tokio::test]
    async fn connections_over_the_cap_wait_for_a_slot_instead_of_being_served_at_once() {
        let address = start().await;
        // Two slow clients hold both slots (headers never finished).
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut s = TcpStream::connect(address).await.unwrap();
            s.write_all(b"GET /ok HTTP/1.1\r\n").await.unwrap();
            held.push(s);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut third = TcpStream::connect(address).await.unwrap();
        third
            .write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut first_byte = [0u8; 1];
        let early = tokio::time::timeout(Duration::from_millis(150), third.read(&mut first_byte)).await;
        assert!(early.is_err(), "served while both slots were taken");
        // Once the deadline frees the slots, it is served.
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), third.read_to_end(&mut out))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status(&String::from_utf8_lossy(&out)), "200");
    }

    #[tokio::test]
    async fn a_client_trickling_its_body_is_cut_off() {
        let address = start().await;
        let answer = exchange(
            address,
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nslow",
        )
        .await;
        assert_eq!(status(&answer.unwrap()), "408");
    }

    #[tokio::test]
    async fn a_flood_of_connections_leaves_the_server_serving() {
        let address = start().await;
        let flood: Vec<_> = (0..200)
            .map(|i| {
                tokio::spawn(async move {
                    let request: &[u8] = match i % 3 {
                        0 => b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                        1 => b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 999999\r\n\r\n",
                        _ => b"garbage\r\n\r\n",
                    };
                    if let Ok(mut s) = TcpStream::connect(address).await {
                        let _ = s.write_all(request).await;
                        let mut out = Vec::new();
                        let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut out)).await;
                    }
                })
            })
            .collect();
        futures::future::join_all(flood).await;
        let r = exchange(
            address,
            b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(status(&r.unwrap()), "200");
    }
}
