//! The webhook of an operator that costs nothing, for the replay floor (`stages::replay`): HTTPS on a
//! loopback port with a throwaway certificate, answering every AdmissionReview "allowed", nothing
//! patched. Registered as the bench registers cmset's own (`cluster::register_webhook`), so the API
//! server pays for the call (a TLS round trip, the review encoded and the answer decoded) exactly as it
//! does for cmset's, and the only cost the replay leaves out is cmset's answer.

use std::convert::Infallible;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpListener;

use crate::cluster::Result;

/// A running null webhook; stopped when dropped.
pub struct NullWebhook {
    pub port: u16,
    /// The certificate's PEM, base64-encoded, as a registration's `caBundle` takes it.
    pub ca_bundle: String,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for NullWebhook {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Only the review's uid is read; serde skips the rest of the body without keeping it.
#[derive(Deserialize)]
struct Review {
    request: ReviewRequest,
}

#[derive(Deserialize)]
struct ReviewRequest {
    uid: String,
}

impl NullWebhook {
    pub async fn start() -> Result<Self> {
        let generated = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])?;
        let ca_bundle = base64::engine::general_purpose::STANDARD.encode(generated.cert.pem());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(generated.signing_key.serialize_der()));
        let mut server =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()?
                .with_no_client_auth()
                .with_single_cert(vec![CertificateDer::from(generated.cert.der().to_vec())], key)?;
        // The API server speaks HTTP/1.1 to webhooks, as it does to cmset's.
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(answer);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Ok(Self {
            port,
            ca_bundle,
            accept,
        })
    }
}

async fn answer(request: Request<Incoming>) -> std::result::Result<Response<Full<Bytes>>, Infallible> {
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return Ok(status(StatusCode::BAD_REQUEST)),
    };
    let Some(answer) = allowed(&body) else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    let mut response = Response::new(Full::new(Bytes::from(answer)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// The answer to a review: allowed, for its uid; `None` for a body that is no review.
fn allowed(body: &[u8]) -> Option<String> {
    let review = serde_json::from_slice::<Review>(body).ok()?;
    let answer = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": review.request.uid, "allowed": true},
    });
    Some(answer.to_string())
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = code;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn starts_with_a_certificate_for_the_registration() {
        let hook = NullWebhook::start().await.expect("start");
        assert!(hook.port > 0);
        let pem = base64::engine::general_purpose::STANDARD
            .decode(&hook.ca_bundle)
            .expect("base64");
        assert!(String::from_utf8_lossy(&pem).contains("BEGIN CERTIFICATE"));
    }

    #[test]
    fn allows_every_review_for_its_uid_and_refuses_other_bodies() {
        let body =
            br#"{"apiVersion":"admission.k8s.io/v1","request":{"uid":"u-1","object":{"big":[1,2,3]}}}"#;
        let answer: serde_json::Value = serde_json::from_str(&allowed(body).expect("a review")).unwrap();
        assert_eq!(answer["response"], json!({"uid": "u-1", "allowed": true}));
        assert_eq!(answer["kind"], "AdmissionReview");
        assert_eq!(allowed(b"{}"), None);
        assert_eq!(allowed(b"not json"), None);
    }
}
