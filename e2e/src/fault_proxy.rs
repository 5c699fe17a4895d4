//! An HTTP-level proxy in front of the API server that a test can make misbehave, for one client only
//! (the operator whose kubeconfig [`FaultProxy::kubeconfig`] rewrote); everyone else reaches the API
//! server as usual.
//!
//! It terminates TLS with a throwaway self-signed certificate (which the rewritten kubeconfig trusts),
//! forwards each request over its own TLS connection to the real API server (with the kubeconfig's CA
//! and client identity; a bearer token passes through in the request's header), and streams responses
//! back, watches included. A test can:
//! - answer the next N (or every) request matching a method and a path substring with an error and
//!   a proper `Status` body ([`Rule`], [`Fault`]);
//! - or forward such a request at once but hold the API server's answer back for a while
//!   ([`Rule::delay_answer`]): the server has acted, the client learns of it late;
//! - hold a request (read whole) until the test releases it, then forward it whatever became of the
//!   client ([`Rule::hold_request`], [`FaultProxy::release_held`]): a write that lands late, after its
//!   sender gave up on it or exited;
//! - drop every open watch connection mid-stream, as a network cut would ([`FaultProxy::drop_watches`]);
//! - end every open watch with a `410 Gone` `ERROR` event, as the server does when the resourceVersion
//!   a watch resumes from is compacted away ([`FaultProxy::expire_watches`]);
//! - answer every request for an API group as a server that does not serve that group does
//!   ([`Rule::unserved_group`]): a cluster without a CRD, for one client, while the CRD stays installed
//!   for the tests running at the same time;
//! - count the requests matching a [`Match`], to measure request rates.
//!
//! The proxy never logs headers: the Authorization header carries a credential.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use kube::client::ConfigExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// Which requests a rule or a count is about: an HTTP method (any when `None`) and a substring of the
/// path and query (`/configmaps`, `watch=true`, ...).
#[derive(Clone, Debug)]
pub struct Match {
    pub method: Option<Method>,
    pub path_contains: String,
}

impl Match {
    pub fn new(method: Method, path_contains: &str) -> Self {
        Self {
            method: Some(method),
            path_contains: path_contains.to_string(),
        }
    }

    /// Any method.
    pub fn path(path_contains: &str) -> Self {
        Self {
            method: None,
            path_contains: path_contains.to_string(),
        }
    }

    /// Every request.
    pub fn all() -> Self {
        Self::path("")
    }

    /// Watch requests whose path contains `path_contains`.
    pub fn watches(path_contains: &str) -> Self {
        Self::new(Method::GET, path_contains).and_query("watch=true")
    }

    fn and_query(mut self, query: &str) -> Self {
        // Kept as a second substring in the same field, separated by a character no path holds.
        self.path_contains = format!("{}\n{query}", self.path_contains);
        self
    }

    pub fn matches(&self, method: &Method, path_and_query: &str) -> bool {
        self.method.as_ref().is_none_or(|m| m == method)
            && self
                .path_contains
                .split('\n')
                .all(|part| path_and_query.contains(part))
    }
}

/// An error answer, with a `Status` body the way the API server writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub code: u16,
    /// Sent as the `Retry-After` header and as `details.retryAfterSeconds`.
    pub retry_after_seconds: Option<u32>,
}

impl Fault {
    pub const CONFLICT: Fault = Fault::code(409);
    pub const GONE: Fault = Fault::code(410);
    pub const INTERNAL: Fault = Fault::code(500);
    pub const UNAVAILABLE: Fault = Fault::code(503);

    pub const fn code(code: u16) -> Self {
        Self {
            code,
            retry_after_seconds: None,
        }
    }

    pub const fn too_many_requests(retry_after_seconds: u32) -> Self {
        Self {
            code: 429,
            retry_after_seconds: Some(retry_after_seconds),
        }
    }

    fn reason(self) -> &'static str {
        match self.code {
            409 => "Conflict",
            410 => "Expired",
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            _ => "",
        }
    }

    /// The `Status` object the API server would send.
    pub fn status(self) -> serde_json::Value {
        let mut details = serde_json::Map::new();
        if let Some(seconds) = self.retry_after_seconds {
            details.insert("retryAfterSeconds".into(), json!(seconds));
        }
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": format!("injected by the e2e fault proxy: {}", self.reason()),
            "reason": self.reason(),
            "details": details,
            "code": self.code,
        })
    }

    fn response(self) -> Response<ProxyBody> {
        let body = serde_json::to_vec(&self.status()).expect("a Status serializes");
        let mut response = Response::new(full(body));
        *response.status_mut() = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(seconds) = self.retry_after_seconds {
            headers.insert(http::header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The API server's answer to a request under a group it does not serve, as the e2e control plane
/// (kube-apiserver v1.20.2) gave it for `/apis/argoproj.io/v1alpha1/namespaces/x/rollouts` without the
/// Argo Rollouts CRD (`curl -i`, 2026-11-25): not a `Status`, but its handler chain's fallback, Go's
/// plain-text `http.NotFound`, with these headers (and `Date`, `Content-Length` and the
/// `X-Kubernetes-Pf-*` of its priority and fairness filter). kubectl-cmset's stand-in server
/// (`crates/kubectl-cmset/src/stand_in.rs`) records the same answer; e2e/tests/plugin.rs checks both
/// against the running server.
pub const UNSERVED_HEADERS: [(&str, &str); 3] = [
    ("cache-control", "no-cache, private"),
    ("content-type", "text/plain; charset=utf-8"),
    ("x-content-type-options", "nosniff"),
];
pub const UNSERVED_BODY: &str = "404 page not found\n";

fn unserved_response() -> Response<ProxyBody> {
    let mut response = Response::new(full(UNSERVED_BODY));
    *response.status_mut() = StatusCode::NOT_FOUND;
    for (name, value) in UNSERVED_HEADERS {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    response
}

/// What a rule does to a request it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Answer with this error; the API server never sees the request.
    Fail(Fault),
    /// Answer as the API server answers for a group it does not serve; it never sees the request.
    NotServed,
    /// Forward the request at once, and pass the API server's answer on this much later: a slow
    /// network on the way back, where the server has acted long before the client knows.
    DelayAnswer(Duration),
    /// Hold the request, its body read whole, until [`FaultProxy::release_held`]; then forward it,
    /// whether or not its client is still there: a write that reaches the API server late.
    HoldRequest,
}

/// Do `action` to the requests `matcher` matches: the next `times` of them, or all while the rule is
/// in place (`times: None`).
#[derive(Clone, Debug)]
pub struct Rule {
    pub matcher: Match,
    pub action: Action,
    pub times: Option<usize>,
}

impl Rule {
    /// Answer the next `times` matching requests with `fault`.
    pub fn next(times: usize, matcher: Match, fault: Fault) -> Self {
        Self {
            matcher,
            action: Action::Fail(fault),
            times: Some(times),
        }
    }

    /// Answer every matching request with `fault` while the rule is in place.
    pub fn always(matcher: Match, fault: Fault) -> Self {
        Self {
            matcher,
            action: Action::Fail(fault),
            times: None,
        }
    }

    /// While the rule is in place, the API group `group` (`argoproj.io`) is not served: every request
    /// for a path under one of its versions gets the API server's answer for a group it does not
    /// serve. Discovery (`/apis`, `/apis/<group>`) is passed on as it is: a client that reads it still
    /// finds the group, so this stands in for a server without the group only for clients that ask
    /// for its resources directly, as kubectl-cmset does.
    pub fn unserved_group(group: &str) -> Self {
        Self {
            matcher: Match::path(&format!("/apis/{group}/")),
            action: Action::NotServed,
            times: None,
        }
    }

    /// Forward the next `times` matching requests, and pass each answer on `by` later.
    pub fn delay_answer(times: usize, matcher: Match, by: Duration) -> Self {
        Self {
            matcher,
            action: Action::DelayAnswer(by),
            times: Some(times),
        }
    }
}

impl Rule {
    /// Hold the next `times` matching requests until [`FaultProxy::release_held`].
    pub fn hold_request(times: usize, matcher: Match) -> Self {
        Self {
            matcher,
            action: Action::HoldRequest,
            times: Some(times),
        }
    }
}

/// What happens to the watches open when the test says so.
#[derive(Clone, Copy, Debug)]
enum WatchCommand {
    /// Cut the connection mid-stream.
    Drop,
    /// Send an `ERROR` event carrying a 410 `Status`, then end the response.
    Expire,
}

struct Seen {
    at: Instant,
    method: Method,
    path_and_query: String,
}

struct State {
    upstream: Upstream,
    rules: Mutex<Vec<Rule>>,
    seen: Mutex<Vec<Seen>>,
    injected: AtomicUsize,
    open_watches: AtomicUsize,
    watches: broadcast::Sender<WatchCommand>,
    /// Bumped by each [`FaultProxy::release_held`]: a held request goes once it moves past the value
    /// it arrived under.
    release: tokio::sync::watch::Sender<u64>,
    /// Requests held and not yet forwarded.
    holding: AtomicUsize,
    /// The API server's status codes for the held requests forwarded so far, in the order answered.
    held_answers: Mutex<Vec<u16>>,
}

/// Where and how to reach the real API server.
struct Upstream {
    /// `host:port` to connect to.
    address: String,
    /// What the server's certificate must name.
    server_name: ServerName<'static>,
    /// `Host` header value.
    authority: String,
    tls: tokio_rustls::TlsConnector,
}

pub struct FaultProxy {
    pub port: u16,
    state: Arc<State>,
    source: PathBuf,
    /// The proxy's own certificate (PEM), which the rewritten kubeconfig trusts.
    certificate_pem: String,
    accept: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to the API server of the kubeconfig at `kubeconfig`.
    pub async fn start(kubeconfig: &Path) -> Self {
        let source = Kubeconfig::read_from(kubeconfig).expect("read the kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(source, &KubeConfigOptions::default())
            .await
            .expect("a usable kubeconfig");
        let authority = config
            .cluster_url
            .authority()
            .expect("the server URL has a host")
            .to_string();
        let host = config.cluster_url.host().expect("the server URL has a host");
        let port = config.cluster_url.port_u16().unwrap_or(443);
        let server_name = ServerName::try_from(
            config
                .tls_server_name
                .clone()
                .unwrap_or_else(|| host.trim_matches(['[', ']']).to_string()),
        )
        .expect("a valid TLS server name");
        let tls = config.rustls_client_config().expect("a TLS client configuration");
        let upstream = Upstream {
            address: format!("{host}:{port}"),
            server_name,
            authority,
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
        };

        let generated =
            rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .expect("generate a certificate");
        let certificate_pem = generated.cert.pem();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(generated.signing_key.serialize_der()));
        let mut server =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("TLS versions")
                .with_no_client_auth()
                .with_single_cert(vec![CertificateDer::from(generated.cert.der().to_vec())], key)
                .expect("a serving certificate");
        // HTTP/1.1 only: every request and watch is then one exchange the proxy sees whole.
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));

        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State {
            upstream,
            rules: Mutex::new(Vec::new()),
            seen: Mutex::new(Vec::new()),
            injected: AtomicUsize::new(0),
            open_watches: AtomicUsize::new(0),
            watches: broadcast::channel(16).0,
            release: tokio::sync::watch::Sender::new(0),
            holding: AtomicUsize::new(0),
            held_answers: Mutex::new(Vec::new()),
        });
        let shared = state.clone();
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, state) = (acceptor.clone(), shared.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |request| handle(state.clone(), request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Self {
            port,
            state,
            source: kubeconfig.to_path_buf(),
            certificate_pem,
            accept,
        }
    }

    /// A copy of the kubeconfig the proxy was started with whose clusters are the proxy (trusting its
    /// certificate); the user's credentials are kept.
    pub fn kubeconfig(&self, name: &str) -> PathBuf {
        let mut config = Kubeconfig::read_from(&self.source).expect("read the kubeconfig");
        let ca = base64::engine::general_purpose::STANDARD.encode(self.certificate_pem.as_bytes());
        for named in &mut config.clusters {
            if let Some(cluster) = named.cluster.as_mut() {
                cluster.server = Some(format!("https://127.0.0.1:{}", self.port));
                cluster.certificate_authority = None;
                cluster.certificate_authority_data = Some(ca.clone());
                cluster.insecure_skip_tls_verify = None;
                cluster.tls_server_name = None;
                cluster.proxy_url = None;
            }
        }
        let out = std::env::temp_dir().join(format!("{name}.fault-proxy.kubeconfig"));
        let text = serde_yaml_ng::to_string(&config).expect("a kubeconfig serializes");
        write_private(&out, text.as_bytes());
        out
    }

    /// Adds a rule; rules are tried in the order added, and the first that matches answers.
    pub fn inject(&self, rule: Rule) {
        self.state.rules.lock().unwrap().push(rule);
    }

    /// Removes every rule: from now on every request is forwarded.
    pub fn clear(&self) {
        self.state.rules.lock().unwrap().clear();
    }

    /// Cuts every open watch connection mid-stream; returns how many there were.
    pub fn drop_watches(&self) -> usize {
        self.state.watches.send(WatchCommand::Drop).unwrap_or(0)
    }

    /// Ends every open watch with an `ERROR` event carrying a 410 `Status`; returns how many there were.
    pub fn expire_watches(&self) -> usize {
        self.state.watches.send(WatchCommand::Expire).unwrap_or(0)
    }

    /// Watches being streamed right now.
    pub fn open_watches(&self) -> usize {
        self.state.open_watches.load(Ordering::SeqCst)
    }

    /// Requests `matcher` matches, since the proxy started.
    pub fn count(&self, matcher: &Match) -> usize {
        self.count_between(matcher, None, None)
    }

    /// Requests `matcher` matches that arrived at or after `since`.
    pub fn count_since(&self, matcher: &Match, since: Instant) -> usize {
        self.count_between(matcher, Some(since), None)
    }

    /// Requests `matcher` matches that arrived in `[from, to)` (either end open when `None`).
    pub fn count_between(&self, matcher: &Match, from: Option<Instant>, to: Option<Instant>) -> usize {
        let seen = self.state.seen.lock().unwrap();
        seen.iter()
            .filter(|s| from.is_none_or(|f| s.at >= f) && to.is_none_or(|t| s.at < t))
            .filter(|s| matcher.matches(&s.method, &s.path_and_query))
            .count()
    }

    /// Forwards every request held so far ([`Rule::hold_request`]).
    pub fn release_held(&self) {
        self.state.release.send_modify(|epoch| *epoch += 1);
    }

    /// Requests held now, not yet released.
    pub fn holding(&self) -> usize {
        self.state.holding.load(Ordering::SeqCst)
    }

    /// The API server's status codes for the held requests it has answered, in order.
    pub fn held_answers(&self) -> Vec<u16> {
        self.state.held_answers.lock().unwrap().clone()
    }

    /// Requests a rule acted on so far (answered with a fault, or delayed).
    pub fn injected(&self) -> usize {
        self.state.injected.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

fn write_private(path: &Path, contents: &[u8]) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .expect("write the proxied kubeconfig");
    f.write_all(contents).expect("write the proxied kubeconfig");
}

fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn is_watch(path_and_query: &str) -> bool {
    path_and_query
        .split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

/// What the first rule matching this request does to it, if any rule does, counting that rule down.
fn take_action(state: &State, method: &Method, path_and_query: &str) -> Option<Action> {
    let mut rules = state.rules.lock().unwrap();
    let at = rules
        .iter()
        .position(|r| r.matcher.matches(method, path_and_query))?;
    let action = rules[at].action;
    if let Some(times) = rules[at].times.as_mut() {
        *times -= 1;
        if *times == 0 {
            rules.remove(at);
        }
    }
    Some(action)
}

async fn handle(state: Arc<State>, request: Request<Incoming>) -> Result<Response<ProxyBody>, Infallible> {
    let method = request.method().clone();
    let path_and_query = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".to_string());
    state.seen.lock().unwrap().push(Seen {
        at: Instant::now(),
        method: method.clone(),
        path_and_query: path_and_query.clone(),
    });
    let action = take_action(&state, &method, &path_and_query);
    if action.is_some() {
        state.injected.fetch_add(1, Ordering::SeqCst);
    }
    let answer_delay = match action {
        Some(Action::Fail(fault)) => {
            // Read the body, so the client's connection stays usable for its next request.
            let _ = request.into_body().collect().await;
            return Ok(fault.response());
        }
        Some(Action::NotServed) => {
            let _ = request.into_body().collect().await;
            return Ok(unserved_response());
        }
        Some(Action::DelayAnswer(by)) => by,
        Some(Action::HoldRequest) => return Ok(hold(state, request, path_and_query).await),
        None => Duration::ZERO,
    };
    let watch = is_watch(&path_and_query);
    // Subscribed before the request goes out: a command given while it is under way still reaches it.
    let commands = state.watches.subscribe();
    let forwarded = forward(&state.upstream, request, &path_and_query).await;
    if !answer_delay.is_zero() {
        tokio::time::sleep(answer_delay).await;
    }
    match forwarded {
        Ok(response) if watch && response.status().is_success() => {
            Ok(watch_response(state, response, commands))
        }
        Ok(response) => {
            let (parts, body) = response.into_parts();
            Ok(Response::from_parts(
                parts,
                body.map_err(BoxError::from).boxed_unsync(),
            ))
        }
        Err(e) => Ok(unreachable(&e)),
    }
}

/// The proxy's answer when it could not reach the API server.
fn unreachable(e: &BoxError) -> Response<ProxyBody> {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("e2e fault proxy: the API server is unreachable: {e}"),
        "reason": "ServiceUnavailable", "code": 502,
    });
    let mut response = Response::new(full(serde_json::to_vec(&body).unwrap()));
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    response
}

/// Holds `request` until the test releases it, then forwards it from a task of its own, so that it
/// reaches the API server even when its client has gone meanwhile (its connection closed, its process
/// exited); the client, if still there, gets the answer.
async fn hold(state: Arc<State>, request: Request<Incoming>, path_and_query: String) -> Response<ProxyBody> {
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return unreachable(&BoxError::from(e)),
    };
    let mut release = state.release.subscribe();
    let arrived = *release.borrow_and_update();
    state.holding.fetch_add(1, Ordering::SeqCst);
    let (answer, answered) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        // The sender lives in `state`, which this task holds: waiting cannot fail.
        let _ = release.wait_for(|epoch| *epoch > arrived).await;
        state.holding.fetch_sub(1, Ordering::SeqCst);
        let request = Request::from_parts(parts, Full::new(body));
        let response = match forward(&state.upstream, request, &path_and_query).await {
            Ok(response) => {
                let (parts, body) = response.into_parts();
                let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                state.held_answers.lock().unwrap().push(parts.status.as_u16());
                Response::from_parts(parts, full(body))
            }
            Err(e) => unreachable(&e),
        };
        let _ = answer.send(response);
    });
    answered
        .await
        .unwrap_or_else(|_| unreachable(&"the held request's task ended".into()))
}

/// Hop-by-hop headers: about one connection, not to be forwarded to the next.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
    ] {
        headers.remove(name);
    }
}

/// Sends `request` to the API server over a connection of its own (watches hold theirs for minutes).
async fn forward<B>(
    upstream: &Upstream,
    request: Request<B>,
    path_and_query: &str,
) -> Result<Response<Incoming>, BoxError>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let tcp = TcpStream::connect(&upstream.address).await?;
    let tls = upstream.tls.connect(upstream.server_name.clone(), tcp).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(connection);
    let (mut parts, body) = request.into_parts();
    parts.uri = path_and_query.parse()?;
    strip_hop_by_hop(&mut parts.headers);
    parts
        .headers
        .insert(http::header::HOST, HeaderValue::from_str(&upstream.authority)?);
    let mut response = sender.send_request(Request::from_parts(parts, body)).await?;
    strip_hop_by_hop(response.headers_mut());
    Ok(response)
}

/// Counts an open watch for as long as its stream lives.
struct OpenWatch(Arc<State>);

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The event the API server sends when a watch cannot continue from its resourceVersion.
fn gone_event() -> Bytes {
    let mut status = Fault::GONE.status();
    status["message"] = json!("too old resource version (injected by the e2e fault proxy)");
    let mut line = serde_json::to_vec(&json!({"type": "ERROR", "object": status})).unwrap();
    line.push(b'\n');
    line.into()
}

/// Streams a watch response through, one whole event (line) at a time, so that a 410 event can be put
/// between two events and a cut never looks like a truncated event the server sent.
fn watch_response(
    state: Arc<State>,
    response: Response<Incoming>,
    commands: broadcast::Receiver<WatchCommand>,
) -> Response<ProxyBody> {
    state.open_watches.fetch_add(1, Ordering::SeqCst);
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(http::header::CONTENT_LENGTH);
    struct Streaming {
        body: Incoming,
        commands: broadcast::Receiver<WatchCommand>,
        pending: BytesMut,
        /// The proxy is gone: the body follows the API server alone.
        orphaned: bool,
        done: bool,
        _open: OpenWatch,
    }
    let start = Streaming {
        body,
        commands,
        pending: BytesMut::new(),
        orphaned: false,
        done: false,
        _open: OpenWatch(state),
    };
    let frames = futures::stream::unfold(start, |mut s| async move {
        loop {
            if s.done {
                return None;
            }
            tokio::select! {
                command = s.commands.recv(), if !s.orphaned => match command {
                    Ok(WatchCommand::Drop) => {
                        s.done = true;
                        let cut: BoxError = "watch dropped by the e2e fault proxy".into();
                        return Some((Err(cut), s));
                    }
                    Ok(WatchCommand::Expire) => {
                        s.done = true;
                        return Some((Ok(Frame::data(gone_event())), s));
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => {
                        s.orphaned = true;
                        continue;
                    }
                },
                frame = s.body.frame() => match frame {
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => {
                            s.pending.extend_from_slice(&data);
                            if let Some(end) = s.pending.iter().rposition(|b| *b == b'\n') {
                                let lines = s.pending.split_to(end + 1).freeze();
                                return Some((Ok(Frame::data(lines)), s));
                            }
                        }
                        Err(frame) => return Some((Ok(frame), s)),
                    },
                    Some(Err(e)) => {
                        s.done = true;
                        return Some((Err(BoxError::from(e)), s));
                    }
                    None => {
                        s.done = true;
                        let rest = std::mem::take(&mut s.pending).freeze();
                        return (!rest.is_empty()).then(|| (Ok(Frame::data(rest)), s));
                    }
                },
            }
        }
    });
    Response::from_parts(parts, BodyExt::boxed_unsync(StreamBody::new(frames.boxed())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_by_method_and_substrings() {
        let create = Match::new(Method::POST, "/configmaps");
        assert!(create.matches(&Method::POST, "/api/v1/namespaces/a/configmaps?fieldManager=x"));
        assert!(!create.matches(&Method::GET, "/api/v1/namespaces/a/configmaps"));
        let watches = Match::watches("/configmapsets");
        assert!(watches.matches(
            &Method::GET,
            "/apis/cmset.dev/v1alpha1/namespaces/a/configmapsets?watch=true&resourceVersion=1"
        ));
        assert!(!watches.matches(
            &Method::GET,
            "/apis/cmset.dev/v1alpha1/namespaces/a/configmapsets"
        ));
        assert!(Match::all().matches(&Method::DELETE, "/anything"));
    }

    #[test]
    fn watches_are_told_by_their_query() {
        assert!(is_watch("/api/v1/configmaps?labelSelector=a&watch=true"));
        assert!(is_watch("/api/v1/configmaps?watch=1"));
        assert!(!is_watch("/api/v1/configmaps?labelSelector=watch%3Dtrue"));
        assert!(!is_watch("/api/v1/watch=true"));
    }

    #[test]
    fn an_unserved_group_is_every_path_under_it_and_only_those() {
        let rule = Rule::unserved_group("argoproj.io");
        assert_eq!(rule.action, Action::NotServed);
        assert_eq!(rule.times, None);
        for path in [
            "/apis/argoproj.io/v1alpha1/namespaces/a/rollouts?limit=500",
            "/apis/argoproj.io/v1alpha1",
        ] {
            assert!(rule.matcher.matches(&Method::GET, path), "{path}");
        }
        for path in ["/apis", "/apis/apps/v1/namespaces/argoproj.io/deployments"] {
            assert!(!rule.matcher.matches(&Method::GET, path), "{path}");
        }
        let response = unserved_response();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            response.headers()[http::header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
    }

    #[test]
    fn statuses_look_like_the_api_servers() {
        let status = Fault::too_many_requests(2).status();
        assert_eq!(status["code"], 429);
        assert_eq!(status["reason"], "TooManyRequests");
        assert_eq!(status["details"]["retryAfterSeconds"], 2);
        let gone: serde_json::Value = serde_json::from_slice(&gone_event()).unwrap();
        assert_eq!(gone["type"], "ERROR");
        assert_eq!(gone["object"]["code"], 410);
        assert!(gone_event().ends_with(b"\n"));
    }
}
