//! Leader election on a `coordination.k8s.io/v1` Lease, so several replicas can run with one active.
//!
//! **Who may take the lease** (client-go's rules): a replica takes it when there is none yet, when it
//! is released (no holder), when it already names this replica, or when its holder has stopped
//! renewing it. Every write carries the resourceVersion it read, so two candidates can never both win.
//! The holder renews by writing over the lease as its own last write left it, without reading it
//! first: one request per renewal; a 409 (someone else wrote) sends it back to reading.
//!
//! **"Stopped renewing" is judged on the local monotonic clock alone.** The lease's `renewTime` is
//! the holder's wall-clock time, and replicas' clocks may disagree by seconds: comparing it with our
//! own clock would let a candidate whose clock runs ahead take a lease that is still being renewed. So,
//! as client-go does, a candidate remembers the lease record (its spec) it last read and the local
//! instant at which it first read that record ([`Observation`]). Every renewal changes the record (a
//! new `renewTime`), whatever clock wrote it. The lease has expired when the record has stayed the same
//! for its `leaseDurationSeconds` of local time (our own lease duration when the record names none). A
//! record read for the first time is never expired, whatever its `renewTime` says, so a candidate that
//! starts beside a dead holder waits one lease duration before taking over. `renewTime` and
//! `acquireTime` are written for people (`kubectl get lease`) and never read. A released lease is free
//! at once.
//!
//! **Timing**, as client-go's `leaseDuration` / `renewDeadline` / `retryPeriod` (15 s / 10 s / 2 s by
//! default). The leader tries to renew every `retry_period`. Its deadline counts from the START of the
//! request that last took or renewed the lease (for the first term: the attempt in [`Elector::acquire`]
//! that took it, however long that attempt took to come back): the write may have reached the server
//! at any moment after that start, so that is the earliest a standby may have begun counting the
//! record's age. If no later request has succeeded within `renew_deadline` of that start, the leader
//! steps down at once, `duration - renew_deadline` before any standby may take over: standbys count
//! `duration` from when they first see the record, which is after the write, which is after the
//! request started. Only the rates of the replicas' clocks must agree, not their readings. Every
//! request is cut off at the deadline, so a request that hangs counts as failed when it passes.
//! Every write of the controllers is bounded by the same deadline ([`Term`]): none is sent after it,
//! and one in flight then is cut off. Stepping down stops the controllers (their futures are dropped,
//! so no further write is issued), then the process exits and is restarted; releasing the lease on
//! the way out is best effort, with its own short deadline.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;
use tracing::{info, warn};

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long the lease is valid after a renewal: a standby takes over once the lease record has
    /// stayed unchanged this long on its own clock.
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
    /// The lease record as last read, and since when it has looked so.
    observed: Mutex<Option<Observation>>,
    /// When the request that last took or renewed the lease started; `None` while not holding it.
    renewed_at: Mutex<Option<Instant>>,
    /// The lease as this replica's last successful write left it, while it holds it: the next renewal
    /// is written over it without reading it first (its resourceVersion makes a concurrent write a
    /// 409, after which the lease is read again). One request per renewal instead of two.
    written: Mutex<Option<Lease>>,
}

/// What a replica knows of the lease's record: the spec as it last read it, and the local monotonic
/// instant at which it first read that spec. Pure: every instant is passed in (tokio's `Instant`, so
/// that tests on tokio's paused clock drive it).
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    record: LeaseSpec,
    since: Instant,
}

impl Observation {
    /// What is known after reading `record` at `now`, given what was known before: a record equal to
    /// the previous one keeps the instant it was first seen; a new or changed one is seen from `now`.
    pub fn after(previous: Option<&Observation>, record: LeaseSpec, now: Instant) -> Observation {
        match previous {
            Some(p) if p.record == record => p.clone(),
            _ => Observation { record, since: now },
        }
    }

    /// The holder it names, if any (an empty name is none: the lease was released).
    pub fn holder(&self) -> Option<&str> {
        self.record.holder_identity.as_deref().filter(|h| !h.is_empty())
    }

    /// The local instant from which the record counts as abandoned: `leaseDurationSeconds` (or
    /// `fallback` when it names no positive duration) after it was first seen unchanged.
    pub fn expires_at(&self, fallback: Duration) -> Instant {
        let duration = match self.record.lease_duration_seconds {
            Some(secs) if secs > 0 => Duration::from_secs(secs.unsigned_abs().into()),
            _ => fallback,
        };
        self.since + duration
    }

    /// Whether `identity` may write itself into the lease at `now`: it is released, it names
    /// `identity`, or its record has not changed for its lease duration of local time. The record's
    /// `renewTime` plays no part: it is another machine's clock.
    pub fn may_take(&self, identity: &str, now: Instant, fallback: Duration) -> bool {
        match self.holder() {
            None => true,
            Some(holder) if holder == identity => true,
            Some(_) => now >= self.expires_at(fallback),
        }
    }
}

/// The lock's data even if a thread panicked while holding it (no code here can leave it half-written).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Elector {
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: Mutex::new(None),
            renewed_at: Mutex::new(None),
            written: Mutex::new(None),
        }
    }

    /// The instant by which this replica must have stopped acting as leader: `renew_deadline` after the
    /// start of the request that last took or renewed the lease; `None` when it does not hold it.
    pub fn step_down_at(&self) -> Option<Instant> {
        lock(&self.renewed_at).map(|renewed| renewed + self.config.renew_deadline)
    }

    /// Forgets the term: no deadline, and the next attempt reads the lease before writing it.
    fn stop_leading(&self) {
        *lock(&self.renewed_at) = None;
        *lock(&self.written) = None;
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

    /// One attempt to take or renew the lease. `Ok(true)` when this replica holds it afterwards; the
    /// instant the attempt started then counts as the lease's last renewal ([`Self::step_down_at`]).
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let started = Instant::now();
        let taken = self.take_or_renew().await?;
        if taken {
            *lock(&self.renewed_at) = Some(started);
        }
        Ok(taken)
    }

    async fn take_or_renew(&self) -> Result<bool, kube::Error> {
        let wall = Timestamp::now();
        let ours = lock(&self.written).take();
        if let Some(mut lease) = ours {
            lease.spec = Some(self.spec(lease.spec.as_ref(), wall));
            match self.write(&lease).await {
                Ok(()) => return Ok(true),
                // Written by someone else since: read it and judge it as any candidate would.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        match self.api.get_opt(&self.config.name).await? {
            None => {
                *lock(&self.observed) = None;
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(self.spec(None, wall)),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(created) => {
                        *lock(&self.written) = Some(created);
                        Ok(true)
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Some(mut lease) => {
                let now = Instant::now();
                let observation = {
                    let mut observed = lock(&self.observed);
                    let record = lease.spec.clone().unwrap_or_default();
                    let next = Observation::after(observed.as_ref(), record, now);
                    *observed = Some(next.clone());
                    next
                };
                if !observation.may_take(&self.config.identity, now, self.config.duration) {
                    return Ok(false);
                }
                lease.spec = Some(self.spec(lease.spec.as_ref(), wall));
                match self.write(&lease).await {
                    Ok(()) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Writes `lease` with the resourceVersion it carries (a concurrent writer makes this a 409) and
    /// keeps what the server answered for the next renewal.
    async fn write(&self, lease: &Lease) -> Result<(), kube::Error> {
        let written = self
            .api
            .replace(&self.config.name, &PostParams::default(), lease)
            .await?;
        *lock(&self.written) = Some(written);
        Ok(())
    }

    /// Waits until this replica holds the lease. Its term counts from the start of the attempt that
    /// took it, not from when this returns.
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
                Err(e) => {
                    warn!(error = %crate::platform::redact::api_error(&e), "could not read or take the lease")
                }
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Renews the lease until it is lost; returns when this replica must stop acting as leader: the
    /// lease was taken, or `renew_deadline` passed since the start of the last request that took or
    /// renewed it ([`Self::step_down_at`]). Each attempt is cut off at that deadline, so a frozen API
    /// server cannot hold this past it. Returns at once when this replica never took the lease.
    pub async fn hold(&self) {
        loop {
            let Some(deadline) = self.step_down_at() else {
                warn!(lease = %self.config.name, "not holding the lease; stepping down");
                return;
            };
            tokio::time::sleep_until((Instant::now() + self.config.retry_period).min(deadline)).await;
            if Instant::now() >= deadline {
                warn!(
                    lease = %self.config.name,
                    deadline = ?self.config.renew_deadline,
                    "no renewal within the renew deadline; stepping down before the lease can expire"
                );
                self.stop_leading();
                return;
            }
            match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => {
                    warn!(lease = %self.config.name, "lease taken by another replica");
                    self.stop_leading();
                    return;
                }
                Ok(Err(e)) => {
                    warn!(error = %crate::platform::redact::api_error(&e), "could not renew the lease")
                }
                Err(_) => warn!(lease = %self.config.name, "renewing the lease did not finish in time"),
            }
        }
    }

    /// Gives the lease up on shutdown so a standby takes over at once instead of after expiry. Best
    /// effort: it gives up after half the time between the renew deadline and the lease's expiry (at
    /// most `RELEASE_DEADLINE`), so that a leader that stepped down has exited before a standby may
    /// take over.
    pub async fn release(&self) {
        self.stop_leading();
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
            warn!(error = %crate::platform::redact::api_error(&e), "could not release the lease");
        }
    }
}

/// This replica's term as leader, as the controllers' writes see it: a write is sent only before the
/// term ends ([`Elector::step_down_at`]), and one still in flight then is cut off, so nothing this
/// replica sends can reach the API server after a standby may have taken over (short of a request
/// already on the wire: the preconditions it carries refuse it then).
#[derive(Clone)]
pub struct Term(Arc<dyn Fn() -> Option<Instant> + Send + Sync>);

impl Term {
    /// The term of the leader `elector` elects: it ends at its step-down deadline, or at once when it
    /// does not hold the lease.
    pub fn of(elector: Arc<Elector>) -> Self {
        Self(Arc::new(move || elector.step_down_at()))
    }

    /// A term that ends at `end` (`None`: ended already), for tests.
    pub fn until(end: Option<Instant>) -> Self {
        Self(Arc::new(move || end))
    }

    /// A term whose end is whatever `ends` says when asked, for tests in which a replica takes over.
    #[cfg(test)]
    pub(crate) fn from_fn(ends: impl Fn() -> Option<Instant> + Send + Sync + 'static) -> Self {
        Self(Arc::new(ends))
    }

    /// When the term ends; `None` when it has (or this replica does not lead).
    pub fn ends_at(&self) -> Option<Instant> {
        (self.0)().filter(|end| Instant::now() < *end)
    }
}

impl std::fmt::Debug for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Term").field(&self.ends_at()).finish()
    }
}

/// A write this replica did not send, or cut off in flight, because its term as leader had ended.
#[derive(Debug, thiserror::Error)]
#[error("not sent: this replica's term as leader has ended")]
pub struct TermEnded;

impl TermEnded {
    /// As a client error, which every write returns.
    pub fn error() -> kube::Error {
        kube::Error::Service(Box::new(TermEnded))
    }

    /// Whether `error` is this one.
    pub fn is(error: &kube::Error) -> bool {
        matches!(error, kube::Error::Service(e) if e.is::<TermEnded>())
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

    const FIFTEEN: Duration = Duration::from_secs(15);

    /// A lease record held by `holder`, renewed at wall-clock second `renewed`.
    fn record(holder: Option<&str>, renewed: i64, secs: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap())),
            lease_duration_seconds: secs,
            ..LeaseSpec::default()
        }
    }

    /// The wall clock of the machine running the test, in seconds: only to write plausible renewTimes.
    fn wall_now() -> i64 {
        Timestamp::now().as_second()
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn a_record_seen_for_the_first_time_is_not_expired_however_old_its_renew_time() {
        let t0 = Instant::now();
        let an_hour_ago = record(Some("b"), wall_now() - 3600, Some(15));
        let seen = Observation::after(None, an_hour_ago, t0);
        assert!(!seen.may_take("a", t0, FIFTEEN));
        assert!(!seen.may_take("a", t0 + secs(14.9), FIFTEEN));
        assert_eq!(seen.expires_at(FIFTEEN), t0 + FIFTEEN);
    }

    #[test]
    fn an_unchanged_record_expires_after_its_lease_duration_of_local_time() {
        let t0 = Instant::now();
        let lease = record(Some("b"), wall_now(), Some(15));
        let mut seen = Observation::after(None, lease.clone(), t0);
        // Read again and again, unchanged: the first sighting is what counts.
        for later in [2.0, 5.0, 10.0, 14.9] {
            seen = Observation::after(Some(&seen), lease.clone(), t0 + secs(later));
            assert!(!seen.may_take("a", t0 + secs(later), FIFTEEN), "{later} s");
        }
        seen = Observation::after(Some(&seen), lease, t0 + FIFTEEN);
        assert!(seen.may_take("a", t0 + FIFTEEN, FIFTEEN));
    }

    #[test]
    fn a_holder_whose_clock_runs_ahead_still_expires_after_the_lease_duration_once_it_stops() {
        let t0 = Instant::now();
        // b's clock is an hour ahead: its last renewTime lies an hour in our future.
        let ahead = record(Some("b"), wall_now() + 3600, Some(15));
        let mut seen = Observation::after(None, ahead.clone(), t0);
        seen = Observation::after(Some(&seen), ahead.clone(), t0 + secs(10.0));
        assert!(!seen.may_take("a", t0 + secs(14.9), FIFTEEN));
        seen = Observation::after(Some(&seen), ahead, t0 + secs(15.5));
        assert!(
            seen.may_take("a", t0 + secs(15.5), FIFTEEN),
            "b stopped renewing 15 s of our time ago, whatever its renewTime says"
        );
    }

    #[test]
    fn a_record_that_keeps_changing_never_expires() {
        let t0 = Instant::now();
        // b's clock is an hour behind, so every renewTime it writes looks long expired to us; it renews
        // every 5 s of our time for ten minutes.
        let behind = wall_now() - 3600;
        let mut seen: Option<Observation> = None;
        for step in 0..120_u32 {
            let now = t0 + Duration::from_secs(5 * u64::from(step));
            let lease = record(Some("b"), behind + 5 * i64::from(step), Some(15));
            let next = Observation::after(seen.as_ref(), lease, now);
            assert!(!next.may_take("a", now, FIFTEEN), "renewal {step}");
            // Just before the next renewal arrives, it is still not expired.
            assert!(!next.may_take("a", now + secs(4.9), FIFTEEN), "renewal {step}");
            seen = Some(next);
        }
    }

    #[test]
    fn any_change_of_the_record_restarts_the_count() {
        let t0 = Instant::now();
        let lease = record(Some("b"), wall_now(), Some(15));
        let seen = Observation::after(None, lease.clone(), t0);
        // c took it over (same renewTime, a different holder): a new record, counted from now.
        let mut taken_over = lease;
        taken_over.holder_identity = Some("c".to_string());
        let seen = Observation::after(Some(&seen), taken_over, t0 + secs(14.0));
        assert!(!seen.may_take("a", t0 + secs(20.0), FIFTEEN));
        assert!(seen.may_take("a", t0 + secs(29.0), FIFTEEN));
    }

    #[test]
    fn a_released_lease_is_free_at_once_and_our_own_is_ours() {
        let t0 = Instant::now();
        let released = Observation::after(None, record(None, wall_now(), Some(1)), t0);
        assert!(released.may_take("a", t0, FIFTEEN), "no holder");
        let emptied = Observation::after(None, record(Some(""), wall_now(), Some(15)), t0);
        assert!(emptied.may_take("a", t0, FIFTEEN), "empty holder");
        assert!(Observation::after(None, LeaseSpec::default(), t0).may_take("a", t0, FIFTEEN));
        let ours = Observation::after(None, record(Some("a"), wall_now(), Some(15)), t0);
        assert!(ours.may_take("a", t0, FIFTEEN), "our own");
    }

    #[test]
    fn a_record_without_a_duration_counts_ours() {
        let t0 = Instant::now();
        for secs_field in [None, Some(0), Some(-3)] {
            let seen = Observation::after(None, record(Some("b"), wall_now(), secs_field), t0);
            assert_eq!(seen.expires_at(FIFTEEN), t0 + FIFTEEN, "{secs_field:?}");
        }
    }

    /// A mocked API server on tokio's paused clock, for the elector's own timing.
    mod elector {
        use std::sync::Arc;

        use http::{Method, Request, Response};
        use kube::client::Body;
        use serde_json::{Value, json};

        use super::*;

        const NS: &str = "cmset-system";
        const NAME: &str = "cmset-controller";

        fn config(identity: &str) -> LeaseConfig {
            LeaseConfig::with_duration(NS.into(), NAME.into(), identity.into(), FIFTEEN)
        }

        fn lease_json(holder: &str, renew_time: Timestamp, resource_version: u64) -> Value {
            json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": NAME, "namespace": NS, "resourceVersion": resource_version.to_string()},
                "spec": {
                    "holderIdentity": holder, "leaseDurationSeconds": 15,
                    "renewTime": renew_time.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string(),
                },
            })
        }

        fn not_found() -> (u16, Value) {
            let status = json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "reason": "NotFound", "code": 404, "message": "leases \"cmset-controller\" not found",
            });
            (404, status)
        }

        /// How the mocked server treats one request: answer after a (virtual) delay, or never.
        enum Answer {
            After(Duration, u16, Value),
            Never,
        }

        /// Each request the mocked server received: when it arrived, and its method.
        type Arrivals = Arc<Mutex<Vec<(Instant, Method)>>>;

        /// A client whose API server answers with `respond(method, body)`; the task records the
        /// instant each request arrived, with its method.
        fn client(respond: impl Fn(&Method, &Value) -> Answer + Send + 'static) -> (Client, Arrivals) {
            let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
            let seen = Arc::new(Mutex::new(Vec::new()));
            let record = seen.clone();
            tokio::spawn(async move {
                while let Some((request, send)) = handle.next_request().await {
                    let (parts, body) = request.into_parts();
                    let body = http_body_util::BodyExt::collect(body)
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    lock(&record).push((Instant::now(), parts.method.clone()));
                    match respond(&parts.method, &body) {
                        Answer::After(delay, code, reply) => {
                            tokio::spawn(async move {
                                tokio::time::sleep(delay).await;
                                let response = Response::builder()
                                    .status(code)
                                    .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                                    .unwrap();
                                send.send_response(response);
                            });
                        }
                        // Kept alive, never answered: a frozen API server.
                        Answer::Never => {
                            tokio::spawn(async move {
                                let _send = send;
                                futures::future::pending::<()>().await;
                            });
                        }
                    }
                }
            });
            (Client::new(service, "default"), seen)
        }

        #[tokio::test(start_paused = true)]
        async fn the_deadline_of_hold_counts_from_the_start_of_the_request_that_took_the_lease() {
            // No lease yet; the create reaches the server at once but its answer takes 8 s (of the
            // 10 s renew deadline) to come back; from then on the API server answers nothing.
            let created = Arc::new(Mutex::new(false));
            let flag = created.clone();
            let (client, _seen) = client(move |method, body| {
                let mut created = lock(&flag);
                match (method, *created) {
                    (&Method::GET, false) => {
                        let (code, status) = not_found();
                        Answer::After(Duration::ZERO, code, status)
                    }
                    (&Method::POST, false) => {
                        *created = true;
                        Answer::After(Duration::from_secs(8), 201, body.clone())
                    }
                    _ => Answer::Never,
                }
            });
            let elector = Elector::new(client, config("a"));
            let asked = Instant::now();
            elector.acquire().await;
            assert!(asked.elapsed() >= Duration::from_secs(8), "the slow create");
            assert_eq!(elector.step_down_at(), Some(asked + config("a").renew_deadline));
            elector.hold().await;
            assert_eq!(
                asked.elapsed(),
                config("a").renew_deadline,
                "stepped down renew_deadline after the acquiring request started, not after it returned"
            );
            assert_eq!(elector.step_down_at(), None, "no longer leading");
        }

        #[tokio::test(start_paused = true)]
        async fn the_holder_renews_with_one_write_each_time_and_reads_again_only_after_a_conflict() {
            // No lease at first. Every write succeeds and advances the resourceVersion, until the
            // fourth renewal: b has taken the lease meanwhile, so it gets a 409 and the read that
            // follows shows b's fresh record.
            let version = Arc::new(Mutex::new(0u64));
            let v = version.clone();
            let (client, seen) = client(move |method, body| {
                let mut version = lock(&v);
                match *method {
                    Method::GET if *version == 0 => {
                        let (code, status) = not_found();
                        Answer::After(Duration::ZERO, code, status)
                    }
                    Method::GET => Answer::After(Duration::ZERO, 200, lease_json("b", Timestamp::now(), 99)),
                    _ if *version == 4 => {
                        let status = json!({
                            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "reason": "Conflict", "code": 409, "message": "the object has been modified",
                        });
                        Answer::After(Duration::ZERO, 409, status)
                    }
                    _ => {
                        let sent = body["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap_or("")
                            .to_string();
                        assert_eq!(
                            sent,
                            if *version == 0 {
                                String::new()
                            } else {
                                version.to_string()
                            },
                            "each write carries the version the last one returned"
                        );
                        *version += 1;
                        let mut reply = body.clone();
                        reply["metadata"]["resourceVersion"] = json!(version.to_string());
                        Answer::After(Duration::ZERO, 200, reply)
                    }
                }
            });
            let elector = Elector::new(client, config("a"));
            elector.acquire().await;
            elector.hold().await;
            let methods: Vec<Method> = lock(&seen).iter().map(|(_, m)| m.clone()).collect();
            assert_eq!(
                methods,
                [
                    Method::GET,
                    Method::POST,
                    Method::PUT,
                    Method::PUT,
                    Method::PUT,
                    Method::PUT,
                    Method::GET
                ],
                "a read before taking it, a write per renewal, a read after the conflict"
            );
            assert_eq!(elector.step_down_at(), None, "b holds it now");
        }

        #[tokio::test(start_paused = true)]
        async fn hold_without_the_lease_returns_at_once() {
            let (client, seen) = client(|_, _| Answer::Never);
            let elector = Elector::new(client, config("a"));
            let started = Instant::now();
            elector.hold().await;
            assert_eq!(started.elapsed(), Duration::ZERO);
            assert!(lock(&seen).is_empty(), "nothing to renew");
        }

        #[tokio::test(start_paused = true)]
        async fn a_stale_looking_lease_that_keeps_being_renewed_is_never_taken_and_a_silent_one_is() {
            // b holds the lease with a clock an hour behind ours: every renewTime it writes looks an
            // hour old. It renews every 5 s for the first 60 s, then stops.
            let start = Instant::now();
            let b_clock = Timestamp::now() - jiff::SignedDuration::from_hours(1);
            let (client, seen) = client(move |method, body| {
                let elapsed = start.elapsed().min(Duration::from_secs(60));
                let renewals = elapsed.as_secs() / 5;
                let renewed = b_clock + jiff::SignedDuration::from_secs(5 * renewals as i64);
                match *method {
                    Method::GET => Answer::After(Duration::ZERO, 200, lease_json("b", renewed, renewals + 1)),
                    _ => Answer::After(Duration::ZERO, 200, body.clone()),
                }
            });
            let elector = Elector::new(client, config("a"));
            elector.acquire().await;
            let took = start.elapsed();
            let writes: Vec<Instant> = lock(&seen)
                .iter()
                .filter(|(_, m)| *m == Method::PUT)
                .map(|(at, _)| *at)
                .collect();
            assert_eq!(writes.len(), 1, "one write: the takeover");
            // b's last renewal happened at 60 s; a may take over only 15 s of unchanged record later.
            assert!(took >= Duration::from_secs(75), "took over after {took:?}");
            assert!(
                took <= Duration::from_secs(75) + config("a").retry_period * 2,
                "took over soon after the lease expired: {took:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_term_ends_at_its_deadline_or_at_once_without_one() {
        let end = Instant::now() + secs(4.0);
        let term = Term::until(Some(end));
        assert_eq!(term.ends_at(), Some(end));
        tokio::time::advance(secs(3.9)).await;
        assert_eq!(term.ends_at(), Some(end));
        tokio::time::advance(secs(0.1)).await;
        assert_eq!(term.ends_at(), None, "ended at the deadline itself");
        assert_eq!(Term::until(None).ends_at(), None, "not leading");
        assert!(TermEnded::is(&TermEnded::error()));
        assert!(
            !TermEnded::is(&timed_out()),
            "another client error is not this one"
        );
    }
}
