//! Every call to the API server, and nothing else: connect, read the set, list its revisions, read two
//! revision Secrets for a diff, list the workloads of a namespace. The plugin only reads.
//!
//! A SecretSet's revisions are listed by their metadata only; the only Secrets read in full are the two
//! a diff compares ([`Cluster::secret`]), and no error about a Secret request repeats anything of the
//! answer ([`secret_error`]).

use std::path::Path;

use cmset_api::{ConfigMapSet, SecretSet, labels};
use cmset_core::naming::set_label_value;
use cmset_core::observe::WorkloadKind;
use cmset_core::set::SetKind;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplateSpec, Secret};
use kube::api::{ListParams, ObjectMeta, PartialObjectMeta};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde::de::DeserializeOwned;

use crate::address::{Address, Lookup, Set, SetId, pick};
use crate::error::Error;
use crate::status::Workload;

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
            (None, None) => Config::infer().await.map_err(|e| Error::Config(e.to_string()))?,
        };
        let namespace = namespace.map_or_else(|| config.default_namespace.clone(), str::to_string);
        let client = Client::try_from(config).map_err(|e| Error::Config(e.to_string()))?;
        Ok(Self { client, namespace })
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

    async fn lookup<K>(&self, name: &str) -> Result<Lookup<K>, kube::Error>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + DeserializeOwned,
    {
        match self.api::<K>().get(name).await {
            Ok(set) => Ok(Lookup::Found(set)),
            // A missing object names itself in the details; a missing API does not.
            Err(kube::Error::Api(status)) if status.is_not_found() => {
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

    /// One Secret, in full: only for [`crate::secret_diff::compare`], which keeps its values to itself.
    pub async fn secret(&self, name: &str) -> Result<Secret, Error> {
        self.api::<Secret>()
            .get(name)
            .await
            .map_err(|e| secret_error("reading a revision Secret", e))
    }

    /// Every Deployment, StatefulSet and DaemonSet of the namespace, opted in or not.
    pub async fn workloads(&self) -> Result<Vec<Workload>, Error> {
        let lp = ListParams::default();
        let mut out = Vec::new();
        let deployments = self.api::<Deployment>().list(&lp).await;
        for d in deployments.map_err(|e| Error::kube("listing Deployments", e))? {
            let template = d.spec.map(|s| s.template);
            out.push(workload(WorkloadKind::Deployment, d.metadata, template));
        }
        let statefulsets = self.api::<StatefulSet>().list(&lp).await;
        for s in statefulsets.map_err(|e| Error::kube("listing StatefulSets", e))? {
            let template = s.spec.map(|s| s.template);
            out.push(workload(WorkloadKind::StatefulSet, s.metadata, template));
        }
        let daemonsets = self.api::<DaemonSet>().list(&lp).await;
        for d in daemonsets.map_err(|e| Error::kube("listing DaemonSets", e))? {
            let template = d.spec.map(|s| s.template);
            out.push(workload(WorkloadKind::DaemonSet, d.metadata, template));
        }
        Ok(out)
    }
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

fn workload(kind: WorkloadKind, metadata: ObjectMeta, template: Option<PodTemplateSpec>) -> Workload {
    Workload {
        kind,
        name: metadata.name.unwrap_or_default(),
        uid: metadata.uid.unwrap_or_default(),
        labels: metadata.labels.unwrap_or_default(),
        pod_spec: template.and_then(|t| t.spec),
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;
    use crate::revisions::fixtures::assert_no_secret_values;

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

    #[test]
    fn revisions_are_listed_by_the_set_label() {
        assert_eq!(labelled("db").label_selector.as_deref(), Some("cmset.dev/set=db"));
    }
}
