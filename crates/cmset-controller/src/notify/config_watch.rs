//! The notification configuration, kept current: the ConfigMap `cmset-notifications` and the Secret
//! `cmset-notifications-secret` of the operator's namespace, each watched by name, parsed again on
//! every change of either (no restart). Each refused entry is logged, counted in
//! `cmset_notification_config_problems`, and named in an Event on the ConfigMap; the others work.
//! Every replica reads the configuration (a replica taking over then lists nothing), but only the
//! leader publishes the Event: a standby owes it, and publishes it once when it takes over.
//!
//! The configuration is used only once both were read (the Secret's watch listed it, or found it
//! absent): parsed with the ConfigMap alone, every service that names a `$key` would be missing for a
//! moment at each start.

use std::collections::BTreeMap;
use std::sync::Arc;

use cmset_core::notify::{self, Config, Problem};
use futures::{StreamExt, future::BoxFuture};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::platform::leader::Term;
use crate::platform::metrics::Metrics;

/// Who reports on the configuration: Events are published as the operator, while this replica's term
/// as leader lasts.
#[derive(Clone)]
pub struct Reporting {
    pub client: Client,
    pub reporter: kube::runtime::events::Reporter,
    pub metrics: Arc<Metrics>,
    pub term: Option<Term>,
    /// Turns true when this replica takes over (it never turns back: a replica that loses the lease
    /// exits). Without leader election it is true from the start.
    pub took_over: watch::Receiver<bool>,
}

impl Reporting {
    /// Whether an Event published now would be sent (see `send_event`).
    fn leads(&self) -> bool {
        self.term.as_ref().is_none_or(|term| term.ends_at().is_some())
    }
}

/// Whether the Event naming the current problems is still owed: it is published only while this
/// replica leads, so problems read as a standby are owed until it takes over.
#[derive(Debug, Default)]
struct EventOwed(bool);

impl EventOwed {
    /// The problems changed to `problems`; whether to publish their Event now.
    fn changed(&mut self, problems: &[Problem], leading: bool) -> bool {
        self.0 = !problems.is_empty() && !leading;
        !problems.is_empty() && leading
    }

    /// This replica took over; whether to publish the current problems' Event now (once).
    fn took_over(&mut self) -> bool {
        std::mem::take(&mut self.0)
    }
}

/// The configuration as last read: `None` while the ConfigMap does not exist (nothing is sent).
#[derive(Debug, Default)]
pub struct Loaded {
    pub config: Option<Config>,
    pub problems: Vec<Problem>,
}

/// What the two watches last showed: `None` before the first list (and the ConfigMap once gone).
#[derive(Default)]
struct Sources {
    data: Option<BTreeMap<String, String>>,
    secret: Option<BTreeMap<String, Vec<u8>>>,
}

impl Sources {
    /// Nothing configured until both the ConfigMap and the Secret were read.
    fn load(&self) -> Loaded {
        match (&self.data, &self.secret) {
            (None, _) | (_, None) => Loaded::default(),
            (Some(data), Some(secret)) => {
                let (config, problems) = notify::config::parse(data, secret);
                Loaded {
                    config: Some(config),
                    problems,
                }
            }
        }
    }
}

enum Change {
    Data(Option<BTreeMap<String, String>>),
    Secret(BTreeMap<String, Vec<u8>>),
}

fn by_name(name: &str) -> watcher::Config {
    watcher::Config::default().fields(&format!("metadata.name={name}"))
}

/// The watch of one object by name, as the changes it makes: the object's data, or none once it is
/// gone (or absent from a relist).
fn changes<K, F>(api: Api<K>, name: &str, of: F) -> futures::stream::BoxStream<'static, Change>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: Fn(Option<&K>) -> Change + Send + Sync + 'static,
{
    let of = Arc::new(of);
    let mut listed: Option<K> = None;
    watcher(api, by_name(name))
        .filter_map(move |event| {
            let change = match event {
                Ok(watcher::Event::Apply(obj)) => Some(of(Some(&obj))),
                Ok(watcher::Event::Delete(_)) => Some(of(None)),
                Ok(watcher::Event::Init) => {
                    listed = None;
                    None
                }
                Ok(watcher::Event::InitApply(obj)) => {
                    listed = Some(obj);
                    None
                }
                Ok(watcher::Event::InitDone) => Some(of(listed.take().as_ref())),
                Err(e) => {
                    warn!(object = %std::any::type_name::<K>(), error = %crate::platform::redact::watcher_error(&e), "notification configuration watch failed; retrying");
                    None
                }
            };
            futures::future::ready(change)
        })
        .boxed()
}

/// Starts watching; the receiver always holds the configuration as last read. The future drives the
/// watches (until dropped).
pub fn watch(
    namespace: &str,
    read_secret: bool,
    reporting: Reporting,
) -> (watch::Receiver<Arc<Loaded>>, BoxFuture<'static, ()>) {
    let client = &reporting.client.clone();
    let (tx, rx) = watch::channel(Arc::new(Loaded::default()));
    let data = changes(
        Api::<ConfigMap>::namespaced(client.clone(), namespace),
        notify::CONFIGMAP_NAME,
        |cm| Change::Data(cm.map(|cm| cm.data.clone().unwrap_or_default())),
    );
    // Without rights on Secrets (`--secret-sets=false`) the Secret is not read: a `$key` then names
    // nothing, and the service that uses it is refused.
    let secret = if !read_secret {
        futures::stream::empty().boxed()
    } else {
        changes(
            Api::<Secret>::namespaced(client.clone(), namespace),
            notify::SECRET_NAME,
            |secret| {
                let data = secret.and_then(|s| s.data.as_ref());
                Change::Secret(
                    data.into_iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), v.0.clone()))
                        .collect(),
                )
            },
        )
    };
    let namespace = namespace.to_string();
    let driver = async move {
        let mut sources = Sources {
            // Not read at all: nothing to wait for.
            secret: (!read_secret).then(BTreeMap::new),
            ..Sources::default()
        };
        let mut reported: Vec<Problem> = Vec::new();
        let mut owed = EventOwed::default();
        let mut took_over = reporting.took_over.clone();
        // Already leading (no leader election, or the lease taken before this ran): nothing to wait for.
        let mut standing_by = !*took_over.borrow_and_update();
        let mut merged = futures::stream::select(
            // Backoff with jitter comes from the watcher's default; a broken watch logs and retries.
            data.chain(futures::stream::pending()),
            secret.chain(futures::stream::pending()),
        );
        loop {
            tokio::select! {
                change = merged.next() => {
                    let Some(change) = change else { break };
                    match change {
                        Change::Data(data) => sources.data = data,
                        Change::Secret(secret) => sources.secret = Some(secret),
                    }
                    let loaded = sources.load();
                    if loaded.problems != reported {
                        log_and_count(&reporting, &loaded.problems);
                        if owed.changed(&loaded.problems, reporting.leads()) {
                            publish(&reporting, &namespace, &loaded.problems);
                        }
                        reported = loaded.problems.clone();
                    }
                    info!(
                        configured = loaded.config.is_some(),
                        services = loaded.config.as_ref().map_or(0, |c| c.services.len()),
                        problems = loaded.problems.len(),
                        "notification configuration read"
                    );
                    let _ = tx.send(Arc::new(loaded));
                }
                changed = took_over.changed(), if standing_by => match changed {
                    // The sender is gone: nothing more will be said.
                    Err(_) => standing_by = false,
                    Ok(()) if *took_over.borrow_and_update() => {
                        standing_by = false;
                        if owed.took_over() {
                            publish(&reporting, &namespace, &reported);
                        }
                    }
                    Ok(()) => {}
                },
            }
        }
    };
    (rx, Box::pin(driver))
}

/// Logs each refused entry (its key and why, never a value) and sets the gauge: every replica does.
fn log_and_count(reporting: &Reporting, problems: &[Problem]) {
    reporting
        .metrics
        .notification_config_problems
        .set(i64::try_from(problems.len()).unwrap_or(i64::MAX));
    for problem in problems {
        warn!(key = %problem.key, problem = %problem.message, "notification configuration entry refused; the others still work");
    }
}

/// Names the problems in a Warning Event on the ConfigMap (sent only while this replica leads).
fn publish(reporting: &Reporting, namespace: &str, problems: &[Problem]) {
    if problems.is_empty() {
        return;
    }
    let (event, regarding) = problems_event(namespace, problems);
    let reporting = reporting.clone();
    tokio::spawn(async move {
        let Reporting {
            client,
            reporter,
            metrics,
            term,
            ..
        } = &reporting;
        crate::engine::context::send_event(client, reporter, metrics, term.as_ref(), &event, &regarding)
            .await;
    });
}

fn problems_event(namespace: &str, problems: &[Problem]) -> (kube::runtime::events::Event, ObjectReference) {
    let mut note = problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    truncate(&mut note, cmset_core::rollout::plan::EVENT_MESSAGE_MAX_LEN);
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some(notify::CONFIGMAP_NAME.into()),
        namespace: Some(namespace.to_string()),
        ..Default::default()
    };
    let event = kube::runtime::events::Event {
        type_: kube::runtime::events::EventType::Warning,
        reason: "InvalidNotificationConfig".into(),
        note: Some(note),
        action: "ReadConfiguration".into(),
        secondary: None,
    };
    (event, regarding)
}

fn truncate(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max.saturating_sub(3);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn no_configmap_means_nothing_configured_whatever_the_secret_holds() {
        let sources = Sources {
            data: None,
            secret: Some([("token".to_string(), b"xoxb-1".to_vec())].into()),
        };
        let loaded = sources.load();
        assert!(loaded.config.is_none());
        assert!(loaded.problems.is_empty());
    }

    #[test]
    fn a_bad_entry_is_a_problem_and_the_others_are_read() {
        let sources = Sources {
            data: Some(
                [
                    ("service.slack".to_string(), "token: $slack-token".to_string()),
                    ("service.nonsense".to_string(), "a: b".to_string()),
                ]
                .into(),
            ),
            secret: Some([("slack-token".to_string(), b"xoxb-secret-value".to_vec())].into()),
        };
        let loaded = sources.load();
        let config = loaded.config.expect("configured");
        assert!(config.services.contains_key("slack"));
        assert_eq!(loaded.problems.len(), 1, "{:?}", loaded.problems);
        assert_eq!(loaded.problems[0].key, "service.nonsense");
        assert!(!format!("{:?}", loaded.problems).contains("xoxb-secret-value"));
    }

    /// Issue 36: read before the Secret, the ConfigMap configures nothing (its bot would be missing for
    /// a moment); once the Secret was read, present or absent, it does.
    #[test]
    fn nothing_is_configured_until_the_secret_was_read_too() {
        let data = [("service.slack".to_string(), "token: $slack-token".to_string())].into();
        let mut sources = Sources {
            data: Some(data),
            secret: None,
        };
        let loaded = sources.load();
        assert!(loaded.config.is_none() && loaded.problems.is_empty());
        sources.secret = Some([("slack-token".to_string(), b"xoxb-1".to_vec())].into());
        assert!(sources.load().config.unwrap().services.contains_key("slack"));
        // Gone (deleted to be recreated): read, and the bot is refused until it is back.
        sources.secret = Some(BTreeMap::new());
        let loaded = sources.load();
        assert!(!loaded.config.unwrap().services.contains_key("slack"));
        assert_eq!(loaded.problems.len(), 1);
    }

    fn problem(key: &str) -> Problem {
        Problem {
            key: key.into(),
            message: "not a service type".into(),
        }
    }

    #[test]
    fn problems_read_as_a_standby_are_owed_until_it_takes_over_then_published_once() {
        let problems = [problem("service.nonsense")];
        let mut owed = EventOwed::default();
        assert!(!owed.changed(&problems, false), "a standby publishes nothing");
        assert!(owed.took_over(), "taking over publishes them");
        assert!(!owed.took_over(), "once");

        // Read while leading: published then, not again.
        let mut owed = EventOwed::default();
        assert!(owed.changed(&problems, true));
        assert!(!owed.took_over());

        // Fixed before the takeover: nothing is owed any more.
        let mut owed = EventOwed::default();
        assert!(!owed.changed(&problems, false));
        assert!(!owed.changed(&[], false));
        assert!(!owed.took_over());
    }

    type Body = kube::client::Body;

    /// An API server holding `cmset-notifications` with one refused key: lists answer it, watches
    /// never answer, and each Event created is recorded (and echoed back).
    fn api_server() -> (Client, Arc<std::sync::Mutex<Vec<serde_json::Value>>>) {
        use http_body_util::BodyExt;
        let (service, mut handle) = tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
        let events = Arc::new(std::sync::Mutex::new(Vec::new()));
        let created = events.clone();
        tokio::spawn(async move {
            let mut watches = Vec::new();
            while let Some((request, send)) = handle.next_request().await {
                let (method, path) = (request.method().clone(), request.uri().path().to_string());
                let query = request.uri().query().unwrap_or_default().to_string();
                let bytes = request.into_body().collect().await.unwrap().to_bytes();
                let (code, body) = if path.ends_with("/events") && method == http::Method::POST {
                    let event: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                    created.lock().unwrap().push(event.clone());
                    (201, event)
                } else if path.ends_with("/configmaps") && query.contains("watch=true") {
                    watches.push(send);
                    continue;
                } else if path.ends_with("/configmaps") {
                    let cm = serde_json::json!({"metadata": {"name": notify::CONFIGMAP_NAME,
                        "namespace": "ops", "resourceVersion": "1"}, "data": {"service.nonsense": "a: b"}});
                    (
                        200,
                        serde_json::json!({"kind": "ConfigMapList", "apiVersion": "v1",
                        "metadata": {"resourceVersion": "1"}, "items": [cm]}),
                    )
                } else {
                    (
                        404,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "code": 404}),
                    )
                };
                send.send_response(
                    http::Response::builder()
                        .status(code)
                        .body(Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap(),
                );
            }
        });
        (Client::new(service, "ops"), events)
    }

    #[tokio::test]
    async fn a_standby_that_takes_over_publishes_the_problems_event_once() {
        let (client, events) = api_server();
        let term_end = Arc::new(std::sync::Mutex::new(None));
        let term = Term::from_fn({
            let term_end = term_end.clone();
            move || *term_end.lock().unwrap()
        });
        let (took_over, took_over_rx) = watch::channel(false);
        let metrics = Arc::new(Metrics::default());
        let reporting = Reporting {
            client,
            reporter: kube::runtime::events::Reporter {
                controller: "cmset".into(),
                instance: Some("b".into()),
            },
            metrics: metrics.clone(),
            term: Some(term),
            took_over: took_over_rx,
        };
        let (mut loaded, driver) = watch("ops", false, reporting);
        let driver = tokio::spawn(driver);
        tokio::time::timeout(
            Duration::from_secs(10),
            loaded.wait_for(|l| !l.problems.is_empty()),
        )
        .await
        .expect("the configuration read")
        .unwrap();
        assert_eq!(
            metrics.notification_config_problems.get(),
            1,
            "a standby counts them"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(events.lock().unwrap().is_empty(), "a standby publishes no Event");

        *term_end.lock().unwrap() = Some(tokio::time::Instant::now() + Duration::from_secs(60));
        took_over.send_replace(true);
        tokio::time::timeout(Duration::from_secs(10), async {
            while events.lock().unwrap().is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the Event published on taking over");
        took_over.send_replace(true);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let events = events.lock().unwrap().clone();
        assert_eq!(events.len(), 1, "published once: {events:?}");
        assert_eq!(events[0]["reason"], "InvalidNotificationConfig");
        assert_eq!(events[0]["regarding"]["name"], notify::CONFIGMAP_NAME);
        assert!(
            events[0]["note"].as_str().unwrap().contains("service.nonsense"),
            "{events:?}"
        );
        driver.abort();
    }

    #[test]
    fn a_long_note_is_cut_on_a_character_boundary() {
        let mut text = "é".repeat(600);
        truncate(&mut text, 1024);
        assert!(text.len() <= 1024 && text.ends_with("..."));
    }
}
