//! What the tests of the other workload kinds share (`e2e/tests/kinds.rs`): CRDs from `e2e/fixtures`
//! installed and removed, objects of kinds the harness has no Rust type for (CronJobs in `batch/v1beta1`,
//! Rollouts, the test CRDs) read as JSON, the ConfigMaps a pod template in such an object names, and a
//! CronJob's Jobs made the way the CronJob controller makes them.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::fixtures::configmap_names;
use crate::{TestNamespace, eventually, try_kubectl_in};

/// A file of `e2e/fixtures`.
pub fn fixture(name: &str) -> String {
    format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Installs (or updates) the CRD in fixture `file`, named `crd`, and waits until it is established
/// (served). Tests running at once may install the same CRD: a conflict is tried again.
pub async fn install_crd(file: &str, crd: &str) {
    let path = fixture(file);
    let mut attempts = 0;
    loop {
        let path = path.clone();
        let applied =
            tokio::task::spawn_blocking(move || try_kubectl_in(None, &["apply", "-f", &path], None))
                .await
                .expect("kubectl apply");
        match applied {
            Ok(_) => break,
            Err(e)
                if attempts < 5 && (e.contains("Conflict") || e.contains("the object has been modified")) =>
            {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("install the CRD {crd}: {e}"),
        }
    }
    // Polled through the API: `kubectl wait` fails at once on a CRD whose status has no conditions yet.
    let client = Client::try_default()
        .await
        .expect("KUBECONFIG points at a cluster");
    let crds = Api::<CustomResourceDefinition>::all(client);
    eventually(&format!("the CRD {crd} to be established"), || async {
        let crd = crds.get_opt(crd).await.ok()??;
        let conditions = crd.status?.conditions?;
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
}

/// Deletes the CRD `crd` (and every object of its kind) and waits until it is gone.
pub async fn remove_crd(crd: &str) {
    let crd = crd.to_string();
    tokio::task::spawn_blocking(move || {
        try_kubectl_in(
            None,
            &[
                "delete",
                "crd",
                &crd,
                "--ignore-not-found",
                "--wait=true",
                "--timeout=60s",
            ],
            None,
        )
    })
    .await
    .expect("kubectl delete")
    .unwrap_or_else(|e| panic!("remove the CRD: {e}"));
}

/// A namespaced resource of `group/version`, kind `kind`, plural `plural`.
pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// CronJobs in the version the server serves: `batch/v1` from Kubernetes 1.21, else `batch/v1beta1`
/// (the local control plane, v1.20).
pub async fn cronjob_resource(client: &Client) -> ApiResource {
    let v1 = GroupVersionKind::gvk("batch", "v1", "CronJob");
    match kube::discovery::pinned_kind(client, &v1).await {
        Ok((resource, _)) => resource,
        Err(_) => resource("batch", "v1beta1", "CronJob", "cronjobs"),
    }
}

impl TestNamespace {
    /// The objects of `resource` in this namespace.
    pub fn dynamic(&self, resource: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.name, resource)
    }
}

/// Creates `object` (JSON, with its apiVersion and kind) through the API. Objects of a CRD just
/// installed are made so rather than with kubectl, whose cached discovery may not know the kind yet.
pub async fn create(api: &Api<DynamicObject>, object: Value) -> DynamicObject {
    let object: DynamicObject = serde_json::from_value(object).expect("an object with apiVersion and kind");
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", object.name_any()))
}

/// The ConfigMaps the pod spec at JSON pointer `pod_spec` of `object` names (empty if there is none).
pub fn names_at(object: &Value, pod_spec: &str) -> BTreeSet<String> {
    object
        .pointer(pod_spec)
        .and_then(|spec| serde_json::from_value::<PodSpec>(spec.clone()).ok())
        .map(|spec| configmap_names(&spec))
        .unwrap_or_default()
}

/// Where a CronJob keeps its pod spec.
pub const CRONJOB_POD_SPEC: &str = "/spec/jobTemplate/spec/template/spec";

/// Creates Job `name` from the CronJob `cronjob` as the CronJob controller does when the schedule fires:
/// the job template's labels, annotations and spec, and a controller ownerReference to the CronJob.
pub async fn job_from_cronjob(ns: &TestNamespace, cronjob: &DynamicObject, name: &str) -> Job {
    let template = &cronjob.data["spec"]["jobTemplate"];
    let api_version = cronjob
        .types
        .as_ref()
        .map(|t| t.api_version.clone())
        .expect("a CronJob read from the API has its apiVersion");
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": template["metadata"]["labels"],
            "annotations": template["metadata"]["annotations"],
            "ownerReferences": [{
                "apiVersion": api_version,
                "kind": "CronJob",
                "name": cronjob.name_any(),
                "uid": cronjob.uid().expect("a stored CronJob has a uid"),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": template["spec"],
    });
    let job: Job = serde_json::from_value(job).expect("a Job made of a CronJob's job template");
    ns.api::<Job>()
        .create(&PostParams::default(), &job)
        .await
        .expect("create the Job")
}
