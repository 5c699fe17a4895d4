//! Safe rollouts on a real API server: a set's new revision reaches its workloads wave by wave (their
//! `cmset.dev/wave` label, lowest first), each wave only once the previous one completed its rollout and
//! stayed healthy for `spec.rollout.stabilizationSeconds`; a revision whose pods never become ready
//! fails in its first wave, is rolled back there (`autoRollback`) and never reaches a later wave; and
//! a restart of the operator in the middle of a stabilization window changes nothing.
//!
//! A revision is made bad with the local cluster's switch: the simulated node never makes ready a pod
//! that reads a ConfigMap or Secret holding the key `CMSET_FAKE_NODE_FAIL` (see
//! `e2e/README-cluster.md`). On another cluster nothing would make such pods fail, so the test of the
//! bad change skips when the simulated node is not there.
//!
//! Every Deployment runs one replica and has a `progressDeadlineSeconds` of its own far longer than the
//! set's, so that cmset's deadline is the one that decides. The local cluster is slow, so the waits are
//! generous ([`WAIT`]); the timing claims allow for the one-second granularity of the times the status
//! records.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cmset_e2e::cmset_api::{
    ConfigMapSet, ConfigMapSetStatus, RolloutPhase, RolloutStatus, SecretSet, WorkloadState, WorkloadStatus,
};
use cmset_e2e::fixtures::{replica_set_names, rollout_status, template_names};
use cmset_e2e::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use cmset_e2e::k8s_openapi::api::core::v1::Node;
use cmset_e2e::k8s_openapi::jiff::{SignedDuration, Timestamp};
use cmset_e2e::kube::{Api, ResourceExt};
use cmset_e2e::{
    Operator, TestNamespace, eventually_within, kustomize_name, kustomize_secret_name, put_secret,
    secret_names, stays, warning_event,
};

/// How long any one wait lasts at most: rollouts of several waves on a slow local cluster.
const WAIT: Duration = Duration::from_secs(90);
/// How often the scenarios look.
const POLL: Duration = Duration::from_millis(200);
/// What the timing claims allow for: the status records times to the second, so a window counted from
/// one may end up to a second early.
const GRANULARITY: SignedDuration = SignedDuration::from_secs(1);
/// ... and besides, for claims on times the test sees only when it polls: a poll late.
const SLACK: SignedDuration = SignedDuration::from_millis(1500);
/// The key that makes the simulated node never ready a pod that reads it (`e2e/cluster/fake-node.py`).
const FAIL_KEY: &str = "CMSET_FAKE_NODE_FAIL";
/// The Deployments' own progress deadline: far beyond the set's, so that cmset's is what triggers.
const DEPLOYMENT_PROGRESS_DEADLINE: i32 = 3600;

/// The local cluster's simulated node, which knows [`FAIL_KEY`].
const FAKE_NODE: &str = "cmset-fake-node";

/// The Deployment of wave 0 (no label) and the one of wave 1.
const FIRST: &str = "first";
const SECOND: &str = "second";
/// A Deployment of wave 0 that opts in after the rollout failed.
const LATE: &str = "late";

/// The source Secret of the SecretSet variant.
const SOURCE: &str = "db-credentials";
const OPAQUE: &str = "Opaque";

// ------------------------------------------------------------------------------------------ sets --

/// `spec.rollout` of a set.
#[derive(Clone, Copy, Debug)]
struct Rollout {
    stabilization_seconds: i32,
    /// Left out (the default, 600) when `None`.
    progress_deadline_seconds: Option<i32>,
    auto_rollback: bool,
}

impl Rollout {
    /// The `rollout:` block, to follow `spec:`.
    fn yaml(&self) -> String {
        let deadline = self
            .progress_deadline_seconds
            .map(|s| format!("\n    progressDeadlineSeconds: {s}"))
            .unwrap_or_default();
        format!(
            "\n  rollout:\n    stabilizationSeconds: {}{deadline}\n    autoRollback: {}",
            self.stabilization_seconds, self.auto_rollback
        )
    }
}

/// Which kind of set a scenario runs with. Its workloads read it with `envFrom` of its bare name, as a
/// team would write them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// ConfigMapSet `app-config`, its content inline.
    ConfigMaps,
    /// SecretSet `db`, versioning the Secret `db-credentials`.
    Secrets,
}

impl Kind {
    fn set(self) -> &'static str {
        match self {
            Kind::ConfigMaps => "app-config",
            Kind::Secrets => "db",
        }
    }

    /// `Kind/name` of the set, as an event's `regarding` names it.
    fn regarding(self) -> String {
        match self {
            Kind::ConfigMaps => format!("ConfigMapSet/{}", self.set()),
            Kind::Secrets => format!("SecretSet/{}", self.set()),
        }
    }

    /// Gives the set the content `data` (and `rollout`), creating it if need be; returns the name of
    /// the revision that content becomes (kustomize's name for it). The name is worked out first, so
    /// that the caller looks at the cluster as soon as the change is made.
    async fn write(self, ns: &TestNamespace, data: &[(&str, &str)], rollout: Rollout) -> String {
        let set = self.set();
        let revision = match self {
            Kind::ConfigMaps => kustomize_name(set, data),
            Kind::Secrets => kustomize_secret_name(set, OPAQUE, data),
        };
        let rollout = rollout.yaml();
        match self {
            Kind::ConfigMaps => {
                let entries: String = data
                    .iter()
                    .map(|(k, v)| format!("\n      {k}: {}", serde_json::to_string(v).unwrap()))
                    .collect();
                ns.apply(&format!(
                    r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {set}
spec:{rollout}
  template:
    data:{entries}
"#
                ));
            }
            Kind::Secrets => {
                let yaml = format!(
                    r#"
apiVersion: cmset.dev/v1alpha1
kind: SecretSet
metadata:
  name: {set}
spec:
  secretName: {SOURCE}{rollout}
"#
                );
                // The change itself (the source's content) comes last; a new set only once it has a source.
                let exists = ns
                    .api::<SecretSet>()
                    .get_opt(set)
                    .await
                    .expect("read the SecretSet");
                if exists.is_some() {
                    ns.apply(&yaml);
                    put_source(ns, data).await;
                } else {
                    put_source(ns, data).await;
                    ns.apply(&yaml);
                }
            }
        }
        revision
    }

    /// The set's status, if it has one yet.
    async fn status(self, ns: &TestNamespace) -> Option<ConfigMapSetStatus> {
        match self {
            Kind::ConfigMaps => ns.api::<ConfigMapSet>().get(self.set()).await.ok()?.status,
            Kind::Secrets => ns.api::<SecretSet>().get(self.set()).await.ok()?.status,
        }
    }

    /// The objects of the set's kind (ConfigMaps or Secrets) a Deployment's pod template names.
    fn reads(self, d: &Deployment) -> BTreeSet<String> {
        match self {
            Kind::ConfigMaps => template_names(d),
            Kind::Secrets => secret_names(
                d.spec
                    .as_ref()
                    .and_then(|s| s.template.spec.as_ref())
                    .expect("a Deployment has a pod spec"),
            ),
        }
    }

    fn env_from(self) -> &'static str {
        match self {
            Kind::ConfigMaps => "configMapRef",
            Kind::Secrets => "secretRef",
        }
    }
}

/// Creates or replaces the source Secret, as a secrets manager would.
async fn put_source(ns: &TestNamespace, data: &[(&str, &str)]) {
    put_secret(ns, SOURCE, OPAQUE, data).await;
}

// ----------------------------------------------------------------------------------- workloads --

/// An opted-in Deployment of one replica, in `wave` (no label when `None`), reading every key of the
/// set by its bare name.
fn deployment_yaml(kind: Kind, name: &str, wave: Option<i32>) -> String {
    let wave = wave
        .map(|w| format!("\n    cmset.dev/wave: \"{w}\""))
        .unwrap_or_default();
    let (set, env_from) = (kind.set(), kind.env_from());
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  labels:
    cmset.dev/enabled: "true"{wave}
spec:
  replicas: 1
  progressDeadlineSeconds: {DEPLOYMENT_PROGRESS_DEADLINE}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: app
          image: registry.k8s.io/pause:3.9
          envFrom:
            - {env_from}: {{name: {set}}}
"#
    )
}

/// `first` in wave 0 (no label) and `second` in wave 1.
fn create_workloads(ns: &TestNamespace, kind: Kind) {
    ns.apply(&deployment_yaml(kind, FIRST, None));
    ns.apply(&deployment_yaml(kind, SECOND, Some(1)));
}

/// Whether the Deployment's rollout is complete, as `kubectl rollout status` decides: the controller saw
/// the latest spec, and every replica is updated and available, with no old one left.
fn rolled_out(d: &Deployment) -> bool {
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(status) = d.status.as_ref() else {
        return false;
    };
    status.observed_generation.is_some()
        && status.observed_generation >= d.metadata.generation
        && status.updated_replicas.unwrap_or(0) == want
        && status.replicas.unwrap_or(0) == want
        && status.available_replicas.unwrap_or(0) == want
}

fn only(name: &str) -> BTreeSet<String> {
    BTreeSet::from([name.to_string()])
}

/// The ReplicaSets the Deployment owns.
async fn replica_sets_of(ns: &TestNamespace, d: &Deployment) -> Vec<ReplicaSet> {
    let uid = d.uid().expect("a stored Deployment has a uid");
    let mut all = ns.replica_sets().await;
    all.retain(|rs| rs.owner_references().iter().any(|o| o.uid == uid));
    all
}

// -------------------------------------------------------------------------------------- status --

fn entry<'a>(status: &'a ConfigMapSetStatus, name: &str) -> Option<&'a WorkloadStatus> {
    status
        .workloads
        .iter()
        .find(|w| w.kind == "Deployment" && w.name == name)
}

/// The rollout the status records, if it is the one of `revision`.
fn rollout_of<'a>(status: &'a ConfigMapSetStatus, revision: &str) -> Option<&'a RolloutStatus> {
    status.rollout.as_ref().filter(|r| r.revision == revision)
}

/// The Ready condition: status, reason, message.
fn ready(status: &ConfigMapSetStatus) -> Option<(String, String, String)> {
    let c = status.condition("Ready")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

// --------------------------------------------------------------------------------------- waits --

/// What a scenario looks at, for failure messages.
async fn describe(ns: &TestNamespace, kind: Kind) -> String {
    let mut out = String::new();
    for name in [FIRST, SECOND] {
        let d = ns.deployment(name).await;
        out += &format!(
            "\n  {name}: reads {:?}, rolled out: {}, status {:?}",
            kind.reads(&d),
            rolled_out(&d),
            d.status
        );
    }
    out += &format!("\n  set status: {:?}", kind.status(ns).await);
    out
}

/// Waits until both Deployments run `revision` (rolled out) and the set reports the rollout of
/// `revision` Complete and is Ready.
async fn wait_settled(ns: &TestNamespace, kind: Kind, revision: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let status = kind.status(ns).await.unwrap_or_default();
        let complete = rollout_of(&status, revision).is_some_and(|r| r.phase == RolloutPhase::Complete);
        let is_ready = ready(&status).is_some_and(|(s, ..)| s == "True");
        let mut on_it = true;
        for name in [FIRST, SECOND] {
            let d = ns.deployment(name).await;
            on_it &= kind.reads(&d) == only(revision) && rolled_out(&d);
        }
        if complete && is_ready && on_it && status.current_revision.as_deref() == Some(revision) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for both Deployments to run {revision} and its rollout to be \
             Complete and the set Ready:{}",
            describe(ns, kind).await
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Records, until stopped, every change of what a Deployment's pod template names (ConfigMaps or
/// Secrets, by `kind`), with when the change was seen: to prove what a workload named at any point.
struct TemplateLog {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<(Timestamp, BTreeSet<String>)>>,
}

impl TemplateLog {
    fn start(ns: &TestNamespace, kind: Kind, name: &str) -> Self {
        let api: Api<Deployment> = Api::namespaced(ns.client.clone(), &ns.name);
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, name) = (stop.clone(), name.to_string());
        let task = tokio::spawn(async move {
            let mut seen: Vec<(Timestamp, BTreeSet<String>)> = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                if let Ok(d) = api.get(&name).await {
                    let names = kind.reads(&d);
                    if seen.last().is_none_or(|(_, last)| *last != names) {
                        seen.push((Timestamp::now(), names));
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            seen
        });
        Self { stop, task }
    }

    async fn finish(self) -> Vec<(Timestamp, BTreeSet<String>)> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("the template log's task")
    }
}

/// The names in a [`TemplateLog`], without the times.
fn sequence(log: &[(Timestamp, BTreeSet<String>)]) -> Vec<BTreeSet<String>> {
    log.iter().map(|(_, names)| names.clone()).collect()
}

/// When the log first saw `names`.
fn first_seen(log: &[(Timestamp, BTreeSet<String>)], names: &BTreeSet<String>) -> Option<Timestamp> {
    log.iter().find(|(_, n)| n == names).map(|(t, _)| *t)
}

fn seconds(d: SignedDuration) -> f64 {
    d.as_secs_f64()
}

// ----------------------------------------------------------------------------------- scenarios --

/// (a), for either kind of set: a good change moves wave 0, waits for it to be rolled out and to stay
/// healthy for the stabilization window, then moves wave 1; the rollout ends Complete.
async fn a_good_change_moves_wave_by_wave(ns: &TestNamespace, kind: Kind) {
    const STABILIZATION: i32 = 5;
    let _operator = Operator::start(&ns.name).await;
    let rollout = Rollout {
        stabilization_seconds: STABILIZATION,
        progress_deadline_seconds: None,
        auto_rollback: false,
    };
    let v1 = kind.write(ns, &[("APP_VERSION", "1")], rollout).await;
    create_workloads(ns, kind);
    wait_settled(ns, kind, &v1).await;

    let v2 = kind.write(ns, &[("APP_VERSION", "2")], rollout).await;
    assert_ne!(v1, v2);
    let (old, new) = (only(&v1), only(&v2));
    // Times as the polls saw them: a change is seen at the start of the first poll that finds it.
    let mut first_moved: Option<Timestamp> = None;
    let mut first_rolled_out: Option<Timestamp> = None;
    let mut second_moved: Option<Timestamp> = None;
    // Bounds for the timing claims: first rolled out after the start of the last poll that found it
    // not rolled out, and second moved before the end of the read that found it moved.
    let mut first_not_yet_rolled_out = Timestamp::now();
    let mut second_moved_by: Option<Timestamp> = None;
    // The last `waveHealthySince` of wave 0 the status recorded before `second` moved.
    let mut wave_0_healthy_since: Option<Timestamp> = None;
    // Seen at least once: `first` moved, `second` not, and the status saying so (wave 0, Waiting).
    let mut saw_second_waiting = false;
    let deadline = Instant::now() + WAIT;
    loop {
        // The Deployments first, then the status (which may be newer than them, never older).
        let now = Timestamp::now();
        let first = ns.deployment(FIRST).await;
        let second = ns.deployment(SECOND).await;
        let read = Timestamp::now();
        let status = kind.status(ns).await.unwrap_or_default();
        let (f, s) = (kind.reads(&first), kind.reads(&second));

        if f == new {
            first_moved.get_or_insert(now);
            if rolled_out(&first) {
                first_rolled_out.get_or_insert(now);
            }
        } else {
            assert_eq!(f, old, "{FIRST} names the old revision until it moves");
        }
        if first_rolled_out.is_none() {
            first_not_yet_rolled_out = now;
        }
        if s == new {
            if second_moved.is_none() {
                assert!(
                    first_rolled_out.is_some(),
                    "{SECOND} (wave 1) moved before {FIRST} (wave 0) had rolled out:{}",
                    describe(ns, kind).await
                );
                second_moved = Some(now);
                second_moved_by = Some(read);
            }
        } else {
            assert_eq!(s, old, "{SECOND} names the old revision until it moves");
            assert!(second_moved.is_none(), "{SECOND} went back to {s:?}");
        }

        if let Some(r) = rollout_of(&status, &v2) {
            if r.phase == RolloutPhase::Progressing && r.wave == 0 {
                assert_eq!(r.waves, vec![0, 1], "the rollout's waves: {r:?}");
                let e = entry(&status, SECOND).expect("the status lists second");
                assert_eq!(
                    (e.state, e.revision.as_str(), e.wave),
                    (WorkloadState::Waiting, v1.as_str(), 1),
                    "while wave 0 is in progress, second waits on the old revision: {e:?}"
                );
                if let Some(since) = &r.wave_healthy_since
                    && second_moved.is_none()
                {
                    wave_0_healthy_since = Some(since.0);
                }
                if f == new && s == old {
                    saw_second_waiting = true;
                }
            }
            if r.phase == RolloutPhase::Complete && s == new && rolled_out(&second) {
                break;
            }
            assert_ne!(r.phase, RolloutPhase::Failed, "a good revision fails: {r:?}");
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {v2} to reach both waves and its rollout to complete \
             (first moved {first_moved:?}, rolled out {first_rolled_out:?}, second moved {second_moved:?}):{}",
            describe(ns, kind).await
        );
        tokio::time::sleep(POLL).await;
    }

    let (first_moved, first_rolled_out, second_moved, second_moved_by) = (
        first_moved.unwrap(),
        first_rolled_out.unwrap(),
        second_moved.unwrap(),
        second_moved_by.unwrap(),
    );
    eprintln!(
        "{FIRST} moved at {first_moved}, rolled out at {first_rolled_out} (after \
         {first_not_yet_rolled_out}); wave 0 healthy since {wave_0_healthy_since:?}; {SECOND} moved at \
         {second_moved} (by {second_moved_by})"
    );
    assert!(first_moved < second_moved, "{FIRST} moves before {SECOND}");
    assert!(
        saw_second_waiting,
        "never saw {FIRST} moved while {SECOND} was Waiting in wave 0 of a Progressing rollout"
    );
    // At most this long passed between first rolling out and second moving: it must cover the window,
    // less the second the status's times may lose.
    let window = SignedDuration::from_secs(STABILIZATION.into());
    let gap = second_moved_by.duration_since(first_not_yet_rolled_out);
    assert!(
        gap >= window - GRANULARITY,
        "{SECOND} moved at most {:.1} s after {FIRST} had rolled out: before the {STABILIZATION} s window \
         was over",
        seconds(gap)
    );
    let since = wave_0_healthy_since.expect("the status recorded when wave 0 became healthy");
    assert!(
        second_moved_by + GRANULARITY >= since + window,
        "{SECOND} moved by {second_moved_by}, before waveHealthySince {since} + {STABILIZATION} s"
    );

    // The end: both Current on the new revision, the rollout Complete, the set Ready.
    let status = kind.status(ns).await.expect("a status");
    let r = rollout_of(&status, &v2).expect("the rollout of the new revision");
    assert_eq!((r.phase, r.waves.clone()), (RolloutPhase::Complete, vec![0, 1]));
    for (name, wave) in [(FIRST, 0), (SECOND, 1)] {
        let e = entry(&status, name).expect("the status lists the workload");
        assert_eq!(
            (e.state, e.revision.as_str(), e.wave),
            (WorkloadState::Current, v2.as_str(), wave),
            "{name}: {e:?}"
        );
    }
    wait_settled(ns, kind, &v2).await;
}

#[tokio::test]
async fn a_good_change_moves_wave_0_then_wave_1() {
    let ns = TestNamespace::new("wavegood").await;
    a_good_change_moves_wave_by_wave(&ns, Kind::ConfigMaps).await;
}

#[tokio::test]
async fn a_good_secret_change_moves_wave_0_then_wave_1() {
    let ns = TestNamespace::new("wavesecret").await;
    a_good_change_moves_wave_by_wave(&ns, Kind::Secrets).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_change_fails_in_wave_0_is_rolled_back_and_wave_1_never_sees_it() {
    const DEADLINE: i32 = 15;
    let kind = Kind::ConfigMaps;
    let ns = TestNamespace::new("wavebad").await;
    let node = Api::<Node>::all(ns.client.clone()).get_opt(FAKE_NODE).await;
    if !matches!(node, Ok(Some(_))) {
        eprintln!(
            "SKIPPED: a bad revision needs the local cluster's simulated node {FAKE_NODE} ({FAIL_KEY})"
        );
        return;
    }
    let _operator = Operator::start(&ns.name).await;
    let rollout = Rollout {
        stabilization_seconds: 2,
        progress_deadline_seconds: Some(DEADLINE),
        auto_rollback: true,
    };
    let good = kind.write(&ns, &[("APP_VERSION", "1")], rollout).await;
    create_workloads(&ns, kind);
    wait_settled(&ns, kind, &good).await;
    let second_sets_before = replica_sets_of(&ns, &ns.deployment(SECOND).await).await.len();
    let first_log = TemplateLog::start(&ns, kind, FIRST);
    let second_log = TemplateLog::start(&ns, kind, SECOND);

    // The change adds the key that keeps the new pods from ever becoming ready.
    let bad = kind
        .write(&ns, &[("APP_VERSION", "1"), (FAIL_KEY, "true")], rollout)
        .await;
    eventually_within(WAIT, "first to be moved to the bad revision", || async {
        (kind.reads(&ns.deployment(FIRST).await) == only(&bad)).then_some(())
    })
    .await;

    // It fails in wave 0: first goes back to the good revision, second waits on it.
    let deadline = Instant::now() + WAIT;
    let status = loop {
        let status = kind.status(&ns).await.unwrap_or_default();
        let failed = rollout_of(&status, &bad).is_some_and(|r| r.phase == RolloutPhase::Failed);
        let back = kind.reads(&ns.deployment(FIRST).await) == only(&good);
        // The status and the Deployment are read one after the other: wait until the status also shows
        // the move back (written moments after it), not only the decision to make it.
        let rolled_back =
            entry(&status, FIRST).is_some_and(|e| e.state == WorkloadState::RolledBack && e.revision == good);
        let not_ready = ready(&status).is_some_and(|(s, ..)| s == "False");
        if failed && back && rolled_back && not_ready {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for the rollout of {bad} to fail and {FIRST} to be rolled \
             back:{}",
            describe(&ns, kind).await
        );
        tokio::time::sleep(POLL).await;
    };
    let r = rollout_of(&status, &bad).unwrap();
    assert_eq!(
        (r.phase, r.wave),
        (RolloutPhase::Failed, 0),
        "failed in wave 0: {r:?}"
    );
    assert!(
        r.message.as_deref().is_some_and(|m| m.contains(FIRST)),
        "the rollout's message names the workload: {r:?}"
    );
    let (ready_status, reason, message) = ready(&status).unwrap();
    assert_eq!(
        (ready_status.as_str(), reason.as_str()),
        ("False", "RolloutFailed")
    );
    assert!(
        message.contains(FIRST),
        "Ready's message names {FIRST}: {message}"
    );
    let history = |name: &str| status.history.iter().find(|h| h.name == name).cloned();
    assert!(
        history(&bad).is_some_and(|h| h.failed),
        "the bad revision is marked failed: {:?}",
        status.history
    );
    assert!(
        history(&good).is_some_and(|h| !h.failed),
        "the good revision is not: {:?}",
        status.history
    );
    let first = entry(&status, FIRST).unwrap();
    assert_eq!(
        (first.state, first.revision.as_str()),
        (WorkloadState::RolledBack, good.as_str()),
        "{first:?}"
    );
    let second = entry(&status, SECOND).unwrap();
    assert_eq!(
        (second.state, second.revision.as_str(), second.wave),
        (WorkloadState::Waiting, good.as_str(), 1),
        "{second:?}"
    );
    warning_event(&ns, "RolloutFailed", &kind.regarding()).await;
    warning_event(&ns, "RolledBack", &format!("Deployment/{FIRST}")).await;

    // first runs the good revision again, and the failed revision is not tried again.
    rollout_status(&ns, &format!("deployment/{FIRST}")).await;
    stays(
        "the failed rollout stays as it is",
        Duration::from_secs(5),
        || async {
            let status = kind.status(&ns).await.unwrap_or_default();
            rollout_of(&status, &bad).is_some_and(|r| r.phase == RolloutPhase::Failed)
                && kind.reads(&ns.deployment(FIRST).await) == only(&good)
                && kind.reads(&ns.deployment(SECOND).await) == only(&good)
        },
    )
    .await;

    // No ReplicaSet of second ever named the bad revision; one of first did (it really was moved).
    let names_bad = |rs: &ReplicaSet| replica_set_names(rs).is_some_and(|n| n.contains(&bad));
    let second_sets = replica_sets_of(&ns, &ns.deployment(SECOND).await).await;
    assert!(
        !second_sets.iter().any(names_bad),
        "a ReplicaSet of {SECOND} names the bad revision"
    );
    assert_eq!(
        second_sets.len(),
        second_sets_before,
        "{SECOND} did not roll at all"
    );
    let first_sets = replica_sets_of(&ns, &ns.deployment(FIRST).await).await;
    assert!(
        first_sets.iter().any(names_bad),
        "a ReplicaSet of {FIRST} names the bad revision"
    );

    // A workload that opts in now, in the wave that failed, starts on the good revision: a newcomer
    // never receives what failed (the webhook writes it at creation; the controller agrees).
    ns.apply(&deployment_yaml(kind, LATE, None));
    rollout_status(&ns, &format!("deployment/{LATE}")).await;
    let late = ns.deployment(LATE).await;
    assert_eq!(
        kind.reads(&late),
        only(&good),
        "{LATE} starts on the good revision"
    );
    assert!(
        !replica_sets_of(&ns, &late).await.iter().any(names_bad),
        "a ReplicaSet of {LATE} names the failed revision"
    );

    // A new good change (the bad key gone, a value changed) starts a fresh rollout, which completes.
    let fixed = kind.write(&ns, &[("APP_VERSION", "3")], rollout).await;
    wait_settled(&ns, kind, &fixed).await;

    let first_log = first_log.finish().await;
    let second_log = second_log.finish().await;
    assert_eq!(
        sequence(&first_log),
        [only(&good), only(&bad), only(&good), only(&fixed)],
        "what {FIRST} named, in order"
    );
    assert_eq!(
        sequence(&second_log),
        [only(&good), only(&fixed)],
        "what {SECOND} named, in order: never the bad revision"
    );
    // first stayed on the bad revision for the set's progress deadline before it was moved back.
    let moved = first_log[1].0;
    let back = first_log[2].0;
    assert!(
        back.duration_since(moved) >= SignedDuration::from_secs(DEADLINE.into()) - SLACK,
        "{FIRST} was moved back {:.1} s after it moved, before progressDeadlineSeconds ({DEADLINE})",
        seconds(back.duration_since(moved))
    );
    let first_fixed = first_seen(&first_log, &only(&fixed)).unwrap();
    let second_fixed = first_seen(&second_log, &only(&fixed)).unwrap();
    assert!(
        first_fixed < second_fixed,
        "the fresh rollout moves {FIRST} ({first_fixed}) before {SECOND} ({second_fixed})"
    );
    let status = kind.status(&ns).await.unwrap();
    for name in [FIRST, SECOND] {
        let e = entry(&status, name).unwrap();
        assert_eq!(
            (e.state, e.revision.as_str()),
            (WorkloadState::Current, fixed.as_str()),
            "{name}: {e:?}"
        );
    }
}

#[tokio::test]
async fn an_operator_restart_during_stabilization_changes_nothing() {
    const STABILIZATION: i32 = 20;
    let kind = Kind::ConfigMaps;
    let ns = TestNamespace::new("waverestart").await;
    let mut operator = Operator::start(&ns.name).await;
    let rollout = Rollout {
        stabilization_seconds: STABILIZATION,
        progress_deadline_seconds: None,
        auto_rollback: false,
    };
    let v1 = kind.write(&ns, &[("APP_VERSION", "1")], rollout).await;
    create_workloads(&ns, kind);
    wait_settled(&ns, kind, &v1).await;
    let second_before = ns.deployment(SECOND).await;
    let generation_before = second_before.metadata.generation.unwrap();
    let sets_before = replica_sets_of(&ns, &second_before).await.len();

    // Wave 0 moves and is healthy: the stabilization window is open.
    let v2 = kind.write(&ns, &[("APP_VERSION", "2")], rollout).await;
    let window = SignedDuration::from_secs(STABILIZATION.into());
    let healthy_since = eventually_within(WAIT, "wave 0 to be moved and healthy on v2", || async {
        let first = ns.deployment(FIRST).await;
        if kind.reads(&first) != only(&v2) || !rolled_out(&first) {
            return None;
        }
        let status = kind.status(&ns).await?;
        let r = rollout_of(&status, &v2)?;
        if r.phase != RolloutPhase::Progressing || r.wave != 0 {
            return None;
        }
        r.wave_healthy_since.as_ref().map(|t| t.0)
    })
    .await;
    assert_eq!(
        kind.reads(&ns.deployment(SECOND).await),
        only(&v1),
        "{SECOND} waits for the window"
    );
    assert!(
        Timestamp::now() + SignedDuration::from_secs(8) < healthy_since + window,
        "the test came too late in the window to stop the operator in it (healthy since {healthy_since})"
    );

    // The operator goes away for a while inside the window, and comes back.
    operator.stop().await;
    stays(
        "second does not move while the operator is down",
        Duration::from_secs(5),
        || async { kind.reads(&ns.deployment(SECOND).await) == only(&v1) },
    )
    .await;
    operator.restart().await;

    // second moves once the window is over, counted from the recorded waveHealthySince.
    let deadline = Instant::now() + WAIT;
    // When the read that found it moved was done: it moved at the latest then.
    let moved = loop {
        let second = ns.deployment(SECOND).await;
        let read = Timestamp::now();
        if kind.reads(&second) == only(&v2) {
            break read;
        }
        assert_eq!(
            kind.reads(&second),
            only(&v1),
            "{SECOND} names the old revision until it moves"
        );
        let status = kind.status(&ns).await.unwrap_or_default();
        if let Some(r) = rollout_of(&status, &v2).filter(|r| r.wave == 0) {
            assert_eq!(r.phase, RolloutPhase::Progressing, "{r:?}");
            assert_eq!(
                r.wave_healthy_since.as_ref().map(|t| t.0),
                Some(healthy_since),
                "the restart kept the window's start (wave 0 stayed healthy)"
            );
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {SECOND} to move to {v2}:{}",
            describe(&ns, kind).await
        );
        tokio::time::sleep(POLL).await;
    };
    eprintln!("wave 0 healthy since {healthy_since}; {SECOND} moved at {moved}");
    assert!(
        moved + GRANULARITY >= healthy_since + window,
        "{SECOND} moved at {moved}, before waveHealthySince {healthy_since} + {STABILIZATION} s"
    );
    wait_settled(&ns, kind, &v2).await;

    // Exactly once: one template write, one new ReplicaSet, and no more afterwards.
    let rolled_once = || async {
        let second = ns.deployment(SECOND).await;
        let sets = replica_sets_of(&ns, &second).await;
        let on_v2 = sets
            .iter()
            .filter(|rs| replica_set_names(rs) == Some(only(&v2)))
            .count();
        (second.metadata.generation.unwrap(), sets.len(), on_v2)
    };
    assert_eq!(
        rolled_once().await,
        (generation_before + 1, sets_before + 1, 1),
        "{SECOND} rolled exactly once (generation, ReplicaSets, ReplicaSets on {v2})"
    );
    stays("second rolls no more", Duration::from_secs(3), || async {
        rolled_once().await == (generation_before + 1, sets_before + 1, 1)
    })
    .await;
}
