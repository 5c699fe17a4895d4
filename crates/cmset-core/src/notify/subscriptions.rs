//! Who hears about a set: its annotations `notifications.cmset.dev/subscribe.<trigger>.<service>:
//! <recipient>[;<recipient>]` (or `subscribe.<service>` for the default triggers), and the ConfigMap's
//! `subscriptions` whose selector matches its labels.
//!
//! A set names recipients, never addresses: a channel for a Slack bot, or one of the names the admin
//! gave a Slack webhook or Teams URL. A recipient that looks like a URL is refused, and problems never
//! quote a refused recipient (it may be a webhook URL, which is a credential).
//!
//! The admin aims what a set may reach: a Slack bot's `channels` globs bound the channels its
//! annotations may name, and one set names at most `max_recipients` recipients in all (beyond, none
//! of its annotations subscribes: a set cannot fan one token out to hundreds of channels).

use std::collections::{BTreeMap, BTreeSet};

use super::config::{self, Config, ServiceKind, SlackDelivery};
use super::selector::Selector;
use super::{Problem, SUBSCRIBE_PREFIX};

/// One trigger, one service, one recipient (empty for a webhook service, which has none).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Subscription {
    pub trigger: String,
    pub service: String,
    pub recipient: String,
}

/// A service and a recipient of it, checked against the configuration.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    pub service: String,
    pub recipient: String,
}

/// An entry of the ConfigMap's `subscriptions`: these recipients hear these triggers (the default ones
/// when none are named) of every set whose labels the selector matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultSubscription {
    pub recipients: Vec<Target>,
    /// Recipients of a service that is not configured now (its Secret missing, say): not subscribed,
    /// but their records are kept until it is back ([`held`]).
    pub held: Vec<Target>,
    pub triggers: Vec<String>,
    pub selector: Selector,
}

/// Longest recipient accepted (Slack channel names are at most 80 characters).
const MAX_RECIPIENT_LEN: usize = 80;

fn looks_like_url(recipient: &str) -> bool {
    let lower = recipient.to_ascii_lowercase();
    lower.contains("://")
        || lower.contains('/')
        || lower.contains('\\')
        || lower.starts_with("http:")
        || lower.starts_with("https:")
        || lower.starts_with("www.")
}

/// Whether `recipient` may be sent to through `service`. The recipient of a webhook service is
/// ignored and becomes empty. Messages never quote the recipient.
pub(crate) fn check_recipient(config: &Config, service: &str, recipient: &str) -> Result<Target, String> {
    let Some(configured) = config.services.get(service) else {
        let names: Vec<&str> = config.services.keys().map(String::as_str).collect();
        return Err(format!(
            "names a service that is not configured (configured: {})",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ));
    };
    let named = |names: &BTreeMap<String, super::Credential>| {
        if names.contains_key(recipient) {
            Ok(())
        } else {
            Err(format!(
                "is not one of the recipients of service {service} ({})",
                names.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
            ))
        }
    };
    if let ServiceKind::Webhook(_) = configured.kind {
        return Ok(Target {
            service: service.to_string(),
            recipient: String::new(),
        });
    }
    if recipient.is_empty() {
        return Err(format!("names no recipient of service {service}"));
    }
    if looks_like_url(recipient) {
        return Err(
            "is a URL, which a set cannot name: name a channel or a recipient the admin configured"
                .to_string(),
        );
    }
    let plain = recipient.len() <= MAX_RECIPIENT_LEN
        && recipient
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '#' | '@' | '.' | '_' | '-'));
    if !plain {
        return Err("is not a channel or recipient name (letters, digits, #, @, ., _ and -)".to_string());
    }
    match &configured.kind {
        ServiceKind::Slack(slack) => match &slack.delivery {
            SlackDelivery::Bot { .. } => Ok(()),
            SlackDelivery::Webhooks(names) => named(names),
        },
        ServiceKind::Teams(teams) => named(&teams.recipient_urls),
        ServiceKind::Webhook(_) => Ok(()),
    }?;
    Ok(Target {
        service: service.to_string(),
        recipient: recipient.to_string(),
    })
}

/// Recipients one set may name in all its annotations, unless the operator says otherwise
/// (`--notifications-max-recipients`).
pub const DEFAULT_MAX_RECIPIENTS: usize = 10;

/// What [`of_set`] reports when a set names more than its share: the key of its problem.
pub const ALL_ANNOTATIONS: &str = "notifications.cmset.dev/subscribe.*";

/// The distinct (service, recipient) pairs a set's annotations name, as written: what
/// `max_recipients` bounds. A webhook service counts once.
fn named_recipients(config: &Config, annotations: &BTreeMap<String, String>) -> usize {
    let mut named: BTreeSet<(&str, &str)> = BTreeSet::new();
    for (annotation, value) in annotations {
        let Some(rest) = annotation.strip_prefix(SUBSCRIBE_PREFIX) else {
            continue;
        };
        let service = rest.rsplit('.').next().unwrap_or(rest);
        let webhook = matches!(
            config.services.get(service).map(|s| &s.kind),
            Some(ServiceKind::Webhook(_))
        );
        let mut recipients: Vec<&str> = value
            .split(';')
            .map(str::trim)
            .filter(|r| !r.is_empty() && !webhook)
            .collect();
        if recipients.is_empty() {
            recipients.push("");
        }
        named.extend(recipients.into_iter().map(|r| (service, r)));
    }
    named.len()
}

/// The subscriptions of a set, from its annotations and the ConfigMap's `subscriptions`, sorted and
/// without repeats, and a problem for each annotation (or recipient in it) that is wrong, keyed by the
/// annotation. A set whose annotations name more than `max_recipients` recipients in all gets none of
/// them (one problem, keyed [`ALL_ANNOTATIONS`]); the admin's `subscriptions` still apply.
pub fn of_set(
    config: &Config,
    annotations: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
    max_recipients: usize,
) -> (Vec<Subscription>, Vec<Problem>) {
    let mut subs = BTreeSet::new();
    let mut problems = Vec::new();
    let named = named_recipients(config, annotations);
    let annotations = if named > max_recipients {
        problems.push(Problem::new(
            ALL_ANNOTATIONS,
            format!(
                "the set names {named} recipients in its subscriptions, more than the {max_recipients} \
                 the operator allows: none of them is subscribed"
            ),
        ));
        &BTreeMap::new()
    } else {
        annotations
    };
    for (annotation, value) in annotations {
        let Some(rest) = annotation.strip_prefix(SUBSCRIBE_PREFIX) else {
            continue;
        };
        let (triggers, service) = match rest.split('.').collect::<Vec<_>>().as_slice() {
            [service] => (config.default_triggers(), *service),
            [trigger, service] => (vec![trigger.to_string()], *service),
            _ => {
                problems.push(Problem::new(
                    annotation,
                    format!("must be {SUBSCRIBE_PREFIX}<trigger>.<service> or {SUBSCRIBE_PREFIX}<service>"),
                ));
                continue;
            }
        };
        if let Some(unknown) = triggers.iter().find(|t| config.trigger(t).is_none()) {
            problems.push(Problem::new(
                annotation,
                format!("names trigger `{unknown}`, which is not defined"),
            ));
            continue;
        }
        let recipients: Vec<&str> = value
            .split(';')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .collect();
        let recipients = if recipients.is_empty() {
            vec![""]
        } else {
            recipients
        };
        for (i, recipient) in recipients.iter().enumerate() {
            let aimed = check_recipient(config, service, recipient).and_then(|target| {
                match config.services.get(&target.service) {
                    Some(s) if !config::may_name(s, &target.recipient) => Err(format!(
                        "is not one of the channels service {service} lets sets name"
                    )),
                    _ => Ok(target),
                }
            });
            match aimed {
                Ok(target) => subs.extend(triggers.iter().map(|trigger| Subscription {
                    trigger: trigger.clone(),
                    service: target.service.clone(),
                    recipient: target.recipient.clone(),
                })),
                Err(e) if recipients.len() == 1 => {
                    problems.push(Problem::new(annotation, format!("the recipient {e}")))
                }
                Err(e) => problems.push(Problem::new(annotation, format!("recipient {} {e}", i + 1))),
            }
        }
    }
    for default in config.subscriptions.iter().filter(|d| d.selector.matches(labels)) {
        let triggers = if default.triggers.is_empty() {
            config.default_triggers()
        } else {
            default.triggers.clone()
        };
        for trigger in &triggers {
            subs.extend(default.recipients.iter().map(|target| Subscription {
                trigger: trigger.clone(),
                service: target.service.clone(),
                recipient: target.recipient.clone(),
            }));
        }
    }
    problems.sort();
    (subs.into_iter().collect(), problems)
}

/// The subscriptions a set still declares but cannot use now, because the service (or trigger) they
/// name is missing from the configuration for the moment: those of its annotations (within
/// `max_recipients`) and of the admin's entries that select it. Their records are kept, so that the
/// service coming back does not make them new.
pub fn held(
    config: &Config,
    annotations: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
    max_recipients: usize,
) -> Vec<Subscription> {
    let mut out = BTreeSet::new();
    if named_recipients(config, annotations) <= max_recipients {
        for (annotation, value) in annotations {
            let Some(rest) = annotation.strip_prefix(SUBSCRIBE_PREFIX) else {
                continue;
            };
            let (triggers, service) = match rest.split('.').collect::<Vec<_>>().as_slice() {
                [service] => (config.default_triggers(), *service),
                [trigger, service] => (vec![trigger.to_string()], *service),
                _ => continue,
            };
            let missing = !config.services.contains_key(service)
                || triggers.iter().any(|t| config.trigger(t).is_none());
            if !missing {
                continue;
            }
            // What the recipient becomes depends on the service's kind, unknown now: as written, and
            // none (a webhook's).
            let recipients = value.split(';').map(str::trim).chain([""]);
            for recipient in recipients {
                out.extend(triggers.iter().map(|trigger| Subscription {
                    trigger: trigger.clone(),
                    service: service.to_string(),
                    recipient: recipient.to_string(),
                }));
            }
        }
    }
    for default in config.subscriptions.iter().filter(|d| d.selector.matches(labels)) {
        let triggers = if default.triggers.is_empty() {
            config.default_triggers()
        } else {
            default.triggers.clone()
        };
        for trigger in &triggers {
            out.extend(default.held.iter().map(|target| Subscription {
                trigger: trigger.clone(),
                service: target.service.clone(),
                recipient: target.recipient.clone(),
            }));
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::fixtures::{self, data};

    fn subs(list: &[(&str, &str, &str)]) -> Vec<Subscription> {
        list.iter()
            .map(|(t, s, r)| Subscription {
                trigger: t.to_string(),
                service: s.to_string(),
                recipient: r.to_string(),
            })
            .collect()
    }

    fn annotate(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (format!("{SUBSCRIBE_PREFIX}{k}"), v.to_string()))
            .collect()
    }

    #[test]
    fn annotations_subscribe_recipients() {
        let config = fixtures::config_with(&[("defaultTriggers", "[on-rollout-failed, on-rolled-back]")]);
        let annotations = annotate(&[
            ("on-rollout-completed.slack", " #deploys ; ops;; "),
            ("on-rollout-failed.teams", "prod"),
            ("on-rollout-failed.audit", ""),
            ("on-rollout-failed.hooks", "dev"),
            ("slack", "oncall"),
        ]);
        let (got, problems) = of_set(&config, &annotations, &BTreeMap::new(), DEFAULT_MAX_RECIPIENTS);
        assert_eq!(problems, []);
        assert_eq!(
            got,
            subs(&[
                ("on-rolled-back", "slack", "oncall"),
                ("on-rollout-completed", "slack", "#deploys"),
                ("on-rollout-completed", "slack", "ops"),
                ("on-rollout-failed", "audit", ""),
                ("on-rollout-failed", "hooks", "dev"),
                ("on-rollout-failed", "slack", "oncall"),
                ("on-rollout-failed", "teams", "prod"),
            ])
        );
    }

    #[test]
    fn a_wrong_annotation_is_reported_without_quoting_its_recipient() {
        let config = fixtures::config_with(&[]);
        let url_refused =
            "is a URL, which a set cannot name: name a channel or a recipient the admin configured";
        for (suffix, value, want) in [
            ("on-rollout-failed.slack", "https://hooks.slack.com/services/T/B/x", format!("the recipient {url_refused}")),
            ("on-rollout-failed.slack", "ops;hooks.slack.com/services/x", format!("recipient 2 {url_refused}")),
            ("on-rollout-failed.slack", "http:evil", format!("the recipient {url_refused}")),
            (
                "on-rollout-failed.slack",
                "a b",
                "the recipient is not a channel or recipient name (letters, digits, #, @, ., _ and -)".into(),
            ),
            ("on-rollout-failed.slack", "", "the recipient names no recipient of service slack".into()),
            (
                "on-rollout-failed.hooks",
                "prod",
                "the recipient is not one of the recipients of service hooks (dev, ops)".into(),
            ),
            ("on-rollout-failed.teams", "dev", "the recipient is not one of the recipients of service teams (prod)".into()),
            (
                "on-rollout-failed.email",
                "a",
                "the recipient names a service that is not configured (configured: audit, hooks, slack, teams)".into(),
            ),
            ("on-nothing.slack", "ops", "names trigger `on-nothing`, which is not defined".into()),
            (
                "a.b.c",
                "ops",
                format!("must be {SUBSCRIBE_PREFIX}<trigger>.<service> or {SUBSCRIBE_PREFIX}<service>"),
            ),
        ] {
            let annotations = annotate(&[(suffix, value), ("on-rollout-completed.slack", "ops")]);
            let (got, problems) = of_set(&config, &annotations, &BTreeMap::new(), DEFAULT_MAX_RECIPIENTS);
            let key = format!("{SUBSCRIBE_PREFIX}{suffix}");
            assert_eq!(problems, [Problem::new(key, want)], "{suffix}: {value}");
            // The other annotation still subscribes, and a good recipient beside a bad one too.
            assert!(got.contains(&subs(&[("on-rollout-completed", "slack", "ops")])[0]), "{suffix}");
            if value.starts_with("ops;") {
                assert!(got.contains(&subs(&[("on-rollout-failed", "slack", "ops")])[0]));
            }
        }
    }

    #[test]
    fn the_admins_subscriptions_apply_by_selector_and_merge_without_repeats() {
        let config = fixtures::config_with(&[(
            "subscriptions",
            "- recipients: [slack:ops]\n  triggers: [on-rollout-failed]\n  selector: team=payments\n\
             - recipients: [teams:prod]\n  triggers: [on-rollout-failed]\n  selector: team in (search)\n\
             - recipients: [audit]\n  triggers: [on-rollout-completed]\n",
        )]);
        let annotations = annotate(&[("on-rollout-failed.slack", "ops")]);
        let (got, problems) = of_set(
            &config,
            &annotations,
            &data(&[("team", "payments")]),
            DEFAULT_MAX_RECIPIENTS,
        );
        assert_eq!(problems, []);
        assert_eq!(
            got,
            subs(&[
                ("on-rollout-completed", "audit", ""),
                ("on-rollout-failed", "slack", "ops")
            ])
        );
        let (got, _) = of_set(
            &config,
            &BTreeMap::new(),
            &data(&[("team", "search")]),
            DEFAULT_MAX_RECIPIENTS,
        );
        assert_eq!(
            got,
            subs(&[
                ("on-rollout-completed", "audit", ""),
                ("on-rollout-failed", "teams", "prod")
            ])
        );
    }

    #[test]
    fn a_subscription_without_triggers_takes_the_defaults() {
        let config = fixtures::config_with(&[
            ("defaultTriggers", "[on-rollout-failed]"),
            ("subscriptions", "- recipients: [slack:ops]"),
        ]);
        let (got, _) = of_set(
            &config,
            &BTreeMap::new(),
            &BTreeMap::new(),
            DEFAULT_MAX_RECIPIENTS,
        );
        assert_eq!(got, subs(&[("on-rollout-failed", "slack", "ops")]));
    }

    /// Issue 36: a Slack bot whose `channels` the admin listed takes only those from a set; the
    /// refusal names the annotation, not the channel.
    #[test]
    fn a_channel_outside_the_admins_globs_is_refused() {
        let config = fixtures::config_with(&[(
            "service.slack.aimed",
            "token: $slack-token\nchannels: ['#payments-*']",
        )]);
        let annotations = annotate(&[("on-rollout-failed.aimed", "#payments-alerts;#general;@ceo")]);
        let (got, problems) = of_set(&config, &annotations, &BTreeMap::new(), DEFAULT_MAX_RECIPIENTS);
        assert_eq!(got, subs(&[("on-rollout-failed", "aimed", "#payments-alerts")]));
        let key = format!("{SUBSCRIBE_PREFIX}on-rollout-failed.aimed");
        let refused = "is not one of the channels service aimed lets sets name";
        assert_eq!(
            problems,
            [
                Problem::new(&key, format!("recipient 2 {refused}")),
                Problem::new(&key, format!("recipient 3 {refused}")),
            ]
        );
    }

    /// Issue 36: one set names at most `max_recipients` recipients in all its annotations; more
    /// subscribes none of them (200 channels send nothing), and the admin's defaults still apply.
    #[test]
    fn a_set_naming_more_recipients_than_allowed_subscribes_none() {
        let config = fixtures::config_with(&[(
            "subscriptions",
            "- recipients: [audit]\n  triggers: [on-rollout-failed]\n",
        )]);
        let channels = |n: usize| (0..n).map(|i| format!("#c{i}")).collect::<Vec<_>>().join(";");
        let cases = [(10, 10), (11, 0), (200, 0)];
        for (named, subscribed) in cases {
            let annotations = annotate(&[("on-rollout-failed.slack", &channels(named))]);
            let (got, problems) = of_set(&config, &annotations, &BTreeMap::new(), 10);
            let slack = got.iter().filter(|s| s.service == "slack").count();
            assert_eq!(slack, subscribed, "{named} named");
            assert!(got.contains(&subs(&[("on-rollout-failed", "audit", "")])[0]));
            if subscribed == 0 {
                assert_eq!(
                    problems,
                    [Problem::new(
                        ALL_ANNOTATIONS,
                        format!(
                            "the set names {named} recipients in its subscriptions, more than the 10 \
                             the operator allows: none of them is subscribed"
                        )
                    )]
                );
            } else {
                assert_eq!(problems, []);
            }
        }
        // Recipients count across annotations and services, each pair once, a webhook once.
        let annotations = annotate(&[
            ("on-rollout-failed.slack", &channels(6)),
            ("on-rollout-completed.slack", &channels(6)),
            ("on-rollout-failed.teams", "prod"),
            ("on-rollout-failed.audit", ""),
            ("on-rollout-completed.audit", "ignored"),
        ]);
        assert_eq!(named_recipients(&config, &annotations), 8);
        let (_, problems) = of_set(&config, &annotations, &BTreeMap::new(), 7);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].key, ALL_ANNOTATIONS);
        let (got, problems) = of_set(&config, &annotations, &BTreeMap::new(), 8);
        assert_eq!((got.len(), problems.len()), (15, 0), "{got:?}");
    }

    /// Issue 36: with the Secret gone for a moment, the bot that needs it is missing from the
    /// configuration; the set's annotation and the admin's entry naming it are held, not dropped.
    #[test]
    fn subscriptions_of_a_service_missing_for_now_are_held() {
        let without_secret = |extra: &[(&str, &str)]| {
            let mut entries = vec![("service.slack", "token: $slack-token")];
            entries.extend_from_slice(extra);
            config::parse(&data(&entries), &BTreeMap::new()).0
        };
        let config = without_secret(&[(
            "subscriptions",
            "- recipients: [slack:ops]\n  triggers: [on-rollout-failed]",
        )]);
        let annotations = annotate(&[("on-rolled-back.slack", "#deploys")]);
        let (usable, _) = of_set(&config, &annotations, &BTreeMap::new(), DEFAULT_MAX_RECIPIENTS);
        assert_eq!(usable, []);
        assert_eq!(
            held(&config, &annotations, &BTreeMap::new(), DEFAULT_MAX_RECIPIENTS),
            subs(&[
                ("on-rolled-back", "slack", ""),
                ("on-rolled-back", "slack", "#deploys"),
                ("on-rollout-failed", "slack", "ops"),
            ])
        );
        // With the service there, nothing is held.
        let config = fixtures::config_with(&[]);
        assert_eq!(
            held(&config, &annotations, &BTreeMap::new(), DEFAULT_MAX_RECIPIENTS),
            []
        );
    }
}
