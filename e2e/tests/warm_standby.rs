//! Every replica keeps the index warm: a standby answers admission from memory without asking the API
//! server, a standby that takes the lease reconciles from its index without listing anything again
//! but the history kinds (which only a leader watches),
//! and a leader stopped by SIGTERM in the middle of a burst finishes its work, hands over, and the next
//! leader converges.

use cmset_e2e::fault_proxy::{FaultProxy, Match};
use cmset_e2e::fixtures::{
    Reads, app_config_revision, app_config_yaml, deployment_yaml, set_yaml, wait_names,
};
use cmset_e2e::{Operator, TestNamespace, eventually, kustomize_name, operator_kubeconfig};
use http::Method;

async fn leading(op: &Operator, what: &str) {
    eventually(what, || async {
        (op.metric("cmset_leader") == 1.0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_standby_answers_admission_from_its_index_without_asking_the_api_server() {
    let ns = TestNamespace::new("standby-admits").await;
    let a_args = ns.pair_replica_args("a");
    let a_args: Vec<&str> = a_args.iter().map(String::as_str).collect();
    let a = Operator::start_without_webhook(&ns.name, &a_args).await;
    leading(&a, "replica a to lead").await;
    // The API server calls only b's webhook; b stands by.
    let b_args = ns.pair_replica_args("b");
    let b_args: Vec<&str> = b_args.iter().map(String::as_str).collect();
    let b = Operator::start_with(&ns.name, &b_args).await;
    assert_eq!(b.metric("cmset_leader"), 0.0);

    ns.apply(&app_config_yaml("1", None));
    let v1 = app_config_revision("1");
    eventually("the revision", || async {
        ns.revision_names("app-config").await.contains(&v1).then_some(())
    })
    .await;
    // Created naming the bare set: stored already naming the revision, by the standby's webhook.
    let created = ns.apply(&deployment_yaml("web", &[Reads::EnvFrom("app-config")]));
    assert!(created.contains("created"), "{created}");
    let stored = ns.deployment("web").await;
    assert_eq!(
        cmset_e2e::fixtures::template_names(&stored),
        [v1.clone()].into(),
        "admitted already rewritten"
    );
    // Re-applied (a GitOps sync): unchanged, and still no request.
    ns.apply(&deployment_yaml("web", &[Reads::EnvFrom("app-config")]));
    assert!(b.metric("cmset_admissions_total") >= 2.0);
    assert!(b.metric("cmset_admission_duration_seconds_count") >= 2.0);
    assert_eq!(
        b.metric("cmset_admission_api_requests_total"),
        0.0,
        "admission read nothing from the API server"
    );
    assert_eq!(b.writes(), 0.0, "the standby wrote nothing");
    ns.drop_pair_lease().await;
}

#[tokio::test]
async fn a_standby_takes_over_from_its_warm_index_without_listing_again() {
    let ns = TestNamespace::new("warm-takeover").await;
    let a_args = ns.pair_replica_args("a");
    let a_args: Vec<&str> = a_args.iter().map(String::as_str).collect();
    let mut a = Operator::start_without_webhook(&ns.name, &a_args).await;
    leading(&a, "replica a to lead").await;
    ns.apply(&app_config_yaml("1", None));
    ns.apply(&deployment_yaml("web", &[Reads::EnvFrom("app-config")]));
    wait_names(&ns, "web", &[&app_config_revision("1")]).await;

    // b watches through a proxy that counts its requests.
    let proxy = FaultProxy::start(&operator_kubeconfig()).await;
    let b_args = ns.pair_replica_args("b");
    let b_args: Vec<&str> = b_args.iter().map(String::as_str).collect();
    let b = Operator::start_via(&ns.name, &b_args, proxy.kubeconfig("b")).await;
    // kube's lists page with `limit=`; watches do not.
    let lists = Match::new(Method::GET, "limit=");
    let listed_at_start = proxy.count(&lists);
    assert!(
        listed_at_start >= 8,
        "b listed every kind once: {listed_at_start}"
    );

    // The history kinds (label cmset.dev/managed=true) are the leader's alone.
    let history = Match::new(Method::GET, "cmset.dev%2Fmanaged%3Dtrue");
    assert_eq!(proxy.count(&history), 0, "a standby hears no history");

    a.kill().await;
    leading(&b, "replica b to take over").await;
    ns.apply(&app_config_yaml("2", None));
    wait_names(&ns, "web", &[&app_config_revision("2")]).await;
    eventually("the new leader to list the history kinds", || async {
        (proxy.count(&lists) == listed_at_start + 3).then_some(())
    })
    .await;
    assert!(
        proxy.count(&history) >= 3,
        "the new leader worked from its warm index: its only lists since it started are the three \
         history kinds'"
    );
    ns.drop_pair_lease().await;
}

#[tokio::test]
async fn sigterm_in_the_middle_of_a_burst_hands_over_and_the_next_leader_converges() {
    const SETS: usize = 12;
    let ns = TestNamespace::new("sigterm-burst").await;
    let a_args = ns.pair_replica_args("a");
    let a_args: Vec<&str> = a_args.iter().map(String::as_str).collect();
    let mut a = Operator::start_without_webhook(&ns.name, &a_args).await;
    leading(&a, "replica a to lead").await;
    let b_args = ns.pair_replica_args("b");
    let b_args: Vec<&str> = b_args.iter().map(String::as_str).collect();
    let b = Operator::start_without_webhook(&ns.name, &b_args).await;

    let names: Vec<String> = (0..SETS).map(|i| format!("conf-{i}")).collect();
    let revision = |name: &str, v: &str| kustomize_name(name, &[("v", v)]);
    for name in &names {
        ns.apply(&set_yaml(name, &[("v", "1")], None));
        ns.apply(&deployment_yaml(&format!("{name}-web"), &[Reads::EnvFrom(name)]));
    }
    for name in &names {
        wait_names(&ns, &format!("{name}-web"), &[&revision(name, "1")]).await;
    }
    // Every set changes at once; the leader is told to stop while it works through them.
    let burst: String = names
        .iter()
        .map(|name| set_yaml(name, &[("v", "2")], None))
        .collect::<Vec<_>>()
        .join("\n---\n");
    ns.apply(&burst);
    let status = a.stop().await.expect("the leader exits within its grace period");
    assert!(status.success(), "exit status {status:?}");
    // The lease was released on the way out: b leads at once rather than after expiry.
    leading(&b, "replica b to take over").await;
    for name in &names {
        wait_names(&ns, &format!("{name}-web"), &[&revision(name, "2")]).await;
    }
    // Every revision a workload names exists, and each set's status names the workload's revision.
    for name in &names {
        let current = revision(name, "2");
        assert!(ns.revision_names(name).await.contains(&current), "{name}");
        eventually("the set's status to record the move", || async {
            let set = ns.set(name).await;
            let status = set.status?;
            (status.current_revision.as_deref() == Some(current.as_str())
                && status.workloads.iter().all(|w| w.revision == current))
            .then_some(())
        })
        .await;
    }
    ns.drop_pair_lease().await;
}
