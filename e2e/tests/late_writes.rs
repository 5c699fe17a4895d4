//! Writes cannot go back in time (issue #25, item 6): a leader's status write that reaches the API
//! server after the leader stepped down, and after the new leader wrote the set's status, is refused
//! instead of putting the older status back.
//!
//! Two replicas; the leader reaches the API server through the fault proxy, which holds its status
//! write (the request itself, not the answer) until the test releases it. Meanwhile the leader loses
//! its lease (its renewals fail), steps down and exits, the standby takes over and writes the status
//! of the set's next two generations. Then the held write is forwarded, as a write delayed on the
//! network would land: the API server must answer 409 Conflict (it carries the resourceVersion the
//! old leader planned from), and the set's status stays the new leader's.

use std::time::Duration;

use cmset_e2e::fault_proxy::{Fault, FaultProxy, Match, Rule};
use cmset_e2e::kube::ResourceExt;
use cmset_e2e::{Operator, TestNamespace, eventually, kustomize_name, operator_kubeconfig, stays};
use http::Method;

const SET: &str = "late-config";

fn write_set(ns: &TestNamespace, value: &str) -> String {
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  template:
    data:
      MODE: "{value}"
"#
    ));
    kustomize_name(SET, &[("MODE", value)])
}

/// Waits until the set's status says it observed `generation` and runs `revision`.
async fn status_at(ns: &TestNamespace, generation: i64, revision: &str) {
    eventually(
        &format!("the status of generation {generation}, on {revision}"),
        || async {
            let set = ns.set(SET).await;
            let status = set.status?;
            (status.observed_generation == Some(generation)
                && status.current_revision.as_deref() == Some(revision))
            .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_status_write_delayed_past_the_leaders_step_down_does_not_land_over_the_new_leaders() {
    let ns = TestNamespace::new("late-write").await;
    let proxy = FaultProxy::start(&operator_kubeconfig()).await;
    let a_args = ns.pair_replica_args("a");
    let a_args: Vec<&str> = a_args.iter().map(String::as_str).collect();
    let mut a = Operator::start_via(&ns.name, &a_args, proxy.kubeconfig(&ns.name)).await;
    eventually("replica a to lead", || async {
        (a.metric("cmset_leader") == 1.0).then_some(())
    })
    .await;
    let b_args = ns.pair_replica_args("b");
    let b_args: Vec<&str> = b_args.iter().map(String::as_str).collect();
    let b = Operator::start_without_webhook(&ns.name, &b_args).await;

    let v1 = write_set(&ns, "one");
    status_at(&ns, 1, &v1).await;

    // a's next status write of the set is held in the proxy; generation 2 makes a write one.
    let status_path = format!("/namespaces/{}/configmapsets/{SET}/status", ns.name);
    proxy.inject(Rule::hold_request(1, Match::new(Method::PATCH, &status_path)));
    let v2 = write_set(&ns, "two");
    eventually("a's status write of generation 2 held in the proxy", || async {
        (proxy.holding() == 1).then_some(())
    })
    .await;

    // a can no longer renew its lease: it steps down (and exits), b takes over and writes the status
    // of generation 2, then of generation 3.
    proxy.inject(Rule::always(
        Match::path(&format!("/leases/{}", ns.pair_lease())),
        Fault::UNAVAILABLE,
    ));
    let exited = a.wait_exit(Duration::from_secs(30)).await;
    assert!(
        exited.is_some(),
        "a steps down and exits once it cannot renew its lease"
    );
    eventually("b to lead", || async {
        (b.metric("cmset_leader") == 1.0).then_some(())
    })
    .await;
    status_at(&ns, 2, &v2).await;
    let v3 = write_set(&ns, "three");
    status_at(&ns, 3, &v3).await;
    let before = ns.set(SET).await;

    // The old leader's write lands now, late: refused, and the status stays b's.
    proxy.release_held();
    let answers = eventually("the held write answered", || async {
        let answers = proxy.held_answers();
        (!answers.is_empty()).then_some(answers)
    })
    .await;
    let after = ns.set(SET).await;
    assert_eq!(
        answers,
        vec![409],
        "the late write must be refused; the set's status was {:#?} and is now {:#?}",
        before.status,
        after.status
    );
    assert_eq!(after.resource_version(), before.resource_version());
    stays(
        "the status is the new leader's, of generation 3",
        Duration::from_secs(3),
        || async {
            let status = ns.set(SET).await.status.unwrap_or_default();
            status.observed_generation == Some(3) && status.current_revision.as_deref() == Some(&*v3)
        },
    )
    .await;
    eprintln!(
        "b sent {} writes, {} refused as conflicts",
        b.writes(),
        b.metric("cmset_api_write_conflicts_total")
    );

    ns.drop_pair_lease().await;
}
