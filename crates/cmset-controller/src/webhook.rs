//! The mutating admission webhook (`POST /mutate` over HTTPS): opted-in workloads are stored already
//! pointing at their sets' current revisions (see `cmset_core::admission` for why).
//!
//! Every replica answers, leader or not: the handler lists the namespace's ConfigMapSets per request
//! instead of reading the leader's caches. Admission requests come only for opted-in workloads (the
//! webhook's objectSelector), so that is one small LIST per deploy; and it fails open: if anything goes
//! wrong the object is admitted unchanged and the workload controller converges it afterwards.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use base64::Engine;
use cmset_api::ConfigMapSet;
use cmset_core::admission;
use cmset_core::observe::WorkloadKind;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use kube::api::ListParams;
use kube::{Api, Client};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::metrics::Metrics;

#[derive(Clone, Debug)]
pub struct WebhookConfig {
    pub address: SocketAddr,
    /// Holds `tls.crt` and `tls.key` (as cert-manager mounts them). When they are missing a self-signed
    /// pair is generated and written there, so its `tls.crt` can serve as the webhook's `caBundle`.
    pub cert_dir: PathBuf,
    /// Names for a generated certificate, besides `localhost` and `127.0.0.1`.
    pub dns_names: Vec<String>,
}

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

/// Loads the serving certificate, generating a self-signed one when none is there.
fn certificate(
    config: &WebhookConfig,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), WebhookError> {
    let dir = &config.cert_dir;
    let io = |source| WebhookError::Certificate {
        dir: dir.clone(),
        source,
    };
    let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    if !crt.exists() || !key.exists() {
        let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        names.extend(config.dns_names.iter().cloned());
        let generated = rcgen::generate_simple_self_signed(names)?;
        std::fs::create_dir_all(dir).map_err(io)?;
        write_private(&key, generated.signing_key.serialize_pem().as_bytes()).map_err(io)?;
        std::fs::write(&crt, generated.cert.pem()).map_err(io)?;
        info!(dir = %dir.display(), "generated a self-signed webhook serving certificate");
    }
    let certs = CertificateDer::pem_file_iter(&crt)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(&key)?;
    Ok((certs, key))
}

fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(contents)
}

#[derive(Clone)]
struct Handler {
    client: Client,
    metrics: Arc<Metrics>,
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

async fn mutate(State(handler): State<Handler>, axum::Json(review): axum::Json<Value>) -> axum::Json<Value> {
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
    let sets: Api<ConfigMapSet> = Api::namespaced(handler.client.clone(), namespace);
    let outcome = match sets.list(&ListParams::default()).await {
        Ok(list) => admission::mutate(kind, &request["object"], &list.items),
        Err(e) => {
            // Fail open: the workload controller converges it afterwards.
            warn!(%namespace, error = %e, "admission: could not list ConfigMapSets; admitting unchanged");
            handler
                .metrics
                .admissions
                .get_or_create(&crate::metrics::ResultLabel { result: "error" })
                .inc();
            return axum::Json(review_response(uid, None));
        }
    };
    let name = request
        .pointer("/object/metadata/name")
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

pub fn router(client: Client, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .with_state(Handler { client, metrics })
}

/// A webhook listener with its TLS configuration, ready to serve.
pub struct Bound {
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    address: SocketAddr,
}

/// Loads (or generates) the certificate and binds the address, so that a bad certificate or a taken
/// port stops the operator at startup instead of leaving it running without its webhook.
pub async fn bind(config: &WebhookConfig) -> Result<Bound, WebhookError> {
    let (certs, key) = certificate(config)?;
    let tls = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    let listener = tokio::net::TcpListener::bind(config.address)
        .await
        .map_err(|source| WebhookError::Listen {
            address: config.address,
            source,
        })?;
    let address = listener.local_addr().unwrap_or(config.address);
    Ok(Bound {
        listener,
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(tls)),
        address,
    })
}

/// Serves the webhook over HTTPS until `shutdown` resolves.
pub async fn serve(
    bound: Bound,
    client: Client,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let Bound {
        listener,
        acceptor,
        address,
    } = bound;
    info!(%address, "serving the admission webhook at /mutate");
    let app = router(client, metrics);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => { warn!(error = %e, "webhook accept failed"); continue; }
            },
            _ = &mut shutdown => return,
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let tls = match acceptor.accept(stream).await {
                Ok(tls) => tls,
                Err(e) => return debug!(%peer, error = %e, "TLS handshake failed"),
            };
            let service = TowerToHyperService::new(app);
            if let Err(e) = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                debug!(%peer, error = %e, "webhook connection ended with an error");
            }
        });
    }
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

    #[test]
    fn a_missing_certificate_is_generated_once_and_then_reused() {
        let dir = std::env::temp_dir().join(format!("cmset-webhook-cert-{}", std::process::id()));
        let config = WebhookConfig {
            address: "127.0.0.1:0".parse().unwrap(),
            cert_dir: dir.clone(),
            dns_names: vec![],
        };
        let (first, _) = certificate(&config).unwrap();
        let (second, _) = certificate(&config).unwrap();
        assert_eq!(first, second, "the written pair is reused");
        let _ = std::fs::remove_dir_all(dir);
    }
}
