//! The mutating admission webhook (`POST /mutate` over HTTPS): opted-in workloads are stored already
//! pointing at their sets' current revisions (see `cmset_core::admission` for why). The same server
//! validates AnalysisTemplates (`POST /validate-analysistemplate`, see [`crate::serving::template_admission`]),
//! change windows (`POST /validate-windows`), sets' windows and content (`POST /validate-set`, see
//! [`crate::serving::set_admission`]) and records who created a break-glass WindowOverride
//! (`POST /override-window`, see [`crate::serving::override_admission`]).
//!
//! Every replica answers, leader or not, from its own warm index (every replica watches; see
//! [`crate::engine::runtime::Scope`]) and with the decision the workload controller makes
//! ([`crate::reconcile::decisions`]), so admission and the controller cannot disagree. In steady state an
//! admission sends no request to the API server: a set created moments before is awaited on the index.
//! The one lookup left is for a workload that can be held (a Deployment, a Rollout, a CronJob) being
//! created that names something no set claims (does that ConfigMap exist?). It fails open: if anything
//! goes wrong (the index still filling, say) the object is admitted unchanged and the workload
//! controller converges it afterwards.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use base64::Engine;
use cmset_core::admission::{self, Circumstances};
use cmset_core::decide::Undecided;
use cmset_core::kinds::Kinds;
use cmset_core::observe::{WorkloadKind, WorkloadView};
use cmset_core::refs::Referenced;
use cmset_core::rollout::SetTarget;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::engine::runtime::{Scope, Scopes};
use crate::platform::metrics::Metrics;
use crate::reconcile::decisions::Gathered;
use crate::serving::http::Limits;
use crate::serving::override_admission::review_override;

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
    /// The warm indexes admission decides from: the same observations the controllers plan from.
    scopes: Scopes,
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
            .get_or_create(&crate::platform::metrics::RequestLabels { verb, resource })
            .inc();
    }

    fn count(&self, result: &'static str) {
        self.metrics
            .admissions
            .get_or_create(&crate::platform::metrics::ResultLabel { result })
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

/// How long an admission waits for a set it reads to be decided (created moments before, its revision
/// not made yet; or changed together with another set it reads): the index tells it of every change,
/// and the leader makes a revision within milliseconds. Well inside the webhook's 5 s timeout.
const DECISION_WAIT: Duration = Duration::from_secs(2);
/// Referenced names looked up as ConfigMaps or Secrets per admission, at most.
const LOOKUPS: usize = 8;
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

async fn mutate(State(handler): State<Handler>, axum::Json(review): axum::Json<Value>) -> axum::Json<Value> {
    let started = std::time::Instant::now();
    let answer = answer(&handler, &review).await;
    handler
        .metrics
        .admission_duration
        .observe(started.elapsed().as_secs_f64());
    axum::Json(answer)
}

async fn answer(handler: &Handler, review: &Value) -> Value {
    let request = &review["request"];
    let uid = request["uid"].as_str().unwrap_or_default();
    let (Some(kind), Some(namespace)) = (
        workload_kind(&handler.scopes.kinds, request),
        request["namespace"].as_str(),
    ) else {
        return review_response(uid, None);
    };
    let object = &request["object"];
    let Some(workload) = admission::admitted_workload(kind, object) else {
        handler.count("unchanged");
        return review_response(uid, None);
    };
    let Some(scope) = handler.scopes.serving(namespace).filter(|s| s.is_ready()) else {
        // Not served here, or the index is still filling: fail open, the controller converges it.
        debug!(%namespace, "admission: namespace not served or index not ready; admitting unchanged");
        handler.count("error");
        return review_response(uid, None);
    };
    let creating = request["operation"].as_str() == Some("CREATE");
    // A workload's first start names the current revision whatever the change windows say, but for a
    // Job its CronJob starts (it runs what the CronJob holds); a change to one that runs is held by them
    // as the controller would hold it.
    let windows = cmset_core::admission::windows_apply(kind, object, creating);
    let decided = decide(
        scope,
        handler.scopes.multi_set_window,
        namespace,
        &workload,
        windows,
    )
    .await;
    let missing = if creating && cmset_core::hold::can_hold(kind) {
        missing_names(handler, scope, namespace, &workload).await
    } else {
        BTreeSet::new()
    };
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap_or_default();
    let circumstances = Circumstances {
        creating,
        missing,
        now: now.to_string(),
        stored: (!creating)
            .then(|| request.get("oldObject").filter(|o| o.is_object()).cloned())
            .flatten(),
        budgeted: handler.scopes.budgeted,
    };
    let patch = admission::mutate(kind, object, &workload, &decided, &circumstances);
    let result = if patch.is_some() { "patched" } else { "unchanged" };
    handler.count(result);
    debug!(%kind, %namespace, name = %workload.name, result, undecided = ?decided.as_ref().err(), "admission");
    review_response(uid, patch.as_ref())
}

/// The kind of the object admitted, if it is a workload kind of the table (its group must match too:
/// another group's kind of the same name is not ours).
fn workload_kind(kinds: &Kinds, request: &Value) -> Option<WorkloadKind> {
    let kind = kinds.parse(request.pointer("/kind/kind")?.as_str()?)?;
    let group = request
        .pointer("/kind/group")
        .and_then(Value::as_str)
        .unwrap_or_default();
    (kind.spec().group == group).then_some(kind)
}

/// The one decision (see [`crate::reconcile::decisions`]) from the warm index, waiting up to [`DECISION_WAIT`]
/// for a set to be decided or for the changes of one apply to gather, as the controller would. Sends
/// no request: each change of the index wakes it.
async fn decide(
    scope: &Scope,
    window: Duration,
    namespace: &str,
    workload: &WorkloadView,
    windows: bool,
) -> Result<Vec<SetTarget>, Undecided> {
    let deadline = tokio::time::Instant::now() + DECISION_WAIT;
    let mut changes = scope.index.changes();
    loop {
        changes.mark_unchanged();
        let gathered = Gathered::of(&scope.index, &scope.stores, namespace, workload, windows);
        let decided = gathered
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|g| g.decide(workload));
        let now = tokio::time::Instant::now();
        match (&decided, &gathered) {
            (Ok(_), Ok(gathered)) => {
                // Sets changed moments ago may be joined by more of the same apply: wait it out.
                match gathered.gathering_left(window) {
                    Some(left) if now + left < deadline => tokio::time::sleep(left).await,
                    _ => return decided,
                }
            }
            _ if now >= deadline => return decided,
            _ => {
                // Woken by the next change of the index (or the deadline): decide again.
                let _ = tokio::time::timeout_at(deadline, changes.changed()).await;
            }
        }
    }
}

/// Names the workload references that no set claims and that do not exist: a new workload naming one
/// is held, when its kind can be (see [`admission::Circumstances`]). The index knows every set; whether
/// a plain ConfigMap or Secret exists is asked of the API server (metadata only: a Secret's values are
/// never read here), only for such a workload being created that names something no set claims. A failed lookup counts as
/// present: never hold on a guess.
async fn missing_names(
    handler: &Handler,
    scope: &Scope,
    namespace: &str,
    workload: &WorkloadView,
) -> BTreeSet<(Referenced, String)> {
    let kinds: &[Referenced] = if handler.secret_sets {
        &[Referenced::ConfigMap, Referenced::Secret]
    } else {
        &[Referenced::ConfigMap]
    };
    let claimed = |of: Referenced, name: &str| scope.index.claims(namespace, of, name);
    let mut missing = BTreeSet::new();
    for (of, name) in admission::unclaimed_names(workload, kinds, LOOKUPS, claimed) {
        let found = match of {
            Referenced::ConfigMap => exists::<ConfigMap>(handler, "configmaps", namespace, &name).await,
            Referenced::Secret => exists::<Secret>(handler, "secrets", namespace, &name).await,
        };
        match found {
            Ok(Ok(false)) => {
                missing.insert((of, name));
            }
            Ok(Ok(true)) => {}
            Ok(Err(e)) => {
                warn!(%namespace, %of, error = %crate::platform::redact::api_error(&e), "admission: could not look a name up; taking it as present")
            }
            Err(_) => warn!(%namespace, %of, "admission: looking a name up timed out; taking it as present"),
        }
    }
    missing
}

/// Whether an object of kind `K` (the resource `plural`) named `name` exists, within [`LOOKUP_TIMEOUT`].
/// Only its metadata is read.
async fn exists<K>(
    handler: &Handler,
    plural: &'static str,
    namespace: &str,
    name: &str,
) -> Result<kube::Result<bool>, tokio::time::error::Elapsed>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    handler.requested("get", plural);
    let api: Api<K> = Api::namespaced(handler.client.clone(), namespace);
    tokio::time::timeout(LOOKUP_TIMEOUT, api.get_metadata_opt(name))
        .await
        .map(|r| r.map(|o| o.is_some()))
}

/// `/override-window`: see [`crate::serving::override_admission`].
async fn override_window(axum::Json(review): axum::Json<Value>) -> axum::Json<Value> {
    axum::Json(review_override(&review))
}

/// `POST /validate-set`: a ConfigMapSet's or SecretSet's windows, validation and content (see
/// [`crate::serving::set_admission`]).
async fn validate_set(
    State(handler): State<Handler>,
    axum::Json(review): axum::Json<Value>,
) -> axum::Json<Value> {
    use crate::serving::set_admission;
    let gathered = set_admission::gather(&handler.client, &handler.metrics, &review).await;
    axum::Json(set_admission::review_set(
        &review,
        gathered.as_ref(),
        &handler.metrics,
    ))
}

pub fn router(scopes: Scopes, client: Client, metrics: Arc<Metrics>, secret_sets: bool) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/override-window", post(override_window))
        .route("/validate-set", post(validate_set))
        .route(
            "/validate-windows",
            post(crate::serving::window_admission::validate),
        )
        .route(
            "/validate-analysistemplate",
            post(crate::serving::template_admission::validate),
        )
        .with_state(Handler {
            scopes,
            client,
            metrics,
            secret_sets,
        })
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

/// Serves the webhook over HTTPS until `stop`, within [`Limits::WEBHOOK`].
pub async fn serve<F>(
    bound: Bound,
    scopes: Scopes,
    client: Client,
    metrics: Arc<Metrics>,
    secret_sets: bool,
    stop: crate::serving::http::Stop<F>,
) where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let Bound {
        listener,
        acceptor,
        address,
    } = bound;
    info!(%address, "serving the admission webhooks at /mutate, /override-window, /validate-analysistemplate, /validate-set and /validate-windows");
    crate::serving::http::serve(
        listener,
        Some(acceptor),
        router(scopes, client, metrics, secret_sets),
        Limits::WEBHOOK,
        stop,
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
