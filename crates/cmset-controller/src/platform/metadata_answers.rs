//! Writes whose answer cmset reads only for its metadata ask the API server for only that.
//!
//! The API server answers a create with the whole object it stored. For a revision that is all of its
//! content (up to 1 MiB), read back, decoded and dropped, when all the set controller keeps is the
//! resourceVersion. Asking for a `PartialObjectMetadata` answer (`Accept: ...;as=PartialObjectMetadata`,
//! served for writes as for reads since Kubernetes 1.15) leaves the content on the server. A status
//! written by the notifier or the checks is likewise answered with the whole set, spec and content
//! included, and nothing of it is read. kube's `Api::patch_metadata` does the same for patches of an
//! object; these are its counterparts for creates and for the status subresource.

use kube::api::{PartialObjectMeta, Patch, PatchParams, PostParams};
use kube::core::Request;
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The media type of a metadata-only answer (meta.k8s.io/v1 `PartialObjectMetadata`).
pub const METADATA_ANSWER: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// Creates `object` in `namespace` and returns only the metadata the API server stored.
pub async fn create<K>(
    client: &Client,
    namespace: &str,
    params: &PostParams,
    object: &K,
) -> kube::Result<PartialObjectMeta<K>>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone,
{
    let url = K::url_path(&(), Some(namespace));
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let request = Request::new(url)
        .create(params, body)
        .map_err(kube::Error::BuildRequest)?;
    answered_with_metadata(client, request).await
}

/// Patches the status of `name` in `namespace` and returns only the set's metadata.
pub async fn patch_status<K, P>(
    client: &Client,
    namespace: &str,
    name: &str,
    params: &PatchParams,
    patch: &Patch<P>,
) -> kube::Result<PartialObjectMeta<K>>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone,
    P: Serialize,
{
    let url = K::url_path(&(), Some(namespace));
    let request = Request::new(url)
        .patch_subresource("status", name, params, patch)
        .map_err(kube::Error::BuildRequest)?;
    answered_with_metadata(client, request).await
}

async fn answered_with_metadata<K>(
    client: &Client,
    mut request: http::Request<Vec<u8>>,
) -> kube::Result<PartialObjectMeta<K>>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone,
{
    request.headers_mut().insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static(METADATA_ANSWER),
    );
    client.request::<PartialObjectMeta<K>>(request).await
}
