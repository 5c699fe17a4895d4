//! A leader that loses the API server while a standby still reaches it (issue #11): the leader must
//! stop acting before its lease can expire, so that when the standby takes over there is never a
//! moment with two leaders. The leader talks to the API server through a proxy that the test freezes:
//! its connections stay open and nothing moves, as with a SIGSTOPped API server.

use std::time::{Duration, Instant};

use cmset_e2e::k8s_openapi::api::coordination::v1::Lease;
use cmset_e2e::kube::Api;
use cmset_e2e::proxy::{Proxy, kubeconfig_via, upstream_of};
use cmset_e2e::{Operator, TestNamespace, eventually};

const LEASE_SECONDS: u64 = 6;

async fn holder(ns: &TestNamespace) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(ns.client.clone(), "cmset-system");
    leases
        .get_opt("cmset-controller")
        .await
        .ok()??
        .spec?
        .holder_identity
}

#[tokio::test]
async fn a_leader_cut_off_from_the_api_server_steps_down_before_the_standby_takes_over() {
    let ns = TestNamespace::new("splitbrain").await;
    let operator_kubeconfig = cmset_e2e::operator_kubeconfig();
    let proxy = Proxy::start(upstream_of(&operator_kubeconfig)).await;
    let via_proxy = kubeconfig_via(&operator_kubeconfig, &proxy, &ns.name);
    let lease_seconds = LEASE_SECONDS.to_string();
    let args = |identity: &'static str| {
        vec![
            "--leader-election=true".to_string(),
            "--lease-duration-seconds".to_string(),
            lease_seconds.clone(),
            "--identity".to_string(),
            identity.to_string(),
        ]
    };
    let a_args = args("split-a");
    let a_refs: Vec<&str> = a_args.iter().map(String::as_str).collect();
    let mut a = Operator::start_via(&ns.name, &a_refs, via_proxy).await;
    eventually("replica a to lead", || async {
        (a.metric("cmset_leader") == 1.0).then_some(())
    })
    .await;
    let b_args = args("split-b");
    let b_refs: Vec<&str> = b_args.iter().map(String::as_str).collect();
    let b = Operator::start_with(&ns.name, &b_refs).await;
    assert_eq!(holder(&ns).await.as_deref(), Some("split-a"));

    // Cut a off. It must stop acting (and exit) before its lease can expire, and b takes over after.
    proxy.freeze();
    let frozen_at = Instant::now();
    let mut a_stopped = None;
    let mut b_led = None;
    while frozen_at.elapsed() < Duration::from_secs(4 * LEASE_SECONDS)
        && (a_stopped.is_none() || b_led.is_none())
    {
        if a_stopped.is_none() && a.exited().is_some() {
            a_stopped = Some(frozen_at.elapsed());
        }
        if b_led.is_none() && b.metric("cmset_leader") == 1.0 {
            b_led = Some(frozen_at.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let a_stopped = a_stopped.expect("the cut-off leader exits");
    let b_led = b_led.expect("the standby takes over");
    eprintln!("cut-off leader stopped after {a_stopped:?}; standby leads after {b_led:?}");
    assert!(
        a_stopped < Duration::from_secs(LEASE_SECONDS),
        "the cut-off leader stops before its lease can expire: {a_stopped:?}"
    );
    assert!(
        a_stopped < b_led,
        "never two leaders: a stopped at {a_stopped:?}, b led at {b_led:?}"
    );
    assert_eq!(holder(&ns).await.as_deref(), Some("split-b"));
    proxy.thaw();
}
