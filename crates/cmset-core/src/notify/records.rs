//! What a set's `status.notifications` should hold, and what to send now, from its subscriptions and
//! the records it has. One record per subscription (and per condition of its trigger that fired): the
//! once-per key last heard, so that an event is sent once whatever restarts or leader changes come
//! between.
//!
//! A subscription hears of what happens after it exists: the first time one is seen (no record for
//! its trigger, service and recipient), the events that already stand are recorded as heard, without
//! sending. Otherwise an admin who adds a subscription for every set would announce every rollout
//! that completed long ago.
//!
//! A delivery that failed in a way that may pass (no answer, 408, 429, 5xx) is recorded `Retrying`,
//! with the time of its first attempt: it is tried again after a backoff ([`retry_at`]) until it lands
//! or the maximum age has passed since that first attempt ([`after_delivery`]), and only then
//! `Failed`. The record, not the memory of a process, says what is still owed, so a leader change
//! neither loses nor repeats it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

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
        first_attempt: None,
        attempts: 0,
        message: None,
    }
}

/// Shortest wait before a `Retrying` notification is tried again.
pub const RETRY_MIN: Duration = Duration::from_secs(5);
/// Longest wait between two tries of a `Retrying` notification.
pub const RETRY_MAX: Duration = Duration::from_secs(60);

/// When a `Retrying` record is due again: after as long as it has been retrying (so the waits grow
/// geometrically), at least [`RETRY_MIN`] and at most [`RETRY_MAX`] after its last attempt. `None`
/// for any other record.
pub fn retry_at(record: &NotificationStatus) -> Option<Time> {
    if record.result != NotificationResult::Retrying {
        return None;
    }
    let last = record.time.as_ref()?.0;
    let first = record.first_attempt.as_ref().map_or(last, |t| t.0);
    let retrying = last.duration_since(first).try_into().unwrap_or(Duration::ZERO);
    Some(Time(
        last.saturating_add(retrying.clamp(RETRY_MIN, RETRY_MAX)).ok()?,
    ))
}

/// How one delivery of a notification went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// Tries it made (every request, every retry within the delivery).
    pub attempts: u32,
    /// Why it failed, and whether that may pass by itself; `None` when it landed.
    pub failure: Option<(String, bool)>,
}

/// The record of `key` after a delivery of the event `once`, given the record it had (`previous`):
/// `Delivered`; `Retrying` when the failure may pass and less than `max_age` has passed since the
/// first attempt at this event; else `Failed`. Attempts add up across the retries of one event.
pub fn after_delivery(
    key: &SubscriptionKey,
    once: &str,
    previous: Option<&NotificationStatus>,
    attempt: &Attempt,
    now: &Time,
    max_age: Duration,
) -> NotificationStatus {
    let retried = previous.filter(|p| p.result == NotificationResult::Retrying && p.once == once);
    let first = retried
        .and_then(|p| p.first_attempt.clone())
        .unwrap_or_else(|| now.clone());
    let earlier = retried.map_or(0, |p| p.attempts);
    let attempts = earlier.saturating_add(i32::try_from(attempt.attempts).unwrap_or(i32::MAX));
    let base = NotificationStatus {
        attempts,
        ..subscribed(key, once, now)
    };
    let Some((reason, may_pass)) = &attempt.failure else {
        return NotificationStatus {
            result: NotificationResult::Delivered,
            ..base
        };
    };
    let age: Duration = now.0.duration_since(first.0).try_into().unwrap_or(Duration::ZERO);
    let result = if *may_pass && age < max_age {
        NotificationResult::Retrying
    } else {
        NotificationResult::Failed
    };
    NotificationStatus {
        result,
        first_attempt: Some(first),
        message: Some(reason.clone()),
        ..base
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
    /// The earliest time a `Retrying` record not due yet will be: when to look at the set again.
    pub retry_at: Option<Time>,
}

fn subscription_of(key: &SubscriptionKey) -> (&str, &str, &str) {
    (&key.trigger, &key.service, &key.recipient)
}

/// Composes the records of a set from its `subscriptions` and the records it has (`records`): those of
/// subscriptions gone are dropped, new subscriptions are recorded as having heard what stands now, and
/// the others send what stands with a once-per key other than the one recorded, and what is
/// `Retrying` once it is due again ([`retry_at`]).
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
    let due = |record: &NotificationStatus| retry_at(record).is_some_and(|at| at.0 <= now.0);
    let (send, found) = triggers::fired(config, set, &known, |key| {
        kept.get(key).filter(|r| !due(r)).map(|r| r.once.as_str())
    });
    problems.extend(found);
    let retry_at = kept
        .values()
        .filter_map(retry_at)
        .filter(|at| at.0 > now.0)
        .min_by_key(|at| at.0);
    problems.sort();
    problems.dedup();
    Composed {
        records: kept.into_values().collect(),
        changed,
        send,
        problems,
        retry_at,
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

    fn at(rfc3339: &str) -> Time {
        Time(rfc3339.parse().unwrap())
    }

    fn failure(may_pass: bool) -> Attempt {
        Attempt {
            attempts: 6,
            failure: Some(("HTTP 503".into(), may_pass)),
        }
    }

    /// Issue 36: a failure that may pass is `Retrying`, not `Failed`, until the maximum age has
    /// passed since the first attempt at the event; attempts add up; a later event starts afresh.
    #[test]
    fn a_failure_that_may_pass_is_retried_until_the_maximum_age() {
        let key = key_of(&subscribed(
            &SubscriptionKey {
                trigger: "on-rollout-failed".into(),
                condition: 0,
                service: "hook".into(),
                recipient: String::new(),
            },
            "",
            &now(),
        ));
        let hour = Duration::from_secs(3600);
        let first = after_delivery(
            &key,
            "web-2",
            None,
            &failure(true),
            &at("2026-11-26T09:00:00Z"),
            hour,
        );
        assert_eq!(first.result, NotificationResult::Retrying);
        assert_eq!(first.first_attempt, Some(at("2026-11-26T09:00:00Z")));
        assert_eq!((first.attempts, first.message.as_deref()), (6, Some("HTTP 503")));
        let later = after_delivery(
            &key,
            "web-2",
            Some(&first),
            &failure(true),
            &at("2026-11-26T09:59:00Z"),
            hour,
        );
        assert_eq!(later.result, NotificationResult::Retrying);
        assert_eq!(
            later.first_attempt, first.first_attempt,
            "the age counts from the first attempt"
        );
        assert_eq!(later.attempts, 12);
        let aged = after_delivery(
            &key,
            "web-2",
            Some(&later),
            &failure(true),
            &at("2026-11-26T10:00:00Z"),
            hour,
        );
        assert_eq!(aged.result, NotificationResult::Failed);
        assert_eq!(aged.attempts, 18);
        // A failure that will not pass fails at once.
        let refused = after_delivery(&key, "web-2", None, &failure(false), &now(), hour);
        assert_eq!(refused.result, NotificationResult::Failed);
        // Landed at last: delivered, with every attempt counted.
        let landed = Attempt {
            attempts: 1,
            failure: None,
        };
        let delivered = after_delivery(&key, "web-2", Some(&later), &landed, &now(), hour);
        assert_eq!(
            (delivered.result, delivered.attempts, delivered.message),
            (NotificationResult::Delivered, 13, None)
        );
        // Another event's retries do not count for this one.
        let other = after_delivery(&key, "web-3", Some(&later), &failure(true), &now(), hour);
        assert_eq!((other.attempts, other.first_attempt), (6, Some(now())));
    }

    #[test]
    fn retries_back_off_from_the_last_attempt_within_bounds() {
        let retrying = |first: &str, last: &str| NotificationStatus {
            result: NotificationResult::Retrying,
            first_attempt: Some(at(first)),
            time: Some(at(last)),
            ..Default::default()
        };
        let cases = [
            ("09:00:00", "09:00:00", "09:00:05"),
            ("09:00:00", "09:00:20", "09:00:40"),
            ("09:00:00", "09:30:00", "09:31:00"),
        ];
        for (first, last, due) in cases {
            let day = |t: &str| format!("2026-11-26T{t}Z");
            assert_eq!(
                retry_at(&retrying(&day(first), &day(last))),
                Some(at(&day(due))),
                "{first} {last}"
            );
        }
        let delivered = NotificationStatus {
            result: NotificationResult::Delivered,
            ..retrying("2026-11-26T09:00:00Z", "2026-11-26T09:00:00Z")
        };
        assert_eq!(retry_at(&delivered), None);
    }

    /// The record alone (as a new leader reads it) says what is still owed: a `Retrying` event is sent
    /// again once due, not before, and the set says when to look again.
    #[test]
    fn a_retrying_record_is_sent_again_once_due() {
        let first = compose_for(&ConfigMapSetStatus::default(), &[sub("on-rollout-failed")], &[]);
        let then = compose_for(&failed("web-2"), &[sub("on-rollout-failed")], &first.records);
        let sent = &then.send[0];
        let hour = Duration::from_secs(3600);
        let tried = after_delivery(
            &sent.key,
            &sent.once,
            None,
            &failure(true),
            &at("2026-11-26T08:59:58Z"),
            hour,
        );
        let records = with_record(&then.records, tried);
        let early = compose_for(&failed("web-2"), &[sub("on-rollout-failed")], &records);
        assert!(early.send.is_empty() && !early.changed);
        assert_eq!(early.retry_at, Some(at("2026-11-26T09:00:03Z")));
        let records: Vec<_> = records
            .into_iter()
            .map(|r| NotificationStatus {
                time: Some(at("2026-11-26T08:59:50Z")),
                ..r
            })
            .collect();
        let due = compose_for(&failed("web-2"), &[sub("on-rollout-failed")], &records);
        assert_eq!(due.send.len(), 1);
        assert_eq!(due.send[0].once, sent.once);
        assert_eq!(due.retry_at, None);
    }
}
