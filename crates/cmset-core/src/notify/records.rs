//! What a set's `status.notifications` should hold, and what to send now, from its subscriptions and
//! the records it has. One record per subscription and condition of its trigger (keyed by the
//! condition's content, not its place): the once-per key last heard, so that an event is sent once
//! whatever restarts or leader changes come between.
//!
//! A subscription hears of what happens after it exists: the first time a condition of it is seen (a
//! new subscription, or a condition added to or edited in its trigger), the events that already stand
//! are recorded as heard, without sending. Otherwise an admin who adds a subscription for every set
//! would announce every rollout that completed long ago, and one who appends a condition would resend
//! every standing event. A subscription is new only when its annotation or admin entry is: one whose
//! service is missing for a moment (its Secret deleted and recreated, a typo being fixed) is `held`
//! and keeps its records.
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
        condition: record.condition_key.clone(),
        service: record.service.clone(),
        recipient: record.recipient.clone(),
    }
}

/// A record of `key` that heard `once`, with nothing sent.
pub fn subscribed(key: &SubscriptionKey, once: &str, now: &Time) -> NotificationStatus {
    NotificationStatus {
        trigger: key.trigger.clone(),
        condition: 0,
        condition_key: key.condition.clone(),
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

/// A record written before `conditionKey`, keyed by the content of the condition its index names
/// (as the trigger is now); others as they are.
fn keyed_by_content(config: &Config, record: &NotificationStatus) -> NotificationStatus {
    if !record.condition_key.is_empty() {
        return record.clone();
    }
    let condition = usize::try_from(record.condition).ok().and_then(|index| {
        let trigger = config.trigger(&record.trigger)?;
        trigger.conditions.get(index).map(|c| c.key())
    });
    NotificationStatus {
        condition: 0,
        condition_key: condition.unwrap_or_default(),
        ..record.clone()
    }
}

/// Records one set keeps at most: `status.notifications` is bounded like the rest of the status.
pub const MAX_RECORDS: usize = cmset_api::MAX_NOTIFICATION_RECORDS as usize;

/// The subscriptions whose records fit in `max` (each takes one per condition of its trigger), usable
/// ones first, in order; a problem naming how many do not (the same ones at every call, so the
/// records do not flap).
fn within_bound(
    config: &Config,
    subscriptions: &[Subscription],
    held: &[Subscription],
    max: usize,
) -> (Vec<Subscription>, Vec<Subscription>, Option<Problem>) {
    let records_of = |s: &Subscription| {
        config
            .trigger(&s.trigger)
            .map_or(1, |t| t.conditions.len().max(1))
    };
    let mut room = max;
    let mut refused = 0;
    let mut fit = |list: &[Subscription]| -> Vec<Subscription> {
        let mut out = Vec::new();
        for sub in list {
            let needs = records_of(sub);
            if needs <= room {
                room -= needs;
                out.push(sub.clone());
            } else {
                refused += 1;
            }
        }
        out
    };
    let usable = fit(subscriptions);
    let held = fit(held);
    let problem = (refused > 0).then(|| {
        Problem::new(
            "status.notifications",
            format!(
                "the set's subscriptions need more than the {max} records a set keeps: {refused} of them \
                 are not subscribed"
            ),
        )
    });
    (usable, held, problem)
}

/// Composes the records of a set from its `subscriptions` (usable now), `held` (declared by an
/// annotation or an admin entry that still exists, but whose service or trigger is missing for now)
/// and the records it has (`records`):
/// - records of subscriptions neither usable nor held, or of conditions their trigger no longer has,
///   are dropped; a held subscription keeps its records and sends nothing;
/// - a condition of a usable subscription seen for the first time (a new subscription, a condition
///   added or edited) is recorded as having heard what stands now, without sending;
/// - the others send what stands with a once-per key other than the one recorded, and what is
///   `Retrying` once it is due again ([`retry_at`]).
///
/// At most [`MAX_RECORDS`] records: the subscriptions beyond are refused, with a problem.
pub fn compose(
    config: &Config,
    set: &SetView<'_>,
    subscriptions: &[Subscription],
    held: &[Subscription],
    records: &[NotificationStatus],
    now: &Time,
) -> Composed {
    compose_within(config, set, subscriptions, held, records, now, MAX_RECORDS)
}

fn compose_within(
    config: &Config,
    set: &SetView<'_>,
    subscriptions: &[Subscription],
    held: &[Subscription],
    records: &[NotificationStatus],
    now: &Time,
    max_records: usize,
) -> Composed {
    let (subscriptions, held, over) = within_bound(config, subscriptions, held, max_records);
    let (subscriptions, held) = (subscriptions.as_slice(), held.as_slice());
    let as_tuple = |s: &Subscription| (s.trigger.clone(), s.service.clone(), s.recipient.clone());
    let declared: BTreeSet<(String, String, String)> =
        subscriptions.iter().chain(held).map(as_tuple).collect();
    let mut problems: Vec<Problem> = over.into_iter().collect();
    let conditions_of = |trigger: &str| -> Option<Vec<String>> {
        config
            .trigger(trigger)
            .map(|t| t.conditions.iter().map(|c| c.key()).collect())
    };
    let mut kept: BTreeMap<SubscriptionKey, NotificationStatus> = BTreeMap::new();
    let mut changed = false;
    for stored in records {
        let record = keyed_by_content(config, stored);
        changed |= record != *stored;
        let key = key_of(&record);
        let (trigger, service, recipient) = subscription_of(&key);
        let still_declared = declared.contains(&(trigger.into(), service.into(), recipient.into()));
        // A trigger missing for now (held) keeps its records; one that is there keeps those of its
        // conditions.
        let condition_stands = conditions_of(trigger).is_none_or(|keys| keys.contains(&key.condition));
        if still_declared && condition_stands && !kept.contains_key(&key) {
            kept.insert(key, record);
        } else {
            changed = true;
        }
    }
    for sub in subscriptions {
        let key_of_condition = |condition: String| SubscriptionKey {
            trigger: sub.trigger.clone(),
            condition,
            service: sub.service.clone(),
            recipient: sub.recipient.clone(),
        };
        let fresh: Vec<SubscriptionKey> = conditions_of(&sub.trigger)
            .unwrap_or_default()
            .into_iter()
            .map(key_of_condition)
            .filter(|key| !kept.contains_key(key))
            .collect();
        if fresh.is_empty() {
            continue;
        }
        changed = true;
        let (standing, found) = triggers::fired(config, set, std::slice::from_ref(sub), |_| None);
        problems.extend(found);
        for key in fresh {
            let once = standing
                .iter()
                .find(|n| n.key == key)
                .map_or("", |n| n.once.as_str());
            kept.insert(key.clone(), subscribed(&key, once, now));
        }
    }
    let due = |record: &NotificationStatus| retry_at(record).is_some_and(|at| at.0 <= now.0);
    let (send, found) = triggers::fired(config, set, subscriptions, |key| {
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
        compose(&config(), &view, subs, &[], records, &now())
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
                condition: String::new(),
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

    fn view_of<'a>(status: &'a ConfigMapSetStatus, labels: &'a BTreeMap<String, String>) -> SetView<'a> {
        SetView {
            kind: SetKind::ConfigMapSet,
            name: "web",
            namespace: "shop",
            labels,
            annotations: labels,
            status,
        }
    }

    /// Issue 36: a service missing for a moment (its Secret deleted and recreated) keeps the records
    /// of the subscriptions that name it, so what happened meanwhile is sent once it is back, not
    /// recorded as heard as for a new subscription.
    #[test]
    fn a_service_missing_for_a_moment_keeps_its_records() {
        let subs = [sub("on-rollout-failed")];
        let first = compose_for(&failed("web-1"), &subs, &[]);
        let missing = {
            let (config, _) = config::parse(
                &[("service.slack".to_string(), "token: $gone".to_string())].into(),
                &BTreeMap::new(),
            );
            config
        };
        let labels = BTreeMap::new();
        let status = failed("web-2");
        // Meanwhile the set's rollout of web-2 failed; the service is gone, the annotation is not.
        let meanwhile = compose(
            &missing,
            &view_of(&status, &labels),
            &[],
            &subs,
            &first.records,
            &now(),
        );
        assert!(meanwhile.send.is_empty() && !meanwhile.changed, "{meanwhile:?}");
        assert_eq!(meanwhile.records, first.records);
        let back = compose_for(&status, &subs, &meanwhile.records);
        assert_eq!(back.send.len(), 1, "{back:?}");
        assert!(back.send[0].once.starts_with("web-2"));
        // Neither usable nor held: the subscription is gone and so are its records.
        let gone = compose(
            &missing,
            &view_of(&status, &labels),
            &[],
            &[],
            &first.records,
            &now(),
        );
        assert!(gone.changed && gone.records.is_empty());
    }

    fn with_trigger(conditions: &str) -> Config {
        let data = [
            (
                "service.webhook.hook".to_string(),
                "url: https://example.invalid/hook".to_string(),
            ),
            ("trigger.on-trouble".to_string(), conditions.to_string()),
        ]
        .into();
        let (config, problems) = config::parse(&data, &BTreeMap::new());
        assert!(problems.is_empty(), "{problems:?}");
        config
    }

    /// Issue 36: conditions are keyed by their content. Appending or reordering conditions sends
    /// nothing that already stood (the new condition hears it, as a new subscription would), and
    /// keeps the others' records.
    #[test]
    fn editing_a_trigger_sends_only_what_the_edit_newly_matches() {
        let failed_on = "- on: RolloutFailed\n  send: [rollout-failed]\n";
        let completed_on = "- on: RolloutCompleted\n  send: [rollout-completed]\n";
        let labels = BTreeMap::new();
        let subs = [sub("on-trouble")];
        let status = failed("web-2");
        let before = with_trigger(failed_on);
        let first = compose(
            &before,
            &view_of(&failed("web-1"), &labels),
            &subs,
            &[],
            &[],
            &now(),
        );
        let then = compose(
            &before,
            &view_of(&status, &labels),
            &subs,
            &[],
            &first.records,
            &now(),
        );
        assert_eq!(then.send.len(), 1);
        let delivered = NotificationStatus {
            result: NotificationResult::Delivered,
            ..subscribed(&then.send[0].key, &then.send[0].once, &now())
        };
        let records = with_record(&then.records, delivered);
        // Appended with a second condition on the same standing event, and prepended: nothing sent.
        let also_paged = "- on: RolloutFailed\n  send: [rolled-back]\n";
        for edited in [
            format!("{failed_on}{also_paged}"),
            format!("{also_paged}{completed_on}{failed_on}"),
        ] {
            let config = with_trigger(&edited);
            let out = compose(&config, &view_of(&status, &labels), &subs, &[], &records, &now());
            assert!(out.send.is_empty(), "{edited}: {:?}", out.send);
            assert!(out.changed, "the new conditions are recorded");
            let kept = out
                .records
                .iter()
                .find(|r| r.result == NotificationResult::Delivered);
            assert!(
                kept.is_some(),
                "the first condition keeps its record: {:?}",
                out.records
            );
            // The next event is sent by every condition that matches it.
            let next = failed("web-3");
            let later = compose(
                &config,
                &view_of(&next, &labels),
                &subs,
                &[],
                &out.records,
                &now(),
            );
            assert_eq!(later.send.len(), 2, "{edited}");
        }
        // A record of a condition the trigger no longer has goes.
        let config = with_trigger(completed_on);
        let out = compose(&config, &view_of(&status, &labels), &subs, &[], &records, &now());
        assert!(out.send.is_empty());
        assert!(
            out.records
                .iter()
                .all(|r| r.result == NotificationResult::Subscribed)
        );
    }

    /// A record written before condition keys (by index) is keyed by the content of that condition:
    /// nothing is sent again after an upgrade.
    #[test]
    fn a_record_keyed_by_index_is_read_by_content() {
        let first = compose_for(&ConfigMapSetStatus::default(), &[sub("on-rollout-failed")], &[]);
        let then = compose_for(&failed("web-2"), &[sub("on-rollout-failed")], &first.records);
        let legacy = NotificationStatus {
            result: NotificationResult::Delivered,
            condition_key: String::new(),
            ..subscribed(&then.send[0].key, &then.send[0].once, &now())
        };
        let out = compose_for(&failed("web-2"), &[sub("on-rollout-failed")], &[legacy]);
        assert!(out.send.is_empty(), "{:?}", out.send);
        assert!(out.changed, "rewritten with its key");
        assert_eq!(out.records[0].condition_key, then.send[0].key.condition);
    }

    /// Issue 36: `status.notifications` is bounded. Subscriptions beyond the bound (counted in
    /// records: one per condition) are refused with a problem, the same ones every time, so the
    /// records never exceed it and do not flap.
    #[test]
    fn records_are_bounded_per_set() {
        let labels = BTreeMap::new();
        let status = failed("web-1");
        let view = view_of(&status, &labels);
        let many: Vec<Subscription> = (0..10)
            .map(|i| Subscription {
                trigger: "on-rollout-failed".into(),
                service: "hook".into(),
                recipient: format!("r{i}"),
            })
            .collect();
        let first = compose_within(&config(), &view, &many, &[], &[], &now(), 4);
        assert_eq!(first.records.len(), 4);
        assert_eq!(
            first.problems,
            [Problem::new(
                "status.notifications",
                "the set's subscriptions need more than the 4 records a set keeps: 6 of them are not subscribed"
            )]
        );
        let again = compose_within(&config(), &view, &many, &[], &first.records, &now(), 4);
        assert!(!again.changed, "stable");
        assert_eq!(again.records, first.records);
        // The bound the status schema states is the one kept.
        let lots: Vec<Subscription> = (0..MAX_RECORDS + 5)
            .map(|i| Subscription {
                trigger: "on-rollout-failed".into(),
                service: "hook".into(),
                recipient: format!("r{i}"),
            })
            .collect();
        let out = compose(&config(), &view, &lots, &[], &[], &now());
        assert_eq!(out.records.len(), MAX_RECORDS);
        assert_eq!(MAX_RECORDS, 128);
    }
}
