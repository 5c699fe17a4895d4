//! The client metric analysis asks Prometheus with: one instant query (`GET /api/v1/query`) at a time,
//! every failure an inconclusive outcome with a short message, never a panic or an error to propagate.
//!
//! It uses the HTTP stack kube already brings (hyper, hyper-util's pooled client, hyper-rustls with
//! ring). The bearer token is read from its file at every query, so a rotated token is used at once;
//! it travels only in the `Authorization` header (marked sensitive) and appears in no message.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cmset_core::analysis::{QueryOutcome, parse_query_response};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::Request;
use hyper::body::Bytes;
use hyper::header::{ACCEPT, AUTHORIZATION, HeaderValue};
use hyper::http::uri::Uri;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// How long a query may take, connecting included.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read: an analysis query returns a few series, not a dump of the database.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// Longest error message kept from the HTTP stack.
const MAX_MESSAGE_LEN: usize = 200;
/// Everything but RFC 3986's unreserved characters is escaped in the query's value.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Where Prometheus is and how to reach it: operator configuration (`--prometheus-*` flags), never
/// part of a set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrometheusConfig {
    /// `http://` or `https://`, host, optional port and path prefix (e.g. `http://thanos:9090/prom`).
    pub url: String,
    /// A file holding the bearer token; read at every query.
    pub bearer_token_file: Option<PathBuf>,
    /// PEM certificates to trust for an https URL, instead of the system's.
    pub ca_file: Option<PathBuf>,
    pub timeout: Duration,
}

impl PrometheusConfig {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            bearer_token_file: None,
            ca_file: None,
            timeout: QUERY_TIMEOUT,
        }
    }
}

/// A configuration the client cannot be built from; said at start-up.
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error("--prometheus-url {url:?}: {problem}")]
    Url { url: String, problem: &'static str },
    #[error("--prometheus-ca-file {path}: {problem}")]
    CaFile { path: String, problem: String },
    #[error("--prometheus-url is https and the system trusts no CA ({0}): give --prometheus-ca-file")]
    NoSystemRoots(String),
    #[error("TLS setup: {0}")]
    Tls(String),
}

/// A Prometheus HTTP API to run instant queries against. Cheap to clone (the connection pool is
/// shared).
#[derive(Clone)]
pub struct Prometheus {
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    /// The URL without a trailing `/`; `/api/v1/query` follows it.
    base: String,
    bearer_token_file: Option<PathBuf>,
    timeout: Duration,
}

impl fmt::Debug for Prometheus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prometheus")
            .field("url", &self.base)
            .field("bearer_token_file", &self.bearer_token_file)
            .finish_non_exhaustive()
    }
}

impl Prometheus {
    /// Checks `config` and prepares the client; nothing is sent yet.
    pub fn new(config: PrometheusConfig) -> Result<Self, PrometheusError> {
        let (base, https) = base_url(&config.url)?;
        let tls = tls_config(https, config.ca_file.as_deref())?;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self {
            client,
            base,
            bearer_token_file: config.bearer_token_file,
            timeout: config.timeout,
        })
    }

    /// The URL queries go to, below which `/api/v1/query` is asked.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// The longest a query takes, connecting included.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs `promql` as an instant query. Whatever goes wrong (the token file, the connection, a
    /// timeout, an HTTP or API error, a malformed answer) comes back as [`QueryOutcome::Error`] with a
    /// short message.
    pub async fn query(&self, promql: &str) -> QueryOutcome {
        match tokio::time::timeout(self.timeout, self.ask(promql)).await {
            Ok(outcome) => outcome,
            Err(_) => QueryOutcome::Error(format!(
                "no answer within {}",
                cmset_core::status::message::duration(self.timeout)
            )),
        }
    }

    async fn ask(&self, promql: &str) -> QueryOutcome {
        let request = match self.request(promql) {
            Ok(request) => request,
            Err(message) => return QueryOutcome::Error(message),
        };
        let response = match self.client.request(request).await {
            Ok(response) => response,
            Err(e) => return QueryOutcome::Error(describe(&e)),
        };
        let status = response.status().as_u16();
        match Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
        {
            Ok(body) => parse_query_response(status, &body.to_bytes()),
            Err(e) => QueryOutcome::Error(format!("reading the answer (HTTP {status}): {}", describe(&*e))),
        }
    }

    fn request(&self, promql: &str) -> Result<Request<Empty<Bytes>>, String> {
        let uri = format!(
            "{}/api/v1/query?query={}",
            self.base,
            utf8_percent_encode(promql, QUERY_VALUE)
        );
        let mut request = Request::get(uri).header(ACCEPT, "application/json");
        if let Some(path) = &self.bearer_token_file {
            request = request.header(AUTHORIZATION, bearer(path)?);
        }
        request
            .body(Empty::new())
            .map_err(|_| "the query does not make a valid request".to_string())
    }
}

/// The `Authorization` header from the token file, read now. Messages never include the token.
// A small local file (a projected token): read in place, as kube reads its own token file.
fn bearer(path: &Path) -> Result<HeaderValue, String> {
    let token = std::fs::read_to_string(path).map_err(|e| format!("reading the bearer token file: {e}"))?;
    let token = token.trim();
    if token.is_empty() {
        return Err("the bearer token file is empty".to_string());
    }
    let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| "the bearer token file holds characters a header cannot carry".to_string())?;
    value.set_sensitive(true);
    Ok(value)
}

/// The URL without a trailing `/`, and whether it is https. Credentials in the URL are refused: they
/// would show wherever the URL does.
fn base_url(url: &str) -> Result<(String, bool), PrometheusError> {
    let invalid = |problem| PrometheusError::Url {
        url: without_userinfo(url),
        problem,
    };
    let uri: Uri = url.parse().map_err(|_| invalid("not a URL"))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(invalid("must start with http:// or https://")),
    };
    let authority = uri.authority().ok_or_else(|| invalid("has no host"))?;
    if authority.as_str().contains('@') {
        return Err(invalid(
            "credentials do not belong in the URL: use --prometheus-bearer-token-file",
        ));
    }
    if uri.query().is_some() {
        return Err(invalid("may not have a query string"));
    }
    let path = uri.path().trim_end_matches('/');
    let scheme = if https { "https" } else { "http" };
    Ok((format!("{scheme}://{authority}{path}"), https))
}

/// `url` with any `user:password@` replaced by `…@`, for messages.
fn without_userinfo(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let separator = if scheme.is_empty() { "" } else { "://" };
            format!("{scheme}{separator}…{}", &rest[at..])
        }
        None => url.to_string(),
    }
}

/// TLS for an https URL: the CA file's certificates if given, else the system's roots. An http URL
/// never uses TLS; it gets a configuration that trusts nothing.
fn tls_config(https: bool, ca_file: Option<&Path>) -> Result<rustls::ClientConfig, PrometheusError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PrometheusError::Tls(e.to_string()))?;
    let config = match (https, ca_file) {
        (true, None) => {
            use rustls_platform_verifier::BuilderVerifierExt;
            builder
                .with_platform_verifier()
                .map_err(|e| PrometheusError::NoSystemRoots(e.to_string()))?
                .with_no_client_auth()
        }
        (true, Some(path)) => builder
            .with_root_certificates(root_store(path)?)
            .with_no_client_auth(),
        (false, _) => builder
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth(),
    };
    Ok(config)
}

fn root_store(path: &Path) -> Result<rustls::RootCertStore, PrometheusError> {
    let problem = |problem: String| PrometheusError::CaFile {
        path: path.display().to_string(),
        problem,
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| problem(e.to_string()))? {
        let cert = cert.map_err(|e| problem(e.to_string()))?;
        roots.add(cert).map_err(|e| problem(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(problem("holds no PEM certificate".to_string()));
    }
    Ok(roots)
}

/// An error and its causes in one line (`client error (Connect): tcp connect error: Connection
/// refused (os error 111)`), each cause once, capped.
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    cmset_core::status::message::join_capped(&[parts.join(": ")], MAX_MESSAGE_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_normalized() {
        let base = |url: &str| base_url(url).map(|(base, _)| base).map_err(|e| e.to_string());
        assert_eq!(
            base("http://prometheus:9090"),
            Ok("http://prometheus:9090".into())
        );
        assert_eq!(
            base("http://prometheus:9090/"),
            Ok("http://prometheus:9090".into())
        );
        assert_eq!(
            base("https://thanos.example/prom/"),
            Ok("https://thanos.example/prom".into())
        );
        assert_eq!(
            base("prometheus:9090"),
            Err(r#"--prometheus-url "prometheus:9090": must start with http:// or https://"#.into())
        );
        assert_eq!(
            base("http://admin:secret@prometheus:9090"),
            Err(r#"--prometheus-url "http://…@prometheus:9090": credentials do not belong in the URL: use --prometheus-bearer-token-file"#.into())
        );
        assert_eq!(
            without_userinfo("admin:s3cret@prometheus/x@y"),
            "…@prometheus/x@y"
        );
        assert!(base("http://prometheus:9090/?x=1").is_err());
        assert!(base("ftp://prometheus").is_err());
        assert!(base("").is_err());
    }

    #[test]
    fn the_query_is_escaped_whole() {
        let promql = r#"sum(rate(x{a="b c",d=~"e|f"}[5m])) > 0.5 & +1"#;
        let escaped = utf8_percent_encode(promql, QUERY_VALUE).to_string();
        assert!(
            escaped
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b)),
            "{escaped}"
        );
        let decoded = percent_encoding::percent_decode_str(&escaped)
            .decode_utf8()
            .unwrap();
        assert_eq!(decoded, promql);
    }
}
