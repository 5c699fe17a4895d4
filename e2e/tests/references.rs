//! Every form in which a pod template can name a ConfigMap, on a real API server: all references to a
//! set move to its current revision together, in one rollout, while references to anything else (an
//! unrelated ConfigMap, a Secret, even one with the set's name) stay exactly as written, and workloads
//! that did not opt in are never touched.

use std::collections::BTreeMap;
use std::time::Duration;

use cmset_e2e::fixtures::{self, DeploymentYaml, Reads, rollout_status, set_yaml};
use cmset_e2e::k8s_openapi::api::apps::v1::Deployment;
use cmset_e2e::k8s_openapi::api::core::v1::ConfigMap;
use cmset_e2e::kube::ResourceExt;
use cmset_e2e::{Operator, TestNamespace, eventually, kustomize_name, stays};
use serde_json::Value;

/// A ConfigMap that exists and has nothing to do with cmset, and a Secret that has the set's name: a
/// reference to either must never be rewritten.
const NEIGHBOURS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: unrelated
data:
  U: "u"
---
apiVersion: v1
kind: Secret
metadata:
  name: app-config
stringData:
  S: "s"
"#;

/// The container block used for both `initContainers` and `containers`: every env form, each pointing
/// at the set, at the unrelated ConfigMap and at the Secret.
fn container(name: &str) -> String {
    format!(
        r#"
        - name: {name}
          image: registry.k8s.io/pause:3.9
          env:
            - name: FROM_SET
              valueFrom:
                configMapKeyRef: {{name: app-config, key: A}}
            - name: FROM_UNRELATED
              valueFrom:
                configMapKeyRef: {{name: unrelated, key: U}}
            - name: FROM_SECRET
              valueFrom:
                secretKeyRef: {{name: app-config, key: S}}
          envFrom:
            - configMapRef: {{name: app-config}}
            - configMapRef: {{name: unrelated}}
            - secretRef: {{name: app-config}}"#
    )
}

/// A Deployment reading `app-config` in every form. `opt_in` decides whether it carries the label.
fn deployment_yaml(name: &str, opt_in: bool) -> String {
    let pod_spec = format!(
        r#"
      initContainers:{init}
      containers:{app}
      volumes:
        - name: set
          configMap: {{name: app-config}}
        - name: projected
          projected:
            sources:
              - configMap: {{name: app-config}}
              - configMap: {{name: unrelated}}
              - secret: {{name: app-config}}
        - name: unrelated
          configMap: {{name: unrelated}}
        - name: secret
          secret: {{secretName: app-config}}
"#,
        init = container("init"),
        app = container("app"),
    );
    DeploymentYaml::with_pod_spec(name, &pod_spec)
        .opted_in(opt_in)
        .yaml()
}

/// Every place in [`deployment_yaml`] that names the set (relative to the pod spec).
const SET_PATHS: [&str; 6] = [
    "/volumes/0/configMap/name",
    "/volumes/1/projected/sources/0/configMap/name",
    "/initContainers/0/env/0/valueFrom/configMapKeyRef/name",
    "/initContainers/0/envFrom/0/configMapRef/name",
    "/containers/0/env/0/valueFrom/configMapKeyRef/name",
    "/containers/0/envFrom/0/configMapRef/name",
];

/// Every place in [`deployment_yaml`] that names something else, with what it names.
const OTHER_PATHS: [(&str, &str); 12] = [
    ("/volumes/1/projected/sources/1/configMap/name", "unrelated"),
    ("/volumes/1/projected/sources/2/secret/name", "app-config"),
    ("/volumes/2/configMap/name", "unrelated"),
    ("/volumes/3/secret/secretName", "app-config"),
    (
        "/initContainers/0/env/1/valueFrom/configMapKeyRef/name",
        "unrelated",
    ),
    (
        "/initContainers/0/env/2/valueFrom/secretKeyRef/name",
        "app-config",
    ),
    ("/initContainers/0/envFrom/1/configMapRef/name", "unrelated"),
    ("/initContainers/0/envFrom/2/secretRef/name", "app-config"),
    ("/containers/0/env/1/valueFrom/configMapKeyRef/name", "unrelated"),
    ("/containers/0/env/2/valueFrom/secretKeyRef/name", "app-config"),
    ("/containers/0/envFrom/1/configMapRef/name", "unrelated"),
    ("/containers/0/envFrom/2/secretRef/name", "app-config"),
];

fn pod_spec_json(d: &Deployment) -> Value {
    serde_json::to_value(&d.spec.as_ref().expect("spec").template.spec).expect("pod spec to JSON")
}

/// The value at every path of [`SET_PATHS`].
fn set_refs(d: &Deployment) -> BTreeMap<&'static str, String> {
    let spec = pod_spec_json(d);
    SET_PATHS
        .iter()
        .map(|p| {
            let name = spec.pointer(p).and_then(Value::as_str).unwrap_or("<missing>");
            (*p, name.to_string())
        })
        .collect()
}

fn all_at(d: &Deployment, revision: &str) -> bool {
    set_refs(d).values().all(|n| n == revision)
}

/// Asserts each set reference names `revision`, path by path, and everything else is as written.
fn assert_refs(d: &Deployment, revision: &str) {
    let spec = pod_spec_json(d);
    for path in SET_PATHS {
        assert_eq!(
            spec.pointer(path).and_then(Value::as_str),
            Some(revision),
            "the set reference at {path} of Deployment {} names the current revision",
            d.name_any()
        );
    }
    for (path, name) in OTHER_PATHS {
        assert_eq!(
            spec.pointer(path).and_then(Value::as_str),
            Some(name),
            "the reference at {path} of Deployment {} (not to the set) stays as written",
            d.name_any()
        );
    }
}

fn template_label(d: &Deployment, key: &str) -> Option<String> {
    let metadata = d.spec.as_ref()?.template.metadata.as_ref()?;
    metadata.labels.as_ref()?.get(key).cloned()
}

/// The pod spec of `untouched` (the same YAML as web, never rewritten) with every set reference naming
/// `revision`: exactly what web's must be, field for field.
fn rewritten(untouched: &Deployment, revision: &str) -> Value {
    let mut spec = pod_spec_json(untouched);
    for path in SET_PATHS {
        *spec
            .pointer_mut(path)
            .expect("the path exists in the untouched spec") = Value::from(revision);
    }
    spec
}

/// Names of the workloads in the set's status.
async fn listed_workloads(ns: &TestNamespace) -> Vec<String> {
    let status = ns.set("app-config").await.status.unwrap_or_default();
    status.workloads.iter().map(|w| w.name.clone()).collect()
}

/// How many times a Deployment has rolled, three ways: the spec writes (`metadata.generation`), the
/// ReplicaSets it owns, and `deployment.kubernetes.io/revision`. The generation also counts writes
/// that land before the Deployment controller makes a ReplicaSet of the one in between.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rollouts {
    generation: i64,
    replica_sets: usize,
    revision: u64,
}

impl Rollouts {
    /// One more rollout than `self`.
    fn next(&self) -> Self {
        Self {
            generation: self.generation + 1,
            replica_sets: self.replica_sets + 1,
            revision: self.revision + 1,
        }
    }
}

async fn rollouts(ns: &TestNamespace, name: &str) -> Rollouts {
    let d = ns.deployment(name).await;
    let uid = d.uid().expect("uid");
    let replica_sets = ns
        .replica_sets()
        .await
        .iter()
        .filter(|rs| rs.owner_references().iter().any(|o| o.uid == uid))
        .count();
    let revision = d
        .annotations()
        .get("deployment.kubernetes.io/revision")
        .and_then(|r| r.parse().ok())
        .expect("a numeric deployment.kubernetes.io/revision");
    Rollouts {
        generation: d.metadata.generation.expect("generation"),
        replica_sets,
        revision,
    }
}

/// The Deployment controller has nothing more to write about it: its status describes its spec and the
/// rollout is complete. Only then are its resourceVersion and generation a fair baseline.
async fn settled(ns: &TestNamespace, name: &str) -> Deployment {
    rollout_status(ns, &format!("deployment/{name}")).await;
    eventually(&format!("Deployment {name} to settle"), || async {
        let d = ns.deployment(name).await;
        let status = d.status.as_ref()?;
        let complete =
            status.observed_generation == d.metadata.generation
                && status.conditions.iter().flatten().any(|c| {
                    c.type_ == "Progressing" && c.reason.as_deref() == Some("NewReplicaSetAvailable")
                });
        complete.then_some(d)
    })
    .await
}

#[tokio::test]
async fn every_reference_form_moves_in_one_rollout_and_nothing_else_does() {
    let ns = TestNamespace::new("refs").await;
    let _operator = Operator::start(&ns.name).await;
    let v1 = kustomize_name("app-config", &[("A", "1")]);
    let v2 = kustomize_name("app-config", &[("A", "2")]);

    ns.apply(NEIGHBOURS);
    ns.apply(&set_yaml("app-config", &[("A", "1")], None));
    ns.apply(&deployment_yaml("web", true));
    ns.apply(&deployment_yaml("bystander", false));

    let web = eventually(
        "every set reference of web to name the first revision",
        || async {
            let d = ns.deployment("web").await;
            all_at(&d, &v1).then_some(d)
        },
    )
    .await;
    assert_refs(&web, &v1);
    assert_eq!(
        template_label(&web, "cmset.dev/managed").as_deref(),
        Some("true"),
        "cmset labels the pod template it rewrote"
    );
    let web = settled(&ns, "web").await;
    assert_refs(&web, &v1);

    let bystander = settled(&ns, "bystander").await;
    assert!(
        set_refs(&bystander).values().all(|n| n == "app-config"),
        "a Deployment without the opt-in label keeps the bare set name: {:?}",
        set_refs(&bystander)
    );
    assert_eq!(
        listed_workloads(&ns).await,
        ["web"],
        "only the opted-in Deployment is listed in status.workloads"
    );
    assert_eq!(
        pod_spec_json(&web),
        rewritten(&bystander, &v1),
        "the opted-in pod spec differs from the identical, untouched one only at the set references"
    );

    // A content change moves every reference again, in one rollout.
    let before = rollouts(&ns, "web").await;
    ns.apply(&set_yaml("app-config", &[("A", "2")], None));
    eventually(
        "every set reference of web to name the second revision",
        || async { all_at(&ns.deployment("web").await, &v2).then_some(()) },
    )
    .await;
    let web = settled(&ns, "web").await;
    assert_refs(&web, &v2);
    assert_eq!(
        pod_spec_json(&web),
        rewritten(&bystander, &v2),
        "after the change, the pod spec still differs from the untouched one only at the set references"
    );
    let one_more = before.next();
    assert_eq!(
        rollouts(&ns, "web").await,
        one_more,
        "all references moved in one rollout: one spec write, one new ReplicaSet, one new deployment revision"
    );
    stays(
        "web has rolled exactly once for the content change",
        Duration::from_secs(2),
        || async { rollouts(&ns, "web").await == one_more },
    )
    .await;
    let new_rs = ns
        .replica_sets()
        .await
        .into_iter()
        .find(|rs| {
            rs.annotations().get("deployment.kubernetes.io/revision") == Some(&one_more.revision.to_string())
                && rs
                    .owner_references()
                    .iter()
                    .any(|o| Some(&o.uid) == web.metadata.uid.as_ref())
        })
        .expect("the new ReplicaSet of web");
    let rs_spec = serde_json::to_value(&new_rs.spec.unwrap().template.unwrap().spec).unwrap();
    for path in SET_PATHS {
        assert_eq!(
            rs_spec.pointer(path).and_then(Value::as_str),
            Some(v2.as_str()),
            "the one new ReplicaSet has every reference at the second revision ({path})"
        );
    }

    // The Deployment that did not opt in was never touched.
    let after = ns.deployment("bystander").await;
    assert_eq!(
        after.metadata.generation, bystander.metadata.generation,
        "the Deployment without the opt-in label keeps its generation"
    );
    assert_eq!(
        after.resource_version(),
        bystander.resource_version(),
        "the Deployment without the opt-in label was not written to at all"
    );
    assert_eq!(
        pod_spec_json(&after),
        pod_spec_json(&bystander),
        "the Deployment without the opt-in label keeps its pod template"
    );
    assert!(
        after
            .managed_fields()
            .iter()
            .all(|f| f.manager.as_deref() != Some("cmset-controller")),
        "cmset never wrote to the Deployment without the opt-in label"
    );
    assert_eq!(
        listed_workloads(&ns).await,
        ["web"],
        "the Deployment without the opt-in label is not listed in status.workloads"
    );

    // The ConfigMap and Secret cmset does not own are as they were.
    let unrelated: ConfigMap = ns.api::<ConfigMap>().get("unrelated").await.unwrap();
    assert!(
        unrelated.owner_references().is_empty() && !unrelated.labels().contains_key("cmset.dev/set"),
        "the unrelated ConfigMap is not adopted"
    );
}

/// Reads set `alpha` through envFrom and set `beta` as a volume.
fn two_sets_deployment() -> String {
    fixtures::deployment_yaml("both", &[Reads::EnvFrom("alpha"), Reads::Volume("beta")])
}

fn both_refs(d: &Deployment) -> (String, String) {
    let spec = pod_spec_json(d);
    let at = |p: &str| {
        spec.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (
        at("/containers/0/envFrom/0/configMapRef/name"),
        at("/volumes/0/configMap/name"),
    )
}

#[tokio::test]
async fn two_sets_changed_in_one_apply_roll_once() {
    let ns = TestNamespace::new("twosets").await;
    let _operator = Operator::start(&ns.name).await;
    let a1 = kustomize_name("alpha", &[("A", "1")]);
    let b1 = kustomize_name("beta", &[("A", "1")]);
    let a2 = kustomize_name("alpha", &[("A", "2")]);
    let b2 = kustomize_name("beta", &[("A", "2")]);

    ns.apply(&format!(
        "{}---{}",
        set_yaml("alpha", &[("A", "1")], None),
        set_yaml("beta", &[("A", "1")], None)
    ));
    ns.apply(&two_sets_deployment());
    eventually("the Deployment to name both first revisions", || async {
        (both_refs(&ns.deployment("both").await) == (a1.clone(), b1.clone())).then_some(())
    })
    .await;
    settled(&ns, "both").await;

    let before = rollouts(&ns, "both").await;
    // One `kubectl apply` of one YAML that changes both sets.
    ns.apply(&format!(
        "{}---{}",
        set_yaml("alpha", &[("A", "2")], None),
        set_yaml("beta", &[("A", "2")], None)
    ));
    eventually("the Deployment to name both second revisions", || async {
        (both_refs(&ns.deployment("both").await) == (a2.clone(), b2.clone())).then_some(())
    })
    .await;
    settled(&ns, "both").await;
    let one_more = before.next();
    assert_eq!(
        rollouts(&ns, "both").await,
        one_more,
        "two sets changed in one apply roll the Deployment once (one spec write, one new ReplicaSet, one new \
         deployment revision)"
    );
    stays(
        "the Deployment has rolled exactly once",
        Duration::from_secs(2),
        || async { rollouts(&ns, "both").await == one_more },
    )
    .await;
}
