//! Every call to the API server, and nothing else: connect, read the set, list its revision ConfigMaps,
//! list the workloads of a namespace. The plugin only reads.

use std::path::Path;

use cmset_api::{ConfigMapSet, labels};
use cmset_core::naming::set_label_value;
use cmset_core::observe::WorkloadKind;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplateSpec};
use kube::api::{ListParams, ObjectMeta};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};

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

    /// The set, or a clear error when it (or its API) does not exist.
    pub async fn set(&self, name: &str) -> Result<ConfigMapSet, Error> {
        self.api::<ConfigMapSet>().get(name).await.map_err(|e| match e {
            kube::Error::Api(status) if status.is_not_found() => {
                // A missing object names itself in the details; a missing API does not.
                if status.details.as_ref().is_some_and(|d| !d.name.is_empty()) {
                    Error::SetNotFound {
                        name: name.to_string(),
                        namespace: self.namespace.clone(),
                    }
                } else {
                    Error::NoApi
                }
            }
            other => Error::kube("reading the ConfigMapSet", other),
        })
    }

    /// ConfigMaps carrying the set's label; [`crate::revisions::revisions_of`] keeps its own.
    pub async fn labelled_config_maps(&self, set: &ConfigMapSet) -> Result<Vec<ConfigMap>, Error> {
        let selector = format!("{}={}", labels::SET, set_label_value(&set.name_any()));
        let list = self
            .api::<ConfigMap>()
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| Error::kube("listing the revision ConfigMaps", e))?;
        Ok(list.items)
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

fn workload(kind: WorkloadKind, metadata: ObjectMeta, template: Option<PodTemplateSpec>) -> Workload {
    Workload {
        kind,
        name: metadata.name.unwrap_or_default(),
        uid: metadata.uid.unwrap_or_default(),
        labels: metadata.labels.unwrap_or_default(),
        pod_spec: template.and_then(|t| t.spec),
    }
}
