//! What a set's `status.notifications` should hold, and what to send now, from its subscriptions and
//! the records it has. One record per subscription (and per condition of its trigger that fired): the
//! once-per key last heard, so that an event is sent once whatever restarts or leader changes come
//! between.
//!
//! A subscription hears of what happens after it exists: the first time one is seen (no record for
//! its trigger, service and recipient), the events that already stand are recorded as heard, without
//! sending. Otherwise an admin who adds a subscription for every set would announce every rollout
//! that completed long ago.

use std::collections::{BTreeMap, BTreeSet};

use cmset_api::{NotificationResult, NotificationStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::triggers::{self, Notification, SubscriptionKey};
use super::{Config, Problem, SetView, Subscription};

/// The record's key.
pub fn key_of(record: &NotificationStatus) -> SubscriptionKey {
    SubscriptionKey {
        trigger: record.trigger.clone(),
        condition: usize::try_from(record.condition).unwrap_or(0),
        service: record.service.clone(),
        recipient: record.recipient.clone(),
    }
}

/// A record of `key` that heard `once`, with nothing sent.
pub fn subscribed(key: &SubscriptionKey, once: &str, now: &Time) -> NotificationStatus {
    NotificationStatus {
        trigger: key.trigger.clone(),
        condition: i32::try_from(key.condition).unwrap_or(i32::MAX),
        service: key.service.clone(),
        recipient: key.recipient.clone(),
        once: once.to_string(),
        result: NotificationResult::Subscribed,
        time: Some(now.clone()),
        attempts: 0,
        message: None,
    }
}

/// The records a set should have and the notifications to send now.
#[derive(Debug, Default, PartialEq)]
pub struct Composed {
    /// The records, sorted by key: kept ones, and first sightings of new subscriptions.
    pub records: Vec<NotificationStatus>,
    /// Whether `records` differs from what the set has (a subscription came or went).
    pub changed: bool,
    pub send: Vec<Notification>,
    pub problems: Vec<Problem>,
}

fn subscription_of(key: &SubscriptionKey) -> (&str, &str, &str) {
    (&key.trigger, &key.service, &key.recipient)
}

/// Composes the records of a set from its `subscriptions` and the records it has (`records`): those of
/// subscriptions gone are dropped, new subscriptions are recorded as having heard what stands now, and
/// the others send what stands with a once-per key other than the one recorded.
pub fn compose(
    config: &Config,
    set: &SetView<'_>,
    subscriptions: &[Subscription],
    records: &[NotificationStatus],
    now: &Time,
) -> Composed {
    let wanted: BTreeSet<(&str, &str, &str)> = subscriptions
        .iter()
        .map(|s| (s.trigger.as_str(), s.service.as_str(), s.recipient.as_str()))
        .collect();
    let mut kept: BTreeMap<SubscriptionKey, NotificationStatus> = BTreeMap::new();
    let mut changed = false;
    for record in records {
        let key = key_of(record);
        if wanted.contains(&subscription_of(&key)) && !kept.contains_key(&key) {
            kept.insert(key, record.clone());
        } else {
            changed = true;
        }
    }
    let seen: BTreeSet<(String, String, String)> = kept
        .keys()
        .map(|k| (k.trigger.clone(), k.service.clone(), k.recipient.clone()))
        .collect();
    let (known, new): (Vec<Subscription>, Vec<Subscription>) = subscriptions
        .iter()
        .cloned()
        .partition(|s| seen.contains(&(s.trigger.clone(), s.service.clone(), s.recipient.clone())));
    let mut problems = Vec::new();
    for sub in &new {
        let (standing, found) = triggers::fired(config, set, std::slice::from_ref(sub), |_| None);
        problems.extend(found);
        changed = true;
        if standing.is_empty() {
            let key = SubscriptionKey {
                trigger: sub.trigger.clone(),
                condition: 0,
                service: sub.service.clone(),
                recipient: sub.recipient.clone(),
            };
            kept.insert(key.clone(), subscribed(&key, "", now));
        }
        for n in standing {
            kept.insert(n.key.clone(), subscribed(&n.key, &n.once, now));
        }
    }
    let (send, found) = triggers::fired(config, set, &known, |key| kept.get(key).map(|r| r.once.as_str()));
    problems.extend(found);
    problems.sort();
    problems.dedup();
    Composed {
        records: kept.into_values().collect(),
        changed,
        send,
        problems,
    }
}

/// `records` with `record` in place of the one of its key (or added), sorted by key.
pub fn with_record(records: &[NotificationStatus], record: NotificationStatus) -> Vec<NotificationStatus> {
    let key = key_of(&record);
    let mut out: BTreeMap<SubscriptionKey, NotificationStatus> =
        records.iter().map(|r| (key_of(r), r.clone())).collect();
    out.insert(key, record);
    out.into_values().collect()
}

#[cfg(test)]
mod tests {
    use cmset_api::{ConfigMapSetStatus, RolloutPhase, RolloutStatus};

    use super::*;
    use crate::notify::config;
    use crate::set::SetKind;

    fn now() -> Time {
        Time("2026-11-26T09:00:00Z".parse().unwrap())
    }

    fn config() -> Config {
        let data = [(
            "service.webhook.hook".to_string(),
            "url: https://example.invalid/hook".to_string(),
        )]
        .into();
        let (config, problems) = config::parse(&data, &BTreeMap::new());
        assert!(problems.is_empty(), "{problems:?}");
        config
    }

    fn failed(revision: &str) -> ConfigMapSetStatus {
        ConfigMapSetStatus {
            rollout: Some(RolloutStatus {
                revision: revision.into(),
                phase: RolloutPhase::Failed,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sub(trigger: &str) -> Subscription {
        Subscription {
            trigger: trigger.into(),
            service: "hook".into(),
            recipient: String::new(),
        }
    }

    fn compose_for(
        status: &ConfigMapSetStatus,
        subs: &[Subscription],
        records: &[NotificationStatus],
    ) -> Composed {
        let (labels, annotations) = (BTreeMap::new(), BTreeMap::new());
        let view = SetView {
            kind: SetKind::ConfigMapSet,
            name: "web",
            namespace: "shop",
            labels: &labels,
            annotations: &annotations,
            status,
        };
        compose(&config(), &view, subs, records, &now())
    }

    #[test]
    fn a_new_subscription_hears_what_stands_without_sending_it() {
        let out = compose_for(&failed("web-1"), &[sub("on-rollout-failed")], &[]);
        assert!(out.send.is_empty());
        assert!(out.changed);
        assert_eq!(out.records.len(), 1);
        assert_eq!(out.records[0].result, NotificationResult::Subscribed);
        assert!(out.records[0].once.starts_with("web-1"), "{:?}", out.records[0]);
    }

    #[test]
    fn a_new_subscription_with_nothing_standing_is_recorded_empty() {
        let out = compose_for(&ConfigMapSetStatus::default(), &[sub("on-rollout-failed")], &[]);
        assert!(out.send.is_empty());
        assert_eq!(
            out.records,
            vec![subscribed(&key_of(&out.records[0]), "", &now())]
        );
        assert_eq!(out.records[0].trigger, "on-rollout-failed");
    }

    #[test]
    fn a_known_subscription_sends_an_event_once() {
        let first = compose_for(&ConfigMapSetStatus::default(), &[sub("on-rollout-failed")], &[]);
        let then = compose_for(&failed("web-2"), &[sub("on-rollout-failed")], &first.records);
        assert!(!then.changed);
        assert_eq!(then.send.len(), 1);
        let sent = &then.send[0];
        // Delivered: recorded, and the same status sends nothing again.
        let record = NotificationStatus {
            once: sent.once.clone(),
            result: NotificationResult::Delivered,
            ..subscribed(&sent.key, "", &now())
        };
        let records = with_record(&then.records, record);
        let again = compose_for(&failed("web-2"), &[sub("on-rollout-failed")], &records);
        assert!(again.send.is_empty() && !again.changed);
    }

    #[test]
    fn a_subscription_gone_drops_its_record_and_sends_nothing() {
        let first = compose_for(&ConfigMapSetStatus::default(), &[sub("on-rollout-failed")], &[]);
        let out = compose_for(&failed("web-2"), &[], &first.records);
        assert!(out.changed && out.records.is_empty() && out.send.is_empty());
    }

    #[test]
    fn unchanged_subscriptions_and_records_change_nothing() {
        let first = compose_for(&failed("web-1"), &[sub("on-rollout-failed")], &[]);
        let out = compose_for(&failed("web-1"), &[sub("on-rollout-failed")], &first.records);
        assert_eq!(
            out,
            Composed {
                records: first.records.clone(),
                ..Default::default()
            }
        );
    }
}
