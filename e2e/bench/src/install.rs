//! The operator as one configuration installs it, in one namespace: two replicas with leader election
//! (one leads, the other stands by), and in the `webhook` configuration the admission webhook,
//! registered as config/webhook registers it and served by both replicas behind a Service.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cluster::{self, Result};
use crate::metrics::Scrape;
use crate::operator::{Memory, Operator, Role};
use crate::service::Service;
use crate::stages::Ctx;

/// Replicas of config/manager's Deployment.
pub const REPLICAS: usize = 2;

/// What is installed besides the two replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Configuration {
    /// config/default: the webhook registered (failurePolicy Ignore, 5 s, opted-in objects only) and
    /// served by every replica.
    Webhook,
    /// The same without the webhook: workloads are rewritten only after they are stored.
    NoWebhook,
}

impl Configuration {
    pub fn name(self) -> &'static str {
        match self {
            Self::Webhook => "webhook",
            Self::NoWebhook => "no-webhook",
        }
    }

    pub fn webhook(self) -> bool {
        self == Self::Webhook
    }

    /// What a run installs for it, in words (for the record).
    pub fn describe(self, lease_duration_s: u64) -> String {
        let replicas = format!(
            "{REPLICAS} replicas, leader election (Lease in the watched namespace, {lease_duration_s} s)"
        );
        match self {
            Self::Webhook => format!(
                "{replicas}; the admission webhook registered at a loopback Service in front of both \
                 replicas (failurePolicy Ignore, timeout 5 s, opted-in objects only)"
            ),
            Self::NoWebhook => format!("{replicas}; no webhook"),
        }
    }
}

impl std::str::FromStr for Configuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "webhook" => Ok(Self::Webhook),
            "no-webhook" => Ok(Self::NoWebhook),
            other => Err(format!("{other:?}: expected webhook or no-webhook")),
        }
    }
}

impl std::fmt::Display for Configuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

pub struct Webhook {
    /// The MutatingWebhookConfiguration's name.
    pub registration: String,
    pub service: Service,
}

pub struct Install {
    pub namespace: String,
    /// One per slot; a replaced replica's process moves to `retired`.
    pub replicas: Vec<Operator>,
    /// Processes that were killed or exited: their last counters and CPU still count in the sums.
    retired: Vec<Operator>,
    pub webhook: Option<Webhook>,
}

/// One replica's memory and what it was doing.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReplicaMemory {
    /// `leader` or `standby`.
    pub role: String,
    pub memory: Option<Memory>,
}

fn identity(slot: usize) -> String {
    format!("replica-{slot}")
}

impl Install {
    /// Registers the webhook (for `Configuration::Webhook`) and starts both replicas at once, as
    /// `kubectl apply -k config/default` would. Not waited for: see [`Install::ready`].
    pub async fn start(ctx: &Ctx, namespace: &str, config: Configuration) -> Result<Self> {
        let account = ctx.run_identity.as_ref().map(|id| &id.account);
        cluster::grant_lease(&ctx.client, namespace, account).await?;
        let webhook = if config.webhook() {
            let service = Service::start().await?;
            let registration = format!("cmset-bench-{namespace}");
            ctx.register_webhook(&registration, namespace, service.port)
                .await?;
            Some(Webhook {
                registration,
                service,
            })
        } else {
            None
        };
        let mut install = Self {
            namespace: namespace.to_string(),
            replicas: vec![],
            retired: vec![],
            webhook,
        };
        for slot in 0..REPLICAS {
            let op = install.spawn(ctx, slot)?;
            install.replicas.push(op);
        }
        install.update_endpoints().await;
        Ok(install)
    }

    fn spawn(&self, ctx: &Ctx, slot: usize) -> Result<Operator> {
        let identity = identity(slot);
        let log_name = format!("{}-{identity}.log", self.namespace);
        Operator::spawn(
            &ctx.launch,
            &Role {
                namespace: &self.namespace,
                // A container restarted in its pod keeps the pod's name, and so its identity.
                identity: &identity,
                webhook_configuration: self.webhook.as_ref().map(|w| w.registration.as_str()),
                log_name: &log_name,
            },
        )
    }

    async fn update_endpoints(&self) {
        if let Some(w) = &self.webhook {
            let ports: Vec<(u16, u16)> = self
                .replicas
                .iter()
                .filter_map(|r| Some((r.webhook_port?, r.metrics_port)))
                .collect();
            w.service.set_endpoints(&ports).await;
        }
    }

    /// Waits until one replica leads with its caches synced, every other one is ready (standing by),
    /// and, with the webhook, its caBundle is in the registration and the Service has a ready
    /// endpoint. Returns how long after `since` that was.
    pub async fn ready(&mut self, ctx: &Ctx, since: Instant, timeout: Duration) -> Result<Duration> {
        let deadline = since + timeout;
        loop {
            for r in &mut self.replicas {
                if let Some(status) = r.exited() {
                    return Err(format!("replica {} exited: {status}", r.identity).into());
                }
            }
            if self.is_ready(ctx).await {
                return Ok(since.elapsed());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the install was not ready within {timeout:?} (one leader with synced caches, a standby{})",
                    if self.webhook.is_some() {
                        ", the webhook's CA registered"
                    } else {
                        ""
                    }
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn is_ready(&self, ctx: &Ctx) -> bool {
        let mut leaders = 0;
        for r in &self.replicas {
            // The gauge first: a replica that just took the Lease reports unready until its caches are
            // synced, so /readyz read after a leader gauge of 1 means synced.
            if r.leads().await {
                leaders += 1;
            }
            if !r.is_ready().await {
                return false;
            }
        }
        if leaders != 1 {
            return false;
        }
        match &self.webhook {
            None => true,
            Some(w) => {
                w.service.ready_endpoints() > 0 && cluster::has_ca_bundle(&ctx.client, &w.registration).await
            }
        }
    }

    /// The slot of the replica that holds the Lease now.
    pub async fn leader(&self) -> Option<usize> {
        for (i, r) in self.replicas.iter().enumerate() {
            if r.leads().await {
                return Some(i);
            }
        }
        None
    }

    /// Every process's counters summed, those of retired processes as last read.
    pub async fn scrape(&self) -> Scrape {
        let mut sum = Scrape::default();
        for r in self.replicas.iter().chain(&self.retired) {
            sum.add(&r.scrape().await);
        }
        sum
    }

    pub async fn writes_total(&self) -> f64 {
        self.scrape().await.writes_total()
    }

    /// CPU of every process this install ran (replaced ones as last read).
    pub fn cpu(&self) -> Option<Duration> {
        self.replicas.iter().chain(&self.retired).map(Operator::cpu).sum()
    }

    /// CPU by slot of the current replicas (a slot's earlier processes included).
    pub fn cpu_by_slot(&self) -> Vec<Option<Duration>> {
        (0..self.replicas.len())
            .map(|slot| {
                let id = identity(slot);
                self.replicas
                    .iter()
                    .chain(&self.retired)
                    .filter(|r| r.identity == id)
                    .map(Operator::cpu)
                    .sum()
            })
            .collect()
    }

    /// Each replica's memory, with its role (a fresh scrape of the leader gauge), the leader first.
    pub async fn memory(&self) -> Vec<ReplicaMemory> {
        let leader = self.leader().await;
        let mut out = Vec::with_capacity(self.replicas.len());
        for (i, r) in self.replicas.iter().enumerate() {
            let heap = r.scrape().await.heap_in_use_bytes;
            let memory = r.memory().map(|mut m| {
                m.heap_in_use_kib = heap.map(|b| (b / 1024.0) as u64);
                m
            });
            out.push(ReplicaMemory {
                role: role(leader, i).to_string(),
                memory,
            });
        }
        out.sort_by_key(|r| r.role != "leader");
        out
    }

    /// Kills the process in `slot` (unless it is gone already) and starts a new one in its place, as
    /// the kubelet restarts a container.
    pub async fn replace(&mut self, ctx: &Ctx, slot: usize) -> Result<()> {
        let fresh = self.spawn(ctx, slot)?;
        let mut old = std::mem::replace(&mut self.replicas[slot], fresh);
        old.kill().await;
        self.retired.push(old);
        self.update_endpoints().await;
        Ok(())
    }

    /// Starts a new process for every replica that exited by itself (one that lost its Lease, e.g.
    /// when the API server was away), as the kubelet restarts a container, and waits until the install
    /// is ready again; which ones, with their exit status.
    pub async fn revive(&mut self, ctx: &Ctx) -> Result<Vec<String>> {
        let mut revived = vec![];
        for slot in 0..self.replicas.len() {
            if let Some(status) = self.replicas[slot].exited() {
                revived.push(format!("{} ({status})", self.replicas[slot].identity));
                self.replace(ctx, slot).await?;
            }
        }
        if !revived.is_empty() {
            self.ready(ctx, Instant::now(), ctx.timeout_base).await?;
        }
        Ok(revived)
    }

    /// SIGKILL of every replica.
    pub async fn kill_all(&mut self) {
        for r in &mut self.replicas {
            r.kill().await;
        }
    }

    /// Kills every replica and unregisters the webhook.
    pub async fn shutdown(mut self, ctx: &Ctx) {
        self.kill_all().await;
        if let Some(w) = self.webhook.take() {
            ctx.unregister_webhook(&w.registration).await;
        }
    }
}

pub fn role(leader: Option<usize>, slot: usize) -> &'static str {
    if leader == Some(slot) { "leader" } else { "standby" }
}
