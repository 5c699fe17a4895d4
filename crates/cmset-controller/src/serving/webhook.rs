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
//! It reads nothing on the strength of a review: its answer depends only on the body and on the index
//! (revisions and decisions cmset publishes anyway), so a forged review learns nothing about another
//! namespace's objects. It fails open: if anything
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
use cmset_core::rollout::decide::Undecided;
use cmset_core::rollout::pinning::SetTarget;
use cmset_core::workloads::kinds::Kinds;
use cmset_core::workloads::observe::{WorkloadKind, WorkloadView};
use cmset_core::workloads::refs::Referenced;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tracing::{debug, info};

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
    #[error("the webhook's client CA (--webhook-client-ca): {0}")]
    ClientCa(String),
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
    metrics: Arc<Metrics>,
    /// Whether SecretSets are served (and cmset may read Secrets).
    secret_sets: bool,
    /// Who judges sets' content, off the async runtime.
    judges: crate::serving::set_admission::Judges,
    /// Whether this admission counts in the metrics: not for a dry run.
    counting: bool,
}

impl Handler {
    fn count(&self, result: &'static str) {
        if !self.counting {
            return;
        }
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
/// Unclaimed names gathered per admission, at most (one is enough to hold).
const UNCLAIMED: usize = 8;

async fn mutate(State(handler): State<Handler>, axum::Json(review): axum::Json<Value>) -> axum::Json<Value> {
    let started = std::time::Instant::now();
    // A dry run is answered the same and counts nowhere (no metric; admission records no Event).
    let dry_run = review["request"]["dryRun"].as_bool() == Some(true);
    let handler = Handler {
        counting: !dry_run,
        ..handler
    };
    let answer = answer(&handler, &review).await;
    if handler.counting {
        handler
            .metrics
            .admission_duration
            .observe(started.elapsed().as_secs_f64());
    }
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
    let missing = if creating && cmset_core::rollout::hold::can_hold(kind) {
        unclaimed(handler, scope, namespace, &workload)
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

/// Names the workload references that no set claims: a new workload naming one is held (see
/// [`admission::Circumstances`]), in case its set is on the way. Whether such a name is a plain ConfigMap
/// or Secret that exists is not asked here: anything can post a review, and the answer would tell it
/// which objects exist in any namespace. The workload controller asks, once the workload is stored,
/// and releases the hold at once when they all exist.
fn unclaimed(
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
    admission::unclaimed_names(workload, kinds, UNCLAIMED, claimed)
        .into_iter()
        .collect()
}

/// `/override-window`: see [`crate::serving::override_admission`].
async fn override_window(axum::Json(review): axum::Json<Value>) -> axum::Json<Value> {
    axum::Json(review_override(&review))
}

/// `POST /validate-set`: a ConfigMapSet's or SecretSet's windows, validation and content (see
/// [`crate::serving::set_admission`]).
async fn validate_set(State(handler): State<Handler>, body: axum::body::Bytes) -> axum::response::Response {
    use axum::response::IntoResponse;
    // Read as the judging needs it: the content stays text until judged (see `SetReview`).
    match serde_json::from_slice::<crate::serving::set_admission::SetReview>(&body) {
        Ok(review) => {
            axum::Json(handler.judges.review(review, handler.metrics.clone()).await).into_response()
        }
        Err(e) => (
            axum::http::StatusCode::BAD_REQUEST,
            // Where, not what: the body is not repeated.
            format!(
                "not an AdmissionReview of a set ({:?} error at line {} column {})",
                e.classify(),
                e.line(),
                e.column()
            ),
        )
            .into_response(),
    }
}

/// The webhook's routes. They hold no API client: nothing a review says makes cmset send a request.
pub fn router(scopes: Scopes, metrics: Arc<Metrics>, secret_sets: bool) -> Router {
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
            metrics,
            secret_sets,
            judges: Default::default(),
            counting: true,
        })
}

/// A webhook listener with its TLS configuration, ready to serve.
pub struct Bound {
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    address: SocketAddr,
}

/// A verifier that admits only clients presenting a certificate signed by a CA of the PEM file at
/// `path` (`--webhook-client-ca`).
pub fn client_verifier(path: &std::path::Path) -> Result<Arc<dyn ClientCertVerifier>, WebhookError> {
    let pem = std::fs::read(path).map_err(|source| WebhookError::Certificate {
        dir: path.to_path_buf(),
        source,
    })?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert?)?;
    }
    if roots.is_empty() {
        return Err(WebhookError::ClientCa(format!(
            "{} holds no certificate",
            path.display()
        )));
    }
    WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| WebhookError::ClientCa(e.to_string()))
}

/// Binds the address, so that a taken port stops the operator at startup instead of leaving it running
/// without its webhook. Handshakes use whatever `cert` holds at the time; with `client_ca`, a client
/// without a certificate it verifies is refused in the handshake.
pub async fn bind(
    address: SocketAddr,
    cert: Arc<ServingCert>,
    client_ca: Option<Arc<dyn ClientCertVerifier>>,
) -> Result<Bound, WebhookError> {
    let builder =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?;
    let tls = match client_ca {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    }
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
        router(scopes, metrics, secret_sets),
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

    #[tokio::test]
    async fn a_set_review_is_read_from_its_bytes_and_one_that_is_none_is_refused_without_its_body() {
        let handler = Handler {
            scopes: Scopes {
                scopes: Vec::new(),
                multi_set_window: Duration::ZERO,
                kinds: Kinds::built_in(),
                budgeted: false,
            },
            metrics: Arc::new(Metrics::default()),
            secret_sets: false,
            judges: Default::default(),
            counting: true,
        };
        let post = |body: Value| {
            let handler = handler.clone();
            async move {
                let bytes = axum::body::Bytes::from(serde_json::to_vec(&body).unwrap());
                let response = validate_set(State(handler), bytes).await;
                let status = response.status();
                let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
                (status, String::from_utf8_lossy(&body).into_owned())
            }
        };
        let set = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "CREATE", "name": "app", "namespace": "team",
                "kind": {"group": "cmset.dev", "version": "v1alpha1", "kind": "ConfigMapSet"},
                "object": {"metadata": {"name": "app", "managedFields": [{"manager": "kubectl"}]},
                    "spec": {"template": {"data": {"app.json": "{"}},
                             "validation": {"keys": {"*.json": {"format": "json"}}}}}}});
        let (status, body) = post(set).await;
        assert_eq!(status, axum::http::StatusCode::OK);
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["response"]["uid"], "u-1");
        assert_eq!(answer["response"]["allowed"], false, "{answer}");
        let (status, body) = post(json!({"request": {"uid": "u-2", "name": ["s3cr3t"]}})).await;
        assert_eq!(status, axum::http::StatusCode::BAD_REQUEST);
        assert!(body.contains("not an AdmissionReview of a set"), "{body}");
        assert!(!body.contains("s3cr3t"), "the body is not repeated: {body}");
    }

    #[tokio::test]
    async fn a_dry_run_is_answered_the_same_and_counts_in_no_metric() {
        let metrics = Arc::new(Metrics::default());
        let handler = Handler {
            scopes: Scopes {
                scopes: Vec::new(),
                multi_set_window: Duration::ZERO,
                kinds: Kinds::built_in(),
                budgeted: false,
            },
            metrics: metrics.clone(),
            secret_sets: false,
            judges: Default::default(),
            counting: true,
        };
        let review = |dry_run: bool| {
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "request": {"uid": "u-1", "operation": "CREATE", "namespace": "team", "dryRun": dry_run,
                               "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                               "object": {"apiVersion": "apps/v1", "kind": "Deployment",
                                          "metadata": {"name": "web", "namespace": "team",
                                                       "labels": {"cmset.dev/enabled": "true"}},
                                          "spec": {"template": {"spec": {"containers": [
                                              {"name": "c", "image": "x"}]}}}}}})
        };
        let counted = || {
            metrics
                .admissions
                .get_or_create(&crate::platform::metrics::ResultLabel { result: "error" })
                .get()
        };
        let dry = mutate(State(handler.clone()), axum::Json(review(true))).await.0;
        assert_eq!(counted(), 0, "a dry run counts nowhere");
        let real = mutate(State(handler), axum::Json(review(false))).await.0;
        assert_eq!(counted(), 1);
        assert_eq!(dry, real, "the same answer");
    }

    /// A client CA and a certificate it signed for `name` (PEMs: CA, cert, key).
    fn client_pki(name: &str) -> (String, String, String) {
        use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::default();
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        (ca_cert.pem(), cert.pem(), key.serialize_pem())
    }

    /// Whether a TLS handshake with the webhook at `address` (serving a certificate of `server_ca`)
    /// succeeds, presenting `client` (cert, key PEMs) if given.
    async fn handshake(address: SocketAddr, server_ca: &str, client: Option<(&str, &str)>) -> bool {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(server_ca.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let builder =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots);
        let config = match client {
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    CertificateDer::pem_slice_iter(cert.as_bytes())
                        .collect::<Result<Vec<_>, _>>()
                        .unwrap(),
                    PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let Ok(mut tls) = connector.connect(name, tcp).await else {
            return false;
        };
        // TLS 1.3 reports a refused client certificate only on the first read after the handshake.
        let _ = tls.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await;
        let mut answer = [0u8; 16];
        matches!(tls.read(&mut answer).await, Ok(n) if n > 0)
    }

    #[tokio::test]
    async fn with_a_client_ca_only_clients_with_a_certificate_it_signed_complete_a_handshake() {
        let policy = crate::serving::webhook_certs::Policy {
            validity: Duration::from_secs(86_400),
            names: vec![],
        };
        let pair = crate::serving::webhook_certs::issue(&policy, jiff::Timestamp::now(), None).unwrap();
        let cert = Arc::new(ServingCert::default());
        cert.install(pair.cert.as_bytes(), pair.key.as_bytes()).unwrap();
        let (api_ca, api_cert, api_key) = client_pki("kube-apiserver");
        let (_, stranger_cert, stranger_key) = client_pki("kube-apiserver");
        let ca_file = std::env::temp_dir().join(format!("cmset-client-ca-{}.pem", std::process::id()));
        std::fs::write(&ca_file, &api_ca).unwrap();
        let verifier = client_verifier(&ca_file).unwrap();
        std::fs::remove_file(&ca_file).unwrap();
        let bound = bind("127.0.0.1:0".parse().unwrap(), cert, Some(verifier))
            .await
            .unwrap();
        let address = bound.address;
        let acceptor = bound.acceptor.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            while let Ok((tcp, _)) = bound.listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Ok(mut tls) = acceptor.accept(tcp).await {
                        let _ = tls.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await;
                        let _ = tls.shutdown().await;
                    }
                });
            }
        });
        assert!(
            handshake(address, &pair.ca, Some((&api_cert, &api_key))).await,
            "the API server's"
        );
        assert!(!handshake(address, &pair.ca, None).await, "no certificate");
        assert!(
            !handshake(address, &pair.ca, Some((&stranger_cert, &stranger_key))).await,
            "another CA's"
        );
        let missing = client_verifier(std::path::Path::new("/nonexistent/ca.pem"));
        assert!(missing.is_err());
    }
}
