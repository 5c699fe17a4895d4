//! A TCP load balancer in front of several operator replicas' webhooks, standing in for the webhook's
//! Service: it sends each new connection to a replica that was ready when it last probed its `/readyz`,
//! as kube-proxy sends it to an endpoint the endpoints controller last published. Probing once a second
//! gives the lag between a replica turning not ready and the Service leaving it out. A connection the
//! chosen replica refuses is closed, as a refused connection to a pod is: the API server then fails
//! open. TLS passes through untouched.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How often every replica's `/readyz` is asked.
pub const PROBE_PERIOD: Duration = Duration::from_secs(1);

/// One replica behind the balancer: where its webhook listens and where its `/readyz` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backend {
    pub webhook_port: u16,
    pub metrics_port: u16,
}

#[derive(Default)]
struct Pool {
    backends: Vec<Backend>,
    /// The backends ready at the last probe, in the order of `backends`.
    ready: Vec<Backend>,
    next: usize,
}

pub struct Balancer {
    pub port: u16,
    pool: Arc<Mutex<Pool>>,
    /// Stops its thread when dropped.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Balancer {
    /// Starts on a thread of its own, so that a test blocking its runtime (`kubectl`, `curl`) does not
    /// stall the traffic, any more than it would stall a Service.
    pub fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let pool = Arc::new(Mutex::new(Pool::default()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = pool.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the balancer");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("a tokio listener");
                tokio::select! {
                    _ = stopped => {}
                    () = accept(listener, shared.clone()) => {}
                    () = probe(shared) => {}
                }
            });
        });
        Self {
            port,
            pool,
            _stop: stop,
        }
    }

    /// Adds a replica; it takes connections once a probe finds it ready.
    pub fn add(&self, backend: Backend) {
        self.pool.lock().unwrap().backends.push(backend);
    }

    /// Removes a replica whose process is gone (its pod deleted).
    pub fn remove(&self, backend: Backend) {
        let mut pool = self.pool.lock().unwrap();
        pool.backends.retain(|b| *b != backend);
        pool.ready.retain(|b| *b != backend);
    }

    /// The replicas ready at the last probe.
    pub fn ready(&self) -> Vec<Backend> {
        self.pool.lock().unwrap().ready.clone()
    }
}

async fn accept(listener: TcpListener, pool: Arc<Mutex<Pool>>) {
    while let Ok((client, _)) = listener.accept().await {
        let Some(backend) = pick(&pool) else {
            continue; // no endpoint: the connection is closed at once
        };
        tokio::spawn(forward(client, backend.webhook_port));
    }
}

/// Asks every replica's `/readyz` each [`PROBE_PERIOD`]; the ready ones take the next connections.
async fn probe(pool: Arc<Mutex<Pool>>) {
    loop {
        let backends = pool.lock().unwrap().backends.clone();
        let mut ready = Vec::new();
        for backend in backends {
            if is_ready(backend.metrics_port).await {
                ready.push(backend);
            }
        }
        {
            let mut pool = pool.lock().unwrap();
            // A replica removed while it was probed stays removed.
            ready.retain(|b| pool.backends.contains(b));
            pool.ready = ready;
        }
        tokio::time::sleep(PROBE_PERIOD).await;
    }
}

/// The next ready backend, round robin.
fn pick(pool: &Mutex<Pool>) -> Option<Backend> {
    let mut pool = pool.lock().unwrap();
    if pool.ready.is_empty() {
        return None;
    }
    pool.next = (pool.next + 1) % pool.ready.len();
    Some(pool.ready[pool.next])
}

async fn forward(mut client: TcpStream, port: u16) {
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", port)).await else {
        return; // refused: the client sees its connection closed
    };
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}

/// Whether `/readyz` answers 200 within half a second.
async fn is_ready(port: u16) -> bool {
    let ask = async {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        s.write_all(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .await
            .ok()?;
        let mut response = Vec::new();
        s.read_to_end(&mut response).await.ok()?;
        Some(response.starts_with(b"HTTP/1.1 200") || response.starts_with(b"HTTP/1.0 200"))
    };
    tokio::time::timeout(Duration::from_millis(500), ask)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}
