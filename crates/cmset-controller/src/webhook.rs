//! The mutating admission webhook (`POST /mutate` over HTTPS): opted-in workloads are stored already
//! pointing at their sets' current revisions (see `cmset_core::admission` for why).
//!
//! Every replica answers, leader or not: the handler lists the namespace's ConfigMapSets per request
//! instead of reading the leader's caches. Admission requests come only for opted-in workloads (the
//! webhook's objectSelector), so that is one small LIST per deploy; and it fails open: if anything goes
//! wrong the object is admitted unchanged and the workload controller converges it afterwards.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use base64::Engine;
use cmset_api::{ConfigMapSet, SecretSet};
use cmset_core::admission::{self, Circumstances};
use cmset_core::observe::WorkloadKind;
use cmset_core::refs::Referenced;
use cmset_core::set::SetRef;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::ListParams;
use kube::{Api, Client};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::http::Limits;
use crate::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("reading or writing the serving certificate in {dir}: {source}")]
    Certificate { dir: PathBuf, source: std::io::Error },
    #[error("generating a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("parsing the serving certificate: {0}")]
    Pem(#[from] rustls_pki_types::pem::Error),
    #[error("configuring TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("listening on {address}: {source}")]
    Listen {
        address: SocketAddr,
        source: std::io::Error,
    },
}

/// The certificate the webhook serves. The cert keeper replaces it in place when it is renewed; each
/// TLS handshake picks up the current one.
#[derive(Default)]
pub struct ServingCert {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCert")
            .field("loaded", &self.is_loaded())
            .finish()
    }
}

impl ServingCert {
    /// Serves this PEM pair from the next handshake on; refused (and the current pair kept) when the
    /// key does not parse or does not match the certificate.
    pub fn install(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), WebhookError> {
        let certs = CertificateDer::pem_slice_iter(cert_pem).collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(key_pem)?;
        let certified = CertifiedKey::from_der(certs, key, &rustls::crypto::ring::default_provider())?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(certified));
        Ok(())
    }

    pub fn is_loaded(&self) -> bool {
        self.current.read().map(|c| c.is_some()).unwrap_or(false)
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // None until the first pair is loaded: the handshake fails and the API server fails open.
        self.current.read().ok()?.clone()
    }
}

#[derive(Clone)]
struct Handler {
    client: Client,
    metrics: Arc<Metrics>,
    /// Whether SecretSets are served (and cmset may read Secrets).
    secret_sets: bool,
}

impl Handler {
    /// Counts one request the handler sends to the API server.
    fn requested(&self, verb: &'static str, resource: &'static str) {
        self.metrics
            .admission_requests
            .get_or_create(&crate::metrics::RequestLabels { verb, resource })
            .inc();
    }
}

/// The AdmissionReview response: allowed, with the patch when there is one.
fn review_response(uid: &str, patch: Option<&json_patch::Patch>) -> Value {
    let mut response = json!({ "uid": uid, "allowed": true });
    if let Some(patch) = patch {
        // A patch displays as its compact JSON.
        let encoded = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(encoded);
    }
    json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response })
}

/// How long an admission waits for a set created moments ago to record its first revision (its
/// controller does so within milliseconds); well inside the webhook's 5 s timeout.
const SET_WAIT: Duration = Duration::from_secs(2);
const SET_POLL: Duration = Duration::from_millis(100);
/// Referenced names looked up as ConfigMaps per admission, at most.
const LOOKUPS: usize = 8;
const DECISION_TIMEOUT: Duration = Duration::from_secs(8);

#[derive(Debug, thiserror::Error)]
enum Undecided {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("no decision within {DECISION_TIMEOUT:?}")]
    Timeout,
}

async fn mutate(State(handler): State<Handler>, axum::Json(review): axum::Json<Value>) -> axum::Json<Value> {
    let started = std::time::Instant::now();
    let answer = answer(&handler, &review).await;
    handler
        .metrics
        .admission_duration
        .observe(started.elapsed().as_secs_f64());
    answer
}

async fn answer(handler: &Handler, review: &Value) -> axum::Json<Value> {
    let request = &review["request"];
    let uid = request["uid"].as_str().unwrap_or_default();
    let (Some(kind), Some(namespace)) = (
        request
            .pointer("/kind/kind")
            .and_then(Value::as_str)
            .and_then(WorkloadKind::parse),
        request["namespace"].as_str(),
    ) else {
        return axum::Json(review_response(uid, None));
    };
    let object = &request["object"];
    // The API server gives up after the registration's timeout (5 s); so does cmset, a little later.
    let decided = tokio::time::timeout(DECISION_TIMEOUT, decide(handler, kind, namespace, request));
    let outcome = match decided.await.unwrap_or(Err(Undecided::Timeout)) {
        Ok(outcome) => outcome,
        Err(e) => {
            // Fail open: the workload controller converges it afterwards.
            warn!(%namespace, error = %e, "admission: could not read the namespace's sets; admitting unchanged");
            handler
                .metrics
                .admissions
                .get_or_create(&crate::metrics::ResultLabel { result: "error" })
                .inc();
            return axum::Json(review_response(uid, None));
        }
    };
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let result = if outcome.is_some() { "patched" } else { "unchanged" };
    handler
        .metrics
        .admissions
        .get_or_create(&crate::metrics::ResultLabel { result })
        .inc();
    debug!(%kind, %namespace, %name, result, "admission");
    axum::Json(review_response(uid, outcome.as_ref()))
}

/// Reads what the decision needs (the namespace's sets, and whether unclaimed names exist as
/// ConfigMaps) and asks the core.
async fn decide(
    handler: &Handler,
    kind: WorkloadKind,
    namespace: &str,
    request: &Value,
) -> Result<Option<json_patch::Patch>, Undecided> {
    let (client, secret_sets) = (&handler.client, handler.secret_sets);
    let object = &request["object"];
    let mut sets = NamespaceSets::list(handler, namespace).await?;
    // Applied together, a set may be moments older than the workload: wait briefly for its revision.
    let deadline = tokio::time::Instant::now() + SET_WAIT;
    while admission::awaits_sets(kind, object, &sets.refs()) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(SET_POLL).await;
        sets = NamespaceSets::list(handler, namespace).await?;
    }
    let sets = sets.refs();
    let creating = request["operation"].as_str() == Some("CREATE");
    let mut missing = BTreeSet::new();
    if creating && kind == WorkloadKind::Deployment {
        let kinds: &[Referenced] = if secret_sets {
            &[Referenced::ConfigMap, Referenced::Secret]
        } else {
            &[Referenced::ConfigMap]
        };
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        for (of, name) in admission::unclaimed_names(kind, object, &sets, kinds, LOOKUPS) {
            // Metadata only: a Secret's values are never read here. A failed lookup counts as
            // present: never hold on a guess.
            let resource = match of {
                Referenced::ConfigMap => "configmaps",
                Referenced::Secret => "secrets",
            };
            handler.requested("get", resource);
            let found = match of {
                Referenced::ConfigMap => configmaps.get_metadata_opt(&name).await.map(|o| o.is_some()),
                Referenced::Secret => secrets.get_metadata_opt(&name).await.map(|o| o.is_some()),
            };
            if let Ok(false) = found {
                missing.insert((of, name));
            }
        }
    }
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap_or_default();
    let circumstances = Circumstances {
        creating,
        missing,
        now: now.to_string(),
    };
    Ok(admission::mutate(kind, object, &sets, &circumstances))
}

pub fn router(client: Client, metrics: Arc<Metrics>, secret_sets: bool) -> Router {
    Router::new().route("/mutate", post(mutate)).with_state(Handler {
        client,
        metrics,
        secret_sets,
    })
}

/// The sets of one namespace, of every kind served, as admission reads them.
struct NamespaceSets {
    config_map_sets: Vec<ConfigMapSet>,
    secret_sets: Vec<SecretSet>,
}

impl NamespaceSets {
    async fn list(handler: &Handler, namespace: &str) -> Result<Self, kube::Error> {
        let client = &handler.client;
        handler.requested("list", "configmapsets");
        let config_map_sets = Api::<ConfigMapSet>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await?
            .items;
        let secret_sets = if handler.secret_sets {
            handler.requested("list", "secretsets");
            Api::<SecretSet>::namespaced(client.clone(), namespace)
                .list(&ListParams::default())
                .await?
                .items
        } else {
            Vec::new()
        };
        Ok(Self {
            config_map_sets,
            secret_sets,
        })
    }

    fn refs(&self) -> Vec<SetRef<'_>> {
        let config_map_sets = self.config_map_sets.iter().map(SetRef::from);
        config_map_sets
            .chain(self.secret_sets.iter().map(SetRef::from))
            .collect()
    }
}

/// A webhook listener with its TLS configuration, ready to serve.
pub struct Bound {
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    address: SocketAddr,
}

/// Binds the address, so that a taken port stops the operator at startup instead of leaving it running
/// without its webhook. Handshakes use whatever `cert` holds at the time.
pub async fn bind(address: SocketAddr, cert: Arc<ServingCert>) -> Result<Bound, WebhookError> {
    let tls = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| WebhookError::Listen { address, source })?;
    let address = listener.local_addr().unwrap_or(address);
    Ok(Bound {
        listener,
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(tls)),
        address,
    })
}

/// Serves the webhook over HTTPS until `shutdown` resolves, within [`Limits::WEBHOOK`].
pub async fn serve(
    bound: Bound,
    client: Client,
    metrics: Arc<Metrics>,
    secret_sets: bool,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let Bound {
        listener,
        acceptor,
        address,
    } = bound;
    info!(%address, "serving the admission webhook at /mutate");
    crate::http::serve(
        listener,
        Some(acceptor),
        router(client, metrics, secret_sets),
        Limits::WEBHOOK,
        shutdown,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_carry_the_request_uid_and_a_base64_json_patch() {
        assert_eq!(
            review_response("abc", None),
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "abc", "allowed": true}})
        );
        let wire = json!([{"op": "replace", "path": "/x", "value": "y"}]);
        let patch: json_patch::Patch = serde_json::from_value(wire.clone()).unwrap();
        let r = review_response("abc", Some(&patch));
        assert_eq!(r["response"]["patchType"], "JSONPatch");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(r["response"]["patch"].as_str().unwrap())
            .unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&decoded).unwrap(), wire);
    }
}
