//! Leaving without a hole in admission. The webhook fails open, so an admission the API server cannot
//! deliver is stored as written, naming the bare set. On SIGTERM a replica therefore reports not ready at
//! once and keeps answering admission for a drain period, long enough for its endpoint to leave the
//! webhook's Service wherever the API server looks it up, while its controllers stop as before. During
//! the drain each response closes its connection, so that the API server's next admission opens a new
//! one, which the Service sends to a replica still ready.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tracing::info;

/// What `/readyz` reports: ready once the caches are synced, not ready again from the moment the
/// replica starts to drain. Two flags rather than one, so that caches finishing their sync during the
/// drain cannot make a replica that is leaving ready again.
#[derive(Debug, Default)]
pub struct Readiness {
    synced: AtomicBool,
    draining: Arc<AtomicBool>,
}

impl Readiness {
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.synced.load(Ordering::Relaxed) && !self.is_draining()
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// The flag the HTTP servers read to close connections while draining.
    pub fn draining(&self) -> Arc<AtomicBool> {
        self.draining.clone()
    }
}

/// Resolves when the HTTP servers (webhook and probes) stop: `period` after `termination`, the
/// replica reporting not ready from its first moment.
pub async fn serving_until(
    termination: impl Future<Output = ()>,
    readiness: Arc<Readiness>,
    period: Duration,
) {
    termination.await;
    readiness.draining.store(true, Ordering::Relaxed);
    if !period.is_zero() {
        info!(
            ?period,
            "draining: reporting not ready, still answering admission"
        );
        tokio::time::sleep(period).await;
        info!("drain period over; the webhook stops");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::http::{Limits, Stop};
    use crate::serving::server::Health;
    use axum::Router;
    use axum::routing::post;
    use futures::FutureExt;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::{Semaphore, oneshot};

    const DRAIN: Duration = Duration::from_millis(1500);

    /// The probe endpoints and a stand-in webhook, served and stopped as `main` serves and stops them;
    /// `term` stands for SIGTERM. The webhook's `/hold` answers once the test releases it.
    struct Replica {
        probes: SocketAddr,
        webhook: SocketAddr,
        ready: Arc<Readiness>,
        term: Option<oneshot::Sender<()>>,
        release: Arc<Semaphore>,
        webhook_task: tokio::task::JoinHandle<()>,
    }

    async fn listener() -> (TcpListener, SocketAddr) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        (l, a)
    }

    impl Replica {
        async fn start() -> Self {
            let ready = Arc::new(Readiness::default());
            let (term, terminated) = oneshot::channel::<()>();
            let serving = serving_until(terminated.map(drop), ready.clone(), DRAIN)
                .boxed()
                .shared();
            let (probe_listener, probes) = listener().await;
            let health = Health {
                ready: ready.clone(),
                registry: Arc::default(),
            };
            tokio::spawn(crate::serving::server::serve(
                probe_listener,
                health,
                serving.clone(),
            ));
            let release = Arc::new(Semaphore::new(0));
            let gate = release.clone();
            let webhook_router = Router::new()
                .route("/mutate", post(|| async { "admitted" }))
                .route(
                    "/hold",
                    post(move || {
                        let gate = gate.clone();
                        async move {
                            gate.acquire().await.unwrap().forget();
                            "admitted late"
                        }
                    }),
                );
            let (webhook_listener, webhook) = listener().await;
            let stop = Stop {
                draining: ready.draining(),
                stopped: serving.clone(),
            };
            let webhook_task = tokio::spawn(crate::serving::http::serve(
                webhook_listener,
                None,
                webhook_router,
                Limits::WEBHOOK,
                stop,
            ));
            Self {
                probes,
                webhook,
                ready,
                term: Some(term),
                release,
                webhook_task,
            }
        }

        fn terminate(&mut self) {
            let _ = self.term.take().unwrap().send(());
        }
    }

    /// One request on a new connection; the status line and headers, lowercased, and the body.
    async fn call(address: SocketAddr, method: &str, path: &str) -> Option<String> {
        let mut s = TcpStream::connect(address).await.ok()?;
        let request = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
        s.write_all(request.as_bytes()).await.ok()?;
        read_one(&mut s).await
    }

    /// Reads one response on a keep-alive connection (headers and a Content-Length body).
    async fn read_one(s: &mut TcpStream) -> Option<String> {
        let mut out = Vec::new();
        let mut chunk = [0u8; 1024];
        let read = async {
            loop {
                let text = String::from_utf8_lossy(&out).to_lowercase();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .and_then(|n| n.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if body.len() >= length {
                        return Some(text);
                    }
                }
                let n = s.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                out.extend_from_slice(&chunk[..n]);
            }
        };
        tokio::time::timeout(Duration::from_secs(5), read).await.ok()?
    }

    fn status(response: &str) -> &str {
        response.split_whitespace().nth(1).unwrap_or("")
    }

    #[tokio::test]
    async fn on_termination_readiness_fails_at_once_and_the_webhook_answers_until_the_drain_ends() {
        let mut replica = Replica::start().await;
        replica.ready.set_synced();
        let ready = call(replica.probes, "GET", "/readyz").await.unwrap();
        assert_eq!(status(&ready), "200");
        // A keep-alive connection the API server holds from before.
        let mut pooled = TcpStream::connect(replica.webhook).await.unwrap();
        pooled
            .write_all(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            .await
            .unwrap();
        let before = read_one(&mut pooled).await.unwrap();
        assert_eq!(status(&before), "200");
        assert!(!before.contains("connection: close"), "{before}");

        replica.terminate();
        let started = tokio::time::Instant::now();
        while !replica.ready.is_draining() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let not_ready = call(replica.probes, "GET", "/readyz").await.unwrap();
        assert_eq!(status(&not_ready), "503", "not ready at once");
        assert!(started.elapsed() < DRAIN / 2);
        // Still alive for the kubelet, so it is not restarted while it drains.
        assert_eq!(
            status(&call(replica.probes, "GET", "/healthz").await.unwrap()),
            "200"
        );

        // Admission is answered throughout the drain, on the pooled connection (which is then closed,
        // so that the next admission goes to a replica still ready) and on new ones.
        pooled
            .write_all(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            .await
            .unwrap();
        let during = read_one(&mut pooled).await.unwrap();
        assert_eq!(status(&during), "200");
        assert!(during.contains("connection: close"), "{during}");
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(2), pooled.read_to_end(&mut rest)).await;
        assert!(
            matches!(closed, Ok(Ok(0))),
            "the pooled connection is closed after its answer"
        );
        while started.elapsed() < DRAIN - Duration::from_millis(400) {
            let answer = call(replica.webhook, "POST", "/mutate").await.unwrap();
            assert_eq!(
                status(&answer),
                "200",
                "answered {:?} into the drain",
                started.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            status(&call(replica.probes, "GET", "/readyz").await.unwrap()),
            "503"
        );

        // An admission that arrives just before the drain ends is answered even though it finishes
        // after.
        let mut late = TcpStream::connect(replica.webhook).await.unwrap();
        late.write_all(b"POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep_until(started + DRAIN + Duration::from_millis(200)).await;
        assert!(
            TcpStream::connect(replica.webhook).await.is_err(),
            "the webhook stops accepting when the drain ends"
        );
        assert!(
            !replica.webhook_task.is_finished(),
            "it waits for the admission in flight"
        );
        replica.release.add_permits(1);
        let answer = read_one(&mut late).await.unwrap();
        assert_eq!(status(&answer), "200");
        assert!(answer.contains("admitted late"));
        tokio::time::timeout(Duration::from_secs(2), &mut replica.webhook_task)
            .await
            .expect("the webhook returns once nothing is in flight")
            .unwrap();
    }

    #[tokio::test]
    async fn a_replica_that_syncs_while_draining_stays_not_ready() {
        let ready = Readiness::default();
        ready.draining.store(true, Ordering::Relaxed);
        ready.set_synced();
        assert!(!ready.is_ready());
    }
}
