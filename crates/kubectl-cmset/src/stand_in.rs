//! A stand-in API server for the plugin's tests, on a loopback port. A test says what each path
//! answers; what the real API server answers for things that are not there is recorded here, byte for
//! byte, so that the stand-in never answers in a way a real server does not.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use kube::{Client, Config};
use serde_json::json;

use crate::cluster::Cluster;

/// The namespace every stand-in cluster acts in.
pub const NAMESPACE: &str = "demo";

/// One answer: HTTP status, headers and body, or a connection closed without any.
#[derive(Clone, Debug)]
pub enum Answer {
    Http {
        code: u16,
        headers: Vec<(&'static str, &'static str)>,
        body: String,
    },
    /// The connection is closed before a byte of answer: a network failure.
    HangUp,
}

// The next answers were recorded from the e2e control plane (e2e/cluster: kube-apiserver v1.20.2) on
// 2026-11-25, asked as kube asks (HTTP/1.1, `Accept: application/json`) with `curl -i` and the admin
// token. Left out of the headers: `Date`, `Content-Length` (the stand-in writes its own) and the
// `X-Kubernetes-Pf-*` of its priority and fairness filter.

/// Not a Status but Go's plain-text `http.NotFound`, the fallback of the server's handler chain, for a
/// path no API handles. Recorded for `GET /apis/argoproj.io/v1alpha1/namespaces/x/rollouts` without the
/// Argo Rollouts CRD (a group the server does not serve at all); the same for `/apis/argoproj.io`, and,
/// with the CRD installed, for a version it does not serve (`.../v1beta1/namespaces/x/rollouts`) or a
/// resource it does not have (`.../v1alpha1/namespaces/x/foos`): a group served by CRDs answers every
/// path it does not know so.
pub fn page_not_found() -> Answer {
    Answer::Http {
        code: 404,
        headers: vec![
            ("Cache-Control", "no-cache, private"),
            ("Content-Type", "text/plain; charset=utf-8"),
            ("X-Content-Type-Options", "nosniff"),
        ],
        body: "404 page not found\n".to_string(),
    }
}

/// A built-in group's answer for a resource it does not have: recorded for
/// `GET /apis/apps/v1/namespaces/x/foos`; the same for a version of a built-in group the server does not
/// serve (`/apis/batch/v2alpha1/namespaces/x/cronjobs`), as for `batch/v1` CronJobs in Kubernetes 1.20.
pub fn resource_not_found() -> Answer {
    json_answer(
        404,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}
"#
        .to_string(),
    )
}

/// The answer for an object that does not exist, of a resource in a group (a CRD's): recorded for
/// `GET /apis/cmset.dev/v1alpha1/namespaces/x/configmapsets/app` (`configmapsets`, `cmset.dev`, `app`).
pub fn object_not_found(resource: &str, group: &str, name: &str) -> Answer {
    json_answer(
        404,
        format!(
            r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"{resource}.{group} \"{name}\" not found","reason":"NotFound","details":{{"name":"{name}","group":"{group}","kind":"{resource}"}},"code":404}}
"#
        ),
    )
}

/// The answer for a list in a namespace that does not exist: no error, an empty list. Recorded for
/// `GET /apis/apps/v1/namespaces/no-such-namespace/deployments` (`apps/v1`, `Deployment`).
pub fn empty_list(api_version: &str, kind: &str) -> Answer {
    let body = format!(
        r#"{{"kind":"{kind}List","apiVersion":"{api_version}","metadata":{{"resourceVersion":"230"}},"items":[]}}
"#
    );
    json_answer(200, body)
}

/// An answer with a JSON body, as the server sends a list, an object or a Status.
pub fn json(code: u16, body: &serde_json::Value) -> Answer {
    json_answer(code, format!("{body}\n"))
}

fn json_answer(code: u16, body: String) -> Answer {
    Answer::Http {
        code,
        headers: vec![
            ("Cache-Control", "no-cache, private"),
            ("Content-Type", "application/json"),
        ],
        body,
    }
}

/// A list of `items` (the server names it `<Kind>List`; kube reads only the items and metadata).
pub fn list(api_version: &str, items: Vec<serde_json::Value>) -> Answer {
    json(
        200,
        &json!({"apiVersion": api_version, "kind": "List", "metadata": {"resourceVersion": "7"},
                "items": items}),
    )
}

/// A Status of a failed request, as the API server writes one.
pub fn status(code: u16, reason: &str, message: &str, details: serde_json::Value) -> Answer {
    json(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "details": details, "code": code}),
    )
}

/// The collection of `resource` at `group_version` (`v1` for the core group) in [`NAMESPACE`].
pub fn collection(group_version: &str, resource: &str) -> String {
    let root = if group_version == "v1" { "/api" } else { "/apis" };
    format!("{root}/{group_version}/namespaces/{NAMESPACE}/{resource}")
}

/// Each built-in workload kind's collection, at each of its versions: group version and resource.
pub const DEPLOYMENTS: (&str, &str) = ("apps/v1", "deployments");
pub const STATEFULSETS: (&str, &str) = ("apps/v1", "statefulsets");
pub const DAEMONSETS: (&str, &str) = ("apps/v1", "daemonsets");
pub const CRONJOBS: (&str, &str) = ("batch/v1", "cronjobs");
pub const CRONJOBS_V1BETA1: (&str, &str) = ("batch/v1beta1", "cronjobs");
pub const JOBS: (&str, &str) = ("batch/v1", "jobs");
pub const ROLLOUTS: (&str, &str) = ("argoproj.io/v1alpha1", "rollouts");

/// `answer` for the collection `resource` names.
pub fn at((group_version, resource): (&str, &str), answer: Answer) -> (String, Answer) {
    (collection(group_version, resource), answer)
}

/// Kubernetes 1.20 without Argo Rollouts, as it answers for a namespace holding no workload:
/// CronJobs at `batch/v1beta1` only, the group `argoproj.io` not served.
pub fn kubernetes_1_20() -> Vec<(String, Answer)> {
    vec![
        at(DEPLOYMENTS, empty_list("apps/v1", "Deployment")),
        at(STATEFULSETS, empty_list("apps/v1", "StatefulSet")),
        at(DAEMONSETS, empty_list("apps/v1", "DaemonSet")),
        at(CRONJOBS, resource_not_found()),
        at(CRONJOBS_V1BETA1, empty_list("batch/v1beta1", "CronJob")),
        at(JOBS, empty_list("batch/v1", "Job")),
        at(ROLLOUTS, page_not_found()),
    ]
}

/// `base` with the answers of `changes` in place of its own for the same paths.
pub fn with(mut base: Vec<(String, Answer)>, changes: Vec<(String, Answer)>) -> Vec<(String, Answer)> {
    for (path, answer) in changes {
        base.retain(|(p, _)| *p != path);
        base.push((path, answer));
    }
    base
}

/// The requests the stand-in was asked, in the order asked: `GET /api/v1/...` (query left out, but
/// for a dry run, marked ` (dryRun)`).
pub type Asked = Arc<Mutex<Vec<String>>>;

/// Starts a stand-in API server that answers each path (query left out, any method) as `answers` says,
/// and any other as the real server answers a path no API handles ([`page_not_found`]): a test names
/// every path it serves. One request per connection; its thread
/// waits for connections until the test process ends. Returns a cluster (namespace [`NAMESPACE`]) on
/// it, and the requests asked.
pub fn start(answers: Vec<(String, Answer)>) -> (Cluster, Asked) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    let asked = Asked::default();
    let log = asked.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = Vec::new();
            let mut buffer = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buffer[..n]),
                }
            }
            let request = String::from_utf8_lossy(&request);
            let mut words = request.split_whitespace();
            let method = words.next().unwrap_or_default();
            let target = words.next().unwrap_or_default();
            let path = target.split('?').next().unwrap_or_default();
            let answer = answers
                .iter()
                .find(|(p, _)| p == path)
                .map_or_else(page_not_found, |(_, answer)| answer.clone());
            // A dry run says so: what `plan` sends must be seen to store nothing.
            let dry_run = if target.contains("dryRun=All") {
                " (dryRun)"
            } else {
                ""
            };
            log.lock()
                .expect("the log")
                .push(format!("{method} {path}{dry_run}"));
            let Answer::Http { code, headers, body } = answer else {
                continue; // dropping the stream closes it
            };
            let mut head = format!("HTTP/1.1 {code} Answer\r\n");
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            let _ = write!(
                stream,
                "{head}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let client = Client::try_from(Config::new(url.parse().expect("a URL"))).expect("a client");
    (Cluster::new(client, NAMESPACE.to_string()), asked)
}
