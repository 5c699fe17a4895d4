//! Command-line flags, and what each room is configured with from them (the Prometheus client, the
//! rollout budget, the certificate source, the notification policy); each flag has an environment
//! variable so a Deployment can configure it either way.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use cmset_core::workloads::kinds::{Declaration, Kinds};

use crate::reconcile::prometheus::{Prometheus, PrometheusConfig};
use crate::serving::cert_keeper::{CertSource, SecretSource};
use crate::serving::webhook_certs::Policy;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// Which tokio scheduler runs the engine (see `wiring::runtimes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineRuntime {
    /// Every watch, reconcile and the lease on the main thread: no work moves between threads.
    CurrentThread,
    /// A worker per core, stealing work from each other (how the engine ran before).
    MultiThread,
}

/// cmset: immutable, versioned ConfigMaps whose rollouts and rollbacks follow the workloads that use them.
#[derive(Clone, Debug, Parser)]
#[command(name = "cmset-controller", version, about)]
pub struct Cli {
    /// Namespaces to watch, comma-separated or repeated. Empty: all namespaces.
    #[arg(long = "namespace", env = "CMSET_NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<String>,

    /// Log format.
    #[arg(long, env = "CMSET_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter in `tracing` syntax (e.g. `info`, `cmset_controller=debug`).
    #[arg(long, env = "CMSET_LOG", default_value = "info")]
    pub log_level: String,

    /// Set reconciliations run at once, per set kind. Each waits on one or two API requests, so when
    /// many sets change together (an apply of a whole repository) this many requests are in flight; at
    /// 16 a burst of 1,000 changes went 10% faster than at 4, with the same CPU per change.
    #[arg(long, env = "CMSET_CONCURRENCY", default_value_t = 16)]
    pub concurrency: u16,

    /// Workload reconciliations run at once, per workload kind. A workload's reconcile is one patch
    /// of a few hundred bytes, so a rollout of many workloads moves as fast as the API server answers
    /// this many patches in flight.
    #[arg(long, env = "CMSET_WORKLOAD_CONCURRENCY", default_value_t = 16)]
    pub workload_concurrency: u16,

    /// How long a workload that reads several sets waits after the last change to one of them, so
    /// that sets changed by one apply land in one rollout (milliseconds). A workload that reads one set
    /// never waits.
    #[arg(long, env = "CMSET_WORKLOAD_DEBOUNCE_MS", default_value_t = 500)]
    pub workload_debounce_ms: u64,

    /// Offer HTTP/2 to the API server, so that every watch and request shares one connection (the
    /// server or a proxy in between may still answer HTTP/1.1). `false`: HTTP/1.1, a connection per
    /// watch.
    #[arg(long, env = "CMSET_API_HTTP2", default_value_t = true, action = clap::ArgAction::Set)]
    pub api_http2: bool,

    /// How the engine (watches, index, reconciles, leader election, notifications) is scheduled:
    /// `current-thread` runs it all on the main thread (spread over two workers, it spent 17-19% of
    /// its CPU handing work between them and parking them: issue 51); `multi-thread` runs it on a
    /// worker per core. Admission and the HTTP endpoints run on a thread of their own either way.
    #[arg(long, env = "CMSET_ENGINE_RUNTIME", value_enum, default_value_t = EngineRuntime::CurrentThread)]
    pub engine_runtime: EngineRuntime,

    /// Address of the /metrics, /healthz and /readyz endpoints.
    #[arg(long, env = "CMSET_METRICS_ADDRESS", default_value = "0.0.0.0:8080")]
    pub metrics_address: SocketAddr,

    /// Take a Lease before acting, so that only one of several replicas works at a time.
    #[arg(long, env = "CMSET_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,

    /// Namespace of the leader Lease (default: the operator's own, from POD_NAMESPACE, else cmset-system).
    #[arg(long, env = "CMSET_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// Name of the leader Lease.
    #[arg(long, env = "CMSET_LEASE_NAME", default_value = "cmset-controller")]
    pub lease_name: String,

    /// Seconds a leader may go without renewing before another replica takes over.
    #[arg(long, env = "CMSET_LEASE_DURATION_SECONDS", default_value_t = 15)]
    pub lease_duration_seconds: u64,

    /// Serve the mutating admission webhook (`/mutate`, HTTPS) on this address, e.g. `0.0.0.0:9443`.
    /// Off unless set.
    #[arg(long, env = "CMSET_WEBHOOK_ADDRESS")]
    pub webhook_address: Option<SocketAddr>,

    /// Require a client certificate signed by a CA in this PEM file from whoever calls the webhook:
    /// the API server, when its AdmissionConfiguration gives it one (docs/install.md shows how). Off
    /// by default: the webhook then answers any client that reaches its port, and grants nothing on
    /// the strength of a review either way.
    #[arg(long, env = "CMSET_WEBHOOK_CLIENT_CA")]
    pub webhook_client_ca: Option<std::path::PathBuf>,

    /// Keep the webhook's CA and serving certificate in this Secret of the operator's namespace:
    /// issued by the first replica that finds it missing, renewed with a third of its lifetime left, the
    /// CA kept in the caBundle of `--webhook-configuration`. Without it, the certificate is read from
    /// `--webhook-cert-dir` (e.g. mounted by cert-manager).
    #[arg(long, env = "CMSET_WEBHOOK_CERT_SECRET")]
    pub webhook_cert_secret: Option<String>,

    /// The MutatingWebhookConfiguration whose webhooks cmset keeps trusting its CA (with
    /// `--webhook-cert-secret`), and the ValidatingWebhookConfiguration of the same name (the validation
    /// of AnalysisTemplates) when there is one.
    #[arg(long, env = "CMSET_WEBHOOK_CONFIGURATION", default_value = "cmset")]
    pub webhook_configuration: String,

    /// Delete the Mutating- and ValidatingWebhookConfiguration named `--webhook-configuration` and
    /// exit, doing nothing else: the Helm chart's pre-delete hook runs this, so that an uninstall
    /// leaves no admission webhook pointing at a Service whose pods are gone. Missing ones are fine.
    #[arg(long)]
    pub delete_webhook_configurations: bool,

    /// Lifetime of the CA and serving certificate cmset issues (with `--webhook-cert-secret`).
    #[arg(long, env = "CMSET_WEBHOOK_CERT_VALIDITY_SECONDS", default_value_t = 90 * 86_400,
          value_parser = clap::value_parser!(u64).range(60..))]
    pub webhook_cert_validity_seconds: u64,

    /// The webhook's Service in the operator's namespace; its DNS names go into issued certificates
    /// unless `--webhook-dns-names` says otherwise.
    #[arg(long, env = "CMSET_WEBHOOK_SERVICE", default_value = "cmset-webhook")]
    pub webhook_service: String,

    /// Directory with the webhook's `tls.crt` and `tls.key` (without `--webhook-cert-secret`); a
    /// self-signed pair is generated there when they are missing. Read again when they change.
    #[arg(
        long,
        env = "CMSET_WEBHOOK_CERT_DIR",
        default_value = "/tmp/k8s-webhook-server/serving-certs"
    )]
    pub webhook_cert_dir: std::path::PathBuf,

    /// DNS names for an issued or generated webhook certificate (besides localhost and 127.0.0.1).
    #[arg(long, env = "CMSET_WEBHOOK_DNS_NAMES", value_delimiter = ',')]
    pub webhook_dns_names: Vec<String>,

    /// This replica's identity in the Lease and in events (default: POD_NAME, else the host name).
    #[arg(long, env = "CMSET_IDENTITY")]
    pub identity: Option<String>,

    /// On SIGTERM, how long the reconciles in flight may take to finish before the process stops them
    /// and releases its lease (keep it plus `--shutdown-drain-seconds` below the pod's
    /// terminationGracePeriodSeconds).
    #[arg(long, env = "CMSET_SHUTDOWN_GRACE_SECONDS", default_value_t = 20)]
    pub shutdown_grace_seconds: u64,

    /// On SIGTERM, how long a replica serving the webhook keeps answering admission while it reports
    /// not ready, so that its endpoint leaves the webhook's Service before it stops answering (the
    /// webhook fails open: an admission that cannot be delivered is stored as written). The controllers
    /// stop meanwhile. 10 s covers the endpoints controller removing the terminating pod and
    /// kube-proxy (or the API server's own endpoint lookup) seeing it, which takes about a second or two
    /// on a healthy cluster, with room for a busy one. Without `--webhook-address` nothing drains.
    #[arg(long, env = "CMSET_SHUTDOWN_DRAIN_SECONDS", default_value_t = 10)]
    pub shutdown_drain_seconds: u64,

    /// Serve SecretSets (`secretsets.cmset.dev`): watch SecretSets and Secrets (metadata only), read
    /// source Secrets, write revision Secrets. `false` for clusters that give cmset no access to
    /// Secrets at all (`config/no-secrets`); ConfigMapSets work either way.
    #[arg(long, env = "CMSET_SECRET_SETS", default_value_t = true, action = clap::ArgAction::Set)]
    pub secret_sets: bool,

    /// Hold rollouts by the cluster's ChangeWindows (`changewindows.cmset.dev`, listed and watched).
    /// Windows fail closed: while the operator cannot list them (forbidden, failing, or no answer
    /// yet), every set's moves wait and its condition `ChangeWindowsKnown` says why. `false` runs
    /// without cluster windows, for an install that deliberately does without them; a cluster
    /// without the ChangeWindow CRD needs no flag.
    #[arg(long, env = "CMSET_CHANGE_WINDOWS", default_value_t = true, action = clap::ArgAction::Set)]
    pub change_windows: bool,

    /// Send notifications about rollouts as the ConfigMap `cmset-notifications` (and the Secret
    /// `cmset-notifications-secret`) of `--notifications-namespace` configure; without that
    /// ConfigMap nothing is sent. `false`: do not even watch for it.
    #[arg(long, env = "CMSET_NOTIFICATIONS", default_value_t = true, action = clap::ArgAction::Set)]
    pub notifications: bool,

    /// Where the notification configuration lives (default: the operator's own namespace, from
    /// POD_NAMESPACE, else cmset-system).
    #[arg(long, env = "CMSET_NOTIFICATIONS_NAMESPACE")]
    pub notifications_namespace: Option<String>,

    /// How long a notification whose delivery fails in a way that may pass (no answer, a refused
    /// connection, 408, 429, 5xx) is tried again, with backoff, counted from its first attempt; only
    /// then is it recorded `Failed` (a duration: `90s`, `30m`, `1h`).
    #[arg(long, env = "CMSET_NOTIFICATIONS_MAX_AGE", default_value = "1h", value_parser = parse_duration)]
    pub notifications_max_age: std::time::Duration,

    /// Recipients one set may name in all its `notifications.cmset.dev/subscribe.*` annotations; a
    /// set naming more subscribes none of them (and is told why in an Event). The admin's own
    /// `subscriptions` do not count.
    #[arg(long, env = "CMSET_NOTIFICATIONS_MAX_RECIPIENTS", default_value_t = 10)]
    pub notifications_max_recipients: usize,

    /// An extra workload kind with a pod template, as GROUP/VERSION/KIND=TEMPLATE (e.g.
    /// `apps.kruise.io/v1alpha1/CloneSet=spec.template`); repeat the flag (or separate by commas) for
    /// several. cmset needs list, watch and patch on its resource, and a webhook rule for it.
    #[arg(long = "workload-kind", env = "CMSET_WORKLOAD_KINDS", value_delimiter = ',')]
    pub workload_kinds: Vec<String>,

    /// A YAML file listing extra workload kinds: a list of `{group, version, kind, template}`.
    #[arg(long, env = "CMSET_WORKLOAD_KINDS_FILE")]
    pub workload_kinds_file: Option<std::path::PathBuf>,

    /// How often the API server's discovery is asked which workload kinds it serves (a CRD installed
    /// or removed is picked up within this time).
    #[arg(long, env = "CMSET_KIND_DISCOVERY_SECONDS", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub kind_discovery_seconds: u64,

    /// The cluster-wide rollout budget: at most this many workloads moving at once (moved to a new
    /// revision and not yet healthy), across every namespace; the rest wait their turn, oldest change
    /// first (state `Waiting`). Rollbacks of a failed rollout never wait. Unset: no cap.
    #[arg(long, env = "CMSET_MAX_MOVING_WORKLOADS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_moving_workloads: Option<u64>,

    /// Prometheus' HTTP API, for the metric analysis of rollouts (`spec.rollout.analysis`), e.g.
    /// `http://prometheus.monitoring:9090` (Thanos, Mimir or another API compatible with
    /// `/api/v1/query` too; a path prefix is kept). Without it, a set that asks for analysis does not
    /// roll out, and its status says why.
    #[arg(long, env = "CMSET_PROMETHEUS_URL")]
    pub prometheus_url: Option<String>,

    /// A file holding the bearer token sent to Prometheus; read at every query, so a rotated token is
    /// used at once.
    #[arg(long, env = "CMSET_PROMETHEUS_BEARER_TOKEN_FILE")]
    pub prometheus_bearer_token_file: Option<std::path::PathBuf>,

    /// PEM certificates to trust for an https `--prometheus-url`, instead of the system's (the
    /// operator's image has none).
    #[arg(long, env = "CMSET_PROMETHEUS_CA_FILE")]
    pub prometheus_ca_file: Option<std::path::PathBuf>,

    /// How many analysis queries may be in flight at once, across every set. Queries run off the
    /// reconcile path, each within the query timeout: a slow or unreachable Prometheus delays only the
    /// analysis waiting for it, never another set's revisions or rollbacks.
    #[arg(long, env = "CMSET_ANALYSIS_CONCURRENCY", default_value_t = crate::reconcile::measurer::DEFAULT_CONCURRENCY,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub analysis_concurrency: usize,
}

impl Cli {
    /// The table of workload kinds: the built-in ones and every declared one, each checked. An error
    /// names the declaration and what is wrong with it.
    pub fn kinds(&self) -> Result<Kinds, String> {
        let mut declared = Vec::new();
        for text in self.workload_kinds.iter().filter(|t| !t.trim().is_empty()) {
            declared.push(Declaration::parse(text).map_err(|e| format!("--workload-kind: {e}"))?);
        }
        if let Some(path) = &self.workload_kinds_file {
            let shown = path.display();
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("--workload-kinds-file {shown}: {e}"))?;
            let listed: Vec<Declaration> = serde_yaml_ng::from_str::<Option<Vec<Declaration>>>(&text)
                .map_err(|e| {
                    format!(
                        "--workload-kinds-file {shown}: not a list of {{group, version, kind, template}}: {e}"
                    )
                })?
                .unwrap_or_default();
            declared.extend(listed);
        }
        Kinds::with_declared(&declared).map_err(|e| e.to_string())
    }

    /// Where metric analysis asks Prometheus, if anywhere. A token or CA file without a URL is an
    /// error, as is a URL that cannot be used; an empty URL (an unset environment variable in a
    /// manifest) counts as none.
    pub fn prometheus_config(&self) -> Result<Option<PrometheusConfig>, String> {
        let url = self
            .prometheus_url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty());
        let Some(url) = url else {
            return match (&self.prometheus_bearer_token_file, &self.prometheus_ca_file) {
                (None, None) => Ok(None),
                (Some(_), _) => Err("--prometheus-bearer-token-file needs --prometheus-url".to_string()),
                (None, Some(_)) => Err("--prometheus-ca-file needs --prometheus-url".to_string()),
            };
        };
        Ok(Some(PrometheusConfig {
            bearer_token_file: self.prometheus_bearer_token_file.clone(),
            ca_file: self.prometheus_ca_file.clone(),
            ..PrometheusConfig::new(url)
        }))
    }

    /// The Prometheus client metric analysis uses, if one is configured (see
    /// [`Cli::prometheus_config`]).
    pub fn prometheus(&self) -> Result<Option<Prometheus>, String> {
        self.prometheus_config()?
            .map(|config| Prometheus::new(config).map_err(|e| e.to_string()))
            .transpose()
    }

    pub fn kind_discovery(&self) -> Duration {
        Duration::from_secs(self.kind_discovery_seconds)
    }

    /// The rollout budget `--max-moving-workloads` sets, shared by every scope.
    pub fn rollout_budget(&self) -> Option<std::sync::Arc<crate::engine::rollout_budget::RolloutBudget>> {
        let cap = usize::try_from(self.max_moving_workloads?).unwrap_or(usize::MAX);
        Some(std::sync::Arc::new(
            crate::engine::rollout_budget::RolloutBudget::new(cap),
        ))
    }

    pub fn multi_set_window(&self) -> Duration {
        Duration::from_millis(self.workload_debounce_ms)
    }

    pub fn identity(&self) -> String {
        self.identity
            .clone()
            .or_else(|| std::env::var("POD_NAME").ok())
            .or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
            })
            .unwrap_or_else(|| format!("cmset-{}", std::process::id()))
    }

    /// The namespace the operator runs in: POD_NAMESPACE, else cmset-system.
    pub fn operator_namespace(&self) -> String {
        std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "cmset-system".to_string())
    }

    /// The admin's bounds on notifications.
    pub fn notification_policy(&self) -> crate::notify::notifier::Policy {
        crate::notify::notifier::Policy {
            max_age: self.notifications_max_age,
            max_recipients: self.notifications_max_recipients,
        }
    }

    pub fn notifications_namespace(&self) -> String {
        self.notifications_namespace
            .clone()
            .unwrap_or_else(|| self.operator_namespace())
    }

    pub fn lease_namespace(&self) -> String {
        self.leader_election_namespace
            .clone()
            .unwrap_or_else(|| self.operator_namespace())
    }

    /// Where the webhook's serving certificate comes from.
    pub fn webhook_cert_source(&self) -> CertSource {
        let Some(name) = &self.webhook_cert_secret else {
            return CertSource::Dir {
                dir: self.webhook_cert_dir.clone(),
                names: self.webhook_dns_names.clone(),
            };
        };
        let namespace = self.operator_namespace();
        let names = if self.webhook_dns_names.is_empty() {
            // The names the API server uses for a Service-backed webhook.
            let service = format!("{}.{namespace}.svc", self.webhook_service);
            vec![service.clone(), format!("{service}.cluster.local")]
        } else {
            self.webhook_dns_names.clone()
        };
        CertSource::Secret(SecretSource {
            namespace,
            name: name.clone(),
            configuration: self.webhook_configuration.clone(),
            policy: Policy {
                validity: Duration::from_secs(self.webhook_cert_validity_seconds),
                names,
            },
        })
    }
}

/// A positive duration as `90s`, `30m`, `1h` or `1h30m`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let parsed: jiff::SignedDuration = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 90s, 30m or 1h"))?;
    Duration::try_from(parsed)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{text:?} is not a positive duration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("cmset-controller").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn notifications_are_retried_an_hour_unless_told_otherwise() {
        assert_eq!(cli(&[]).notification_policy().max_age, Duration::from_secs(3600));
        assert_eq!(cli(&[]).notification_policy().max_recipients, 10);
        let policy = cli(&["--notifications-max-recipients", "3"]).notification_policy();
        assert_eq!(policy.max_recipients, 3);
        let policy = cli(&["--notifications-max-age", "90s"]).notification_policy();
        assert_eq!(policy.max_age, Duration::from_secs(90));
        let policy = cli(&["--notifications-max-age", "1h30m"]).notification_policy();
        assert_eq!(policy.max_age, Duration::from_secs(5400));
        for bad in ["0s", "soon", "-5m"] {
            let parsed = Cli::try_parse_from(["cmset-controller", "--notifications-max-age", bad]);
            assert!(parsed.is_err(), "{bad}");
        }
    }

    #[test]
    fn declared_kinds_come_from_flags_and_a_file_and_bad_ones_name_themselves() {
        let kinds = cli(&[
            "--workload-kind",
            "apps.kruise.io/v1alpha1/CloneSet=spec.template",
            "--workload-kind",
            "example.com/v1/Worker=spec.pod.template,example.com/v1/Batch=/spec/template",
        ])
        .kinds()
        .unwrap();
        let declared: Vec<&str> = kinds.declared().map(|k| k.as_str()).collect();
        assert_eq!(declared, ["CloneSet", "Worker", "Batch"]);
        assert_eq!(cli(&[]).kinds().unwrap(), Kinds::built_in());

        let error = cli(&["--workload-kind", "apps/v1/Thing=spec.template"])
            .kinds()
            .unwrap_err();
        assert!(
            error.starts_with("--workload-kind: workload kind \"apps/v1/Thing=spec.template\""),
            "{error}"
        );
        assert!(
            error.contains("not the API group of a custom resource"),
            "{error}"
        );

        let dir = std::env::temp_dir().join(format!("cmset-kinds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("kinds.yaml");
        std::fs::write(
            &file,
            "- {group: apps.kruise.io, version: v1alpha1, kind: CloneSet, template: spec.template}\n",
        )
        .unwrap();
        let path = file.to_str().unwrap();
        let from_file = cli(&["--workload-kinds-file", path]).kinds().unwrap();
        assert!(from_file.parse("CloneSet").is_some());

        std::fs::write(
            &file,
            "- {group: apps.kruise.io, version: v1alpha1, kind: CloneSet, templat: spec.template}\n",
        )
        .unwrap();
        let error = cli(&["--workload-kinds-file", path]).kinds().unwrap_err();
        assert!(
            error.contains("not a list of {group, version, kind, template}"),
            "{error}"
        );
        std::fs::write(
            &file,
            "- {group: apps.kruise.io, version: v1alpha1, kind: Deployment, template: spec.template}\n",
        )
        .unwrap();
        let error = cli(&["--workload-kinds-file", path]).kinds().unwrap_err();
        assert!(
            error.contains("already served as the built-in Deployment"),
            "{error}"
        );
        let error = cli(&["--workload-kinds-file", "/nonexistent/kinds.yaml"])
            .kinds()
            .unwrap_err();
        assert!(
            error.starts_with("--workload-kinds-file /nonexistent/kinds.yaml:"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_engine_runs_on_one_thread_unless_told_otherwise() {
        assert_eq!(cli(&[]).engine_runtime, EngineRuntime::CurrentThread);
        let multi = cli(&["--engine-runtime", "multi-thread"]);
        assert_eq!(multi.engine_runtime, EngineRuntime::MultiThread);
        let current = cli(&["--engine-runtime", "current-thread"]);
        assert_eq!(current.engine_runtime, EngineRuntime::CurrentThread);
        for bad in ["multi_thread", "threads", ""] {
            let parsed = Cli::try_parse_from(["cmset-controller", "--engine-runtime", bad]);
            assert!(parsed.is_err(), "{bad:?}");
        }
        let command = <Cli as clap::CommandFactory>::command();
        let flag = command
            .get_arguments()
            .find(|a| a.get_long() == Some("engine-runtime"))
            .unwrap();
        assert_eq!(
            flag.get_env().and_then(|e| e.to_str()),
            Some("CMSET_ENGINE_RUNTIME")
        );
    }

    #[test]
    fn workloads_move_more_at_once_than_sets_reconcile() {
        let defaults = cli(&[]);
        assert_eq!((defaults.concurrency, defaults.workload_concurrency), (16, 16));
        let set = cli(&["--concurrency", "2", "--workload-concurrency", "64"]);
        assert_eq!((set.concurrency, set.workload_concurrency), (2, 64));
    }

    #[test]
    fn analysis_queries_in_flight_are_bounded_by_default_and_the_bound_is_checked() {
        assert_eq!(
            cli(&[]).analysis_concurrency,
            crate::reconcile::measurer::DEFAULT_CONCURRENCY
        );
        assert_eq!(cli(&["--analysis-concurrency", "2"]).analysis_concurrency, 2);
        let parse = |n: &str| Cli::try_parse_from(["cmset-controller", "--analysis-concurrency", n]);
        assert!(parse("0").is_err(), "no query could ever run");
        assert!(parse("1025").is_err());
    }

    #[test]
    fn prometheus_is_optional_and_its_files_need_its_url() {
        assert_eq!(cli(&[]).prometheus_config(), Ok(None));
        assert_eq!(cli(&["--prometheus-url", " "]).prometheus_config(), Ok(None));
        let config = cli(&[
            "--prometheus-url",
            "https://prometheus.monitoring:9090",
            "--prometheus-bearer-token-file",
            "/var/run/secrets/prometheus/token",
            "--prometheus-ca-file",
            "/etc/prometheus-ca/ca.crt",
        ])
        .prometheus_config()
        .unwrap()
        .unwrap();
        assert_eq!(config.url, "https://prometheus.monitoring:9090");
        assert_eq!(
            config.bearer_token_file.as_deref(),
            Some(std::path::Path::new("/var/run/secrets/prometheus/token"))
        );
        assert_eq!(config.timeout, crate::reconcile::prometheus::QUERY_TIMEOUT);
        assert_eq!(
            cli(&["--prometheus-bearer-token-file", "/t"]).prometheus_config(),
            Err("--prometheus-bearer-token-file needs --prometheus-url".to_string())
        );
        assert_eq!(
            cli(&["--prometheus-ca-file", "/ca"]).prometheus_config(),
            Err("--prometheus-ca-file needs --prometheus-url".to_string())
        );
        let client = cli(&["--prometheus-url", "http://prometheus:9090/"])
            .prometheus()
            .unwrap()
            .unwrap();
        assert_eq!(client.url(), "http://prometheus:9090");
        let error = cli(&["--prometheus-url", "prometheus:9090"])
            .prometheus()
            .unwrap_err();
        assert!(error.contains("must start with http:// or https://"), "{error}");
        let error = cli(&[
            "--prometheus-url",
            "https://p",
            "--prometheus-ca-file",
            "/nonexistent/ca.crt",
        ])
        .prometheus()
        .unwrap_err();
        assert!(
            error.starts_with("--prometheus-ca-file /nonexistent/ca.crt:"),
            "{error}"
        );
    }
}
