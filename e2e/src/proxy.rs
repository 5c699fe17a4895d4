//! A TCP proxy in front of the API server that a test can freeze: connections stay open but no byte
//! moves either way, as when the API server is stopped (SIGSTOP) or the network between one client and
//! it hangs. Only the clients that connect through the proxy are affected; everyone else reaches the
//! API server as usual. TLS passes through untouched (the server's certificate names 127.0.0.1).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct Proxy {
    pub port: u16,
    frozen: Arc<AtomicBool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream` (`host:port`).
    pub async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let port = listener.local_addr().unwrap().port();
        let frozen = Arc::new(AtomicBool::new(false));
        let flag = frozen.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pipe(cr, sw, flag.clone()));
                tokio::spawn(pipe(sr, cw, flag.clone()));
            }
        });
        Self { port, frozen, accept }
    }

    /// From now on, nothing passes in either direction (connections stay open).
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies bytes from `from` to `to`, holding them while the proxy is frozen.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

fn server_of(kubeconfig: &str) -> String {
    kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .map(|s| s.trim().trim_matches('"').to_string())
        .expect("the kubeconfig names a server")
}

/// The `host:port` of the API server the kubeconfig at `path` names.
pub fn upstream_of(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).expect("read the kubeconfig");
    server_of(&text)
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string()
}

/// A copy of the kubeconfig at `path` whose server is the proxy.
pub fn kubeconfig_via(path: &std::path::Path, proxy: &Proxy, name: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(path).expect("read the kubeconfig");
    let rewritten = text.replace(&server_of(&text), &format!("https://127.0.0.1:{}", proxy.port));
    let out = std::env::temp_dir().join(format!("{name}.kubeconfig"));
    std::fs::write(&out, rewritten).expect("write the proxied kubeconfig");
    out
}
