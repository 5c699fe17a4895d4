//! A notification receiver for tests: plays Slack, Teams and webhooks on one loopback port and
//! records every request it takes. It answers 200 (Slack's `{"ok":true}` under `/slack`) unless a test
//! makes a path fail for a number of requests ([`Receiver::fail_next`], 500) or for a while
//! ([`Receiver::down_until`], 503), as a receiver that is failing or down would.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};

/// One request the receiver took, and what it answered.
#[derive(Clone, Debug)]
pub struct Heard {
    pub path: String,
    pub authorization: Option<String>,
    pub status: u16,
    pub body: serde_json::Value,
}

#[derive(Clone, Default)]
pub struct Receiver {
    heard: Arc<Mutex<Vec<Heard>>>,
    /// Requests of a path still to be answered 500.
    failing: Arc<Mutex<BTreeMap<String, u32>>>,
    /// Until when a path answers 503.
    down: Arc<Mutex<BTreeMap<String, Instant>>>,
}

impl Receiver {
    /// Serves on a free loopback port; its number.
    pub async fn start(&self) -> u16 {
        let receiver = self.clone();
        crate::serve_http(move |req| receiver.clone().answer(req)).await
    }

    /// Answers 500 to the next `count` requests of `path`.
    pub fn fail_next(&self, path: &str, count: u32) {
        self.failing.lock().unwrap().insert(path.to_string(), count);
    }

    /// Answers 503 to every request of `path` until `until`.
    pub fn down_until(&self, path: &str, until: Instant) {
        self.down.lock().unwrap().insert(path.to_string(), until);
    }

    /// Every request taken so far, in order.
    pub fn heard(&self) -> Vec<Heard> {
        self.heard.lock().unwrap().clone()
    }

    async fn answer(self, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
        let path = req.uri().path().to_string();
        let authorization = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = crate::json_body(req.into_body()).await;
        let status = self.status_for(&path);
        let answer = match status {
            200 if path.starts_with("/slack") => r#"{"ok":true}"#,
            _ => "{}",
        };
        self.heard.lock().unwrap().push(Heard {
            path,
            authorization,
            status,
            body,
        });
        Ok(Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(answer)))
            .unwrap())
    }

    fn status_for(&self, path: &str) -> u16 {
        if self
            .down
            .lock()
            .unwrap()
            .get(path)
            .is_some_and(|until| Instant::now() < *until)
        {
            return 503;
        }
        match self.failing.lock().unwrap().get_mut(path) {
            Some(left) if *left > 0 => {
                *left -= 1;
                500
            }
            _ => 200,
        }
    }
}
