//! The notification configuration, kept current: the ConfigMap `cmset-notifications` and the Secret
//! `cmset-notifications-secret` of the operator's namespace, each watched by name, parsed again on
//! every change of either (no restart). Each refused entry is logged, counted in
//! `cmset_notification_config_problems`, and named in an Event on the ConfigMap; the others work.

use std::collections::BTreeMap;
use std::sync::Arc;

use cmset_core::notify::{self, Config, Problem};
use futures::{StreamExt, future::BoxFuture};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
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
}

/// The configuration as last read: `None` while the ConfigMap does not exist (nothing is sent).
#[derive(Debug, Default)]
pub struct Loaded {
    pub config: Option<Config>,
    pub problems: Vec<Problem>,
}

/// What the two watches last showed.
#[derive(Default)]
struct Sources {
    data: Option<BTreeMap<String, String>>,
    secret: BTreeMap<String, Vec<u8>>,
}

impl Sources {
    fn load(&self) -> Loaded {
        match &self.data {
            None => Loaded::default(),
            Some(data) => {
                let (config, problems) = notify::config::parse(data, &self.secret);
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
        let mut sources = Sources::default();
        let mut reported: Vec<Problem> = Vec::new();
        let mut merged = futures::stream::select(
            // Backoff with jitter comes from the watcher's default; a broken watch logs and retries.
            data.chain(futures::stream::pending()),
            secret.chain(futures::stream::pending()),
        );
        while let Some(change) = merged.next().await {
            match change {
                Change::Data(data) => sources.data = data,
                Change::Secret(secret) => sources.secret = secret,
            }
            let loaded = sources.load();
            if loaded.problems != reported {
                report(&reporting, &namespace, &loaded);
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
    };
    (rx, Box::pin(driver))
}

/// Logs each refused entry (its key and why, never a value), sets the gauge, and names them in an
/// Event on the ConfigMap.
fn report(reporting: &Reporting, namespace: &str, loaded: &Loaded) {
    reporting
        .metrics
        .notification_config_problems
        .set(i64::try_from(loaded.problems.len()).unwrap_or(i64::MAX));
    for problem in &loaded.problems {
        warn!(key = %problem.key, problem = %problem.message, "notification configuration entry refused; the others still work");
    }
    if loaded.problems.is_empty() {
        return;
    }
    let mut note = loaded
        .problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    truncate(&mut note, cmset_core::plan::EVENT_MESSAGE_MAX_LEN);
    let regarding = k8s_openapi::api::core::v1::ObjectReference {
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
    let reporting = reporting.clone();
    tokio::spawn(async move {
        let Reporting {
            client,
            reporter,
            metrics,
            term,
        } = &reporting;
        crate::engine::context::send_event(client, reporter, metrics, term.as_ref(), &event, &regarding)
            .await;
    });
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
    use super::*;

    #[test]
    fn no_configmap_means_nothing_configured_whatever_the_secret_holds() {
        let sources = Sources {
            data: None,
            secret: [("token".to_string(), b"xoxb-1".to_vec())].into(),
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
            secret: [("slack-token".to_string(), b"xoxb-secret-value".to_vec())].into(),
        };
        let loaded = sources.load();
        let config = loaded.config.expect("configured");
        assert!(config.services.contains_key("slack"));
        assert_eq!(loaded.problems.len(), 1, "{:?}", loaded.problems);
        assert_eq!(loaded.problems[0].key, "service.nonsense");
        assert!(!format!("{:?}", loaded.problems).contains("xoxb-secret-value"));
    }

    #[test]
    fn a_long_note_is_cut_on_a_character_boundary() {
        let mut text = "é".repeat(600);
        truncate(&mut text, 1024);
        assert!(text.len() <= 1024 && text.ends_with("..."));
    }
}
