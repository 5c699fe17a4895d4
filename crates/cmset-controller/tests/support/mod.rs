//! A mocked API server for the scenario tests: it answers each request with a `Responder` and records
//! what was sent, so a test can state the exact requests.

use std::sync::{Arc, Mutex};

use http::{Request, Response};
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::Value;

/// One request the controller sent.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: String,
    /// The media types the request accepts in its answer.
    #[allow(dead_code)] // read by the scenarios of some test crates only
    pub accept: String,
    pub body: Value,
}

impl Seen {
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

pub type Responder = Arc<dyn Fn(&Seen) -> (u16, Value) + Send + Sync>;

/// Answers requests with `respond` and records them until the client is dropped.
pub async fn serve(
    mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
    respond: Responder,
    seen: Arc<Mutex<Vec<Seen>>>,
) {
    while let Some((request, send)) = handle.next_request().await {
        let (parts, body) = request.into_parts();
        let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let s = Seen {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or("").to_string(),
            accept: parts
                .headers
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string(),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        };
        let (code, reply) = respond(&s);
        seen.lock().unwrap().push(s);
        send.send_response(
            Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                .unwrap(),
        );
    }
}

/// A client whose requests `respond` answers, the task serving them (it ends when the last client is
/// dropped), and the record of what was sent.
#[allow(dead_code)] // not every scenario file uses every helper
pub fn mock_client(
    respond: Responder,
    namespace: &str,
) -> (kube::Client, tokio::task::JoinHandle<()>, Arc<Mutex<Vec<Seen>>>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let server = tokio::spawn(serve(handle, respond, seen.clone()));
    (kube::Client::new(service, namespace), server, seen)
}

/// Waits for a [`mock_client`]'s server to end, which it does once the last client is dropped; a
/// client kept alive by mistake fails the test here instead of hanging it.
#[allow(dead_code)] // not every scenario file uses every helper
pub async fn server_ends(server: tokio::task::JoinHandle<()>) {
    tokio::time::timeout(std::time::Duration::from_secs(5), server)
        .await
        .expect("server ends")
        .unwrap();
}
