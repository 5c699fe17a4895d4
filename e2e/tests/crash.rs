//! The operator is SIGKILLed at random moments during a series of config changes and restarted: the
//! cluster converges with nothing lost, no duplicate revisions, and no workload left pointing at a
//! ConfigMap that does not exist.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cmset_e2e::k8s_openapi::api::core::v1::{ConfigMap, PodSpec};
use cmset_e2e::kube::ResourceExt;
use cmset_e2e::{Operator, TestNamespace, eventually, kustomize_name, stays};

fn set_yaml(version: u32) -> String {
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: app-config
spec:
  template:
    data:
      APP_VERSION: "{version}"
"#
    )
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    cmset.dev/enabled: "true"
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: app
          image: registry.k8s.io/pause:3.9
          envFrom:
            - configMapRef: {name: app-config}
          volumeMounts:
            - {name: config, mountPath: /etc/app}
      volumes:
        - name: config
          configMap: {name: app-config}
"#;

fn configmap_names(spec: &PodSpec) -> BTreeSet<String> {
    let env = spec
        .containers
        .iter()
        .flat_map(|c| c.env_from.iter().flatten())
        .filter_map(|e| e.config_map_ref.as_ref().map(|r| r.name.clone()));
    let volumes = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.config_map.as_ref().map(|c| c.name.clone()));
    env.chain(volumes).collect()
}

/// A cheap pseudo-random delay (the tests need variety, not cryptography).
fn random_delay(seed: &mut u64) -> Duration {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    Duration::from_millis(*seed % 900)
}

#[tokio::test]
async fn killed_at_random_moments_the_operator_converges_with_nothing_lost() {
    let ns = TestNamespace::new("crash").await;
    let mut seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("crash test seed {seed}");
    let mut operator = Operator::start(&ns.name).await;
    ns.apply(&set_yaml(1));
    ns.apply(DEPLOYMENT);
    for version in 2..=7 {
        ns.apply(&set_yaml(version));
        tokio::time::sleep(random_delay(&mut seed)).await;
        operator.kill().await;
        tokio::time::sleep(random_delay(&mut seed)).await;
        operator.restart().await;
    }
    let last = kustomize_name("app-config", &[("APP_VERSION", "7")]);
    eventually("the Deployment to reach the last version", || async {
        let d = ns.deployment("web").await;
        (configmap_names(d.spec.as_ref()?.template.spec.as_ref()?) == BTreeSet::from([last.clone()]))
            .then_some(())
    })
    .await;
    ns.kubectl(&["rollout", "status", "deployment/web", "--timeout=90s"]);
    eventually("the set to be ready on the last version", || async {
        let status = ns.set("app-config").await.status?;
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (ready && status.current_revision.as_deref() == Some(last.as_str())).then_some(())
    })
    .await;

    // No duplicates: one revision per content, distinct numbers, every name kustomize's for its content.
    let revisions = ns.revisions("app-config").await;
    let mut contents = BTreeMap::new();
    let mut numbers = BTreeSet::new();
    for cm in &revisions {
        let version = cm.data.as_ref().unwrap()["APP_VERSION"].clone();
        assert_eq!(
            cm.name_any(),
            kustomize_name("app-config", &[("APP_VERSION", &version)])
        );
        assert!(
            contents.insert(version, cm.name_any()).is_none(),
            "two revisions hold the same content"
        );
        assert!(
            numbers.insert(cm.annotations()["cmset.dev/revision"].clone()),
            "revision numbers repeat"
        );
        assert_eq!(cm.immutable, Some(true));
    }

    // Nothing points at a missing ConfigMap: the Deployment, its ReplicaSets, its Pods.
    let existing: BTreeSet<String> = ns
        .api::<ConfigMap>()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    for rs in ns.replica_sets().await {
        let names = configmap_names(
            rs.spec
                .as_ref()
                .unwrap()
                .template
                .as_ref()
                .unwrap()
                .spec
                .as_ref()
                .unwrap(),
        );
        // The very first ReplicaSet may name the bare set (made before cmset rewrote the template).
        for name in names.iter().filter(|n| *n != "app-config") {
            assert!(
                existing.contains(name),
                "ReplicaSet {} names missing {name}",
                rs.name_any()
            );
        }
    }
    for pod in ns
        .pods()
        .await
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        for name in configmap_names(pod.spec.as_ref().unwrap()) {
            assert!(
                existing.contains(&name),
                "pod {} names missing {name}",
                pod.name_any()
            );
        }
    }

    // And once converged, the operator is quiet.
    let writes = operator.writes();
    stays(
        "no further writes once converged",
        Duration::from_secs(3),
        || async { operator.writes() == writes },
    )
    .await;
}
