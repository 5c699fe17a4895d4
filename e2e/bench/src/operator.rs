//! One replica of the operator under test as a child process: started as the install runs it (leader
//! election on, optionally serving the admission webhook), observed through /proc (CPU, memory) and
//! its own /metrics, frozen and thawed with SIGSTOP and SIGCONT.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cluster::Result;
use crate::metrics::Scrape;

/// What starts a replica: the same for every start in a run.
#[derive(Clone, Debug)]
pub struct Launch {
    pub bin: PathBuf,
    pub kubeconfig: PathBuf,
    pub extra_args: Vec<String>,
    pub log_dir: PathBuf,
    /// `--lease-duration-seconds`: the install's (15 s) unless the bench is told otherwise.
    pub lease_duration_s: u64,
}

/// How one replica serves: its Lease (in the namespace it watches) and its webhook, if any.
#[derive(Clone, Debug)]
pub struct Role<'a> {
    pub namespace: &'a str,
    pub identity: &'a str,
    /// The MutatingWebhookConfiguration whose caBundle it keeps, when it serves the webhook.
    pub webhook_configuration: Option<&'a str>,
    /// The log file's name (in `Launch::log_dir`).
    pub log_name: &'a str,
}

pub struct Operator {
    child: Option<tokio::process::Child>,
    pub pid: u32,
    pub identity: String,
    pub metrics_port: u16,
    /// Where its webhook listens (HTTPS), when it serves one.
    pub webhook_port: Option<u16>,
    /// The last scrape that answered and the last CPU reading: what it did, once it is frozen or gone.
    last: Mutex<(Scrape, Option<Duration>)>,
    frozen: AtomicBool,
}

/// Not `bind(0)`: the kernel hands out the same ephemeral range to outgoing connections, and a
/// replica once failed to start because one took its port between the pick and its bind.
fn free_port() -> Result<u16> {
    Ok(cmset_e2e::free_port())
}

impl Operator {
    /// Spawns one replica on `role.namespace`; its output is appended to its log file.
    pub fn spawn(launch: &Launch, role: &Role<'_>) -> Result<Self> {
        let metrics_port = free_port()?;
        let webhook_port = match role.webhook_configuration {
            Some(_) => Some(free_port()?),
            None => None,
        };
        let log_path = launch.log_dir.join(role.log_name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let mut cmd = tokio::process::Command::new(&launch.bin);
        cmd.env("KUBECONFIG", &launch.kubeconfig)
            .args(["--namespace", role.namespace])
            .arg("--leader-election=true")
            // The Lease lives in the watched namespace (the bench grants it there), so that no run
            // contends with anyone else's operator for the install's Lease in cmset-system.
            .args(["--leader-election-namespace", role.namespace])
            .args(["--lease-duration-seconds", &launch.lease_duration_s.to_string()])
            .args(["--identity", role.identity])
            .args(["--metrics-address", &format!("127.0.0.1:{metrics_port}")])
            // As config/manager runs it.
            .arg("--log-format=json");
        if let (Some(configuration), Some(port)) = (role.webhook_configuration, webhook_port) {
            cmd.args(["--webhook-address", &format!("127.0.0.1:{port}")])
                .args(["--webhook-cert-secret", "cmset-webhook-tls"])
                .args(["--webhook-configuration", configuration]);
        }
        let child = cmd
            .args(&launch.extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("start {}: {e}", launch.bin.display()))?;
        let pid = child.id().ok_or("the operator exited at once")?;
        Ok(Self {
            child: Some(child),
            pid,
            identity: role.identity.to_string(),
            metrics_port,
            webhook_port,
            last: Mutex::default(),
            frozen: AtomicBool::new(false),
        })
    }

    /// A GET on its metrics port, at most 2 s; `None` while it is frozen, once it is gone (its port
    /// may belong to another process by then), or when it does not answer.
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        if self.is_frozen() || self.child.is_none() {
            return None;
        }
        http_get(self.metrics_port, path, Duration::from_secs(2)).await
    }

    pub async fn is_ready(&self) -> bool {
        self.get("/readyz").await.is_some_and(|(code, _)| code == 200)
    }

    /// Its /metrics now (remembered), or the last scrape that answered.
    pub async fn scrape(&self) -> Scrape {
        if let Some((200, body)) = self.get("/metrics").await {
            let s = Scrape::parse(&body);
            self.last.lock().expect("lock").0 = s.clone();
            return s;
        }
        self.last.lock().expect("lock").0.clone()
    }

    /// Whether it holds the Lease, from a fresh scrape (`false` when it does not answer).
    pub async fn leads(&self) -> bool {
        match self.get("/metrics").await {
            Some((200, body)) => Scrape::parse(&body).leader >= 1.0,
            _ => false,
        }
    }

    /// CPU time used so far (user + system); the last reading once the process is gone.
    pub fn cpu(&self) -> Option<Duration> {
        match cpu_of(self.pid).filter(|_| self.child.is_some()) {
            Some(now) => {
                self.last.lock().expect("lock").1 = Some(now);
                Some(now)
            }
            None => self.last.lock().expect("lock").1,
        }
    }

    /// Resident memory now and its peak, in KiB.
    pub fn memory(&self) -> Option<Memory> {
        self.child.as_ref()?;
        memory_of(self.pid)
    }

    fn signal(&self, sig: &str) {
        let _ = std::process::Command::new("kill")
            .args([sig, &self.pid.to_string()])
            .status();
    }

    /// SIGSTOP: the process keeps its sockets and its Lease record, and does nothing at all.
    pub fn freeze(&self) {
        self.cpu();
        self.frozen.store(true, Ordering::SeqCst);
        self.signal("-STOP");
    }

    /// SIGCONT.
    pub fn thaw(&self) {
        self.signal("-CONT");
        self.frozen.store(false, Ordering::SeqCst);
    }

    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    /// The exit status, once the process has exited by itself.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut()?.try_wait().ok()?
    }

    /// SIGKILL, as a crash would (its counters and CPU are read first, to be kept in the sums).
    pub async fn kill(&mut self) {
        self.scrape().await;
        self.cpu();
        if let Some(mut c) = self.child.take() {
            if self.is_frozen() {
                self.signal("-CONT");
            }
            let _ = c.kill().await;
        }
    }
}

/// A minimal HTTP/1.0 GET on loopback with a deadline: status code and body.
pub async fn http_get(port: u16, path: &str, timeout: Duration) -> Option<(u16, String)> {
    let request = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut response = Vec::new();
        s.read_to_end(&mut response).await.ok()?;
        let response = String::from_utf8_lossy(&response);
        let code = response.split_whitespace().nth(1)?.parse().ok()?;
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Some((code, body))
    };
    tokio::time::timeout(timeout, request).await.ok()?
}

#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Memory {
    pub rss_kib: u64,
    pub hwm_kib: u64,
    /// The heap the program holds (`cmset_heap_in_use_bytes`), against RSS, which also counts the
    /// free memory the allocator keeps.
    #[serde(default)]
    pub heap_in_use_kib: Option<u64>,
    /// `RssAnon`: RSS without the pages of files the process maps. Most of an idle replica's RSS is
    /// its own binary's code (about 23 of 28 MiB), whose resident pages move by megabytes between
    /// two builds of the same source as the code's layout moves; this part is what the program holds.
    #[serde(default)]
    pub anon_kib: Option<u64>,
}

/// Clock ticks per second for /proc/<pid>/stat (`getconf CLK_TCK`; 100 on every Linux in practice).
pub fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
            .filter(|t| *t > 0)
            .unwrap_or(100)
    })
}

/// utime + stime of a process, from /proc/<pid>/stat.
pub fn cpu_of(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields start after its last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // Fields 14 and 15 of the whole line; the first after ')' is field 3 (state).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_secs_f64(
        (utime + stime) as f64 / clock_ticks() as f64,
    ))
}

pub fn memory_of(pid: u32) -> Option<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    Some(Memory {
        rss_kib: field("VmRSS:")?,
        hwm_kib: field("VmHWM:")?,
        heap_in_use_kib: None,
        anon_kib: field("RssAnon:"),
    })
}

/// `<bin> --version`, for the record.
pub fn version_of(bin: &Path) -> String {
    std::process::Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_process() {
        let me = std::process::id();
        assert!(cpu_of(me).is_some());
        let m = memory_of(me).expect("VmRSS and VmHWM");
        assert!(m.rss_kib > 0 && m.hwm_kib >= m.rss_kib);
        let anon = m.anon_kib.expect("RssAnon");
        assert!(anon > 0 && anon <= m.rss_kib);
    }

    #[tokio::test]
    async fn http_get_answers_and_gives_up() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            // One answer, then a connection that is accepted and never answered (a frozen process).
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf).await.unwrap();
            s.write_all(b"HTTP/1.0 200 OK\r\n\r\nok").await.unwrap();
            drop(s);
            let (hung, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(hung);
        });
        let ok = http_get(port, "/readyz", Duration::from_secs(2)).await;
        assert_eq!(ok, Some((200, "ok".to_string())));
        let hung = http_get(port, "/readyz", Duration::from_millis(200)).await;
        assert_eq!(hung, None);
        server.abort();
    }
}
