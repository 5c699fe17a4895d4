//! StatefulSets and DaemonSets, on a real API server: cmset moves them to the current revision, rolls
//! them on a content change, respects `kubectl rollout undo` (Pinned), and keeps the revisions their
//! ControllerRevisions name, which become extra owners of those revision ConfigMaps.

use std::collections::BTreeSet;
use std::time::Duration;

use cmset_e2e::cmset_api::WorkloadState;
use cmset_e2e::fixtures::{
    Reads, app_config_revision, app_config_yaml, configmap_names, live_pods, pod_spec_yaml, rollout_status,
    set_ready,
};
use cmset_e2e::k8s_openapi::api::apps::v1::ControllerRevision;
use cmset_e2e::k8s_openapi::api::core::v1::{ConfigMap, PodSpec};
use cmset_e2e::kube::ResourceExt;
use cmset_e2e::kube::api::ListParams;
use cmset_e2e::{Operator, TestNamespace, eventually, stays};

fn set_yaml(version: &str) -> String {
    // revisionHistoryLimit 0: an old revision survives only because something still uses it.
    app_config_yaml(version, Some(0))
}

/// What both workloads' pods do: read the set through envFrom and as a volume.
fn pod_spec() -> String {
    pod_spec_yaml(&[Reads::EnvFrom("app-config"), Reads::Volume("app-config")])
}

fn statefulset_yaml() -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  labels:
    cmset.dev/enabled: "true"
spec:
  replicas: 2
  serviceName: db
  podManagementPolicy: Parallel
  updateStrategy:
    type: RollingUpdate
  selector:
    matchLabels: {{app: db}}
  template:
    metadata:
      labels: {{app: db}}
    spec:{pod}"#,
        pod = pod_spec(),
    )
}

fn daemonset_yaml() -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
  labels:
    cmset.dev/enabled: "true"
spec:
  updateStrategy:
    type: RollingUpdate
  selector:
    matchLabels: {{app: agent}}
  template:
    metadata:
      labels: {{app: agent}}
    spec:{pod}"#,
        pod = pod_spec(),
    )
}

/// A workload kind under test: what kubectl calls it, what the set's status calls it, its manifest.
#[derive(Clone, Copy)]
struct Kind {
    kubectl: &'static str,
    status: &'static str,
    name: &'static str,
    yaml: fn() -> String,
}

const STATEFULSET: Kind = Kind {
    kubectl: "statefulset",
    status: "StatefulSet",
    name: "db",
    yaml: statefulset_yaml,
};

const DAEMONSET: Kind = Kind {
    kubectl: "daemonset",
    status: "DaemonSet",
    name: "agent",
    yaml: daemonset_yaml,
};

impl Kind {
    fn target(&self) -> String {
        format!("{}/{}", self.kubectl, self.name)
    }

    async fn pod_spec(&self, ns: &TestNamespace) -> PodSpec {
        let template = match self.kubectl {
            "statefulset" => ns.statefulset(self.name).await.spec.unwrap().template,
            _ => ns.daemonset(self.name).await.spec.unwrap().template,
        };
        template.spec.expect("a pod spec")
    }

    async fn uid(&self, ns: &TestNamespace) -> String {
        match self.kubectl {
            "statefulset" => ns.statefulset(self.name).await.uid(),
            _ => ns.daemonset(self.name).await.uid(),
        }
        .expect("uid")
    }

    /// The ConfigMaps the workload's template names (envFrom and volume).
    async fn names(&self, ns: &TestNamespace) -> BTreeSet<String> {
        configmap_names(&self.pod_spec(ns).await)
    }

    /// Waits until both references name `revision`.
    async fn reaches(&self, ns: &TestNamespace, revision: &str, what: &str) {
        let want = BTreeSet::from([revision.to_string()]);
        eventually(&format!("{} {what}", self.target()), || async {
            (self.names(ns).await == want).then_some(())
        })
        .await;
        let spec = self.pod_spec(ns).await;
        let env_from = spec.containers[0].env_from.as_ref().unwrap()[0]
            .config_map_ref
            .as_ref()
            .unwrap()
            .name
            .clone();
        let volume = spec.volumes.as_ref().unwrap()[0]
            .config_map
            .as_ref()
            .unwrap()
            .name
            .clone();
        assert_eq!(env_from, revision, "{}: envFrom names {revision}", self.target());
        assert_eq!(volume, revision, "{}: the volume names {revision}", self.target());
    }
}

/// The ConfigMap names of the workload's pods that are not being deleted.
async fn pod_names(ns: &TestNamespace, app: &str) -> Vec<BTreeSet<String>> {
    live_pods(ns)
        .await
        .iter()
        .filter(|p| p.labels().get("app").map(String::as_str) == Some(app))
        .map(|p| configmap_names(p.spec.as_ref().unwrap()))
        .collect()
}

/// The ControllerRevisions of the workload `owner_uid`, by name.
async fn controller_revisions(ns: &TestNamespace, owner_uid: &str) -> BTreeSet<String> {
    ns.api::<ControllerRevision>()
        .list(&ListParams::default())
        .await
        .expect("list ControllerRevisions")
        .items
        .iter()
        .filter(|cr| cr.owner_references().iter().any(|o| o.uid == owner_uid))
        .map(|cr| cr.name_any())
        .collect()
}

/// Waits until the revision ConfigMap `revision` is owned by what keeps it for the workload once the
/// set is gone: the workload itself (a revision made while it read the set) or one of its
/// ControllerRevisions; returns that owner as `kind/name`.
async fn owned_for(ns: &TestNamespace, kind: Kind, revision: &str) -> String {
    let uid = kind.uid(ns).await;
    let what = format!(
        "revision {revision} to be owned by {} or one of its ControllerRevisions",
        kind.target()
    );
    eventually(&what, || async {
        let cm: ConfigMap = ns.api::<ConfigMap>().get(revision).await.ok()?;
        let ours = controller_revisions(ns, &uid).await;
        cm.owner_references()
            .iter()
            .find(|o| o.uid == uid || (o.kind == "ControllerRevision" && ours.contains(&o.name)))
            .map(|o| {
                assert_eq!(
                    o.controller,
                    Some(false),
                    "an extra owner is never the controller"
                );
                format!("{}/{}", o.kind, o.name)
            })
    })
    .await
}

async fn state_of(ns: &TestNamespace, kind: Kind) -> Option<(WorkloadState, String)> {
    let status = ns.set("app-config").await.status?;
    let w = status
        .workloads
        .iter()
        .find(|w| w.kind == kind.status && w.name == kind.name)?;
    Some((w.state, w.revision.clone()))
}

async fn follows_rollout_and_undo(kind: Kind, short: &str) {
    let ns = TestNamespace::new(short).await;
    let _operator = Operator::start(&ns.name).await;
    let v1 = app_config_revision("1");
    let v2 = app_config_revision("2");
    let v3 = app_config_revision("3");

    ns.apply(&set_yaml("1"));
    set_ready(&ns, "app-config").await;
    ns.apply(&(kind.yaml)());
    kind.reaches(&ns, &v1, "to name the first revision").await;
    rollout_status(&ns, &kind.target()).await;
    eventually("the pods to read the first revision", || async {
        let pods = pod_names(&ns, kind.name).await;
        (!pods.is_empty() && pods.iter().all(|p| *p == BTreeSet::from([v1.clone()]))).then_some(())
    })
    .await;
    assert_eq!(
        state_of(&ns, kind).await,
        Some((WorkloadState::Current, v1.clone())),
        "the set reports {} on the first revision",
        kind.target()
    );

    // A content change rolls the workload.
    ns.apply(&set_yaml("2"));
    kind.reaches(&ns, &v2, "to roll to the second revision").await;
    rollout_status(&ns, &kind.target()).await;
    eventually("the pods to read the second revision", || async {
        let pods = pod_names(&ns, kind.name).await;
        (!pods.is_empty() && pods.iter().all(|p| *p == BTreeSet::from([v2.clone()]))).then_some(())
    })
    .await;

    // Nothing but the workload's ControllerRevision uses the first revision now, and the history limit
    // is 0: it is kept anyway, because that ControllerRevision names it (and the workload or it owns it).
    let owner = owned_for(&ns, kind, &v1).await;
    owned_for(&ns, kind, &v2).await;
    stays(
        "the first revision is kept while a ControllerRevision names it",
        Duration::from_secs(2),
        || async { ns.api::<ConfigMap>().get(&v1).await.is_ok() },
    )
    .await;
    let history = ns.set("app-config").await.status.unwrap().history;
    let first = history.iter().find(|h| h.name == v1);
    assert!(
        first.is_some_and(|h| h.in_use),
        "status.history lists the first revision as in use (owned by {owner}): {history:?}"
    );

    // `kubectl rollout undo` returns to the first revision, and cmset leaves it there.
    ns.kubectl(&["rollout", "undo", &kind.target()]);
    kind.reaches(&ns, &v1, "to be back on the first revision after the undo")
        .await;
    rollout_status(&ns, &kind.target()).await;
    eventually(
        "the set to report the workload Pinned to the first revision",
        || async { (state_of(&ns, kind).await == Some((WorkloadState::Pinned, v1.clone()))).then_some(()) },
    )
    .await;
    let want_v1 = BTreeSet::from([v1.clone()]);
    stays(
        "the rolled-back workload stays on the first revision",
        Duration::from_secs(4),
        || async { kind.names(&ns).await == want_v1 },
    )
    .await;
    let pods = pod_names(&ns, kind.name).await;
    assert!(
        !pods.is_empty() && pods.iter().all(|p| *p == want_v1),
        "the pods of {} run the first revision after the undo: {pods:?}",
        kind.target()
    );
    assert_eq!(
        state_of(&ns, kind).await,
        Some((WorkloadState::Pinned, v1.clone())),
        "still reported Pinned"
    );
    let set = ns.set("app-config").await;
    let ready = set.condition("Ready").expect("a Ready condition");
    assert_eq!(
        ready.status, "True",
        "a pinned workload does not make the set unready: {ready:?}"
    );
    for revision in [&v1, &v2] {
        assert!(
            ns.api::<ConfigMap>().get(revision).await.is_ok(),
            "revision {revision} is kept while the workload's ControllerRevisions name it"
        );
    }

    // The pin lasts until the content changes.
    ns.apply(&set_yaml("3"));
    kind.reaches(&ns, &v3, "to move on to the third revision").await;
    rollout_status(&ns, &kind.target()).await;
    eventually("the set to report the workload Current again", || async {
        (state_of(&ns, kind).await == Some((WorkloadState::Current, v3.clone()))).then_some(())
    })
    .await;
}

#[tokio::test]
async fn statefulset_follows_rollout_and_undo() {
    follows_rollout_and_undo(STATEFULSET, "sts").await;
}

#[tokio::test]
async fn daemonset_follows_rollout_and_undo() {
    follows_rollout_and_undo(DAEMONSET, "ds").await;
}
