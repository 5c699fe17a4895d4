//! Every call to the API server, and nothing else: connect, read the set, list its revisions, read two
//! revision Secrets for a diff, list the workloads of a namespace, list the cluster's ChangeWindows.
//! The plugin only reads, but for the annotations of pause, resume and promote, and the WindowOverride
//! of `promote --override-window`.
//!
//! Workloads are listed for every built-in kind of cmset's table ([`WorkloadKind::BUILT_IN`]), through
//! the dynamic API and the kind's own entry (group, versions preferred first, plural, where its pod
//! template lives), so a kind added to the table is listed here with no change. A kind the server does
//! not serve (Argo Rollouts not installed, CronJob `batch/v1` before Kubernetes 1.21) simply has none
//! ([`not_found`]).
//!
//! A SecretSet's revisions are listed by their metadata only; the only Secrets read in full are the two
//! a diff compares ([`Cluster::secret`]), and no error about a Secret request repeats anything of the
//! answer ([`secret_error`]).

use std::path::Path;

use cmset_api::{ChangeWindow, ConfigMapSet, SecretSet, WindowOverride, labels};
use cmset_core::revisions::naming::set_label_value;
use cmset_core::set::SetKind;
use cmset_core::workloads::observe::{RefNames, WorkloadKind};
use k8s_openapi::api::apps::v1::{ControllerRevision, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, Secret};
use kube::api::{ApiResource, DynamicObject, ListParams, PartialObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::Status;
use kube::{Api, Client, Config, ResourceExt};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::task::JoinSet;

use crate::address::{Address, Lookup, Set, SetId, pick};
use crate::error::Error;
use crate::status::Workload;

/// A WindowOverride created, or found already there.
pub enum Created {
    New(WindowOverride),
    Exists(WindowOverride),
}

/// A client and the namespace commands act in.
pub struct Cluster {
    client: Client,
    pub namespace: String,
}

impl Cluster {
    /// Connects with the given kubeconfig and context, or the usual defaults (`$KUBECONFIG`, then
    /// `~/.kube/config`, then the in-cluster service account). The namespace is `namespace`, else the
    /// context's namespace, else `default`.
    pub async fn connect(
        kubeconfig: Option<&Path>,
        context: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<Self, Error> {
        let options = KubeConfigOptions {
            context: context.map(str::to_string),
            ..KubeConfigOptions::default()
        };
        let config = match (kubeconfig, context) {
            (Some(path), _) => {
                let file = Kubeconfig::read_from(path).map_err(|e| Error::Config(e.to_string()))?;
                Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| Error::Config(e.to_string()))?
            }
            (None, Some(_)) => Config::from_kubeconfig(&options)
                .await
                .map_err(|e| Error::Config(e.to_string()))?,
            // Without a kubeconfig, `infer` falls back to the service account.
            (None, None) => Config::infer().await.map_err(|e| Error::Config(e.to_string()))?,
        };
        let namespace = namespace.map_or_else(|| config.default_namespace.clone(), str::to_string);
        let client = Client::try_from(config).map_err(|e| Error::Config(e.to_string()))?;
        Ok(Self::new(client, namespace))
    }

    /// The client, for the reads of `plan` (see [`crate::plan::gather`]).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A cluster on `client`, acting in `namespace`.
    pub fn new(client: Client, namespace: String) -> Self {
        Self { client, namespace }
    }

    /// The cluster's ChangeWindows, or, when they cannot be listed, a line saying why: they are
    /// optional (the CRD may not be installed, the user may not list them), and `windows` goes on
    /// with the set's own.
    pub async fn change_windows(&self) -> Result<Vec<ChangeWindow>, String> {
        let api: Api<ChangeWindow> = Api::all(self.client.clone());
        let only = "only the set's own windows are shown";
        match api.list(&ListParams::default()).await {
            Ok(list) => Ok(list.items),
            Err(kube::Error::Api(status)) if not_found(&status) => Err(format!(
                "the ChangeWindow API (changewindows.cmset.dev) is not installed: {only}"
            )),
            Err(kube::Error::Api(status)) if status.code == 403 => Err(format!(
                "you may not list ChangeWindows (changewindows.cmset.dev): {only}, and the cluster's may \
                 hold it too"
            )),
            Err(e) => Err(format!(
                "listing ChangeWindows (changewindows.cmset.dev): {e}: {only}"
            )),
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The set the address names, or a clear error when it (or its API) does not exist. A bare name is
    /// looked up as both kinds at once ([`pick`] decides).
    pub async fn set(&self, address: &Address) -> Result<Set, Error> {
        let name = address.name.as_str();
        let ns = self.namespace.as_str();
        match address.kind {
            Some(kind @ SetKind::ConfigMapSet) => {
                let found = self.lookup::<ConfigMapSet>(name).await;
                let found = found.map_err(|e| Error::kube("reading the ConfigMapSet", e))?;
                found.found(SetId::new(kind, name), ns).map(Set::ConfigMap)
            }
            Some(kind @ SetKind::SecretSet) => {
                let found = self.lookup::<SecretSet>(name).await;
                let found = found.map_err(|e| Error::kube("reading the SecretSet", e))?;
                found.found(SetId::new(kind, name), ns).map(Set::Secret)
            }
            None => {
                let (config_map_set, secret_set) =
                    tokio::join!(self.lookup::<ConfigMapSet>(name), self.lookup::<SecretSet>(name));
                let config_map_set = config_map_set.map_err(|e| {
                    Error::kube(
                        "looking for a ConfigMapSet of that name (write secretset/NAME to look for a SecretSet only)",
                        e,
                    )
                });
                let secret_set = secret_set.map_err(|e| {
                    Error::kube(
                        "looking for a SecretSet of that name (write configmapset/NAME to look for a ConfigMapSet only)",
                        e,
                    )
                });
                pick(name, ns, config_map_set, secret_set)
            }
        }
    }

    /// Merge-patches the set's metadata (the annotations `kubectl cmset pause|resume|promote` write).
    /// Patches the set's metadata; its annotations as stored (what admission made of the patch).
    pub async fn patch_set_metadata(
        &self,
        set: &Set,
        patch: &serde_json::Value,
    ) -> Result<std::collections::BTreeMap<String, String>, Error> {
        let params = PatchParams::default();
        let patch = Patch::Merge(patch);
        let result = match set {
            Set::ConfigMap(s) => self
                .api::<ConfigMapSet>()
                .patch_metadata(&s.name_any(), &params, &patch)
                .await
                .map(|o| o.metadata.annotations.unwrap_or_default()),
            Set::Secret(s) => self
                .api::<SecretSet>()
                .patch_metadata(&s.name_any(), &params, &patch)
                .await
                .map(|o| o.metadata.annotations.unwrap_or_default()),
        };
        result.map_err(|e| Error::kube(format!("annotating {}", set.id()), e))
    }

    /// Creates `wanted` (break glass). The API server decides whether the user may: only ClusterRole
    /// cmset-break-glass grants it, and a refusal says so. One of that name already there (the same
    /// rollout let through before: its name is derived from it) is read and returned as `Exists`.
    pub async fn create_window_override(&self, wanted: &WindowOverride) -> Result<Created, Error> {
        let api = self.api::<WindowOverride>();
        let name = wanted.name_any();
        match api.create(&PostParams::default(), wanted).await {
            Ok(stored) => Ok(Created::New(stored)),
            Err(kube::Error::Api(status)) if status.code == 409 => api
                .get(&name)
                .await
                .map(Created::Exists)
                .map_err(|e| Error::kube(format!("reading WindowOverride {name}"), e)),
            Err(kube::Error::Api(status)) if status.code == 403 => Err(Error::Usage(format!(
                "you may not create WindowOverrides (windowoverrides.cmset.dev) in namespace {:?}: letting a \
                 rollout through the change windows needs ClusterRole cmset-break-glass, bound to you \
                 cluster-wide or in that namespace (edit, admin and cmset-edit do not grant it)",
                self.namespace
            ))),
            Err(kube::Error::Api(status)) if not_found(&status) => Err(Error::Usage(
                "the WindowOverride API (windowoverrides.cmset.dev) is not installed in this cluster: \
                 upgrade cmset's CRDs"
                    .to_string(),
            )),
            Err(e) => Err(Error::kube(format!("creating WindowOverride {name}"), e)),
        }
    }

    /// The namespace's WindowOverrides (none when their API is not installed), or, when they cannot be
    /// listed, a line saying why.
    pub async fn window_overrides(&self) -> Result<Vec<WindowOverride>, String> {
        match self.api::<WindowOverride>().list(&ListParams::default()).await {
            Ok(list) => Ok(list.items),
            // Not installed: there are none.
            Err(kube::Error::Api(status)) if not_found(&status) => Ok(Vec::new()),
            Err(kube::Error::Api(status)) if status.code == 403 => {
                Err("you may not list WindowOverrides (windowoverrides.cmset.dev) here".to_string())
            }
            Err(e) => Err(format!(
                "listing WindowOverrides (windowoverrides.cmset.dev): {e}"
            )),
        }
    }

    async fn lookup<K>(&self, name: &str) -> Result<Lookup<K>, kube::Error>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + DeserializeOwned,
    {
        match self.api::<K>().get(name).await {
            Ok(set) => Ok(Lookup::Found(set)),
            // A missing object names itself in the details; a missing API (a Status without a name, or
            // the plain-text 404 of a group the server does not serve) does not.
            Err(kube::Error::Api(status)) if not_found(&status) => {
                if status.details.as_ref().is_some_and(|d| !d.name.is_empty()) {
                    Ok(Lookup::Missing)
                } else {
                    Ok(Lookup::NoApi)
                }
            }
            Err(e) => Err(e),
        }
    }

    /// ConfigMaps carrying the label of ConfigMapSet `set_name`; [`crate::revisions::revisions_of`]
    /// keeps its own.
    pub async fn labelled_config_maps(&self, set_name: &str) -> Result<Vec<ConfigMap>, Error> {
        let list = self
            .api::<ConfigMap>()
            .list(&labelled(set_name))
            .await
            .map_err(|e| Error::kube("listing the revision ConfigMaps", e))?;
        Ok(list.items)
    }

    /// The metadata of the Secrets carrying the label of SecretSet `set_name`: their content is not
    /// read. [`crate::revisions::revisions_of`] keeps the set's own.
    pub async fn labelled_secrets(&self, set_name: &str) -> Result<Vec<PartialObjectMeta<Secret>>, Error> {
        let list = self
            .api::<Secret>()
            .list_metadata(&labelled(set_name))
            .await
            .map_err(|e| secret_error("listing the revision Secrets", e))?;
        Ok(list.items)
    }

    /// The history objects of the namespace made from templates cmset rewrote (ReplicaSets,
    /// ControllerRevisions, Jobs: label `cmset.dev/managed=true`), each as `Kind/name` with the names its
    /// template references: what a rollback can return to. Best effort: a kind that cannot be listed
    /// (not allowed, say) is left out, and `history` shows the owners alone for it.
    pub async fn history_objects(&self) -> Vec<(String, RefNames)> {
        let managed = ListParams::default().labels(&format!("{}=true", labels::MANAGED_TEMPLATE));
        let template_names = |template: Option<&PodSpec>| template.map(RefNames::of).unwrap_or_default();
        let mut found = Vec::new();
        if let Ok(list) = self.api::<ReplicaSet>().list(&managed).await {
            found.extend(list.items.iter().map(|rs| {
                let spec = rs
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.as_ref())
                    .and_then(|t| t.spec.as_ref());
                (format!("ReplicaSet/{}", rs.name_any()), template_names(spec))
            }));
        }
        if let Ok(list) = self.api::<Job>().list(&managed).await {
            found.extend(list.items.iter().map(|job| {
                let spec = job.spec.as_ref().and_then(|s| s.template.spec.as_ref());
                (format!("Job/{}", job.name_any()), template_names(spec))
            }));
        }
        if let Ok(list) = self.api::<ControllerRevision>().list(&managed).await {
            found.extend(list.items.iter().map(|cr| {
                // Its data is the workload's template as a patch: `spec.template.spec`.
                let spec = cr
                    .data
                    .as_ref()
                    .and_then(|d| d.0.pointer("/spec/template/spec"))
                    .and_then(|v| serde_json::from_value::<PodSpec>(v.clone()).ok());
                (
                    format!("ControllerRevision/{}", cr.name_any()),
                    template_names(spec.as_ref()),
                )
            }));
        }
        found
    }

    /// One Secret, in full: only for [`crate::secret_diff::compare`], which keeps its values to itself.
    pub async fn secret(&self, name: &str) -> Result<Secret, Error> {
        self.api::<Secret>()
            .get(name)
            .await
            .map_err(|e| secret_error("reading a revision Secret", e))
    }

    /// Every workload of the namespace, opted in or not, of every built-in kind the server serves. The
    /// kinds are listed at once; the first kind (in table order) that fails for another reason than not
    /// being served makes the error.
    pub async fn workloads(&self) -> Result<Vec<Workload>, Error> {
        let mut lists = JoinSet::new();
        for (at, kind) in WorkloadKind::BUILT_IN.into_iter().enumerate() {
            let (client, namespace) = (self.client.clone(), self.namespace.clone());
            lists.spawn(async move { (at, kind, list_kind(client, &namespace, kind).await) });
        }
        let mut listed = Vec::new();
        while let Some(done) = lists.join_next().await {
            // Nothing aborts these tasks, so a task that did not finish panicked: pass the panic on.
            listed.push(done.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic())));
        }
        listed.sort_by_key(|(at, _, _)| *at);
        let mut out = Vec::new();
        for (_, kind, list) in listed {
            let list = list.map_err(|(version, e)| Error::kube(listing(kind, version), e))?;
            out.extend(list.iter().map(|object| workload(kind, object)));
        }
        Ok(out)
    }
}

/// The objects of `kind` in `namespace`, at the first of its versions the server serves: none when it
/// serves none of them ([`not_found`]; listing in a namespace that does not exist answers an empty
/// list). The error names the version that failed.
async fn list_kind(
    client: Client,
    namespace: &str,
    kind: WorkloadKind,
) -> Result<Vec<DynamicObject>, (&'static str, kube::Error)> {
    let spec = kind.spec();
    let Some(plural) = spec.plural else {
        // A declared kind learns its resource name from discovery; none is built in.
        return Ok(Vec::new());
    };
    for &version in spec.versions {
        let resource = ApiResource {
            group: spec.group.to_string(),
            version: version.to_string(),
            api_version: kind.api_version(version),
            kind: spec.kind.to_string(),
            plural: plural.to_string(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        match api.list(&ListParams::default()).await {
            Ok(list) => return Ok(list.items),
            Err(kube::Error::Api(status)) if not_found(&status) => continue,
            Err(e) => return Err((version, e)),
        }
    }
    Ok(Vec::new())
}

/// Whether the API server answered 404: for a collection, that it does not serve the resource. It says
/// so in one of two ways (recorded in `crate::stand_in`): a group it does not serve at all
/// (`argoproj.io` without Argo Rollouts) gets Go's plain-text `404 page not found`; a resource, or a
/// version, unknown to a group it serves (`batch/v1` CronJobs before 1.21) a `NotFound` Status. kube
/// turns a body that is not a Status into `Error::Api` with the HTTP code and the reason "Failed to
/// parse error data", which `Status::is_not_found` (it looks at the reason only) misses: the code, the
/// HTTP code or the Status's own (which the server sets to it), covers both.
fn not_found(status: &Status) -> bool {
    status.code == 404
}

/// What failed, for an error: `listing CronJobs (batch/v1beta1)`.
fn listing(kind: WorkloadKind, version: &str) -> String {
    format!("listing {kind}s ({})", kind.api_version(version))
}

/// Objects carrying the `cmset.dev/set` label of set `set_name` (either kind: ConfigMaps and Secrets
/// are listed apart).
fn labelled(set_name: &str) -> ListParams {
    ListParams::default().labels(&format!("{}={}", labels::SET, set_label_value(set_name)))
}

/// The reason kube gives a failed answer whose body was not a Kubernetes `Status`; its message is then
/// the raw body.
const UNPARSED_BODY: &str = "Failed to parse error data";

/// An error of a request for Secrets, told without anything the answer held. A `Status` from the API
/// server is the server's own wording, which names objects and never quotes their data; any other body
/// (a proxy's page, a Secret that failed to deserialize, whose error would quote the offending value)
/// is left out. Transport errors never saw a body and are told as they are.
pub fn secret_error(doing: &'static str, e: kube::Error) -> Error {
    let message = match e {
        kube::Error::Api(status) if status.reason == UNPARSED_BODY => format!(
            "the API server answered with HTTP status {} and a body that is not a Kubernetes Status \
             (not shown)",
            status.code
        ),
        kube::Error::Api(status) => format!("{} ({}, HTTP {})", status.message, status.reason, status.code),
        kube::Error::SerdeError(_) | kube::Error::FromUtf8(_) => {
            "the answer could not be read as Secrets (the details are not shown: they could quote a Secret's \
             content)"
                .to_string()
        }
        other => other.to_string(),
    };
    Error::Secret { doing, message }
}

/// A listed object of `kind`, with the pod spec found where its kind keeps it (`None` when there is none
/// there, or it is not a pod spec).
fn workload(kind: WorkloadKind, object: &DynamicObject) -> Workload {
    let metadata = &object.metadata;
    Workload {
        kind,
        name: metadata.name.clone().unwrap_or_default(),
        uid: metadata.uid.clone().unwrap_or_default(),
        labels: metadata.labels.clone().unwrap_or_default(),
        pod_spec: object
            .data
            .pointer(kind.pod_spec().as_str())
            .and_then(|spec| PodSpec::deserialize(spec).ok()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::revisions::fixtures::assert_no_secret_values;
    use crate::stand_in::{
        self, Answer, CRONJOBS, CRONJOBS_V1BETA1, DEPLOYMENTS, JOBS, ROLLOUTS, at, kubernetes_1_20, with,
    };

    #[test]
    fn errors_about_secrets_never_repeat_the_answer() {
        // A body that is not a Secret: serde's own message quotes the value it choked on.
        let bad = serde_json::from_str::<Secret>(r#"{"data": "hunter2-SECRET-VALUE"}"#).unwrap_err();
        assert!(bad.to_string().contains("hunter2-SECRET-VALUE"), "{bad}");
        let err = secret_error("reading a revision Secret", kube::Error::SerdeError(bad)).to_string();
        assert_eq!(
            err,
            "reading a revision Secret: the answer could not be read as Secrets (the details are not \
             shown: they could quote a Secret's content)"
        );

        // An error answer that is not a Status: kube keeps the raw body as the message.
        let body = Status::failure(
            r#"{"data": {"password": "aHVudGVyMi1TRUNSRVQtVkFMVUU="}}"#,
            UNPARSED_BODY,
        )
        .with_code(502);
        let err = secret_error("reading a revision Secret", kube::Error::Api(body.boxed())).to_string();
        assert_no_secret_values(&err);
        assert!(err.contains("HTTP status 502"), "{err}");

        // The API server's own Status is worth showing.
        let forbidden = Status::failure(
            "secrets \"db-abc\" is forbidden: User \"ana\" cannot get resource \"secrets\"",
            "Forbidden",
        )
        .with_code(403);
        let err = secret_error("reading a revision Secret", kube::Error::Api(forbidden.boxed())).to_string();
        assert_eq!(
            err,
            "reading a revision Secret: secrets \"db-abc\" is forbidden: User \"ana\" cannot get resource \
             \"secrets\" (Forbidden, HTTP 403)"
        );
    }

    fn object(name: &str, spec: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"name": name, "namespace": "demo", "uid": format!("{name}-uid"),
                            "labels": {"cmset.dev/enabled": "true"}},
               "spec": spec})
    }

    /// A pod template reading ConfigMap `name`.
    fn template(name: &str) -> serde_json::Value {
        json!({"metadata": {"labels": {"app": "x"}},
               "spec": {"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": name}}]}]}})
    }

    /// Each workload as `Kind/name` and the ConfigMap its pod spec reads.
    fn seen(workloads: &[Workload]) -> Vec<(String, Option<String>)> {
        workloads
            .iter()
            .map(|w| {
                let reads = w.pod_spec.as_ref().and_then(|spec| {
                    spec.containers[0].env_from.as_ref()?[0]
                        .config_map_ref
                        .as_ref()
                        .map(|r| r.name.clone())
                });
                (format!("{}/{}", w.kind, w.name), reads)
            })
            .collect()
    }

    fn sorted(asked: &stand_in::Asked) -> Vec<String> {
        let mut asked = asked.lock().unwrap().clone();
        asked.sort();
        asked
    }

    #[tokio::test]
    async fn workloads_of_every_kind_the_server_serves_and_none_of_the_others() {
        // `argoproj.io` answers the plain-text 404 of a group the server does not serve, `batch/v1`
        // CronJobs the NotFound Status of a resource its group does not have: both are none of a kind.
        let cronjob = object(
            "report",
            json!({"schedule": "*/10 * * * *",
                   "jobTemplate": {"spec": {"template": template("app-cccccccccc")}}}),
        );
        let answers = with(
            kubernetes_1_20(),
            vec![
                at(
                    DEPLOYMENTS,
                    stand_in::list(
                        "apps/v1",
                        vec![object("web", json!({"template": template("app")}))],
                    ),
                ),
                at(CRONJOBS_V1BETA1, stand_in::list("batch/v1beta1", vec![cronjob])),
                at(
                    JOBS,
                    stand_in::list(
                        "batch/v1",
                        vec![object("migrate", json!({"template": template("app-bbbbbbbbbb")}))],
                    ),
                ),
            ],
        );
        let (cluster, asked) = stand_in::start(answers);
        let workloads = cluster.workloads().await.expect("kinds not served are no error");
        assert_eq!(
            seen(&workloads),
            [
                ("Deployment/web".to_string(), Some("app".to_string())),
                ("CronJob/report".to_string(), Some("app-cccccccccc".to_string())),
                ("Job/migrate".to_string(), Some("app-bbbbbbbbbb".to_string())),
            ]
        );
        assert_eq!(workloads[1].uid, "report-uid");
        assert_eq!(
            workloads[1].labels.get("cmset.dev/enabled").map(String::as_str),
            Some("true")
        );
        assert_eq!(
            sorted(&asked),
            [
                "GET /apis/apps/v1/namespaces/demo/daemonsets",
                "GET /apis/apps/v1/namespaces/demo/deployments",
                "GET /apis/apps/v1/namespaces/demo/statefulsets",
                "GET /apis/argoproj.io/v1alpha1/namespaces/demo/rollouts",
                "GET /apis/batch/v1/namespaces/demo/cronjobs",
                "GET /apis/batch/v1/namespaces/demo/jobs",
                "GET /apis/batch/v1beta1/namespaces/demo/cronjobs",
            ],
            "every kind at its versions, preferred first"
        );
    }

    #[tokio::test]
    async fn a_namespace_that_does_not_exist_has_no_workloads() {
        let answers = with(
            kubernetes_1_20(),
            vec![
                at(CRONJOBS, stand_in::empty_list("batch/v1", "CronJob")),
                at(ROLLOUTS, stand_in::empty_list("argoproj.io/v1alpha1", "Rollout")),
            ],
        );
        let (cluster, asked) = stand_in::start(answers);
        assert_eq!(seen(&cluster.workloads().await.unwrap()), []);
        assert_eq!(
            asked.lock().unwrap().len(),
            6,
            "batch/v1 CronJobs served: v1beta1 is not asked"
        );
    }

    #[tokio::test]
    async fn rollouts_and_v1_cronjobs_where_served() {
        let answers = with(
            kubernetes_1_20(),
            vec![
                at(
                    CRONJOBS,
                    stand_in::list(
                        "batch/v1",
                        vec![object(
                            "report",
                            json!({"jobTemplate": {"spec": {"template": template("app")}}}),
                        )],
                    ),
                ),
                at(
                    ROLLOUTS,
                    stand_in::list(
                        "argoproj.io/v1alpha1",
                        vec![
                            object("canary", json!({"template": template("app-ffffffffff")})),
                            // A Rollout whose template is a Deployment's (spec.workloadRef) has none here.
                            object(
                                "by-ref",
                                json!({"workloadRef": {"kind": "Deployment", "name": "web"}}),
                            ),
                        ],
                    ),
                ),
            ],
        );
        let (cluster, asked) = stand_in::start(answers);
        let workloads = cluster.workloads().await.unwrap();
        assert_eq!(
            seen(&workloads),
            [
                ("CronJob/report".to_string(), Some("app".to_string())),
                ("Rollout/canary".to_string(), Some("app-ffffffffff".to_string())),
                ("Rollout/by-ref".to_string(), None),
            ]
        );
        assert!(
            !asked.lock().unwrap().iter().any(|p| p.contains("v1beta1")),
            "batch/v1 served: v1beta1 is not asked"
        );
    }

    #[tokio::test]
    async fn a_kind_the_user_may_not_list_is_an_error_that_names_it() {
        let forbidden = stand_in::status(
            403,
            "Forbidden",
            "rollouts.argoproj.io is forbidden: User \"ana\" cannot list resource \"rollouts\"",
            json!({"group": "argoproj.io", "kind": "rollouts"}),
        );
        let (cluster, _) = stand_in::start(with(kubernetes_1_20(), vec![at(ROLLOUTS, forbidden)]));
        let error = cluster.workloads().await.unwrap_err();
        assert!(error.is_forbidden(), "{error}");
        let text = error.to_string();
        assert!(
            text.starts_with("listing Rollouts (argoproj.io/v1alpha1): ") && text.contains("cannot list"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn any_other_failure_of_a_kind_is_an_error_that_names_it() {
        let internal = stand_in::status(500, "InternalError", "etcd is sad", json!({}));
        // A proxy in front of the server, answering with a page of its own.
        let bad_gateway = Answer::Http {
            code: 502,
            headers: vec![("Content-Type", "text/html")],
            body: "<html>Bad Gateway</html>".to_string(),
        };
        for (kind, answer, told) in [
            (DEPLOYMENTS, internal, "listing Deployments (apps/v1): "),
            (ROLLOUTS, bad_gateway, "listing Rollouts (argoproj.io/v1alpha1): "),
            (
                CRONJOBS_V1BETA1,
                Answer::HangUp,
                "listing CronJobs (batch/v1beta1): ",
            ),
        ] {
            let (cluster, _) = stand_in::start(with(kubernetes_1_20(), vec![at(kind, answer)]));
            let error = cluster.workloads().await.expect_err(told).to_string();
            assert!(error.starts_with(told), "{error}");
        }
    }

    #[tokio::test]
    async fn a_set_api_the_server_does_not_serve_is_told_as_such() {
        let address = |arg: &str| Address::parse(arg).unwrap();
        let no_api = |e: Result<Set, Error>| match e {
            Err(Error::NoApi { kind }) => kind,
            other => panic!("not NoApi: {:?}", other.map(|s| s.id())),
        };
        // No CRD of cmset installed: the group `cmset.dev` is not served.
        let (cluster, _) = stand_in::start(kubernetes_1_20());
        assert_eq!(no_api(cluster.set(&address("app")).await), None);
        assert_eq!(
            no_api(cluster.set(&address("secretset/app")).await),
            Some(SetKind::SecretSet)
        );

        // Only the ConfigMapSet CRD: the group is served, and answers for `secretsets`, which it does
        // not have, as for a group it does not serve (a CRD's group does); no ConfigMapSet `app`.
        let cm = "/apis/cmset.dev/v1alpha1/namespaces/demo/configmapsets/app";
        let answers = vec![(
            cm.to_string(),
            stand_in::object_not_found("configmapsets", "cmset.dev", "app"),
        )];
        let (cluster, _) = stand_in::start(answers);
        assert_eq!(
            no_api(cluster.set(&address("secretset/app")).await),
            Some(SetKind::SecretSet)
        );
        let error = cluster.set(&address("app")).await.map(|s| s.id()).unwrap_err();
        assert!(matches!(error, Error::NeitherFound { .. }), "{error}");
        let error = cluster
            .set(&address("cmset/app"))
            .await
            .map(|s| s.id())
            .unwrap_err();
        assert!(matches!(error, Error::SetNotFound { .. }), "{error}");
    }

    #[test]
    fn revisions_are_listed_by_the_set_label() {
        assert_eq!(labelled("db").label_selector.as_deref(), Some("cmset.dev/set=db"));
    }

    #[tokio::test]
    async fn change_windows_that_cannot_be_listed_are_a_line_not_an_error() {
        let path = "/apis/cmset.dev/v1alpha1/changewindows";
        // No CRD: the group answers the plain-text 404 of a path it does not know.
        let (cluster, asked) = stand_in::start(Vec::new());
        let note = cluster.change_windows().await.unwrap_err();
        assert!(
            note.contains("is not installed: only the set's own windows"),
            "{note}"
        );
        assert_eq!(*asked.lock().unwrap(), [format!("GET {path}")]);

        let forbidden = stand_in::status(
            403,
            "Forbidden",
            "changewindows.cmset.dev is forbidden: User \"ana\" cannot list resource \"changewindows\"",
            json!({"group": "cmset.dev", "kind": "changewindows"}),
        );
        let (cluster, _) = stand_in::start(vec![(path.to_string(), forbidden)]);
        let note = cluster.change_windows().await.unwrap_err();
        assert!(note.starts_with("you may not list ChangeWindows"), "{note}");

        let one = json!({"apiVersion": "cmset.dev/v1alpha1", "kind": "ChangeWindow",
                         "metadata": {"name": "holidays"},
                         "spec": {"windows": [{"kind": "Deny", "schedule": "0 0 24 12 *",
                                               "duration": "48h"}]}});
        let (cluster, _) = stand_in::start(vec![(
            path.to_string(),
            stand_in::list("cmset.dev/v1alpha1", vec![one]),
        )]);
        let listed = cluster.change_windows().await.unwrap();
        assert_eq!(listed[0].spec.windows[0].duration, "48h");
    }
}
