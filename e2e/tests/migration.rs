//! Replacing kustomize's configMapGenerator by a ConfigMapSet rolls no pod: the set's revision has the
//! generator's very name, and cmset takes the generator's ConfigMap over as that revision instead of
//! counting a collision. If a GitOps tool then prunes it, cmset puts it back under the same name.

use std::time::Duration;

use cmset_e2e::fixtures::{
    DeploymentYaml, Reads, app_config_revision, app_config_yaml, rollout_status, wait_names,
};
use cmset_e2e::invariants::ready_on;
use cmset_e2e::k8s_openapi::api::core::v1::ConfigMap;
use cmset_e2e::kube::ResourceExt;
use cmset_e2e::{Operator, TestNamespace, eventually, stays};

fn owned_by_the_set(cm: &ConfigMap) -> bool {
    cm.owner_references()
        .iter()
        .any(|o| o.kind == "ConfigMapSet" && o.name == "app-config" && o.controller == Some(true))
        && cm.labels().get("cmset.dev/set").map(String::as_str) == Some("app-config")
        && cm.immutable == Some(true)
}

#[tokio::test]
async fn replacing_a_config_map_generator_by_a_set_rolls_no_pod() {
    let ns = TestNamespace::new("migrate").await;
    let _operator = Operator::start(&ns.name).await;

    // Before: a generator and a Deployment reading it (kustomize rewrites the name to app-config-<hash>).
    let deployment = DeploymentYaml::new(
        "web",
        &[Reads::EnvFrom("app-config"), Reads::Volume("app-config")],
    )
    .replicas(2)
    .yaml();
    ns.apply_kustomization(
        &[("deployment.yaml", deployment)],
        "resources: [deployment.yaml]\nconfigMapGenerator:\n  - name: app-config\n    literals: [APP_VERSION=1]\n",
    );
    let v1 = app_config_revision("1");
    wait_names(&ns, "web", &[&v1]).await;
    rollout_status(&ns, "deployment/web").await;
    let generation = ns.deployment("web").await.metadata.generation;
    assert_eq!(ns.replica_sets().await.len(), 1);

    // The set replaces the generator, with the same content.
    ns.apply(&app_config_yaml("1", None));
    eventually("the set to be Ready on the generator's name", || async {
        ready_on(&ns.set("app-config").await, &v1).then_some(())
    })
    .await;
    let taken: ConfigMap = ns.api::<ConfigMap>().get(&v1).await.unwrap();
    assert!(
        owned_by_the_set(&taken),
        "taken over as the revision: {:?}",
        taken.metadata
    );
    assert_eq!(
        ns.revision_names("app-config").await,
        vec![v1.clone()],
        "no second revision"
    );
    stays("no rollout", Duration::from_secs(5), || async {
        ns.deployment("web").await.metadata.generation == generation && ns.replica_sets().await.len() == 1
    })
    .await;

    // The generator leaves Git and a prune deletes its ConfigMap: the revision comes back, same name.
    ns.kubectl(&["delete", "configmap", &v1]);
    eventually("the revision to be back under the same name", || async {
        let cm = ns.api::<ConfigMap>().get_opt(&v1).await.ok()??;
        (owned_by_the_set(&cm) && cm.metadata.deletion_timestamp.is_none()).then_some(())
    })
    .await;
    assert_eq!(
        ns.deployment("web").await.metadata.generation,
        generation,
        "no workload moved"
    );
    assert_eq!(ns.replica_sets().await.len(), 1, "zero new ReplicaSets");
}
