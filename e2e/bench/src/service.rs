//! The webhook's Service, on loopback: the API server calls one address, and every replica serves
//! admission behind it, as `config/webhook`'s Service spreads calls over the operator's pods.
//!
//! What it reproduces of a Service and its pods' readiness probe (config/manager): TCP connections,
//! not requests, are spread over the ready endpoints (kube-proxy picks an endpoint per connection, and
//! a kept-alive connection stays where it is); an endpoint is ready after one successful `/readyz`,
//! and no longer ready after 3 failed probes 5 s apart, each allowed 2 s. A frozen replica thus keeps
//! the connections it has and receives new ones for up to 15 s, as a frozen pod would. With no ready
//! endpoint a connection is closed at once (kube-proxy rejects it), and the API server, with
//! `failurePolicy: Ignore`, admits the object unchanged.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

use crate::cluster::Result;
use crate::operator::http_get;

const PROBE_PERIOD: Duration = Duration::from_secs(5);
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
const FAILURE_THRESHOLD: u32 = 3;

#[derive(Clone, Debug)]
struct Endpoint {
    webhook_port: u16,
    metrics_port: u16,
    ready: bool,
    failures: u32,
}

pub struct Service {
    pub port: u16,
    endpoints: Arc<Mutex<Vec<Endpoint>>>,
    accept: tokio::task::JoinHandle<()>,
    probe: tokio::task::JoinHandle<()>,
}

impl Service {
    pub async fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let endpoints: Arc<Mutex<Vec<Endpoint>>> = Arc::default();
        let next = Arc::new(AtomicUsize::new(0));
        let shared = endpoints.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let ready: Vec<u16> = shared
                    .lock()
                    .expect("lock")
                    .iter()
                    .filter(|e| e.ready)
                    .map(|e| e.webhook_port)
                    .collect();
                if ready.is_empty() {
                    continue; // dropped: the client sees the connection closed
                }
                let port = ready[next.fetch_add(1, Ordering::Relaxed) % ready.len()];
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", port)).await else {
                        return;
                    };
                    let mut client = client;
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
            }
        });
        let shared = endpoints.clone();
        let probe = tokio::spawn(async move {
            loop {
                probe_all(&shared).await;
                tokio::time::sleep(PROBE_PERIOD).await;
            }
        });
        Ok(Self {
            port,
            endpoints,
            accept,
            probe,
        })
    }

    /// The replicas behind it, as `(webhook port, metrics port)`; endpoints it knew keep their state,
    /// new ones start unready and are probed at once.
    pub async fn set_endpoints(&self, ports: &[(u16, u16)]) {
        {
            let mut endpoints = self.endpoints.lock().expect("lock");
            let old = std::mem::take(&mut *endpoints);
            for &(webhook_port, metrics_port) in ports {
                let known = old.iter().find(|e| e.webhook_port == webhook_port).cloned();
                endpoints.push(known.unwrap_or(Endpoint {
                    webhook_port,
                    metrics_port,
                    ready: false,
                    failures: 0,
                }));
            }
        }
        probe_all(&self.endpoints).await;
    }

    /// How many endpoints are ready.
    pub fn ready_endpoints(&self) -> usize {
        self.endpoints
            .lock()
            .expect("lock")
            .iter()
            .filter(|e| e.ready)
            .count()
    }
}

/// One probe of every endpoint at once.
async fn probe_all(endpoints: &Mutex<Vec<Endpoint>>) {
    let ports: Vec<u16> = endpoints
        .lock()
        .expect("lock")
        .iter()
        .map(|e| e.metrics_port)
        .collect();
    let results = futures::future::join_all(ports.iter().map(|&port| async move {
        let ok = http_get(port, "/readyz", PROBE_TIMEOUT)
            .await
            .is_some_and(|(code, _)| code == 200);
        (port, ok)
    }))
    .await;
    let mut endpoints = endpoints.lock().expect("lock");
    for (port, ok) in results {
        if let Some(e) = endpoints.iter_mut().find(|e| e.metrics_port == port) {
            if ok {
                (e.ready, e.failures) = (true, 0);
            } else {
                e.failures += 1;
                if e.failures >= FAILURE_THRESHOLD {
                    e.ready = false;
                }
            }
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.accept.abort();
        self.probe.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A backend answering `/readyz` with 200 on one port and echoing a tag on another.
    async fn backend(tag: u8) -> (u16, u16) {
        let web = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let metrics = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ports = (
            web.local_addr().unwrap().port(),
            metrics.local_addr().unwrap().port(),
        );
        tokio::spawn(async move {
            while let Ok((mut s, _)) = web.accept().await {
                let _ = s.write_all(&[tag]).await;
            }
        });
        tokio::spawn(async move {
            while let Ok((mut s, _)) = metrics.accept().await {
                let mut buf = [0u8; 128];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(b"HTTP/1.0 200 OK\r\n\r\nok").await;
            }
        });
        ports
    }

    async fn call(port: u16) -> Option<u8> {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let mut b = [0u8; 1];
        (s.read(&mut b).await.ok()? == 1).then_some(b[0])
    }

    #[tokio::test]
    async fn spreads_connections_over_ready_endpoints_and_closes_them_without_one() {
        let service = Service::start().await.unwrap();
        assert_eq!(call(service.port).await, None, "no endpoint: closed at once");
        let (a, b) = (backend(b'a').await, backend(b'b').await);
        service.set_endpoints(&[a, b]).await;
        assert_eq!(service.ready_endpoints(), 2);
        let mut seen = vec![];
        for _ in 0..4 {
            seen.push(call(service.port).await.unwrap());
        }
        seen.sort();
        assert_eq!(seen, b"aabb");
        // An endpoint that does not answer its probe stays until the third failure.
        let gone = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gone_port = gone.local_addr().unwrap().port();
        drop(gone);
        service.set_endpoints(&[a, (gone_port, gone_port)]).await;
        assert_eq!(service.ready_endpoints(), 1);
    }
}
