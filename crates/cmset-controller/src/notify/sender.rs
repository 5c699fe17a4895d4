//! Sends the requests `cmset_core::notify::request` builds, and tries them again as the core says.
//!
//! - One HTTP client per distinct way out (proxy, CA file, `insecureSkipVerify`), kept for the life of
//!   the operator, so the connections to Slack, Teams or a webhook are reused from one notification to
//!   the next. The timeout is set on each request (connecting included), so services that differ only
//!   in it share a client. The CA file is read at every delivery: a rotated file takes effect at once
//!   (its client is rebuilt) and a missing one is reported.
//! - A failed attempt is tried again when, and after as long as, [`Transport::retry_after`] says,
//!   honouring a `Retry-After` in seconds; the wait is a tokio sleep.
//! - TLS is rustls on ring with the webpki roots built in (the image has no CA bundle), plus the CA
//!   file's certificates. Without a `proxy`, the usual `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY`
//!   variables apply. Redirects are not followed, so a secret header never travels to another host.
//! - No credential in a reason: the URL, secret headers and the proxy travel only in the request.
//!   A reason is written here from the kind of error (reqwest's own text names the URL), and of an
//!   answer only what [`request::response_error`] keeps is quoted.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cmset_core::notify::config::Service;
use cmset_core::notify::request::{self, HttpRequest, Transport};
use reqwest::header::{HeaderMap, HeaderName, RETRY_AFTER};
use reqwest::{Method, Url};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// Most of an answer's body kept: enough for Slack's `{"ok": false, "error": …}`.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// What became of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Answered with a 2xx (for a Slack bot token, one with `"ok": true`) at attempt `attempts`.
    Delivered { attempts: u32 },
    /// Given up after `attempts` tries; 0 when nothing could be sent (an unreadable CA file, an invalid
    /// URL). `retryable` when the last failure may pass by itself (no answer, 408, 429, 5xx), so a
    /// later reconcile may try again. `reason` names no credential.
    Failed {
        attempts: u32,
        reason: String,
        retryable: bool,
    },
}

/// Delivers notification requests. Cloning is cheap and clones share the clients.
#[derive(Clone)]
pub struct Sender {
    inner: Arc<Inner>,
}

struct Inner {
    clients: Mutex<HashMap<ClientKey, Cached>>,
    /// Multiplies every wait between attempts: 1 but in tests.
    backoff_scale: f64,
}

/// What makes two clients differ. It holds the proxy URL, a credential: it has no `Debug`.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    proxy: Option<String>,
    ca_file: Option<String>,
    insecure: bool,
}

struct Cached {
    /// The CA file's content the client trusts.
    ca_pem: Option<Vec<u8>>,
    client: reqwest::Client,
}

impl Default for Sender {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("clients", &self.inner.lock_clients().len())
            .finish()
    }
}

impl Sender {
    pub fn new() -> Self {
        Self::with_backoff_scale(1.0)
    }

    fn with_backoff_scale(backoff_scale: f64) -> Self {
        Self {
            inner: Arc::new(Inner {
                clients: Mutex::default(),
                backoff_scale,
            }),
        }
    }

    /// Sends `request` (built for `service`), retrying as `request.transport.retry_after` says, and
    /// tells how it ended.
    pub async fn deliver(&self, service: &Service, request: &HttpRequest) -> Outcome {
        let transport = &request.transport;
        let prepared = match self.prepare(request) {
            Ok(prepared) => prepared,
            Err(reason) => {
                return Outcome::Failed {
                    attempts: 0,
                    reason,
                    retryable: false,
                };
            }
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (status, asked_wait, failure) = match prepared.send(transport).await {
                Answer::Received {
                    status,
                    retry_after,
                    body,
                } => (
                    Some(status),
                    retry_after,
                    request::response_error(service, status, &body),
                ),
                Answer::None(reason) => (None, None, Some(reason)),
            };
            let Some(mut reason) = failure else {
                return Outcome::Delivered { attempts: attempt };
            };
            match transport.retry_after(attempt, status, asked_wait) {
                Some(wait) => {
                    tracing::debug!(
                        service = %service.name,
                        attempt,
                        wait_ms = wait.as_millis() as u64,
                        %reason,
                        "notification not delivered yet, trying again"
                    );
                    tokio::time::sleep(wait.mul_f64(self.inner.backoff_scale)).await;
                }
                None => {
                    if let Some(wait) = asked_wait
                        && transport.retry_after(attempt, status, None).is_some()
                    {
                        reason.push_str(&format!(
                            "; the server asked to wait {}s, longer than cmset waits",
                            wait.as_secs()
                        ));
                    }
                    return Outcome::Failed {
                        attempts: attempt,
                        reason,
                        retryable: may_pass(status),
                    };
                }
            }
        }
    }

    /// Everything an attempt needs, checked once.
    fn prepare(&self, request: &HttpRequest) -> Result<Prepared, String> {
        let method = Method::from_bytes(request.method.as_bytes())
            .map_err(|_| format!("{:?} is not an HTTP method", request.method))?;
        let url = Url::parse(request.url.expose()).map_err(|e| format!("the URL is not valid: {e}"))?;
        Ok(Prepared {
            client: self.client(&request.transport)?,
            method,
            url,
            headers: header_map(&request.headers)?,
            body: request.body.clone(),
            via_proxy: request.transport.proxy.is_some(),
        })
    }

    /// The client for `transport`'s way out, built on first use or when the CA file changed.
    fn client(&self, transport: &Transport) -> Result<reqwest::Client, String> {
        let ca_pem = match &transport.ca_file {
            Some(path) => Some(std::fs::read(path).map_err(|e| format!("caFile {path}: {e}"))?),
            None => None,
        };
        let key = ClientKey {
            proxy: transport.proxy.as_ref().map(|p| p.expose().to_string()),
            ca_file: transport.ca_file.clone(),
            insecure: transport.insecure_skip_verify,
        };
        let mut clients = self.inner.lock_clients();
        if let Some(cached) = clients.get(&key)
            && cached.ca_pem == ca_pem
        {
            return Ok(cached.client.clone());
        }
        let client = build_client(&key, ca_pem.as_deref())?;
        clients.insert(
            key,
            Cached {
                ca_pem,
                client: client.clone(),
            },
        );
        Ok(client)
    }
}

impl Inner {
    fn lock_clients(&self) -> std::sync::MutexGuard<'_, HashMap<ClientKey, Cached>> {
        // The map is only read and inserted into: a panic elsewhere leaves it whole.
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether a failure with this answer (`None`: no answer) may pass by itself: what the core would try
/// again, asked of it rather than repeated here.
fn may_pass(status: Option<u16>) -> bool {
    request::retry_after(1, 1, status, None).is_some()
}

fn build_client(key: &ClientKey, ca_pem: Option<&[u8]>) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .user_agent(concat!("cmset/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
        .danger_accept_invalid_certs(key.insecure);
    if let (Some(path), Some(pem)) = (&key.ca_file, ca_pem) {
        for certificate in ca_certificates(path, pem)? {
            builder = builder.add_root_certificate(certificate);
        }
    }
    if let Some(proxy) = &key.proxy {
        let proxy = reqwest::Proxy::all(proxy.as_str())
            .map_err(|_| "the proxy is not a valid http://, https:// or socks5:// URL".to_string())?;
        builder = builder.proxy(proxy);
    }
    builder.build().map_err(|e| match cause(&e) {
        Some(cause) => format!("the HTTP client could not be built: {cause}"),
        None => "the HTTP client could not be built".to_string(),
    })
}

/// The PEM file's certificates, each checked as a trust anchor.
fn ca_certificates(path: &str, pem: &[u8]) -> Result<Vec<reqwest::Certificate>, String> {
    let problem = |why: String| format!("caFile {path}: {why}");
    let mut anchors = rustls::RootCertStore::empty();
    let mut certificates = Vec::new();
    for der in CertificateDer::pem_slice_iter(pem) {
        let der = der.map_err(|e| problem(format!("not PEM ({e})")))?;
        anchors
            .add(der.clone())
            .map_err(|e| problem(format!("a certificate is not valid ({e})")))?;
        certificates.push(
            reqwest::Certificate::from_der(&der)
                .map_err(|_| problem("a certificate is not valid".to_string()))?,
        );
    }
    if certificates.is_empty() {
        return Err(problem("holds no PEM certificate".to_string()));
    }
    Ok(certificates)
}

fn header_map(headers: &[(String, request::HeaderValue)]) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("{name:?} is not a valid header name"))?;
        let mut sent = reqwest::header::HeaderValue::from_str(value.expose())
            .map_err(|_| format!("the value of header {name} is not valid"))?;
        sent.set_sensitive(matches!(value, request::HeaderValue::Secret(_)));
        map.append(name, sent);
    }
    Ok(map)
}

struct Prepared {
    client: reqwest::Client,
    method: Method,
    url: Url,
    headers: HeaderMap,
    body: Vec<u8>,
    via_proxy: bool,
}

/// What one attempt got back.
enum Answer {
    Received {
        status: u16,
        /// `Retry-After` in seconds (its date form is ignored: the backoff applies).
        retry_after: Option<Duration>,
        /// At most [`MAX_ANSWER_BYTES`]; what arrived, if the body broke off.
        body: Vec<u8>,
    },
    /// No answer, and why in words of our own.
    None(String),
}

impl Prepared {
    async fn send(&self, transport: &Transport) -> Answer {
        let sent = self
            .client
            .request(self.method.clone(), self.url.clone())
            .headers(self.headers.clone())
            .body(self.body.clone())
            .timeout(transport.timeout)
            .send()
            .await;
        let mut response = match sent {
            Ok(response) => response,
            Err(error) => return Answer::None(self.describe(&error, transport.timeout)),
        };
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let mut body = Vec::new();
        while body.len() < MAX_ANSWER_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                _ => break,
            }
        }
        body.truncate(MAX_ANSWER_BYTES);
        Answer::Received {
            status: response.status().as_u16(),
            retry_after,
            body,
        }
    }

    /// Why an attempt got no answer. reqwest's own text names the URL, so it is never used: the kind
    /// of error is told in our words, with the OS's, hyper's or rustls's fixed description of the cause.
    fn describe(&self, error: &reqwest::Error, timeout: Duration) -> String {
        if error.is_timeout() {
            return format!(
                "no answer within {}",
                cmset_core::status::message::duration(timeout)
            );
        }
        let what = match (error.is_connect(), self.via_proxy) {
            (true, true) => "could not connect through the proxy",
            (true, false) => "could not connect",
            (false, _) => "the request failed",
        };
        match cause(error) {
            Some(cause) => format!("{what}: {cause}"),
            None => what.to_string(),
        }
    }
}

/// The first cause in `error`'s chain that is told in a fixed vocabulary: a network error's kind, a
/// name that did not resolve, a TLS error, a connection that closed or spoke no HTTP. Other causes are
/// skipped: their text may hold a URL.
fn cause(error: &(dyn StdError + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(format!("TLS: {tls}"));
        }
        if let Some(hyper) = error.downcast_ref::<hyper::Error>() {
            if hyper.is_incomplete_message() {
                return Some("the connection closed before an answer".to_string());
            }
            if hyper.is_parse() {
                return Some("the answer is not HTTP".to_string());
            }
        }
        if let Some(io) = error.downcast_ref::<io::Error>() {
            // An I/O error may wrap another (tokio-rustls wraps rustls's) that `source` skips.
            if let Some(inner) = io.get_ref().and_then(|inner| cause(inner)) {
                return Some(inner);
            }
            if network_kind(io.kind()) {
                return Some(io.kind().to_string());
            }
        }
        // hyper-util's connector names a failed lookup so; its type is private.
        if error.to_string() == "dns error" {
            return Some("the host name did not resolve".to_string());
        }
        next = error.source();
    }
    None
}

/// I/O error kinds that say what went wrong on the network ("connection refused"), unlike "other
/// error" or "uncategorized error".
fn network_kind(kind: io::ErrorKind) -> bool {
    use io::ErrorKind::*;
    matches!(
        kind,
        ConnectionRefused
            | ConnectionReset
            | ConnectionAborted
            | NotConnected
            | AddrNotAvailable
            | BrokenPipe
            | TimedOut
            | UnexpectedEof
            | HostUnreachable
            | NetworkUnreachable
            | NetworkDown
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::net::SocketAddr;
    use std::path::PathBuf;
    use std::time::Instant;

    use axum::extract::{ConnectInfo, Request, State};
    use axum::response::Response;
    use base64::Engine;
    use cmset_core::notify::config;
    use cmset_core::notify::render::{Message, Part};
    use rustls::pki_types::PrivateKeyDer;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    const PATH_TOKEN: &str = "path-tok3n-secret";
    const QUERY_TOKEN: &str = "query-tok3n-secret";
    const HEADER_TOKEN: &str = "header-tok3n-secret";
    const PROXY_PASSWORD: &str = "proxy-pa55word";
    const SLACK_TOKEN: &str = "xoxb-slack-tok3n";

    fn secret() -> BTreeMap<String, Vec<u8>> {
        [
            ("path-token", PATH_TOKEN),
            ("query-token", QUERY_TOKEN),
            ("header-token", HEADER_TOKEN),
            ("proxy-password", PROXY_PASSWORD),
            ("slack-token", SLACK_TOKEN),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect()
    }

    /// The service `service.<kind>.svc` configured by `yaml`.
    fn service(kind: &str, yaml: &str) -> Service {
        let data = BTreeMap::from([(format!("service.{kind}.svc"), yaml.to_string())]);
        let (config, problems) = config::parse(&data, &secret());
        assert!(problems.is_empty(), "{problems:?}");
        config.services["svc"].clone()
    }

    /// A webhook service at `url` that retries `retries` times, each attempt `timeout` long.
    fn webhook(url: &str, retries: u32, timeout: &str) -> Service {
        service(
            "webhook",
            &format!(
                "url: {url}\nheaders:\n- name: X-Token\n  value: $header-token\n\
                 retries: {retries}\ntimeout: {timeout}\n"
            ),
        )
    }

    /// The request a webhook template with this body makes.
    fn request_for(service: &Service) -> HttpRequest {
        let part = match &service.kind {
            config::ServiceKind::Webhook(_) => Part::Webhook {
                method: "POST".into(),
                path: None,
                body: r#"{"set":"app"}"#.into(),
            },
            _ => Part::Slack {
                attachments: None,
                blocks: None,
            },
        };
        let message = Message {
            template: "t".into(),
            text: "app rolled out".into(),
            part,
        };
        request::request(service, "#ops", &message).unwrap()
    }

    fn sender() -> Sender {
        // A second of backoff becomes a millisecond.
        Sender::with_backoff_scale(0.001)
    }

    /// One request as the receiver saw it.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Seen {
        method: String,
        /// Path and query, or the whole URL when the receiver stands in for a proxy.
        uri: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        peer: SocketAddr,
    }

    /// How the receiver answers its n-th request (the last reply repeats).
    #[derive(Clone)]
    enum Reply {
        Status {
            code: u16,
            headers: Vec<(&'static str, &'static str)>,
            body: String,
        },
        Never,
    }

    fn status(code: u16) -> Reply {
        Reply::Status {
            code,
            headers: Vec::new(),
            body: String::new(),
        }
    }

    type Log = Arc<Mutex<Vec<Seen>>>;

    /// An HTTP server on 127.0.0.1 that records every request and answers from `script`.
    struct Receiver {
        address: SocketAddr,
        log: Log,
    }

    impl Receiver {
        async fn start(script: Vec<Reply>) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            let log = Log::default();
            let app = axum::Router::new()
                .fallback(answer)
                .with_state((log.clone(), Arc::new(script)));
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            tokio::spawn(async move { axum::serve(listener, app).await });
            Self { address, log }
        }

        fn url(&self, path: &str) -> String {
            format!("http://{}{path}", self.address)
        }

        fn seen(&self) -> Vec<Seen> {
            self.log.lock().unwrap().clone()
        }
    }

    async fn answer(
        State((log, script)): State<(Log, Arc<Vec<Reply>>)>,
        ConnectInfo(peer): ConnectInfo<SocketAddr>,
        request: Request,
    ) -> Response {
        let (parts, body) = request.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        let seen = Seen {
            method: parts.method.to_string(),
            uri: parts.uri.to_string(),
            headers: parts
                .headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
                .collect(),
            body: body.to_vec(),
            peer,
        };
        let count = {
            let mut log = log.lock().unwrap();
            log.push(seen);
            log.len()
        };
        match script[(count - 1).min(script.len() - 1)].clone() {
            Reply::Status { code, headers, body } => {
                let mut response = Response::builder().status(code);
                for (name, value) in headers {
                    response = response.header(name, value);
                }
                response.body(body.into()).unwrap()
            }
            Reply::Never => std::future::pending().await,
        }
    }

    /// An address nothing listens on.
    async fn refused() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    }

    fn failed(outcome: &Outcome) -> (u32, &str, bool) {
        match outcome {
            Outcome::Failed {
                attempts,
                reason,
                retryable,
            } => (*attempts, reason.as_str(), *retryable),
            Outcome::Delivered { .. } => panic!("delivered"),
        }
    }

    #[tokio::test]
    async fn server_errors_are_retried_with_the_same_request_until_delivered() {
        let receiver = Receiver::start(vec![status(500), status(503), status(200)]).await;
        let service = webhook(&receiver.url("/hooks/cmset"), 3, "2s");
        let outcome = sender().deliver(&service, &request_for(&service)).await;
        assert_eq!(outcome, Outcome::Delivered { attempts: 3 });
        let seen = receiver.seen();
        assert_eq!(seen.len(), 3);
        assert!(seen.iter().all(|s| *s == seen[0]), "{seen:#?}");
        let first = &seen[0];
        assert_eq!(first.method, "POST");
        assert_eq!(first.uri, "/hooks/cmset");
        assert_eq!(first.body, br#"{"set":"app"}"#);
        let header = |name: &str| {
            first
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(header("x-token"), Some(HEADER_TOKEN));
        assert_eq!(header("content-type"), Some("application/json; charset=utf-8"));
        assert_eq!(
            header("user-agent"),
            Some(concat!("cmset/", env!("CARGO_PKG_VERSION")))
        );
    }

    #[tokio::test]
    async fn a_client_error_fails_at_once() {
        let receiver = Receiver::start(vec![status(400)]).await;
        let service = webhook(&receiver.url("/"), 3, "2s");
        let outcome = sender().deliver(&service, &request_for(&service)).await;
        assert_eq!(
            outcome,
            Outcome::Failed {
                attempts: 1,
                reason: "HTTP 400".into(),
                retryable: false
            }
        );
        assert_eq!(receiver.seen().len(), 1);
    }

    #[tokio::test]
    async fn too_many_requests_waits_as_retry_after_says() {
        let too_many = |after: &'static str| Reply::Status {
            code: 429,
            headers: vec![("retry-after", after)],
            body: String::new(),
        };
        let receiver = Receiver::start(vec![too_many("0"), status(200)]).await;
        let service = webhook(&receiver.url("/"), 3, "2s");
        let outcome = sender().deliver(&service, &request_for(&service)).await;
        assert_eq!(outcome, Outcome::Delivered { attempts: 2 });

        // A longer wait than the backoff's longest stops the retries; a later reconcile tries again.
        let receiver = Receiver::start(vec![too_many("120"), status(200)]).await;
        let service = webhook(&receiver.url("/"), 3, "2s");
        let outcome = sender().deliver(&service, &request_for(&service)).await;
        assert_eq!(
            failed(&outcome),
            (
                1,
                "HTTP 429; the server asked to wait 120s, longer than cmset waits",
                true
            )
        );
    }

    #[tokio::test]
    async fn a_receiver_that_never_answers_times_out_at_each_attempt() {
        let receiver = Receiver::start(vec![Reply::Never]).await;
        let service = webhook(&receiver.url("/"), 1, "200ms");
        let started = Instant::now();
        let outcome = sender().deliver(&service, &request_for(&service)).await;
        assert_eq!(failed(&outcome), (2, "no answer within 200ms", true));
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(receiver.seen().len(), 2);
    }

    #[tokio::test]
    async fn a_refused_connection_is_retried_then_fails() {
        let address = refused().await;
        let service = webhook(&format!("http://{address}/"), 2, "2s");
        let outcome = sender().deliver(&service, &request_for(&service)).await;
        assert_eq!(
            failed(&outcome),
            (3, "could not connect: connection refused", true)
        );
    }

    #[tokio::test]
    async fn slack_ok_false_fails_with_its_error_code() {
        let receiver = Receiver::start(vec![Reply::Status {
            code: 200,
            headers: vec![("content-type", "application/json")],
            body: r#"{"ok":false,"error":"channel_not_found"}"#.into(),
        }])
        .await;
        let url = receiver.url("/api/chat.postMessage");
        let service = service("slack", &format!("token: $slack-token\napiURL: {url}\n"));
        let outcome = sender().deliver(&service, &request_for(&service)).await;
        assert_eq!(failed(&outcome), (1, "Slack answered channel_not_found", false));
        let seen = receiver.seen();
        assert!(
            seen[0]
                .headers
                .contains(&("authorization".into(), format!("Bearer {SLACK_TOKEN}")))
        );
    }

    #[tokio::test]
    async fn a_proxy_carries_the_request_and_its_credentials() {
        let proxy = Receiver::start(vec![status(204)]).await;
        let service = service(
            "webhook",
            &format!(
                "url: http://hooks.example.com/in\nproxy: http://cmset:$proxy-password@{}\n",
                proxy.address
            ),
        );
        let outcome = sender().deliver(&service, &request_for(&service)).await;
        assert_eq!(outcome, Outcome::Delivered { attempts: 1 });
        let seen = proxy.seen();
        assert_eq!(seen[0].uri, "http://hooks.example.com/in");
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("cmset:{PROXY_PASSWORD}"));
        assert!(
            seen[0]
                .headers
                .contains(&("proxy-authorization".into(), format!("Basic {basic}"))),
            "{:?}",
            seen[0].headers
        );
    }

    #[tokio::test]
    async fn one_client_per_way_out_and_its_connections_are_reused() {
        let receiver = Receiver::start(vec![status(200)]).await;
        let sender = sender();
        let short = webhook(&receiver.url("/a"), 0, "1s");
        let long = webhook(&receiver.url("/b"), 0, "5s");
        for service in [&short, &long, &short] {
            let outcome = sender.deliver(service, &request_for(service)).await;
            assert_eq!(outcome, Outcome::Delivered { attempts: 1 });
        }
        assert_eq!(sender.inner.lock_clients().len(), 1);
        let seen = receiver.seen();
        assert!(seen.iter().all(|s| s.peer == seen[0].peer), "{seen:#?}");

        let proxied = service(
            "webhook",
            &format!("url: http://x/\nproxy: {}\n", receiver.url("")),
        );
        assert_eq!(
            sender.clone().deliver(&proxied, &request_for(&proxied)).await,
            Outcome::Delivered { attempts: 1 }
        );
        assert_eq!(sender.inner.lock_clients().len(), 2);
        assert_eq!(format!("{sender:?}"), "Sender { clients: 2 }");
    }

    /// A file under the system's temporary directory, unique to this process.
    fn temp_file(name: &str, content: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cmset-sender-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    #[tokio::test]
    async fn a_missing_or_bad_ca_file_fails_without_sending() {
        let receiver = Receiver::start(vec![status(200)]).await;
        let garbage = temp_file("garbage.pem", b"not a certificate");
        let broken = temp_file(
            "broken.pem",
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        );
        let missing = std::env::temp_dir().join("cmset-sender-no-such-ca.pem");
        for (path, why) in [
            (&missing, "No such file or directory"),
            (&garbage, "holds no PEM certificate"),
            (&broken, "a certificate is not valid"),
        ] {
            let path = path.display().to_string();
            let service = service(
                "webhook",
                &format!("url: {}\ncaFile: {path}\n", receiver.url("/")),
            );
            let outcome = sender().deliver(&service, &request_for(&service)).await;
            let (attempts, reason, retryable) = failed(&outcome);
            assert_eq!((attempts, retryable), (0, false), "{reason}");
            assert!(reason.starts_with(&format!("caFile {path}: ")), "{reason}");
            assert!(reason.contains(why), "{reason}");
        }
        assert!(receiver.seen().is_empty());
    }

    /// A fresh CA and a certificate for `localhost` it signed, as PEM: the CA's, the certificate's and
    /// its key's. Issued here rather than by the webhook's certificates (`serving`): notify must not
    /// need a room above it, even in its tests.
    fn localhost_certificate() -> (String, String, String) {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
        };
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::default();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "test receiver CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, "localhost");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        (ca.pem(), cert.pem(), key.serialize_pem())
    }

    /// An https server on 127.0.0.1 with a certificate of a fresh CA, answering 200 to each
    /// connection's first request; the CA's PEM comes back too.
    async fn https_receiver() -> (SocketAddr, String) {
        let (ca, cert, key) = localhost_certificate();
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    continue;
                };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && tls.read(&mut byte).await.unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
                let _ = tls.write_all(answer).await;
                let _ = tls.shutdown().await;
            }
        });
        (address, ca)
    }

    #[tokio::test]
    async fn https_trusts_the_ca_file_or_skips_verification_when_told() {
        let (address, ca) = https_receiver().await;
        let url = format!("https://localhost:{}/in", address.port());
        let ca_file = temp_file("ca.pem", ca.as_bytes()).display().to_string();
        let sender = sender();
        let deliver = |yaml: String| {
            let sender = sender.clone();
            async move {
                let service = service("webhook", &yaml);
                sender.deliver(&service, &request_for(&service)).await
            }
        };
        let delivered = Outcome::Delivered { attempts: 1 };
        assert_eq!(
            deliver(format!("url: {url}\ncaFile: {ca_file}\nretries: 0\n")).await,
            delivered
        );
        assert_eq!(
            deliver(format!("url: {url}\ninsecureSkipVerify: true\nretries: 0\n")).await,
            delivered
        );
        let outcome = deliver(format!("url: {url}\nretries: 0\n")).await;
        let (attempts, reason, retryable) = failed(&outcome);
        assert_eq!((attempts, retryable), (1, true));
        assert_eq!(
            reason,
            "could not connect: TLS: invalid peer certificate: UnknownIssuer"
        );
    }

    #[tokio::test]
    async fn no_credential_appears_in_a_reason() {
        // Receivers that echo every secret in their answers.
        let echoed = [PATH_TOKEN, QUERY_TOKEN, HEADER_TOKEN, PROXY_PASSWORD, SLACK_TOKEN].join(" ");
        let echo = Receiver::start(vec![Reply::Status {
            code: 500,
            headers: vec![],
            body: echoed.clone(),
        }])
        .await;
        let slack = Receiver::start(vec![Reply::Status {
            code: 200,
            headers: vec![],
            body: format!(r#"{{"ok":false,"error":"invalid_auth","echo":"{echoed}"}}"#),
        }])
        .await;
        let silent = Receiver::start(vec![Reply::Never]).await;
        let closed = refused().await;
        let secret_path = "/hooks/$path-token?key=$query-token";
        let proxy = |at: SocketAddr| format!("proxy: http://cmset:$proxy-password@{at}");
        let hook = |case: String| {
            format!(
                "{case}\nheaders:\n- name: X-Token\n  value: $header-token\nretries: 1\n\
                 basicAuth:\n  username: cmset\n  password: $proxy-password\n"
            )
        };
        let cases = [
            // A server error, from the receiver and through a proxy.
            (hook(format!("url: {}", echo.url(secret_path))), "HTTP 500"),
            (
                hook(format!(
                    "url: http://hooks.example.com{secret_path}\n{}",
                    proxy(echo.address)
                )),
                "HTTP 500",
            ),
            // The proxy refuses the tunnel to an https URL.
            (
                hook(format!(
                    "url: https://hooks.example.com{secret_path}\n{}",
                    proxy(echo.address)
                )),
                "could not connect through the proxy",
            ),
            // No one listens, at the URL or at the proxy.
            (
                hook(format!("url: http://{closed}{secret_path}")),
                "could not connect: connection refused",
            ),
            (
                hook(format!(
                    "url: http://hooks.example.com{secret_path}\n{}",
                    proxy(closed)
                )),
                "could not connect through the proxy: connection refused",
            ),
            (
                hook(format!(
                    "url: http://127.0.0.1{secret_path}\n\
                     proxy: socks5://cmset:$proxy-password@{closed}"
                )),
                "could not connect through the proxy",
            ),
            // No answer in time.
            (
                hook(format!("url: {}\ntimeout: 100ms", silent.url(secret_path))),
                "no answer within 100ms",
            ),
            // TLS with a server that speaks plain HTTP.
            (
                hook(format!("url: https://{}{secret_path}", echo.address)),
                "could not connect: TLS: received corrupt message of type InvalidContentType",
            ),
            // A URL the client cannot use.
            (
                hook(format!("url: http://[{PATH_TOKEN}]/")),
                "the URL is not valid: invalid IPv6 address",
            ),
        ];
        let sender = sender();
        let mut outcomes = Vec::new();
        for (yaml, want) in cases {
            let service = service("webhook", &yaml);
            outcomes.push((sender.deliver(&service, &request_for(&service)).await, want));
        }
        let bot = service(
            "slack",
            &format!(
                "token: $slack-token\napiURL: {}\n{}",
                slack.url(secret_path),
                proxy(slack.address)
            ),
        );
        outcomes.push((
            sender.deliver(&bot, &request_for(&bot)).await,
            "Slack answered invalid_auth",
        ));

        for (outcome, want) in &outcomes {
            assert_eq!(failed(outcome).1, *want);
            let debug = format!("{outcome:?}");
            for secret in [
                PATH_TOKEN,
                QUERY_TOKEN,
                HEADER_TOKEN,
                PROXY_PASSWORD,
                SLACK_TOKEN,
                "hooks.example.com",
                "/hooks/",
            ] {
                assert!(!debug.contains(secret), "{debug}");
            }
        }
        // The echoing receivers did get the requests, secrets and all.
        assert!(echo.seen().iter().any(|s| s.uri.contains(QUERY_TOKEN)));
        assert_eq!(slack.seen().len(), 1);
    }
}
