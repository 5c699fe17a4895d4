//! The operator process itself: two replicas with leader election have exactly one active, the standby
//! takes over when the leader dies, SIGTERM exits cleanly and hands the lease over at once.

use std::time::{Duration, Instant};

use cmset_e2e::fixtures::{app_config_revision, app_config_yaml};
use cmset_e2e::k8s_openapi::api::coordination::v1::Lease;
use cmset_e2e::kube::Api;
use cmset_e2e::{Operator, TestNamespace, eventually, http_get};

const LEASE_NAMESPACE: &str = "cmset-system";
// The shipped Role grants get/update on this one Lease name only.
const LEASE: &str = "cmset-controller";

async fn holder(ns: &TestNamespace) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(ns.client.clone(), LEASE_NAMESPACE);
    leases.get_opt(LEASE).await.ok()??.spec?.holder_identity
}

async fn replica(ns: &TestNamespace, identity: &str) -> Operator {
    let args = [
        "--leader-election=true",
        "--lease-duration-seconds",
        "6",
        "--identity",
        identity,
    ];
    Operator::start_with(&ns.name, &args).await
}

#[tokio::test]
async fn one_of_two_replicas_leads_and_the_other_takes_over() {
    let ns = TestNamespace::new("leader").await;
    let mut a = replica(&ns, &format!("{}-a", ns.name)).await;
    eventually("replica a to lead", || async {
        (a.metric("cmset_leader") == 1.0).then_some(())
    })
    .await;
    let mut b = replica(&ns, &format!("{}-b", ns.name)).await;
    assert_eq!(
        holder(&ns).await.as_deref(),
        Some(format!("{}-a", ns.name).as_str())
    );
    assert_eq!(b.metric("cmset_leader"), 0.0, "the standby does not act");
    assert_eq!(
        http_get(b.metrics_port, "/readyz").map(|r| r.0),
        Some(200),
        "a standby is ready to take over"
    );

    // Only the leader works.
    ns.apply(&app_config_yaml("1", None));
    let v1 = app_config_revision("1");
    eventually("the leader to create the revision", || async {
        ns.revision_names("app-config").await.contains(&v1).then_some(())
    })
    .await;
    assert_eq!(b.writes(), 0.0, "the standby wrote nothing");

    // The leader dies without releasing: the standby takes over once the lease expires.
    let killed = Instant::now();
    a.kill().await;
    eventually("replica b to lead", || async {
        (b.metric("cmset_leader") == 1.0).then_some(())
    })
    .await;
    assert!(
        killed.elapsed() < Duration::from_secs(20),
        "took over in {:?}",
        killed.elapsed()
    );
    ns.apply(&app_config_yaml("2", None));
    let v2 = app_config_revision("2");
    eventually("the new leader to create the next revision", || async {
        ns.revision_names("app-config").await.contains(&v2).then_some(())
    })
    .await;

    // SIGTERM: a clean exit that releases the lease at once.
    let status = b.stop().await.expect("the operator exits after SIGTERM");
    assert!(status.success(), "exit status {status:?}");
    assert_eq!(holder(&ns).await, None, "the lease was released");
}
