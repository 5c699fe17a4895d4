//! The operator's leader election (`cmset_controller::platform::leader::Elector`) against a real API server,
//! driven directly, one Lease per test namespace:
//! - a replica whose acquiring request took most of the renew deadline to come back steps down
//!   `renew_deadline` after that request started (not after it returned), before a standby takes over;
//! - a lease whose `renewTime` looks an hour old but keeps being renewed is never taken; once its holder
//!   stops renewing, it is taken a lease duration of the candidate's own time later.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cmset_controller::platform::leader::{Elector, LeaseConfig};
use cmset_e2e::fault_proxy::{Fault, FaultProxy, Match, Rule};
use cmset_e2e::k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use cmset_e2e::k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use cmset_e2e::k8s_openapi::jiff::{SignedDuration, Timestamp};
use cmset_e2e::kube::api::{ObjectMeta, PostParams};
use cmset_e2e::kube::config::{KubeConfigOptions, Kubeconfig};
use cmset_e2e::kube::{Api, Client};
use cmset_e2e::{CONVERGE, TestNamespace, eventually};
use http::Method;

const LEASE: &str = "leader-e2e";

fn config(ns: &TestNamespace, identity: &str, duration: Duration) -> LeaseConfig {
    LeaseConfig::with_duration(ns.name.clone(), LEASE.into(), identity.into(), duration)
}

fn admin_kubeconfig() -> PathBuf {
    std::env::var_os("KUBECONFIG")
        .map(PathBuf::from)
        .expect("KUBECONFIG names the cluster (run e2e/run.sh)")
}

async fn client_from(kubeconfig: &PathBuf) -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).expect("read the kubeconfig");
    let config = cmset_e2e::kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a usable kubeconfig");
    Client::try_from(config).expect("a client")
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases.get_opt(LEASE).await.ok()??.spec?.holder_identity
}

#[tokio::test]
async fn leader_election_counts_the_renew_deadline_from_the_start_of_a_slow_acquire() {
    const SLOW: Duration = Duration::from_secs(3);
    let ns = TestNamespace::new("leader-slow").await;
    let leases = ns.api::<Lease>();
    let leases_path = format!("/namespaces/{}/leases", ns.name);
    // a reaches the API server through the proxy; b directly.
    let proxy = FaultProxy::start(&admin_kubeconfig()).await;
    let a_client = client_from(&proxy.kubeconfig(&ns.name)).await;
    let a = Elector::new(a_client, config(&ns, "a", Duration::from_secs(6)));
    let b = Elector::new(ns.client.clone(), config(&ns, "b", Duration::from_secs(6)));
    let renew_deadline = config(&ns, "a", Duration::from_secs(6)).renew_deadline;
    assert!(
        SLOW < renew_deadline,
        "the slow answer still makes the acquire's own deadline"
    );

    // a's create reaches the server at once; its answer comes back SLOW later.
    proxy.inject(Rule::delay_answer(
        1,
        Match::new(Method::POST, &leases_path),
        SLOW,
    ));
    // b stands by from the moment a's lease is on the server, as a standby already running would.
    let standby = tokio::spawn(async move {
        eventually("a's lease on the server", || async {
            (holder(&leases).await.as_deref() == Some("a")).then_some(())
        })
        .await;
        b.acquire().await;
        Instant::now()
    });
    let asked = Instant::now();
    a.acquire().await;
    assert!(asked.elapsed() >= SLOW, "the acquire waited for the slow answer");
    assert_eq!(proxy.injected(), 1, "the create was the delayed request");

    // From now on every request of a's about the lease fails: it cannot renew.
    proxy.inject(Rule::always(Match::path(&leases_path), Fault::UNAVAILABLE));
    a.hold().await;
    let stepped_down = Instant::now();
    let b_led = tokio::time::timeout(CONVERGE, standby)
        .await
        .expect("b takes over the lease a no longer renews")
        .expect("the standby task");
    eprintln!(
        "a asked for the lease; it came back after more than {SLOW:?}; a stepped down after {:?}; b led after {:?}",
        stepped_down - asked,
        b_led - asked
    );
    // The acquiring request started after `asked`: a deadline counted from it cannot fall before.
    assert!(
        stepped_down >= asked + renew_deadline,
        "a held on until its deadline: {:?}",
        stepped_down - asked
    );
    // Counted from when the answer came back, it would have fallen SLOW later than this.
    assert!(
        stepped_down <= asked + renew_deadline + SLOW / 2,
        "a stepped down renew_deadline ({renew_deadline:?}) after its acquiring request started, not after \
         it returned: {:?}",
        stepped_down - asked
    );
    assert!(
        stepped_down < b_led,
        "a stopped acting before b took over: a {:?}, b {:?}",
        stepped_down - asked,
        b_led - asked
    );
    assert_eq!(holder(&ns.api::<Lease>()).await.as_deref(), Some("b"));
}

#[tokio::test]
async fn leader_election_judges_expiry_by_local_time_not_the_holders_renew_time() {
    const DURATION: Duration = Duration::from_secs(4);
    let ns = TestNamespace::new("leader-skew").await;
    let leases = ns.api::<Lease>();
    // `other` holds the lease; its clock is an hour behind, so every renewTime it writes looks to
    // anyone else as if the lease had expired an hour ago.
    let behind = Timestamp::now() - SignedDuration::from_hours(1);
    let other_clock = Instant::now();
    let renew_time = || MicroTime(behind + SignedDuration::try_from(other_clock.elapsed()).unwrap());
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(LEASE.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("other".into()),
            lease_duration_seconds: Some(DURATION.as_secs() as i32),
            acquire_time: Some(renew_time()),
            renew_time: Some(renew_time()),
            ..LeaseSpec::default()
        }),
    };
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("other takes the lease");

    let candidate = Elector::new(ns.client.clone(), config(&ns, "candidate", DURATION));
    let took = tokio::spawn(async move {
        candidate.acquire().await;
        Instant::now()
    });

    // other renews every second for three lease durations: the candidate must never take it.
    let renewing_until = Instant::now() + 3 * DURATION;
    let mut last_renewal = Instant::now();
    let mut renewals = 0;
    while Instant::now() < renewing_until {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !took.is_finished(),
            "the candidate took a lease that is being renewed (after {renewals} renewals)"
        );
        let mut lease = leases.get(LEASE).await.expect("read the lease");
        let spec = lease.spec.as_mut().expect("a lease spec");
        assert_eq!(spec.holder_identity.as_deref(), Some("other"));
        spec.renew_time = Some(renew_time());
        let started = Instant::now();
        // The write carries the resourceVersion read: had the candidate taken the lease, a 409.
        leases
            .replace(LEASE, &PostParams::default(), &lease)
            .await
            .expect("other renews its lease");
        last_renewal = started;
        renewals += 1;
    }
    let stopped = Instant::now();
    assert!(!took.is_finished(), "the candidate never took the renewed lease");

    // other stops renewing: its last record may only be taken once it has aged a lease duration of
    // the candidate's time, and the candidate first saw it after that last renewal was sent.
    let took = tokio::time::timeout(CONVERGE, took)
        .await
        .expect("the candidate takes the abandoned lease")
        .expect("the candidate's task");
    eprintln!(
        "{renewals} renewals; the candidate took the lease {:?} after the last one",
        took - last_renewal
    );
    assert!(
        took >= last_renewal + DURATION,
        "not before the unchanged record had aged {DURATION:?}: {:?}",
        took - last_renewal
    );
    assert!(
        took <= stopped + DURATION + Duration::from_secs(10),
        "soon after it expired: {:?} after the last renewal",
        took - last_renewal
    );
    assert_eq!(holder(&leases).await.as_deref(), Some("candidate"));
}
