//! Leader election on a `coordination.k8s.io/v1` Lease, so several replicas can run with one active.
//!
//! The rules are client-go's: a replica takes the lease when it is free or its holder has not renewed
//! it within `leaseDurationSeconds`; every write carries the resourceVersion it read, so two candidates
//! can never both win.
//!
//! Timing, as client-go's `leaseDuration` / `renewDeadline` / `retryPeriod` (15 s / 10 s / 2 s by
//! default): the leader tries to renew every `retry_period`, and every request it makes for that has a
//! deadline. If no renewal has succeeded within `renew_deadline` of the last one, it steps down at
//! once, `duration - renew_deadline` before any standby may take over, so that two leaders never act
//! at once even when the API server stops answering mid-request (a renewal that hangs counts as failed
//! when its deadline passes). Stepping down stops the controllers (their futures are dropped, so no
//! further write is issued), then the process exits and is restarted; releasing the lease on the way
//! out is best effort, with its own short deadline.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tracing::{info, warn};

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long the lease is valid after a renewal: a standby takes over after that.
    pub duration: Duration,
    /// The leader steps down when it has not renewed within this long (shorter than `duration`).
    pub renew_deadline: Duration,
    /// How often to try to take or renew the lease.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// client-go's proportions (15 s / 10 s / 2 s) for a lease of `duration`.
    pub fn with_duration(namespace: String, name: String, identity: String, duration: Duration) -> Self {
        let duration = duration.max(Duration::from_secs(3));
        Self {
            namespace,
            name,
            identity,
            renew_deadline: duration * 2 / 3,
            retry_period: (duration * 2 / 15).max(Duration::from_millis(500)),
            duration,
        }
    }
}

/// The longest a release may take on the way out: best effort, never a reason to hang.
const RELEASE_DEADLINE: Duration = Duration::from_secs(2);

pub struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
}

/// What holding the lease looks like from the lease object itself (pure, for tests).
pub fn can_take(spec: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> bool {
    let Some(spec) = spec else { return true };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() || holder == identity {
        return true;
    }
    let (Some(renewed), Some(secs)) = (spec.renew_time.as_ref(), spec.lease_duration_seconds) else {
        return true;
    };
    renewed.0 + SignedDuration::from_secs(i64::from(secs)) < now
}

impl Elector {
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
        }
    }

    fn spec(&self, previous: Option<&LeaseSpec>, now: Timestamp) -> LeaseSpec {
        let ours = previous.and_then(|p| p.holder_identity.as_deref()) == Some(self.config.identity.as_str());
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(i32::try_from(self.config.duration.as_secs()).unwrap_or(15)),
            acquire_time: if ours {
                previous.and_then(|p| p.acquire_time.clone())
            } else {
                Some(MicroTime(now))
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(if ours || previous.is_none() {
                transitions
            } else {
                transitions + 1
            }),
            ..LeaseSpec::default()
        }
    }

    /// One attempt to take or renew the lease. `Ok(true)` when this replica holds it afterwards.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        match self.api.get_opt(&self.config.name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(self.spec(None, now)),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Some(mut lease) => {
                if !can_take(lease.spec.as_ref(), &self.config.identity, now) {
                    return Ok(false);
                }
                lease.spec = Some(self.spec(lease.spec.as_ref(), now));
                // `replace` sends the resourceVersion we read: a concurrent writer makes this a 409.
                match self
                    .api
                    .replace(&self.config.name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Waits until this replica holds the lease.
    pub async fn acquire(&self) {
        let mut logged = false;
        loop {
            let attempt = tokio::time::timeout(self.config.renew_deadline, self.try_acquire_or_renew());
            match attempt.await.unwrap_or_else(|_| Err(timed_out())) {
                Ok(true) => {
                    info!(lease = %self.config.name, identity = %self.config.identity, "became leader");
                    return;
                }
                Ok(false) if !logged => {
                    info!(lease = %self.config.name, "another replica leads; standing by");
                    logged = true;
                }
                Ok(false) => {}
                Err(e) => warn!(error = %e, "could not read or take the lease"),
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Renews the lease until it is lost; returns when this replica must stop acting as leader: the
    /// lease was taken, or `renew_deadline` passed since the last renewal. Each attempt is cut off at
    /// that deadline, so a frozen API server cannot hold this past it.
    pub async fn hold(&self) {
        // A renewal is as fresh as the moment its request was sent: the server stamps our clock's time.
        let mut last_renewed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            let deadline = last_renewed + self.config.renew_deadline;
            let started = tokio::time::Instant::now();
            match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => last_renewed = started,
                Ok(Ok(false)) => {
                    warn!(lease = %self.config.name, "lease taken by another replica");
                    return;
                }
                Ok(Err(e)) => warn!(error = %e, "could not renew the lease"),
                Err(_) => warn!(lease = %self.config.name, "renewing the lease did not finish in time"),
            }
            if tokio::time::Instant::now() >= deadline && last_renewed < started {
                warn!(
                    lease = %self.config.name,
                    deadline = ?self.config.renew_deadline,
                    "no renewal within the renew deadline; stepping down before the lease can expire"
                );
                return;
            }
        }
    }

    /// Gives the lease up on shutdown so a standby takes over at once instead of after expiry. Best
    /// effort: it gives up after half the time between the renew deadline and the lease's expiry (at
    /// most [`RELEASE_DEADLINE`]), so that a leader that stepped down has exited before a standby may
    /// take over.
    pub async fn release(&self) {
        let margin = self.config.duration.saturating_sub(self.config.renew_deadline) / 2;
        if tokio::time::timeout(margin.min(RELEASE_DEADLINE), self.release_now())
            .await
            .is_err()
        {
            warn!(lease = %self.config.name, "could not release the lease in time; it expires by itself");
        }
    }

    async fn release_now(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else { return };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        if let Err(e) = self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            warn!(error = %e, "could not release the lease");
        }
    }
}

fn timed_out() -> kube::Error {
    kube::Error::Service(Box::new(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "lease request did not finish before its deadline",
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed: i64, secs: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap())),
            lease_duration_seconds: Some(secs),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn who_may_take_the_lease() {
        let now = Timestamp::from_second(1_000).unwrap();
        assert!(can_take(None, "a", now), "no lease yet");
        assert!(can_take(Some(&lease(None, 999, 15)), "a", now), "released");
        assert!(can_take(Some(&lease(Some("a"), 999, 15)), "a", now), "our own");
        assert!(
            !can_take(Some(&lease(Some("b"), 990, 15)), "a", now),
            "b renewed 10 s ago"
        );
        assert!(
            can_take(Some(&lease(Some("b"), 980, 15)), "a", now),
            "b expired 5 s ago"
        );
    }
}
