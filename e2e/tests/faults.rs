//! The operator under API faults (issue #11): it talks to the API server through a fault proxy that
//! answers some requests with 409, 429 (+Retry-After), 500 or 503, cuts its watches, or ends them with
//! 410 Gone. During a series of set changes it converges after each fault with nothing lost (no workload
//! naming a missing ConfigMap, one revision per content, a rollback pin kept, history within its limit,
//! the set Ready), and a set that fails forever costs a bounded number of requests.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cmset_e2e::cmset_api::WorkloadState;
use cmset_e2e::fault_proxy::{Fault, FaultProxy, Match, Rule};
use cmset_e2e::fixtures::{
    DeploymentYaml, Reads, app_config_revision, app_config_yaml, rollout_status, set_yaml, template_names,
    wait_names,
};
use cmset_e2e::invariants::{
    history_within_limit, nothing_names_a_missing_configmap, one_revision_per_content, ready_on,
    workload_state,
};
use cmset_e2e::kube::api::ListParams;
use cmset_e2e::kube::core::PartialObjectMeta;
use cmset_e2e::{Operator, TestNamespace, eventually, kustomize_name, operator_kubeconfig};
use http::Method;

const LIMIT: i32 = 2;

fn pinned_yaml(version: &str) -> String {
    set_yaml("pinned-config", &[("PINNED", version)], None)
}

fn pinned_revision(version: &str) -> String {
    kustomize_name("pinned-config", &[("PINNED", version)])
}

/// What a step does to the operator's traffic.
enum Disturbance {
    /// Rules in place before the change is applied.
    Rules(Vec<Rule>),
    /// Every open watch is cut just before the change is applied, and again just after.
    DropWatches,
    /// Every open watch ends with a 410 `ERROR` event, and the next watch requests are answered 410.
    ExpireWatches,
}

/// Whether the cluster has converged on `web` naming `want` with the pin of `legacy` on `pinned` intact.
async fn converged(ns: &TestNamespace, want: &str, pinned: &str) -> bool {
    let web = template_names(&ns.deployment("web").await);
    if web != BTreeSet::from([want.to_string()]) {
        return false;
    }
    let legacy = template_names(&ns.deployment("legacy").await);
    if legacy != BTreeSet::from([pinned.to_string()]) {
        return false;
    }
    ready_on(&ns.set("app-config").await, want)
        && workload_state(&ns.set("pinned-config").await, "legacy")
            == Some((WorkloadState::Pinned, pinned.to_string()))
}

/// Polls [`converged`] and returns how long it took, panicking after `limit`.
async fn time_to_converge(ns: &TestNamespace, want: &str, pinned: &str, what: &str) -> Duration {
    let start = Instant::now();
    let limit = Duration::from_secs(120);
    while !converged(ns, want, pinned).await {
        assert!(start.elapsed() < limit, "not converged {limit:?} after {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    start.elapsed()
}

#[tokio::test]
async fn after_each_api_fault_the_operator_converges_with_nothing_lost() {
    let ns = TestNamespace::new("faults").await;
    let proxy = FaultProxy::start(&operator_kubeconfig()).await;
    let mut operator = Operator::start_via(&ns.name, &[], proxy.kubeconfig(&ns.name)).await;
    let configmaps = format!("/api/v1/namespaces/{}/configmaps", ns.name);
    let status = "/configmapsets/app-config/status";
    let web_path = "/deployments/web";

    // `web` follows app-config (keeping one old ReplicaSet, so old revisions do get pruned); `legacy` is
    // rolled back to the first revision of pinned-config, a pin that must survive every fault.
    ns.apply(&app_config_yaml("1", Some(LIMIT)));
    let reads = [Reads::EnvFrom("app-config"), Reads::Volume("app-config")];
    ns.apply(
        &DeploymentYaml::new("web", &reads)
            .revision_history_limit(1)
            .yaml(),
    );
    ns.apply(&pinned_yaml("1"));
    ns.apply(&DeploymentYaml::new("legacy", &[Reads::EnvFrom("pinned-config")]).yaml());
    let (p1, p2) = (pinned_revision("1"), pinned_revision("2"));
    wait_names(&ns, "web", &[&app_config_revision("1")]).await;
    wait_names(&ns, "legacy", &[&p1]).await;
    rollout_status(&ns, "deployment/legacy").await;
    ns.apply(&pinned_yaml("2"));
    wait_names(&ns, "legacy", &[&p2]).await;
    rollout_status(&ns, "deployment/legacy").await;
    ns.kubectl(&["rollout", "undo", "deployment/legacy"]);
    wait_names(&ns, "legacy", &[&p1]).await;
    eventually("legacy to be reported Pinned", || async {
        (workload_state(&ns.set("pinned-config").await, "legacy")
            == Some((WorkloadState::Pinned, p1.clone())))
        .then_some(())
    })
    .await;

    let next = |times, matcher: Match, fault| Rule::next(times, matcher, fault);
    let steps: Vec<(&str, Disturbance)> = vec![
        (
            "409 Conflict",
            Disturbance::Rules(vec![
                next(2, Match::new(Method::POST, &configmaps), Fault::CONFLICT),
                next(2, Match::new(Method::PATCH, status), Fault::CONFLICT),
                next(2, Match::new(Method::PATCH, web_path), Fault::CONFLICT),
            ]),
        ),
        (
            "429 Too Many Requests, Retry-After: 1",
            Disturbance::Rules(vec![
                next(
                    3,
                    Match::new(Method::POST, &configmaps),
                    Fault::too_many_requests(1),
                ),
                next(
                    3,
                    Match::new(Method::PATCH, web_path),
                    Fault::too_many_requests(1),
                ),
                next(3, Match::new(Method::PATCH, status), Fault::too_many_requests(1)),
            ]),
        ),
        (
            "500 Internal Server Error",
            Disturbance::Rules(vec![
                next(3, Match::new(Method::POST, &configmaps), Fault::INTERNAL),
                next(2, Match::new(Method::PATCH, status), Fault::INTERNAL),
                next(2, Match::new(Method::PATCH, web_path), Fault::INTERNAL),
            ]),
        ),
        (
            "503 Service Unavailable",
            Disturbance::Rules(vec![
                next(4, Match::path("/configmapsets"), Fault::UNAVAILABLE),
                next(3, Match::new(Method::POST, &configmaps), Fault::UNAVAILABLE),
                next(3, Match::path(web_path), Fault::UNAVAILABLE),
            ]),
        ),
        ("dropped watches", Disturbance::DropWatches),
        ("410 Gone on watches", Disturbance::ExpireWatches),
    ];

    let mut figures = Vec::new();
    for (version, (name, disturbance)) in (2u32..).zip(steps) {
        let want = app_config_revision(&version.to_string());
        let injected = proxy.injected();
        let watches = proxy.open_watches();
        match &disturbance {
            Disturbance::Rules(rules) => rules.iter().cloned().for_each(|r| proxy.inject(r)),
            Disturbance::DropWatches => {
                proxy.drop_watches();
            }
            Disturbance::ExpireWatches => {
                proxy.inject(Rule::next(3, Match::watches(""), Fault::GONE));
                proxy.expire_watches();
            }
        }
        ns.apply(&app_config_yaml(&version.to_string(), Some(LIMIT)));
        if let Disturbance::DropWatches = disturbance {
            tokio::time::sleep(Duration::from_millis(150)).await;
            proxy.drop_watches();
        }
        let took = time_to_converge(&ns, &want, &p1, name).await;
        let answered = proxy.injected() - injected;
        eprintln!(
            "fault {name}: {answered} requests answered with it, {watches} watches open; converged in {took:.1?}"
        );
        figures.push((name, took));
        proxy.clear();
        assert!(
            operator.exited().is_none(),
            "the operator keeps running through {name}"
        );
    }

    // Whatever happened on the way, nothing is lost.
    rollout_status(&ns, "deployment/web").await;
    one_revision_per_content(&ns, "app-config").await;
    one_revision_per_content(&ns, "pinned-config").await;
    nothing_names_a_missing_configmap(&ns).await;
    history_within_limit(&ns, "app-config").await;
    assert!(
        ns.api::<cmset_e2e::k8s_openapi::api::core::v1::ConfigMap>()
            .get(&p1)
            .await
            .is_ok(),
        "the pinned revision is kept"
    );
    let last = app_config_revision(&(figures.len() + 1).to_string());
    assert!(converged(&ns, &last, &p1).await, "still converged at the end");
    eprintln!("time to converge after each fault: {figures:.1?}");
    assert!(operator.exited().is_none(), "the operator never exited");
}

/// How many requests `matcher` matched in `[from, from + window)`, as a rate per minute.
fn per_minute(count: usize, window: Duration) -> f64 {
    count as f64 * 60.0 / window.as_secs_f64()
}

#[tokio::test]
async fn a_set_that_fails_forever_costs_a_bounded_number_of_requests() {
    let ns = TestNamespace::new("failforever").await;
    let proxy = FaultProxy::start(&operator_kubeconfig()).await;
    let _operator = Operator::start_via(&ns.name, &[], proxy.kubeconfig(&ns.name)).await;
    let configmaps = format!("/api/v1/namespaces/{}/configmaps", ns.name);
    let create = Match::new(Method::POST, &configmaps);
    let fight = Match::new(Method::PATCH, "/configmapsets/fighting/status");

    // `fighting` gets its revision, then every status write of it is a conflict (a writer that always
    // wins); after that every revision create fails, so `doomed`, and the workload reading it, never
    // get anywhere.
    proxy.inject(Rule::always(fight.clone(), Fault::CONFLICT));
    ns.apply(&set_yaml("fighting", &[("K", "v")], None));
    eventually("fighting's revision to exist", || async {
        let list = ns
            .api::<PartialObjectMeta<cmset_e2e::k8s_openapi::api::core::v1::ConfigMap>>()
            .list_metadata(&ListParams::default().labels("cmset.dev/set=fighting"))
            .await
            .ok()?;
        (!list.items.is_empty()).then_some(())
    })
    .await;
    proxy.inject(Rule::always(create.clone(), Fault::INTERNAL));
    let start = Instant::now();
    ns.apply(&set_yaml("doomed", &[("K", "v")], None));
    ns.apply(&DeploymentYaml::new("doomed-web", &[Reads::EnvFrom("doomed")]).yaml());

    // The first half minute is the backoff climbing; the rate that matters is the one after.
    let settle = Duration::from_secs(30);
    let window = Duration::from_secs(90);
    tokio::time::sleep_until((start + settle).into()).await;
    let from = Instant::now();
    tokio::time::sleep(window).await;
    let to = Instant::now();
    let count = |m: &Match| proxy.count_between(m, Some(from), Some(to));
    let creates = count(&create);
    let fights = count(&fight);
    let everything = count(&Match::all()) - count(&Match::watches(""));
    let early_creates = proxy.count_between(&create, Some(start), Some(from));
    eprintln!(
        "failing forever, in the {window:?} after the first {settle:?}: {creates} revision creates \
         ({:.1}/min; {early_creates} in the first {settle:?}), {fights} conflicting status writes ({:.1}/min), \
         {everything} requests in all but watches ({:.1}/min)",
        per_minute(creates, window),
        per_minute(fights, window),
        per_minute(everything, window),
    );
    // Backing off from 1 s (conflicts 0.5 s), doubling: about 2 creates and 3 conflicting writes in this
    // window. A fixed 10 s retry would make 9 creates; a fixed 0.5 s one, 180 writes.
    assert!(
        creates <= 6,
        "a set failing forever backs off: {creates} creates in {window:?}"
    );
    assert!(
        fights <= 10,
        "a set conflicting forever backs off: {fights} writes in {window:?}"
    );
    assert!(creates >= 1, "but it keeps trying: no create in {window:?}");
    // The deployment never moved: it names the bare set still.
    assert_eq!(
        template_names(&ns.deployment("doomed-web").await),
        BTreeSet::from(["doomed".to_string()])
    );
}
