//! Leader election against a mocked API server, on tokio's paused clock: a leader whose API server
//! stops answering steps down within its renew deadline, before its lease could expire, and a release
//! on the way out cannot hang.

use std::time::Duration;

use cmset_controller::platform::leader::{Elector, LeaseConfig};
use http::{Request, Response};
use kube::Client;
use kube::client::Body;

fn config() -> LeaseConfig {
    LeaseConfig::with_duration(
        "cmset-system".into(),
        "cmset-controller".into(),
        "me".into(),
        Duration::from_secs(15),
    )
}

/// A client whose API server accepts connections and never answers (SIGSTOPped, say).
fn frozen_client() -> (Client, tower_test::mock::Handle<Request<Body>, Response<Body>>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), handle)
}

#[test]
fn the_defaults_are_client_go_s() {
    let c = config();
    assert_eq!(c.duration, Duration::from_secs(15));
    assert_eq!(c.renew_deadline, Duration::from_secs(10));
    assert_eq!(c.retry_period, Duration::from_secs(2));
    assert!(
        c.renew_deadline < c.duration,
        "a leader steps down before a standby may take over"
    );
}

/// The lease as the API server returns it: held by this test's elector.
fn our_lease() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "cmset-controller", "namespace": "cmset-system", "resourceVersion": "1"},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15},
    })
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_api_server_freezes_steps_down_within_its_renew_deadline() {
    let (client, mut handle) = frozen_client();
    // The API server answers the two requests that take the lease (read, write), then freezes.
    let server = tokio::spawn(async move {
        let mut unanswered = Vec::new();
        for answered in 0.. {
            let Some((_, send)) = handle.next_request().await else {
                break;
            };
            if answered < 2 {
                send.send_response(Response::new(Body::from(
                    serde_json::to_vec(&our_lease()).unwrap(),
                )));
            } else {
                unanswered.push(send);
            }
        }
    });
    let elector = Elector::new(client, config());
    let started = tokio::time::Instant::now();
    elector.acquire().await;
    elector.hold().await;
    drop(elector);
    server.abort();
    let held = started.elapsed();
    assert!(
        held >= config().renew_deadline,
        "not before the deadline: {held:?}"
    );
    assert!(
        held < config().renew_deadline + config().retry_period,
        "stepped down at once after the deadline, long before the lease expires: {held:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn releasing_against_a_frozen_api_server_gives_up_quickly() {
    let (client, _handle) = frozen_client();
    let elector = Elector::new(client, config());
    let started = tokio::time::Instant::now();
    elector.release().await;
    assert!(
        started.elapsed() <= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewals_succeed_keeps_leading() {
    let (client, mut handle) = frozen_client();
    // An API server that answers: the lease is ours, and each renewal is accepted.
    let server = tokio::spawn(async move {
        let mut renewals = 0;
        while let Some((request, send)) = handle.next_request().await {
            let lease = our_lease();
            if request.method() == http::Method::PUT {
                renewals += 1;
            }
            send.send_response(Response::new(Body::from(serde_json::to_vec(&lease).unwrap())));
        }
        renewals
    });
    let elector = Elector::new(client, config());
    elector.acquire().await;
    let held = tokio::time::timeout(Duration::from_secs(60), elector.hold()).await;
    assert!(
        held.is_err(),
        "still leading after a minute of successful renewals"
    );
    drop(elector);
    let renewals = server.await.unwrap();
    assert!(
        (25..=31).contains(&renewals),
        "one renewal every retry period: {renewals}"
    );
}
