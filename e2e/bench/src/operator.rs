//! The operator under test as a child process: started with its defaults on one namespace, observed
//! through /proc (CPU, memory) and its own /metrics.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cmset_e2e::http_get;

use crate::cluster::Result;

pub struct Operator {
    child: Option<tokio::process::Child>,
    pub pid: u32,
    pub metrics_port: u16,
    /// When the process was spawned.
    pub started: Instant,
}

/// What starts an operator: the same for every start in a run.
#[derive(Clone, Debug)]
pub struct Launch {
    pub bin: PathBuf,
    pub kubeconfig: PathBuf,
    pub extra_args: Vec<String>,
    pub log_dir: PathBuf,
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Operator {
    /// Spawns the operator on `namespace`; its output is appended to `<log_dir>/operator-<namespace>.log`.
    pub fn spawn(launch: &Launch, namespace: &str) -> Result<Self> {
        let port = free_port()?;
        let log_path = launch.log_dir.join(format!("operator-{namespace}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let child = tokio::process::Command::new(&launch.bin)
            .env("KUBECONFIG", &launch.kubeconfig)
            .args(["--namespace", namespace])
            .arg("--leader-election=false")
            .args(["--metrics-address", &format!("127.0.0.1:{port}")])
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
            metrics_port: port,
            started: Instant::now(),
        })
    }

    /// Waits until /readyz answers 200 (caches synced); returns how long after the spawn that was.
    pub async fn ready(&mut self, timeout: Duration) -> Result<Duration> {
        let deadline = self.started + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!("the operator exited before it was ready: {status}").into());
            }
            let port = self.metrics_port;
            let ok = tokio::task::spawn_blocking(move || http_get(port, "/readyz"))
                .await?
                .is_some_and(|(code, _)| code == 200);
            if ok {
                return Ok(self.started.elapsed());
            }
            if Instant::now() >= deadline {
                return Err(format!("the operator was not ready within {timeout:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL, as a crash would.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// CPU time used so far (user + system).
    pub fn cpu(&self) -> Option<Duration> {
        cpu_of(self.pid)
    }

    /// Resident memory now and its peak, in KiB.
    pub fn memory(&self) -> Option<Memory> {
        memory_of(self.pid)
    }

    /// `cmset_api_writes_total` by operation.
    pub async fn writes(&self) -> Option<BTreeMap<String, f64>> {
        let port = self.metrics_port;
        let (_, body) = tokio::task::spawn_blocking(move || http_get(port, "/metrics"))
            .await
            .ok()??;
        Some(
            body.lines()
                .filter_map(|l| {
                    let labels = l.strip_prefix("cmset_api_writes_total{")?;
                    let op = labels.split("operation=\"").nth(1)?.split('"').next()?;
                    Some((op.to_string(), l.rsplit(' ').next()?.parse().ok()?))
                })
                .collect(),
        )
    }

    pub async fn writes_total(&self) -> Option<f64> {
        // `+ 0.0`: an empty sum is -0.0.
        Some(self.writes().await?.values().sum::<f64>() + 0.0)
    }
}

#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Memory {
    pub rss_kib: u64,
    pub hwm_kib: u64,
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
    }
}
