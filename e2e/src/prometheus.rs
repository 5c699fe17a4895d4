//! A real Prometheus for tests, started and stopped by the harness like the operator: Debian's build,
//! cached by `e2e/monitoring/prometheus.sh` (or the binary named by `CMSET_PROMETHEUS_BIN`), on a free
//! loopback port, with a generated configuration: the scrape targets the test gives, every second, and
//! optional rule files. Its data lives in a temporary directory; its log goes to `CMSET_E2E_LOGS` (or
//! the temporary directory) as `prometheus-<name>.log`. Prometheus' own query log (`query_log_file`)
//! records every query it evaluates, so a test can see exactly what reached it
//! ([`Prometheus::logged_queries`]). Dropping it kills the process and removes the data.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long Prometheus has to report ready.
const START: Duration = Duration::from_secs(60);
/// Prometheus' query log, in its directory: one JSON line per query it evaluated.
const QUERY_LOG: &str = "queries.log";

/// One sample of a query's answer (an instant vector's element, or a scalar with no labels).
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// What to start: see [`Prometheus::builder`].
pub struct Builder {
    name: String,
    /// Jobs and their targets.
    scrapes: Vec<(String, Vec<String>)>,
    rule_files: Vec<PathBuf>,
}

impl Builder {
    /// Scrapes `target` (`host:port`, `/metrics`) as job `job` (several targets may share a job, as the
    /// replicas of one operator do), every second. Labels the target sends win over the job's
    /// (`honor_labels`), as with cmset's ServiceMonitor.
    pub fn scrape(mut self, job: &str, target: impl std::fmt::Display) -> Self {
        let target = target.to_string();
        match self.scrapes.iter_mut().find(|(j, _)| j == job) {
            Some((_, targets)) => targets.push(target),
            None => self.scrapes.push((job.to_string(), vec![target])),
        }
        self
    }

    /// Loads the rules (alerting or recording) of `path`, evaluated every second.
    pub fn rule_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.rule_files.push(path.into());
        self
    }

    /// Starts Prometheus and waits until it reports ready.
    pub async fn start(self) -> Prometheus {
        let binary = binary();
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "cmset-prometheus-{}-{}-{nanos:x}",
            self.name,
            std::process::id()
        ));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, self.config(&dir.join(QUERY_LOG))).unwrap();
        let logs = crate::env_path("CMSET_E2E_LOGS").unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&logs).unwrap();
        let log_path = logs.join(format!("prometheus-{}.log", self.name));
        let log = std::fs::File::create(&log_path).unwrap();
        let port = crate::free_port();
        let child = Command::new(&binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        let mut prometheus = Prometheus {
            child: Some(child),
            port,
            dir,
            log: log_path,
        };
        prometheus.wait_ready().await;
        prometheus
    }

    fn config(&self, query_log: &Path) -> String {
        // Every string is written as JSON, which YAML reads as is.
        let quote = |s: &str| serde_json::to_string(s).unwrap();
        let mut out =
            String::from("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n");
        out.push_str(&format!(
            "  query_log_file: {}\n",
            quote(&query_log.to_string_lossy())
        ));
        if !self.rule_files.is_empty() {
            out.push_str("rule_files:\n");
            for path in &self.rule_files {
                let path = std::fs::canonicalize(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                out.push_str(&format!("  - {}\n", quote(&path.to_string_lossy())));
            }
        }
        out.push_str("scrape_configs:\n");
        for (job, targets) in &self.scrapes {
            let targets: Vec<String> = targets.iter().map(|t| quote(t)).collect();
            out.push_str(&format!(
                "  - job_name: {}\n    honor_labels: true\n    static_configs:\n      - targets: [{}]\n",
                quote(job),
                targets.join(", ")
            ));
        }
        out
    }
}

/// A running Prometheus; killed, and its data removed, when dropped.
pub struct Prometheus {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    log: PathBuf,
}

impl Prometheus {
    /// A Prometheus called `name` (its log file and data directory say so) with nothing to scrape yet.
    pub fn builder(name: &str) -> Builder {
        Builder {
            name: name.to_string(),
            scrapes: Vec::new(),
            rule_files: Vec::new(),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its configuration and data.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Every query Prometheus evaluated so far, in order, from its own query log (the harness's
    /// [`Self::query`] included, rule evaluations excluded).
    pub fn logged_queries(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.dir.join(QUERY_LOG)).unwrap_or_default();
        log.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|entry| entry.get("ruleGroup").is_none())
            .filter_map(|entry| entry["params"]["query"].as_str().map(str::to_string))
            .collect()
    }

    /// Evaluates `promql` now: its samples, or Prometheus' error (a query that does not parse, say).
    pub fn query(&self, promql: &str) -> Result<Vec<Sample>, String> {
        samples(&self.api(&format!("/api/v1/query?query={}", percent_encode(promql)))?)
    }

    /// The `data` of a GET on Prometheus' HTTP API (`/api/v1/rules`, say), or its error.
    pub fn api(&self, path: &str) -> Result<serde_json::Value, String> {
        let (code, body) = crate::http_get(self.port, path)
            .ok_or_else(|| format!("no answer from Prometheus on port {}", self.port))?;
        let mut answer: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("HTTP {code}, not JSON ({e}): {body}"))?;
        if answer["status"] != "success" {
            return Err(format!(
                "HTTP {code}: {}: {}",
                answer["errorType"].as_str().unwrap_or("error"),
                answer["error"].as_str().unwrap_or(&body)
            ));
        }
        Ok(answer["data"].take())
    }

    /// Polls `promql` until `accept` takes its samples (and returns them), or panics after `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        promql: &str,
        accept: impl Fn(&[Sample]) -> bool,
    ) -> Vec<Sample> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.query(promql) {
                Ok(samples) if accept(&samples) => return samples,
                other => other,
            };
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting on `{promql}`; last answer: {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Kills the process (the test is done with it; nothing it holds needs a clean shutdown) and waits
    /// for it, so that none is left behind.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + START;
        loop {
            if crate::http_get(self.port, "/-/ready").is_some_and(|(code, _)| code == 200) {
                return;
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!(
                    "Prometheus exited ({status}) before it was ready; its log ends:\n{}",
                    self.log_tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus not ready after {START:?}; its log ends:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The Prometheus binary: `CMSET_PROMETHEUS_BIN`, else the one `e2e/monitoring/prometheus.sh install`
/// caches (downloading it the first time); asked once per test process.
pub fn binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            if let Some(path) = crate::env_path("CMSET_PROMETHEUS_BIN") {
                return path;
            }
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("monitoring/prometheus.sh");
            let out = Command::new("bash")
                .arg(&script)
                .arg("install")
                .stderr(Stdio::inherit())
                .output()
                .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
            assert!(out.status.success(), "{} install failed", script.display());
            let stdout = String::from_utf8_lossy(&out.stdout);
            PathBuf::from(stdout.lines().next().expect("the prometheus path").trim())
        })
        .clone()
}

/// The samples of a query's `data`: an instant vector, or a scalar.
fn samples(data: &serde_json::Value) -> Result<Vec<Sample>, String> {
    let value = |pair: &serde_json::Value| -> Result<f64, String> {
        let text = pair[1].as_str().ok_or_else(|| format!("no value in {pair}"))?;
        // Go writes +Inf, -Inf and NaN, which Rust parses as well.
        text.parse::<f64>().map_err(|e| format!("{text}: {e}"))
    };
    match data["resultType"].as_str() {
        Some("vector") => data["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let labels = r["metric"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect();
                Ok(Sample {
                    labels,
                    value: value(&r["value"])?,
                })
            })
            .collect(),
        Some("scalar") => Ok(vec![Sample {
            labels: BTreeMap::new(),
            value: value(&data["result"])?,
        }]),
        other => Err(format!(
            "a {other:?} result, not an instant vector or a scalar: {data}"
        )),
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(
            percent_encode(r#"sum by (a) (x{b="c d"}) > 0.5"#),
            "sum%20by%20%28a%29%20%28x%7Bb%3D%22c%20d%22%7D%29%20%3E%200.5"
        );
    }

    #[test]
    fn answers_are_read_as_vectors_and_scalars() {
        let vector: serde_json::Value = serde_json::from_str(
            r#"{"resultType":"vector","result":[{"metric":{"__name__":"x","job":"e"},"value":[1.5,"+Inf"]}]}"#,
        )
        .unwrap();
        assert_eq!(
            samples(&vector).unwrap(),
            [Sample {
                labels: [("__name__", "x"), ("job", "e")]
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .into(),
                value: f64::INFINITY,
            }]
        );
        let scalar: serde_json::Value =
            serde_json::from_str(r#"{"resultType":"scalar","result":[1.5,"2"]}"#).unwrap();
        assert_eq!(samples(&scalar).unwrap()[0].value, 2.0);
        let matrix: serde_json::Value =
            serde_json::from_str(r#"{"resultType":"matrix","result":[]}"#).unwrap();
        assert!(samples(&matrix).is_err());
    }

    #[test]
    fn the_configuration_scrapes_every_second_and_honours_labels() {
        let config = Prometheus::builder("config")
            .scrape("cmset", "127.0.0.1:8080")
            .scrape("exporter", "127.0.0.1:9000")
            .scrape("cmset", "127.0.0.1:8081")
            .config(Path::new("/tmp/q.log"));
        assert_eq!(
            config,
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             \x20 query_log_file: \"/tmp/q.log\"\n\
             scrape_configs:\n\
             \x20 - job_name: \"cmset\"\n    honor_labels: true\n    static_configs:\n      - targets: [\"127.0.0.1:8080\", \"127.0.0.1:8081\"]\n\
             \x20 - job_name: \"exporter\"\n    honor_labels: true\n    static_configs:\n      - targets: [\"127.0.0.1:9000\"]\n"
        );
    }
}
