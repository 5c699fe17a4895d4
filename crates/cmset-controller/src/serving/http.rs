//! Serving the operator's HTTP endpoints (the webhook over TLS, metrics and probes in the clear) with
//! bounds, so that slow or abusive clients cannot exhaust the process that also runs the controllers:
//! a cap on open connections, on requests handled at once, on header and body size, and deadlines for
//! the TLS handshake, for a request's headers and for the request itself.
//!
//! Nor can clients that hold connections open starve the others: a probe that waits for a slot fails
//! and the kubelet restarts the pod, and an API server that cannot reach the webhook admits without
//! it. A connection is idle while it has no request in flight: before its first request's headers
//! are complete (a client that connected and sent nothing, or half a header), and between the
//! requests of a keep-alive connection. When every slot is taken, a new connection takes the slot of
//! the connection idle longest, which is closed. A request in flight is never cut for a newcomer: only
//! when every connection has one do new connections wait (in the listen backlog), and each of those
//! requests ends within its deadline.
//!
//! Idle connections are otherwise closed by the header deadline (hyper's timer also runs while it
//! waits for the next request of a keep-alive connection). On the webhook it is longer than the 90 s
//! after which the API server's HTTP client drops an idle connection itself, so the client, not cmset,
//! closes them: the API server does not retry a POST sent on a connection the server closed at the
//! same moment. Eviction can meet that race too, but only when the listener is full, which the API
//! server alone does not bring about: it holds one connection per admission it has in flight plus a
//! pool of idle ones, far below the cap. A full listener means a flood, when losing one POST to the
//! race is better than turning every newcomer away until the flood's connections time out; and the
//! connection idle longest is the one the API server would reuse last (Go's client takes the most
//! recently used idle connection first).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::middleware::Next;
use axum::response::IntoResponse;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tower::limit::GlobalConcurrencyLimitLayer;
use tracing::{debug, warn};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once. When all are taken, a new connection closes the one idle longest;
    /// when all have a request in flight, new ones wait in the listen backlog.
    pub connections: usize,
    /// Requests handled at once; more wait for a slot (and their bodies stay unread meanwhile).
    pub in_flight: usize,
    pub body_bytes: usize,
    /// Bounds the request line and headers (hyper's read buffer; at least 8 KiB).
    pub header_bytes: usize,
    pub handshake: Duration,
    /// For a request's headers, counted from the end of the previous request on a keep-alive
    /// connection: so also how long a connection stays open idle.
    pub header_read: Duration,
    /// From the headers to the response, the wait for an `in_flight` slot and the body included: a
    /// client trickling its body is cut off.
    pub request: Duration,
}

impl Limits {
    /// Admission: AdmissionReviews of an update carry the object twice, each up to etcd's 1.5 MiB.
    /// Anything that reaches the port can send bodies this large, so the bodies held at once (body
    /// size times requests in flight, 48 MiB) stay under a quarter of the install's memory limit.
    pub const WEBHOOK: Limits = Limits {
        connections: 256,
        in_flight: 8,
        body_bytes: 6 * 1024 * 1024,
        header_bytes: 64 * 1024,
        handshake: Duration::from_secs(10),
        // Longer than the API server's 90 s idle timeout: see the module documentation.
        header_read: Duration::from_secs(100),
        // The API server waits 5 s at most (the registration's timeoutSeconds).
        request: Duration::from_secs(10),
    };

    /// Metrics and probes: small GETs from Prometheus and the kubelet. An idle connection is closed
    /// after 10 s: the kubelet opens one per probe, and Go's HTTP client (the kubelet's and
    /// Prometheus') retries a GET that meets a connection the server has just closed.
    pub const PLAIN: Limits = Limits {
        connections: 64,
        in_flight: 8,
        body_bytes: 64 * 1024,
        header_bytes: 16 * 1024,
        handshake: Duration::from_secs(10),
        header_read: Duration::from_secs(10),
        request: Duration::from_secs(10),
    };
}

/// The router with the per-request bounds (body size, duration, requests at once).
pub fn bounded(router: Router, limits: &Limits) -> Router {
    let deadline = limits.request;
    router
        .layer(DefaultBodyLimit::max(limits.body_bytes))
        // One limit shared by every route (a plain ConcurrencyLimitLayer would give each route its own).
        .layer(GlobalConcurrencyLimitLayer::new(limits.in_flight))
        // Outside the limit, so that the deadline also bounds the wait for a slot: a request in flight
        // ends within its deadline, which is what lets a full listener wait for one.
        .layer(axum::middleware::from_fn(move |request, next: Next| async move {
            tokio::time::timeout(deadline, next.run(request))
                .await
                .unwrap_or_else(|_| StatusCode::REQUEST_TIMEOUT.into_response())
        }))
}

/// How a server stops. While `draining` is set, every response closes its connection: the client's
/// next request opens a new connection, which a Service sends to a replica still ready, instead of
/// reusing this one. When `stopped` resolves, the server accepts no more connections, lets the requests
/// in flight finish (each within its deadline) and returns.
pub struct Stop<F> {
    pub draining: Arc<AtomicBool>,
    pub stopped: F,
}

impl<F> Stop<F> {
    /// Stops when `stopped` resolves, with no drain before.
    pub fn at(stopped: F) -> Self {
        Self {
            draining: Arc::default(),
            stopped,
        }
    }
}

/// Serves `router` (bounded by [`bounded`]) on `listener`, over TLS when `tls` is given, until `stop`.
pub async fn serve<F>(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    router: Router,
    limits: Limits,
    stop: Stop<F>,
) where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let slots = Slots::new(limits.connections);
    serve_in(listener, tls, router, limits, slots, stop).await;
}

async fn serve_in<F>(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    router: Router,
    limits: Limits,
    slots: Arc<Slots>,
    stop: Stop<F>,
) where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let Stop { draining, stopped } = stop;
    let app = TowerToHyperService::new(closing_while(bounded(router, &limits), draining));
    tokio::pin!(stopped);
    loop {
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
            _ = &mut stopped => break,
        };
        // A free slot or an idle connection's; meanwhile the backlog holds the next connections.
        let slot = tokio::select! {
            slot = slots.admit(peer) => slot,
            _ = &mut stopped => break,
        };
        let id = slot.id;
        let (tls, app) = (tls.clone(), app.clone());
        let task = tokio::spawn(async move {
            match tls {
                Some(acceptor) => match tokio::time::timeout(limits.handshake, acceptor.accept(stream)).await
                {
                    Ok(Ok(stream)) => serve_connection(stream, app, &limits, peer, &slot).await,
                    Ok(Err(e)) => debug!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => debug!(%peer, "TLS handshake timed out"),
                },
                None => serve_connection(stream, app, &limits, peer, &slot).await,
            }
            // The slot is released here, when `slot` drops (or at once when the task is aborted).
        });
        slots.attach(id, task.abort_handle());
    }
    drop(listener);
    // Answers already begun are finished rather than cut off when the process exits.
    let mut changes = slots.summary.subscribe();
    let settled = changes.wait_for(|s| s.open == s.idle);
    if tokio::time::timeout(limits.request, settled).await.is_err() {
        warn!("requests still in flight when the server stopped");
    }
}

/// While `draining`, each response tells its client that the connection closes (and hyper closes it
/// once the response is written).
fn closing_while(router: Router, draining: Arc<AtomicBool>) -> Router {
    router.layer(axum::middleware::from_fn(move |request, next: Next| {
        let draining = draining.clone();
        async move {
            let mut response = next.run(request).await;
            if draining.load(Ordering::Relaxed) {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            response
        }
    }))
}

async fn serve_connection<S>(
    stream: S,
    app: TowerToHyperService<Router>,
    limits: &Limits,
    peer: SocketAddr,
    slot: &Slot,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (slots, id) = (slot.slots.clone(), slot.id);
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let in_flight = InFlight::start(&slots, id);
        let response = hyper::service::Service::call(&app, request);
        async move {
            let response = response.await?;
            Ok::<_, Infallible>(response.map(|body| Counted {
                body,
                _in_flight: in_flight,
            }))
        }
    });
    let stream = Flushes {
        stream,
        slots: slot.slots.clone(),
        id: slot.id,
    };
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

/// The connections open on one listener, each in flight or idle.
struct Slots {
    capacity: usize,
    open: Mutex<Open>,
    /// Published after every change, for the accept loop (and tests) to wait on.
    summary: watch::Sender<Summary>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Summary {
    open: usize,
    idle: usize,
}

#[derive(Default)]
struct Open {
    next_id: u64,
    /// Numbers the moments connections become idle: the lowest mark is the one idle longest (an
    /// order, not a clock).
    next_mark: u64,
    connections: HashMap<u64, Connection>,
}

/// A request is in flight from the call of the service until its response has been flushed to the
/// socket: evicting the connection after that loses nothing the server wrote.
struct Connection {
    peer: SocketAddr,
    /// Requests whose response body hyper has not taken in full.
    requests: usize,
    /// A response hyper has taken and not flushed yet.
    unflushed: bool,
    idle_mark: u64,
    /// Set as soon as the connection's task is spawned; until then it cannot be evicted.
    task: Option<AbortHandle>,
}

impl Connection {
    fn evictable(&self) -> bool {
        self.requests == 0 && !self.unflushed && self.task.is_some()
    }
}

impl Open {
    fn mark(&mut self) -> u64 {
        self.next_mark += 1;
        self.next_mark
    }
}

impl Slots {
    fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            capacity,
            open: Mutex::new(Open::default()),
            summary: watch::Sender::new(Summary::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Open> {
        // Nothing under this lock panics; were something to, the table would still be usable, and
        // every connection's drop panicking in turn would help no one.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts as idle exactly the connections `try_admit` may evict, so that the accept loop waits
    /// for a change whenever it finds no room.
    fn publish(&self, open: &Open) {
        let idle = open.connections.values().filter(|c| c.evictable()).count();
        self.summary.send_replace(Summary {
            open: open.connections.len(),
            idle,
        });
    }

    /// A slot for a new connection: a free one, else the slot of the connection idle longest
    /// (closed here), else the first that frees up or goes idle.
    async fn admit(self: &Arc<Self>, peer: SocketAddr) -> Slot {
        let mut changes = self.summary.subscribe();
        loop {
            if let Some(slot) = self.try_admit(peer) {
                return slot;
            }
            // The sender lives in `self`: waiting cannot fail while `self` is borrowed.
            let _ = changes
                .wait_for(|s| s.open < self.capacity || s.idle > 0)
                .await
                .map(drop);
        }
    }

    fn try_admit(self: &Arc<Self>, peer: SocketAddr) -> Option<Slot> {
        let mut open = self.lock();
        if open.connections.len() >= self.capacity {
            let (&victim, _) = open
                .connections
                .iter()
                .filter(|(_, c)| c.evictable())
                .min_by_key(|(_, c)| c.idle_mark)?;
            let evicted = open.connections.remove(&victim)?;
            if let Some(task) = evicted.task {
                task.abort();
            }
            debug!(peer = %evicted.peer, newcomer = %peer, "all connections taken: closed the one idle longest");
        }
        let id = open.next_id;
        open.next_id += 1;
        let idle_mark = open.mark();
        open.connections.insert(
            id,
            Connection {
                peer,
                requests: 0,
                unflushed: false,
                idle_mark,
                task: None,
            },
        );
        self.publish(&open);
        Some(Slot {
            slots: self.clone(),
            id,
        })
    }

    fn attach(&self, id: u64, task: AbortHandle) {
        let mut open = self.lock();
        if let Some(c) = open.connections.get_mut(&id) {
            c.task = Some(task);
            self.publish(&open);
        }
    }

    /// The connection's stream was flushed: a response taken before is now on its way.
    fn flushed(&self, id: u64) {
        let mut open = self.lock();
        if open.connections.get(&id).is_some_and(|c| c.unflushed) {
            let mark = open.mark();
            if let Some(c) = open.connections.get_mut(&id) {
                c.unflushed = false;
                if c.requests == 0 {
                    c.idle_mark = mark;
                }
            }
            self.publish(&open);
        }
    }
}

/// A connection's hold on its slot, released when its task ends (or is aborted).
struct Slot {
    slots: Arc<Slots>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.slots.lock();
        if open.connections.remove(&self.id).is_some() {
            self.slots.publish(&open);
        }
    }
}

/// A request on a connection, from the call of the service until hyper has taken the whole response
/// body; the connection stays in flight until that is flushed.
struct InFlight {
    slots: Arc<Slots>,
    id: u64,
}

impl InFlight {
    fn start(slots: &Arc<Slots>, id: u64) -> Self {
        let mut open = slots.lock();
        if let Some(c) = open.connections.get_mut(&id) {
            c.requests += 1;
            slots.publish(&open);
        }
        Self {
            slots: slots.clone(),
            id,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // Still in flight (hence no need to publish): hyper flushes what it took next.
        if let Some(c) = self.slots.lock().connections.get_mut(&self.id) {
            c.requests = c.requests.saturating_sub(1);
            c.unflushed = true;
        }
    }
}

/// A response body that keeps its request in flight until hyper drops it.
struct Counted {
    body: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A connection's stream, telling its slot when hyper has flushed it (hyper flushes after writing
/// each message, and only once its own buffer is empty).
struct Flushes<S> {
    stream: S,
    slots: Arc<Slots>,
    id: u64,
}

impl<S: AsyncRead + Unpin> AsyncRead for Flushes<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Flushes<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let flushed = ready!(Pin::new(&mut self.stream).poll_flush(cx));
        if flushed.is_ok() {
            self.slots.flushed(self.id);
        }
        Poll::Ready(flushed)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::{get, post};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::sync::{Semaphore, mpsc};

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
        tokio::spawn(serve(
            listener,
            None,
            router,
            TIGHT,
            Stop::at(futures::future::pending()),
        ));
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

    /// How long a test waits for anything it expects; far below `PATIENT`'s deadlines.
    const BOUND: Duration = Duration::from_secs(5);

    /// Deadlines no test reaches: a prompt answer while every slot is taken can only come from an
    /// eviction.
    const PATIENT: Limits = Limits {
        connections: 3,
        in_flight: 4,
        body_bytes: 1024,
        header_bytes: 8192,
        handshake: Duration::from_secs(600),
        header_read: Duration::from_secs(600),
        request: Duration::from_secs(600),
    };

    const KEEP_ALIVE: &[u8] = b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n";
    const HOLD: &[u8] = b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n";

    /// A server with `PATIENT` limits whose `/hold` requests wait until the test releases them.
    struct Patient {
        address: SocketAddr,
        slots: Arc<Slots>,
        entered: mpsc::UnboundedReceiver<()>,
        release: Arc<Semaphore>,
    }

    impl Patient {
        async fn start(connections: usize) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            let (enter, entered) = mpsc::unbounded_channel();
            let release = Arc::new(Semaphore::new(0));
            let gate = release.clone();
            let router = Router::new().route("/ok", get(|| async { "ok" })).route(
                "/hold",
                get(move || {
                    let (enter, gate) = (enter.clone(), gate.clone());
                    async move {
                        let _ = enter.send(());
                        gate.acquire().await.unwrap().forget();
                        "held"
                    }
                }),
            );
            let slots = Slots::new(connections);
            let limits = Limits {
                connections,
                ..PATIENT
            };
            let server = serve_in(
                listener,
                None,
                router,
                limits,
                slots.clone(),
                Stop::at(futures::future::pending()),
            );
            tokio::spawn(server);
            Self {
                address,
                slots,
                entered,
                release,
            }
        }

        async fn connect(&self, request: &[u8]) -> TcpStream {
            let mut s = TcpStream::connect(self.address).await.unwrap();
            s.write_all(request).await.unwrap();
            s
        }

        /// Waits until `n` connections hold slots.
        async fn open(&self, n: usize) {
            let mut summary = self.slots.summary.subscribe();
            tokio::time::timeout(BOUND, summary.wait_for(|s| s.open == n))
                .await
                .unwrap_or_else(|_| panic!("{n} connections open: {:?}", *self.slots.summary.borrow()))
                .unwrap();
        }

        /// Waits until a `/hold` request is in its handler.
        async fn entered(&mut self) {
            tokio::time::timeout(BOUND, self.entered.recv())
                .await
                .expect("a /hold request in flight")
                .unwrap();
        }
    }

    /// Reads one response (headers and a Content-Length body) from a connection that stays open.
    async fn read_response(s: &mut TcpStream) -> String {
        let read = async {
            let mut out = Vec::new();
            let mut chunk = [0u8; 1024];
            loop {
                if let Some(end) = out.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&out[..end]).to_ascii_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                    if out.len() >= end + 4 + length {
                        return String::from_utf8_lossy(&out).into_owned();
                    }
                }
                let n = s.read(&mut chunk).await.unwrap();
                assert!(n > 0, "closed mid-response: {:?}", String::from_utf8_lossy(&out));
                out.extend_from_slice(&chunk[..n]);
            }
        };
        tokio::time::timeout(BOUND, read).await.expect("a response")
    }

    /// Whether the server closes `s` (it sent nothing more first).
    async fn closed_by_server(s: &mut TcpStream) -> bool {
        let mut byte = [0u8; 1];
        matches!(
            tokio::time::timeout(BOUND, s.read(&mut byte)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    #[tokio::test]
    async fn idle_connections_give_up_their_slots_to_new_ones_the_longest_idle_first() {
        let server = Patient::start(3).await;
        // Every slot idle: a client that sent nothing, one halfway through its headers, one kept
        // alive after a request.
        let mut silent = server.connect(b"").await;
        server.open(1).await;
        let mut halfway = server.connect(b"GET /ok HTTP/1.1\r\nHo").await;
        server.open(2).await;
        let mut kept = server.connect(KEEP_ALIVE).await;
        assert_eq!(status(&read_response(&mut kept).await), "200");
        server.open(3).await;
        // Each probe is answered at once and stays open, idle: the next one takes the slot of the
        // next connection in the order they went idle.
        let mut probes = Vec::new();
        for (name, idle) in [
            ("silent", &mut silent),
            ("halfway", &mut halfway),
            ("kept alive", &mut kept),
        ] {
            let mut probe = server.connect(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n").await;
            assert_eq!(
                status(&read_response(&mut probe).await),
                "200",
                "while {name} was idle"
            );
            assert!(closed_by_server(idle).await, "{name} gave up its slot");
            probes.push(probe);
        }
        assert_eq!(server.slots.summary.borrow().open, 3, "the cap holds");
        // The probes' own connections still serve.
        probes[2].write_all(KEEP_ALIVE).await.unwrap();
        assert_eq!(status(&read_response(&mut probes[2]).await), "200");
    }

    #[tokio::test]
    async fn a_request_in_flight_keeps_its_slot() {
        let mut server = Patient::start(2).await;
        // The connection open longest has a request in flight; the other one is idle.
        let mut holding = server.connect(HOLD).await;
        server.entered().await;
        let mut silent = server.connect(b"").await;
        server.open(2).await;
        let probe = exchange(
            server.address,
            b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(status(&probe.expect("answered")), "200");
        assert!(closed_by_server(&mut silent).await, "the idle one made room");
        server.release.add_permits(1);
        let held = read_response(&mut holding).await;
        assert!(status(&held) == "200" && held.ends_with("held"), "{held}");
    }

    #[tokio::test]
    async fn when_every_connection_has_a_request_in_flight_new_ones_wait_for_one_to_end() {
        let mut server = Patient::start(2).await;
        let mut holding = Vec::new();
        for _ in 0..2 {
            holding.push(server.connect(HOLD).await);
            server.entered().await;
        }
        let mut probe = server
            .connect(b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await;
        let mut first = [0u8; 1];
        let early = tokio::time::timeout(Duration::from_millis(100), probe.read(&mut first)).await;
        assert!(early.is_err(), "served while both requests were in flight");
        assert_eq!(*server.slots.summary.borrow(), Summary { open: 2, idle: 0 });
        // One request ends; its connection, idle once the response is flushed, makes room.
        server.release.add_permits(1);
        let mut out = Vec::new();
        tokio::time::timeout(BOUND, probe.read_to_end(&mut out))
            .await
            .expect("answered once a request ended")
            .unwrap();
        assert_eq!(status(&String::from_utf8_lossy(&out)), "200");
        // Both requests were answered in full, the one whose connection was closed for the probe too.
        server.release.add_permits(1);
        for s in &mut holding {
            let held = read_response(s).await;
            assert!(status(&held) == "200" && held.ends_with("held"), "{held}");
        }
    }

    #[tokio::test]
    async fn a_connection_stays_in_flight_until_its_response_is_flushed() {
        let slots = Slots::new(1);
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let slot = slots.try_admit(peer).expect("a free slot");
        let task = tokio::spawn(futures::future::pending::<()>());
        slots.attach(slot.id, task.abort_handle());
        let idle = || slots.summary.borrow().idle;
        assert_eq!(idle(), 1, "open, no request yet");
        let request = InFlight::start(&slots, slot.id);
        assert_eq!(idle(), 0);
        drop(request); // hyper took the whole response body
        assert_eq!(idle(), 0, "not flushed yet");
        assert!(slots.try_admit(peer).is_none(), "so it keeps its slot");
        slots.flushed(slot.id);
        assert_eq!(idle(), 1);
        let _newcomer = slots.try_admit(peer).expect("the idle connection's slot");
        let ended = tokio::time::timeout(BOUND, task).await.expect("the task ends");
        assert!(ended.unwrap_err().is_cancelled(), "closed for the newcomer");
        drop(slot); // what the aborted task does last: nothing more changes
        assert_eq!(*slots.summary.borrow(), Summary { open: 1, idle: 0 });
    }

    #[test]
    fn the_webhooks_bodies_in_flight_stay_under_a_quarter_of_the_installs_memory_limit() {
        let values: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(include_str!("../../../../config/helm/cmset/values.yaml")).unwrap();
        let limit = values["resources"]["limits"]["memory"].as_str().unwrap();
        let mebibytes: usize = limit.strip_suffix("Mi").unwrap().parse().unwrap();
        let held = Limits::WEBHOOK.body_bytes * Limits::WEBHOOK.in_flight;
        assert!(
            held * 4 < mebibytes * 1024 * 1024,
            "{held} bytes of bodies against a {limit} limit"
        );
    }
}
