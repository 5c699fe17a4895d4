//! Upgrading cmset opens no hole in admission. The webhook fails open, so an admission that reaches no
//! replica is stored as written, naming the bare set; a replica that gets SIGTERM therefore reports not
//! ready at once and keeps answering admission for its drain period, until its endpoint has left the
//! Service (here a balancer that probes `/readyz` once a second, as the endpoints controller and
//! kube-proxy would), while its controllers stop and hand the lease over.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cmset_e2e::balancer::{Backend, Balancer};
use cmset_e2e::fixtures::{DeploymentYaml, Reads, app_config_revision, app_config_yaml, template_names};
use cmset_e2e::k8s_openapi::api::apps::v1::Deployment;
use cmset_e2e::k8s_openapi::api::coordination::v1::Lease;
use cmset_e2e::kube::api::{ListParams, PostParams};
use cmset_e2e::kube::{Api, ResourceExt};
use cmset_e2e::webhook::Registration;
use cmset_e2e::{Operator, TestNamespace, eventually, free_port};

/// Longer than the balancer's probe period with room to spare, as the default (10 s) is for a Service.
const DRAIN: Duration = Duration::from_secs(3);

struct Replica {
    operator: Operator,
    backend: Backend,
}

/// A replica of the pair behind `registration`: its own webhook port (reached through the balancer),
/// the pair's Lease, and the shared certificate Secret whose CA it keeps in the registration.
async fn start_replica(
    ns: &TestNamespace,
    registration: &Registration,
    balancer: &Balancer,
    name: &str,
) -> Replica {
    let webhook_port = free_port();
    let args = [
        "--leader-election=true".to_string(),
        "--lease-duration-seconds=6".to_string(),
        format!("--lease-name=cmset-e2e-{}", ns.name),
        format!("--identity={}-{name}", ns.name),
        format!("--webhook-address=127.0.0.1:{webhook_port}"),
        "--webhook-cert-secret=cmset-webhook-tls".to_string(),
        format!("--webhook-configuration={}", registration.name),
        format!("--shutdown-drain-seconds={}", DRAIN.as_secs()),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Not the harness' own registration: the API server calls the balancer, not this replica.
    let operator = Operator::start_without_webhook(&ns.name, &args).await;
    let backend = Backend {
        webhook_port,
        metrics_port: operator.metrics_port,
    };
    balancer.add(backend);
    eventually(&format!("replica {name} to take connections"), || async {
        balancer.ready().contains(&backend).then_some(())
    })
    .await;
    Replica { operator, backend }
}

/// A Deployment created during the test, as the API server stored it at admission.
struct Created {
    name: String,
    at: Instant,
    names: std::collections::BTreeSet<String>,
}

/// Creates opted-in Deployments reading `app-config`, one after another, until `stop`.
async fn write_until(api: Api<Deployment>, writer: usize, stop: Arc<AtomicBool>) -> Vec<Created> {
    let mut created = Vec::new();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let name = format!("web-{writer}-{i}");
        i += 1;
        let yaml = DeploymentYaml::new(&name, &[Reads::EnvFrom("app-config")])
            .replicas(0)
            .yaml();
        let d: Deployment = serde_yaml_ng::from_str(&yaml).expect("the fixture is a Deployment");
        let stored = api
            .create(&PostParams::default(), &d)
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
        created.push(Created {
            name,
            at: Instant::now(),
            names: template_names(&stored),
        });
    }
    created
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_both_replicas_admits_every_workload_on_its_revision() {
    let ns = TestNamespace::new("rolling-restart").await;
    let balancer = Balancer::start();
    let registration = Registration::new(&ns.name, balancer.port);
    let mut old = [
        start_replica(&ns, &registration, &balancer, "a").await,
        start_replica(&ns, &registration, &balancer, "b").await,
    ];
    registration.wait_ready().await;
    ns.apply(&app_config_yaml("1", None));
    let v1 = app_config_revision("1");
    eventually("the revision", || async {
        ns.revision_names("app-config").await.contains(&v1).then_some(())
    })
    .await;

    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| tokio::spawn(write_until(ns.api(), w, stop.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Each old replica in turn: SIGTERM, a new one started and ready, the old one gone.
    let mut drains = Vec::new();
    let mut new = Vec::new();
    for (replica, name) in old.iter_mut().zip(["a2", "b2"]) {
        let terminated = Instant::now();
        replica.operator.terminate();
        new.push(start_replica(&ns, &registration, &balancer, name).await);
        let status = replica
            .operator
            .wait_exit(Duration::from_secs(40))
            .await
            .expect("the old replica exits within its grace period");
        let exited = Instant::now();
        assert!(status.success(), "exit status {status:?}");
        assert!(
            exited - terminated >= DRAIN,
            "it answered admission for the whole drain: exited after {:?}",
            exited - terminated
        );
        balancer.remove(replica.backend);
        drains.push((terminated, exited));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let mut created = Vec::new();
    for w in writers {
        created.extend(w.await.expect("a writer"));
    }

    for (i, (from, to)) in drains.iter().enumerate() {
        let during = created.iter().filter(|c| (*from..*to).contains(&c.at)).count();
        assert!(
            during >= 5,
            "workloads were created while replica {i} drained: {during}"
        );
    }
    let expected = std::collections::BTreeSet::from([v1.clone()]);
    let as_written: Vec<&str> = created
        .iter()
        .filter(|c| c.names != expected)
        .map(|c| c.name.as_str())
        .collect();
    assert!(
        as_written.is_empty(),
        "{} of {} workloads were admitted as written: {as_written:?}",
        as_written.len(),
        created.len()
    );
    // And none was rewritten after it was stored (a spec change would have raised its generation).
    let stored = ns
        .api::<Deployment>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(stored.len(), created.len());
    for d in &stored {
        assert_eq!(template_names(d), expected, "{}", d.name_any());
        assert_eq!(d.metadata.generation, Some(1), "{} was rewritten", d.name_any());
    }
    eprintln!(
        "{} workloads created, {:?} of them during the drains",
        created.len(),
        drains
            .iter()
            .map(|(from, to)| created.iter().filter(|c| (*from..*to).contains(&c.at)).count())
            .collect::<Vec<_>>()
    );

    for replica in &mut new {
        replica.operator.stop().await;
    }
    let leases: Api<Lease> = Api::namespaced(ns.client.clone(), "cmset-system");
    let _ = leases
        .delete(&format!("cmset-e2e-{}", ns.name), &Default::default())
        .await;
}
