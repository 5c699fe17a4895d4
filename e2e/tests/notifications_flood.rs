//! A flood of notifications on a real API server (issue 27: "a flood is sent without blocking
//! reconciles, with a bounded queue whose overflow is counted"). 1,000 sets without `spec.rollout` and
//! without workloads, each subscribed to `on-rollout-completed` through webhook services played by a
//! receiver in the test, are created, then all changed at once. Each set's completion must reach each
//! service exactly once: none twice, none lost (a notification that found the queue full is sent once
//! the queue has room: the notifier observes its set again as deliveries finish). Meanwhile an
//! unsubscribed set is changed, and its change must complete promptly.
//!
//! Heavy, so ignored by default. Run it alone, with its figures printed:
//!
//! ```sh
//! E2E_TESTS=notifications_flood bash e2e/run.sh --ignored --nocapture
//! ```
//!
//! Knobs (environment): `CMSET_FLOOD_SETS` (1000), `CMSET_FLOOD_SERVICES` (webhook services each set
//! subscribes to, 1), `CMSET_FLOOD_DELAY_MS` (how long the receiver takes to answer, 0),
//! `CMSET_FLOOD_WAIT_SECS` (the longest each phase may take, 900). The operator's queue holds 1,024
//! deliveries, at most 256 of one namespace (the flood's sets share one), and queues a subscription
//! of a set at most once, so overflow needs more than 256 subscriptions (sets times services) waiting
//! at once.
//! `CMSET_FLOOD_SERVICES=0` is the control: the same reconciles with no notification to send.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cmset_e2e::cmset_api::ConfigMapSet;
use cmset_e2e::kube::Api;
use cmset_e2e::kube::api::{Patch, PatchParams, PostParams};
use cmset_e2e::{Operator, TestNamespace, eventually_within, http_get, kustomize_name, stays};
use futures::{StreamExt, TryStreamExt};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};

const BYSTANDER: &str = "bystander";
/// At most this many writes of the test in flight at once: a flood for the operator, not for the API
/// server.
const WRITES_AT_ONCE: usize = 32;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Requests heard, by service (the path), set, revision and trigger.
type Heard = HashMap<(String, String, String, String), u32>;

/// Counts every notification it hears; answers after `delay`.
#[derive(Clone, Default)]
struct Receiver {
    heard: Arc<Mutex<Heard>>,
    delay: Duration,
}

impl Receiver {
    async fn start(self) -> u16 {
        cmset_e2e::serve_http(move |req| self.clone().answer(req)).await
    }

    async fn answer(self, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
        let path = req.uri().path().to_string();
        let body = cmset_e2e::json_body(req.into_body()).await;
        let context = &body["context"];
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        let key = (
            path,
            text(&context["set"]["name"]),
            text(&context["revision"]),
            text(&context["trigger"]),
        );
        *self.heard.lock().unwrap().entry(key).or_default() += 1;
        tokio::time::sleep(self.delay).await;
        Ok(Response::new(Full::new(Bytes::from_static(b"{}"))))
    }

    /// Completions of each of `sets` heard by each of `services`, counting only revisions `new`
    /// accepts: how many (set, service) pairs heard one, and how many heard more than one.
    fn tally(
        &self,
        sets: &[String],
        services: &[String],
        new: &dyn Fn(&str, &str) -> bool,
    ) -> (usize, usize) {
        let heard = self.heard.lock().unwrap();
        let mut per_pair: HashMap<(&str, &str), u32> = HashMap::new();
        for ((path, set, revision, trigger), n) in heard.iter() {
            if trigger == "on-rollout-completed" && new(set, revision) {
                *per_pair.entry((path.as_str(), set.as_str())).or_default() += n;
            }
        }
        let (mut arrived, mut twice) = (0, 0);
        for set in sets {
            for service in services {
                match per_pair.get(&(format!("/{service}").as_str(), set.as_str())) {
                    Some(1) => arrived += 1,
                    Some(_) => {
                        arrived += 1;
                        twice += 1;
                    }
                    None => {}
                }
            }
        }
        (arrived, twice)
    }

    /// Every request heard, of any set, revision or trigger.
    fn total(&self) -> u32 {
        self.heard.lock().unwrap().values().sum()
    }
}

fn set(name: &str, services: &[String], version: &str) -> ConfigMapSet {
    let annotations: serde_json::Map<String, serde_json::Value> = services
        .iter()
        .map(|s| {
            (
                format!("notifications.cmset.dev/subscribe.on-rollout-completed.{s}"),
                "".into(),
            )
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "cmset.dev/v1alpha1",
        "kind": "ConfigMapSet",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"template": {"data": {"v": version}}},
    }))
    .unwrap()
}

fn revision(name: &str, version: &str) -> String {
    kustomize_name(name, &[("v", version)])
}

async fn patch_version(api: &Api<ConfigMapSet>, name: &str, version: &str) {
    let patch = Patch::Merge(serde_json::json!({"spec": {"template": {"data": {"v": version}}}}));
    api.patch(name, &PatchParams::default(), &patch)
        .await
        .unwrap_or_else(|e| panic!("patch {name}: {e}"));
}

/// The current revision of each flood set (those not reconciled yet are missing).
async fn currents(api: &Api<ConfigMapSet>) -> HashMap<String, String> {
    let Ok(list) = api.list(&Default::default()).await else {
        return HashMap::new();
    };
    list.items
        .into_iter()
        .filter_map(|s| {
            let name = s.metadata.name.filter(|n| n.starts_with("flood-"))?;
            Some((name, s.status?.current_revision?))
        })
        .collect()
}

/// Changes the bystander to `version` and returns how long until its revision is current.
async fn bystander_change(api: &Api<ConfigMapSet>, version: &str, wait: Duration) -> Duration {
    let want = revision(BYSTANDER, version);
    let started = Instant::now();
    patch_version(api, BYSTANDER, version).await;
    loop {
        let set = api.get(BYSTANDER).await.ok();
        if set.and_then(|s| s.status?.current_revision).as_deref() == Some(want.as_str()) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < wait,
            "the bystander's change to {version} did not complete in {wait:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// `cmset_notifications_total{result="dropped"}`, summed over services and triggers.
fn dropped(op: &Operator) -> Option<f64> {
    let (_, body) = http_get(op.metrics_port, "/metrics")?;
    Some(
        body.lines()
            .filter(|l| l.starts_with("cmset_notifications_total{") && l.contains("result=\"dropped\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .fold(0.0, |total, v| total + v),
    )
}

/// Waits until each set's completion of a revision `new` accepts reached every service; fails on
/// the first one heard twice, or after `wait`.
async fn all_heard(
    receiver: &Receiver,
    names: &[String],
    services: &[String],
    new: &dyn Fn(&str, &str) -> bool,
    wait: Duration,
    op: &Operator,
) -> Duration {
    let started = Instant::now();
    let expected = names.len() * services.len();
    loop {
        let (arrived, twice) = receiver.tally(names, services, new);
        assert_eq!(twice, 0, "completions heard twice");
        if arrived == expected {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < wait,
            "{arrived} of {expected} completions heard after {wait:?} (dropped so far: {:?})",
            dropped(op)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "heavy: 1,000 sets; run with --ignored (see the file's doc comment)"]
async fn a_flood_of_completions_is_told_once_each_and_blocks_no_reconcile() {
    let sets = knob("CMSET_FLOOD_SETS", 1000) as usize;
    let services: Vec<String> = (0..knob("CMSET_FLOOD_SERVICES", 1))
        .map(|i| format!("hook{i}"))
        .collect();
    let delay = Duration::from_millis(knob("CMSET_FLOOD_DELAY_MS", 0));
    let wait = Duration::from_secs(knob("CMSET_FLOOD_WAIT_SECS", 900));

    let ns = TestNamespace::new("flood").await;
    let receiver = Receiver {
        delay,
        ..Receiver::default()
    };
    let port = receiver.clone().start().await;
    let service_keys: String = services
        .iter()
        .map(|s| format!("  service.webhook.{s}: |\n    url: http://127.0.0.1:{port}/{s}\n"))
        .collect();
    ns.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cmset-notifications\ndata:\n{service_keys}"
    ));
    let notifications_namespace = format!("--notifications-namespace={}", ns.name);
    let op = Operator::start_without_webhook(&ns.name, &[&notifications_namespace]).await;
    let api: Api<ConfigMapSet> = ns.api();
    api.create(&PostParams::default(), &set(BYSTANDER, &[], "0"))
        .await
        .unwrap();
    let idle = bystander_change(&api, "1", wait).await;

    // Created subscribed, each set hears of its first revision's completion.
    let names: Vec<String> = (0..sets).map(|i| format!("flood-{i:04}")).collect();
    let created = Instant::now();
    futures::stream::iter(names.iter().map(Ok))
        .try_for_each_concurrent(WRITES_AT_ONCE, |name| {
            let api = api.clone();
            let services = services.clone();
            async move {
                api.create(&PostParams::default(), &set(name, &services, "1"))
                    .await
                    .map(drop)
            }
        })
        .await
        .expect("create the sets");
    let create_writes = created.elapsed();
    // Every set has only its first revision so far: any completion is of it.
    let first = all_heard(&receiver, &names, &services, &|_, _| true, wait, &op).await + create_writes;
    // (With no service, nothing was heard: wait for the reconciles instead.)
    let firsts = eventually_within(wait, "every set on its first revision", || async {
        let firsts = currents(&api).await;
        (firsts.len() == sets).then_some(firsts)
    })
    .await;
    let dropped_at_creation = dropped(&op);
    eprintln!(
        "FLOOD creation: {sets} sets x {} services: writes {:.1}s, all heard after {:.1}s, dropped {:?}",
        services.len(),
        create_writes.as_secs_f64(),
        first.as_secs_f64(),
        dropped_at_creation
    );

    // The flood: every set changed at once.
    let changed = Instant::now();
    futures::stream::iter(names.iter())
        .for_each_concurrent(WRITES_AT_ONCE, |name| {
            let api = api.clone();
            async move { patch_version(&api, name, "2").await }
        })
        .await;
    let change_writes = changed.elapsed();
    // Behind the flood: the reconciles of the changed sets, and their deliveries.
    let during_reconciles = bystander_change(&api, "2", wait).await;
    let mut reconciled = None;
    let mut during_backlog = None;
    let mut heard_all = None;
    let expected = sets * services.len();
    let second = |set: &str, revision: &str| firsts.get(set).is_some_and(|first| first != revision);
    // Listing every set is itself load: every two seconds at most.
    let mut listed = Instant::now() - Duration::from_secs(2);
    loop {
        if reconciled.is_none() && listed.elapsed() >= Duration::from_secs(2) {
            listed = Instant::now();
            let now = currents(&api).await;
            if now.iter().filter(|(set, revision)| second(set, revision)).count() == sets {
                reconciled = Some(changed.elapsed());
                // Reconciles done while deliveries still wait: a set's change must not wait on them.
                let (arrived, _) = receiver.tally(&names, &services, &second);
                if arrived < expected {
                    during_backlog = Some((bystander_change(&api, "3", wait).await, expected - arrived));
                }
            }
        }
        let (arrived, twice) = receiver.tally(&names, &services, &second);
        assert_eq!(twice, 0, "deliveries of the flood heard twice");
        if arrived == expected {
            heard_all.get_or_insert(changed.elapsed());
            if reconciled.is_some() {
                break;
            }
        }
        assert!(
            changed.elapsed() < wait,
            "{arrived} of {expected} deliveries of the flood heard after {wait:?} (dropped so far: {:?})",
            dropped(&op)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all = heard_all.unwrap_or_default();
    let total = receiver.total();
    stays(
        "no delivery heard twice afterwards",
        Duration::from_secs(10),
        || async { receiver.total() == total },
    )
    .await;
    // What was heard is the revision each set now shows.
    let seconds = currents(&api).await;
    let shown = |set: &str, revision: &str| seconds.get(set).is_some_and(|s| s == revision);
    assert_eq!(receiver.tally(&names, &services, &shown), (expected, 0));
    let dropped_total = dropped(&op);
    eprintln!(
        "FLOOD change: {sets} sets x {} services, receiver delay {delay:?}: writes {:.1}s, all sets \
         reconciled after {:.1}s, all {expected} deliveries heard after {:.1}s, dropped (both phases) {:?}",
        services.len(),
        change_writes.as_secs_f64(),
        reconciled.unwrap_or_default().as_secs_f64(),
        all.as_secs_f64(),
        dropped_total
    );
    eprintln!(
        "FLOOD bystander: idle {:.3}s, behind the flood's reconciles {:.3}s, during the delivery backlog {}",
        idle.as_secs_f64(),
        during_reconciles.as_secs_f64(),
        during_backlog.map_or(
            "(no backlog left once the reconciles were done)".to_string(),
            |(d, left)| { format!("{:.3}s ({left} deliveries still to come)", d.as_secs_f64()) }
        )
    );
    if let Some((latency, _)) = during_backlog {
        assert!(
            latency < Duration::from_secs(10),
            "a change during the delivery backlog took {latency:?}: the reconcile waited on notifications"
        );
    }
}
