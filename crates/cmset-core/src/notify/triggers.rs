//! Which rollout events stand, judged from the set's status alone, and which subscriptions they fire.
//!
//! An event stands as long as the status shows it (the rollout is failed, a wave awaits promotion);
//! each comes with a once-per key naming the occasion (the rollout, or the rollout's wave). A
//! subscription fires when the key of a standing event differs from the last one delivered to it, which
//! the I/O layer records. So a restart with the same status and records sends nothing, and a
//! notification that could not be delivered is tried again at the next reconcile.

use std::collections::BTreeMap;

use cmset_api::{AnalysisVerdict, ConfigMapSetStatus, RolloutPhase, WorkloadState};
use serde_json::Value as Json;

use super::render::{self, Message};
use super::subscriptions::Subscription;
use super::{Config, Problem, SetView};
use crate::set::rollout_id;

/// A rollout event, each with a built-in trigger (`on-` and its name in kebab case) and a built-in
/// template of the same name without `on-`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Event {
    RolloutStarted,
    WaveStarted,
    RolloutPaused,
    AwaitingPromotion,
    RolloutWaiting,
    AnalysisFailed,
    CheckFailed,
    RolloutFailed,
    RolledBack,
    RolloutCompleted,
    ValidationFailed,
}

impl Event {
    pub const ALL: [Event; 11] = [
        Self::RolloutStarted,
        Self::WaveStarted,
        Self::RolloutPaused,
        Self::AwaitingPromotion,
        Self::RolloutWaiting,
        Self::AnalysisFailed,
        Self::CheckFailed,
        Self::RolloutFailed,
        Self::RolledBack,
        Self::RolloutCompleted,
        Self::ValidationFailed,
    ];

    /// The name a trigger's `on` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RolloutStarted => "RolloutStarted",
            Self::WaveStarted => "WaveStarted",
            Self::RolloutPaused => "RolloutPaused",
            Self::AwaitingPromotion => "AwaitingPromotion",
            Self::RolloutWaiting => "RolloutWaiting",
            Self::AnalysisFailed => "AnalysisFailed",
            Self::CheckFailed => "CheckFailed",
            Self::RolloutFailed => "RolloutFailed",
            Self::RolledBack => "RolledBack",
            Self::RolloutCompleted => "RolloutCompleted",
            Self::ValidationFailed => "ValidationFailed",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == name)
    }

    /// Its built-in trigger.
    pub fn trigger(self) -> &'static str {
        match self {
            Self::RolloutStarted => "on-rollout-started",
            Self::WaveStarted => "on-wave-started",
            Self::RolloutPaused => "on-rollout-paused",
            Self::AwaitingPromotion => "on-awaiting-promotion",
            Self::RolloutWaiting => "on-rollout-waiting",
            Self::AnalysisFailed => "on-analysis-failed",
            Self::CheckFailed => "on-check-failed",
            Self::RolloutFailed => "on-rollout-failed",
            Self::RolledBack => "on-rolled-back",
            Self::RolloutCompleted => "on-rollout-completed",
            Self::ValidationFailed => "on-validation-failed",
        }
    }

    /// Its built-in template.
    pub fn template(self) -> &'static str {
        &self.trigger()["on-".len()..]
    }

    /// The event whose built-in trigger has this name.
    pub fn of_trigger(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.trigger() == name)
    }
}

/// A named trigger: conditions, each firing on its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigger {
    pub name: String,
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    /// The event it waits for.
    pub on: Event,
    /// An expression over the template context; the condition fires only when it is true.
    pub when: Option<String>,
    /// Templates to send, each as one message.
    pub send: Vec<String>,
    /// An expression over the template context whose text replaces the event's once-per key.
    pub once_per: Option<String>,
    pub description: Option<String>,
}

impl Condition {
    /// Its key in the records: a hash of what makes it fire and what it sends (not its
    /// `description`, nor its place among the trigger's conditions), so that reordering, appending or
    /// describing conditions keeps every other condition's record.
    pub fn key(&self) -> String {
        let content = serde_json::json!([self.on.as_str(), self.when, self.send, self.once_per]);
        crate::revisions::hash::short_hash(content.to_string().as_bytes())
    }
}

/// The built-in trigger of that name: on its event, no further condition, its built-in template.
pub fn built_in(name: &str) -> Option<Trigger> {
    let event = Event::of_trigger(name)?;
    Some(Trigger {
        name: name.to_string(),
        conditions: vec![Condition {
            on: event,
            when: None,
            send: vec![event.template().to_string()],
            once_per: None,
            description: None,
        }],
    })
}

/// The events the status shows, each with its once-per key: `<revision>@<rollout>` for the rollout's
/// events and `<revision>/<wave>@<rollout>` for a wave's, where `<rollout>` is the instant it started
/// (as `kubectl cmset promote` names a rollout), left out with `@` when the status has none. A hold by
/// a change window (`RolloutWaiting`) is the wave's, told once per hold: its key adds the window and
/// when it opens (`~<reason>~<nextWindow>`), which stay the same while one hold lasts.
///
/// A set without `spec.rollout` records no rollout: its workloads all move at once to the current
/// revision. Its rollout starts when that revision becomes current and completes once no workload is
/// pending or waiting any more (each runs it, or is pinned by a rollback), both keyed by the revision
/// alone.
pub fn events(status: &ConfigMapSetStatus) -> Vec<(Event, String)> {
    let mut out = rollout_events(status);
    // Content refused by `spec.validation`, once per refusal (its message names the revision it would
    // have been, and why).
    if let Some(refused) = refusal(status) {
        out.push((
            Event::ValidationFailed,
            crate::revisions::hash::short_hash(refused.as_bytes()),
        ));
    }
    out
}

/// Why the set's content was refused (condition `Valid=False`), if it was.
pub fn refusal(status: &ConfigMapSetStatus) -> Option<&str> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == crate::status::conditions::VALID && c.status == "False")
        .map(|c| c.message.as_str())
}

fn rollout_events(status: &ConfigMapSetStatus) -> Vec<(Event, String)> {
    let Some(rollout) = &status.rollout else {
        let Some(current) = &status.current_revision else {
            return Vec::new();
        };
        let mut out = vec![(Event::RolloutStarted, current.clone())];
        if status
            .workloads
            .iter()
            .all(|w| w.state == WorkloadState::Current || w.state == WorkloadState::Pinned)
        {
            out.push((Event::RolloutCompleted, current.clone()));
        }
        return out;
    };
    let started = rollout
        .started_at
        .as_ref()
        .map(|t| format!("@{}", rollout_id(t)))
        .unwrap_or_default();
    let of_rollout = format!("{}{started}", rollout.revision);
    let of_wave = format!("{}/{}{started}", rollout.revision, rollout.wave);
    let mut out = vec![(Event::RolloutStarted, of_rollout.clone())];
    let later_wave = rollout.waves.first().is_some_and(|&first| rollout.wave > first);
    match rollout.phase {
        RolloutPhase::Progressing if later_wave => out.push((Event::WaveStarted, of_wave)),
        RolloutPhase::Paused => out.push((Event::RolloutPaused, of_wave)),
        RolloutPhase::AwaitingPromotion => out.push((Event::AwaitingPromotion, of_wave)),
        RolloutPhase::Waiting => {
            let opens = rollout
                .next_window
                .as_ref()
                .map_or_else(|| "never".to_string(), |t| t.0.to_string());
            let window = rollout.reason.as_deref().unwrap_or("window");
            out.push((Event::RolloutWaiting, format!("{of_wave}~{window}~{opens}")));
        }
        _ => {}
    }
    if rollout
        .analysis
        .iter()
        .any(|a| a.verdict == AnalysisVerdict::Failed)
    {
        out.push((Event::AnalysisFailed, of_rollout.clone()));
    }
    let by_check = rollout.reason.as_deref() == Some(crate::rollout::check_gate::CHECK_FAILED);
    if rollout.phase == RolloutPhase::Failed && by_check {
        out.push((Event::CheckFailed, of_rollout.clone()));
    }
    if rollout.phase == RolloutPhase::Failed {
        out.push((Event::RolloutFailed, of_rollout.clone()));
    }
    if status
        .workloads
        .iter()
        .any(|w| w.state == WorkloadState::RolledBack)
    {
        out.push((Event::RolledBack, of_rollout.clone()));
    }
    if rollout.phase == RolloutPhase::Complete {
        out.push((Event::RolloutCompleted, of_rollout));
    }
    out
}

/// What the I/O layer records per subscription of a set: the once-per key last delivered.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SubscriptionKey {
    pub trigger: String,
    /// The trigger's condition, by its content ([`Condition::key`]).
    pub condition: String,
    pub service: String,
    pub recipient: String,
}

/// One subscription to notify now.
#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    pub key: SubscriptionKey,
    /// To record for `key` once every message is delivered.
    pub once: String,
    pub event: Event,
    /// One per template the condition sends, for `key.service` and `key.recipient`.
    pub messages: Vec<Message>,
}

/// The notifications to send now for the set: for each subscription whose trigger has a condition on
/// a standing event, whose `when` holds, and whose once-per key differs from the one `delivered` gives
/// for it. Problems (an expression that fails, a template that fails and was replaced by the built-in
/// one, a service that is gone) come sorted and without repeats. The condition's templates are
/// rendered once per service, however many recipients of it hear them (a message names no recipient).
pub fn fired<'r>(
    config: &Config,
    set: &SetView<'_>,
    subscriptions: &[Subscription],
    delivered: impl Fn(&SubscriptionKey) -> Option<&'r str>,
) -> (Vec<Notification>, Vec<Problem>) {
    let standing: BTreeMap<Event, String> = events(set.status).into_iter().collect();
    let mut by_trigger: BTreeMap<&str, Vec<&Subscription>> = BTreeMap::new();
    for sub in subscriptions {
        by_trigger.entry(&sub.trigger).or_default().push(sub);
    }
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (name, subs) in by_trigger {
        let key = format!("trigger.{name}");
        let Some(trigger) = config.trigger(name) else {
            problems.push(Problem::new(key, "is not defined"));
            continue;
        };
        for (index, condition) in trigger.conditions.iter().enumerate() {
            // The messages of this condition, by service: the same for every recipient.
            let mut rendered: BTreeMap<&str, Vec<Message>> = BTreeMap::new();
            let Some(event_key) = standing.get(&condition.on) else {
                continue;
            };
            let context = render::context(set, condition.on, name);
            let Some(once) = once_key(condition, index, event_key, &context, &key, &mut problems) else {
                continue;
            };
            let condition_key = condition.key();
            for sub in &subs {
                let sub_key = SubscriptionKey {
                    trigger: name.to_string(),
                    condition: condition_key.clone(),
                    service: sub.service.clone(),
                    recipient: sub.recipient.clone(),
                };
                if delivered(&sub_key) == Some(once.as_str()) {
                    continue;
                }
                let Some(service) = config.services.get(&sub.service) else {
                    problems.push(Problem::new(
                        format!("service.{}", sub.service),
                        "is not configured (a subscription names it)",
                    ));
                    continue;
                };
                let messages = rendered
                    .entry(sub.service.as_str())
                    .or_insert_with(|| {
                        condition
                            .send
                            .iter()
                            .map(|template| {
                                let (message, problem) = render::render_or_built_in(
                                    config,
                                    template,
                                    condition.on,
                                    &context,
                                    service,
                                );
                                problems.extend(problem);
                                message
                            })
                            .collect()
                    })
                    .clone();
                out.push(Notification {
                    key: sub_key,
                    once: once.clone(),
                    event: condition.on,
                    messages,
                });
            }
        }
    }
    problems.sort();
    problems.dedup();
    (out, problems)
}

/// The condition's once-per key if it fires: `None` when `when` is false or fails (a failure is
/// reported); a failing `oncePer` is reported and the event's own key used.
fn once_key(
    condition: &Condition,
    index: usize,
    event_key: &str,
    context: &Json,
    key: &str,
    problems: &mut Vec<Problem>,
) -> Option<String> {
    if let Some(when) = &condition.when {
        match render::is_true(when, context) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                problems.push(Problem::new(
                    key,
                    format!("condition [{index}]: `when` failed, so it did not fire: {e}"),
                ));
                return None;
            }
        }
    }
    match &condition.once_per {
        None => Some(event_key.to_string()),
        Some(expr) => match render::text_of(expr, context) {
            Ok(text) => Some(text),
            Err(e) => {
                problems.push(Problem::new(
                    key,
                    format!("condition [{index}]: `oncePer` failed, so the event's own key was used: {e}"),
                ));
                Some(event_key.to_string())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cmset_api::{RolloutStatus, WorkloadState};

    use super::*;
    use crate::notify::fixtures::{self, Set, failed_status, status};

    const STARTED: &str = "@2025-01-02T03:04:05Z";

    fn keys(events: Vec<(Event, String)>) -> Vec<(Event, String)> {
        events
            .into_iter()
            .map(|(e, k)| (e, k.replace(STARTED, "@T")))
            .collect()
    }

    fn ev(event: Event, key: &str) -> (Event, String) {
        (event, key.to_string())
    }

    #[test]
    fn events_stand_as_the_status_shows_them() {
        use Event::*;
        let mut rolled_back = status(RolloutPhase::Progressing, 0);
        rolled_back.workloads[1].state = WorkloadState::RolledBack;
        let mut no_start = status(RolloutPhase::Paused, 0);
        no_start.rollout.as_mut().unwrap().started_at = None;
        // A set without spec.rollout: no rollout recorded, its workloads moved all at once.
        let mut at_once = status(RolloutPhase::Complete, 0);
        at_once.rollout = None;
        at_once.current_revision = Some("app-2".into());
        for w in &mut at_once.workloads {
            w.state = WorkloadState::Current;
        }
        let mut at_once_moving = at_once.clone();
        at_once_moving.workloads[0].state = WorkloadState::Pending;
        let mut at_once_pinned = at_once.clone();
        at_once_pinned.workloads[0].state = WorkloadState::Pinned;
        for (name, status, want) in [
            ("no rollout", ConfigMapSetStatus::default(), vec![]),
            (
                "all at once, done",
                at_once,
                vec![ev(RolloutStarted, "app-2"), ev(RolloutCompleted, "app-2")],
            ),
            (
                "all at once, moving",
                at_once_moving,
                vec![ev(RolloutStarted, "app-2")],
            ),
            (
                "all at once, one pinned by a rollback",
                at_once_pinned,
                vec![ev(RolloutStarted, "app-2"), ev(RolloutCompleted, "app-2")],
            ),
            (
                "first wave",
                status(RolloutPhase::Progressing, 0),
                vec![ev(RolloutStarted, "app-2@T")],
            ),
            (
                "a later wave",
                status(RolloutPhase::Progressing, 1),
                vec![ev(RolloutStarted, "app-2@T"), ev(WaveStarted, "app-2/1@T")],
            ),
            (
                "paused",
                status(RolloutPhase::Paused, 1),
                vec![ev(RolloutStarted, "app-2@T"), ev(RolloutPaused, "app-2/1@T")],
            ),
            (
                "paused, no start recorded",
                no_start,
                vec![ev(RolloutStarted, "app-2"), ev(RolloutPaused, "app-2/0")],
            ),
            (
                "awaiting promotion",
                status(RolloutPhase::AwaitingPromotion, 0),
                vec![ev(RolloutStarted, "app-2@T"), ev(AwaitingPromotion, "app-2/0@T")],
            ),
            (
                "failed with analysis and a rollback",
                failed_status(),
                vec![
                    ev(RolloutStarted, "app-2@T"),
                    ev(AnalysisFailed, "app-2@T"),
                    ev(RolloutFailed, "app-2@T"),
                    ev(RolledBack, "app-2@T"),
                ],
            ),
            (
                "rolled back",
                rolled_back,
                vec![ev(RolloutStarted, "app-2@T"), ev(RolledBack, "app-2@T")],
            ),
            (
                "complete",
                status(RolloutPhase::Complete, 2),
                vec![ev(RolloutStarted, "app-2@T"), ev(RolloutCompleted, "app-2@T")],
            ),
        ] {
            assert_eq!(keys(events(&status)), want, "{name}");
        }
    }

    #[test]
    fn a_refused_content_stands_once_per_refusal_and_its_message_is_told() {
        let refusal = |message: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: crate::status::conditions::VALID.into(),
            status: "False".into(),
            reason: "ValidationFailed".into(),
            message: message.into(),
            observed_generation: Some(1),
            last_transition_time: fixtures::time("2025-01-02T03:04:05Z"),
        };
        let mut refused = status(RolloutPhase::Complete, 2);
        refused.conditions.push(refusal(
            "content not made into revision app-3 (...): key \"a.json\": ...",
        ));
        let standing = events(&refused);
        let (event, key) = standing.last().unwrap().clone();
        assert_eq!(event, Event::ValidationFailed);
        // Another refusal is another occasion; the same one, the same.
        let mut other = refused.clone();
        other.conditions.last_mut().unwrap().message = "content not made into revision app-4 (...)".into();
        assert_ne!(events(&other).last().unwrap().1, key);
        assert_eq!(events(&refused.clone()).last().unwrap().1, key);
        // Passing again: nothing stands.
        refused.conditions.last_mut().unwrap().status = "True".into();
        assert!(
            events(&refused)
                .iter()
                .all(|(e, _)| *e != Event::ValidationFailed)
        );

        // The built-in template tells the condition's message.
        let mut refused = status(RolloutPhase::Complete, 2);
        refused.conditions.push(refusal(
            "content not made into revision app-3: key \"a.json\": bad",
        ));
        let set = Set::new(refused);
        let config = fixtures::config_with(&[]);
        let (told, problems) = fired(
            &config,
            &set.view(),
            &[sub("on-validation-failed", "slack", "ops")],
            |_| None,
        );
        assert_eq!(problems, []);
        assert_eq!(told.len(), 1);
        assert!(
            told[0].messages[0]
                .text
                .ends_with(r#": content not made into revision app-3: key "a.json": bad"#),
            "{:?}",
            told[0].messages
        );
    }

    fn sub(trigger: &str, service: &str, recipient: &str) -> Subscription {
        Subscription {
            trigger: trigger.into(),
            service: service.into(),
            recipient: recipient.into(),
        }
    }

    /// The subscription keys and once-per keys of what fires, given what was delivered.
    fn fire(
        config: &Config,
        status: ConfigMapSetStatus,
        subs: &[Subscription],
        delivered: &BTreeMap<SubscriptionKey, String>,
    ) -> (Vec<(String, String, String)>, Vec<Problem>) {
        let set = Set::new(status);
        let (fired, problems) = fired(config, &set.view(), subs, |k| {
            delivered.get(k).map(String::as_str)
        });
        let got = fired
            .into_iter()
            .map(|n| {
                (
                    n.key.trigger,
                    format!("{}:{}", n.key.service, n.key.recipient),
                    n.once.replace(STARTED, "@T"),
                )
            })
            .collect();
        (got, problems)
    }

    fn record(
        config: &Config,
        status: ConfigMapSetStatus,
        subs: &[Subscription],
    ) -> BTreeMap<SubscriptionKey, String> {
        let set = Set::new(status);
        let (fired, _) = fired(config, &set.view(), subs, |_| None);
        fired.into_iter().map(|n| (n.key, n.once)).collect()
    }

    fn row(trigger: &str, target: &str, once: &str) -> (String, String, String) {
        (trigger.into(), target.into(), once.into())
    }

    #[test]
    fn each_occasion_is_sent_once_per_subscription() {
        let config = fixtures::config_with(&[]);
        let subs = [
            sub("on-wave-started", "slack", "ops"),
            sub("on-wave-started", "teams", "prod"),
            sub("on-rollout-failed", "slack", "ops"),
        ];
        let wave1 = || status(RolloutPhase::Progressing, 1);
        let nothing = BTreeMap::new();
        assert_eq!(
            fire(&config, wave1(), &subs, &nothing),
            (
                vec![
                    row("on-wave-started", "slack:ops", "app-2/1@T"),
                    row("on-wave-started", "teams:prod", "app-2/1@T"),
                ],
                vec![]
            )
        );
        // A restart with the same status and the same records sends nothing.
        let delivered = record(&config, wave1(), &subs);
        assert_eq!(fire(&config, wave1(), &subs, &delivered), (vec![], vec![]));
        // The next wave sends one per subscription.
        assert_eq!(
            fire(&config, status(RolloutPhase::Progressing, 2), &subs, &delivered).0,
            [
                row("on-wave-started", "slack:ops", "app-2/2@T"),
                row("on-wave-started", "teams:prod", "app-2/2@T"),
            ]
        );
        // Only one recipient got it: the other is sent again.
        let partly: BTreeMap<_, _> = delivered
            .into_iter()
            .filter(|(k, _)| k.service == "slack")
            .collect();
        assert_eq!(
            fire(&config, wave1(), &subs, &partly).0,
            [row("on-wave-started", "teams:prod", "app-2/1@T")]
        );
    }

    #[test]
    fn a_new_rollout_of_the_same_revision_is_a_new_occasion() {
        let config = fixtures::config_with(&[]);
        let subs = [sub("on-rollout-failed", "slack", "ops")];
        let delivered = record(&config, failed_status(), &subs);
        let mut again = failed_status();
        again.rollout.as_mut().unwrap().started_at = Some(fixtures::time("2025-02-01T00:00:00Z"));
        assert_eq!(
            fire(&config, again, &subs, &delivered).0,
            [row(
                "on-rollout-failed",
                "slack:ops",
                "app-2@2025-02-01T00:00:00Z"
            )]
        );
    }

    #[test]
    fn conditions_choose_and_once_per_replaces_the_key() {
        let config = fixtures::config_with(&[
            ("trigger.on-rollout-failed", "- when: set.labels.tier == 'prod'"),
            (
                "trigger.on-team-failure",
                "- on: RolloutFailed\n  when: set.labels.team == 'payments'\n  oncePer: revision\n  send: [rollout-failed, rolled-back]\n\
                 - on: RolledBack\n  when: workloads | selectattr('state', 'eq', 'RolledBack') | list | length > 0\n",
            ),
            (
                "trigger.on-broken",
                "- on: RolloutFailed\n  when: wave + 'x'\n  oncePer: set.labels.tier\n",
            ),
        ]);
        let subs = [
            sub("on-rollout-failed", "slack", "ops"),
            sub("on-team-failure", "slack", "ops"),
            sub("on-broken", "slack", "ops"),
        ];
        let (got, problems) = fire(&config, failed_status(), &subs, &BTreeMap::new());
        // The set has no tier label: the overridden built-in trigger does not fire.
        assert_eq!(
            got,
            [
                row("on-team-failure", "slack:ops", "app-2"),
                row("on-team-failure", "slack:ops", "app-2@T")
            ]
        );
        assert_eq!(
            problems,
            [Problem::new(
                "trigger.on-broken",
                "condition [0]: `when` failed, so it did not fire: tried to use + operator on unsupported types \
                 number and string (line 1)"
            )]
        );
        let set = Set::new(failed_status());
        let (fired, _) = fired(&config, &set.view(), &subs[1..2], |_| None);
        let trigger = config.trigger("on-team-failure").unwrap();
        assert_eq!(fired[0].key.condition, trigger.conditions[0].key());
        assert_eq!(fired[1].key.condition, trigger.conditions[1].key());
        assert_ne!(fired[0].key.condition, fired[1].key.condition);
        let templates: Vec<&str> = fired[0].messages.iter().map(|m| m.template.as_str()).collect();
        assert_eq!(templates, ["rollout-failed", "rolled-back"]);
    }

    #[test]
    fn a_failing_once_per_falls_back_to_the_event_key() {
        let config = fixtures::config_with(&[("trigger.on-rollout-failed", "- oncePer: set.labels.tier")]);
        let (got, problems) = fire(
            &config,
            failed_status(),
            &[sub("on-rollout-failed", "slack", "ops")],
            &BTreeMap::new(),
        );
        assert_eq!(got, [row("on-rollout-failed", "slack:ops", "app-2@T")]);
        assert_eq!(
            problems,
            [Problem::new(
                "trigger.on-rollout-failed",
                "condition [0]: `oncePer` failed, so the event's own key was used: gave no value"
            )]
        );
    }

    #[test]
    fn a_missing_service_or_trigger_is_reported_and_the_rest_sent() {
        let config = fixtures::config_with(&[]);
        let subs = [
            sub("on-rollout-failed", "gone", "x"),
            sub("on-nothing", "slack", "ops"),
            sub("on-rollout-failed", "hooks", "ops"),
        ];
        let (got, problems) = fire(&config, failed_status(), &subs, &BTreeMap::new());
        assert_eq!(got, [row("on-rollout-failed", "hooks:ops", "app-2@T")]);
        assert_eq!(
            problems,
            [
                Problem::new("service.gone", "is not configured (a subscription names it)"),
                Problem::new("trigger.on-nothing", "is not defined"),
            ]
        );
    }

    #[test]
    fn a_set_without_a_rollout_tells_only_of_its_start_and_its_end() {
        let config = fixtures::config_with(&[]);
        let mut status = failed_status();
        status.rollout = None::<RolloutStatus>;
        let subs: Vec<Subscription> = Event::ALL
            .iter()
            .map(|e| sub(e.trigger(), "slack", "ops"))
            .collect();
        // A workload not yet on the revision: started, not complete; nothing of waves or failures.
        let (fired, problems) = fire(&config, status.clone(), &subs, &BTreeMap::new());
        let triggers: Vec<String> = fired.iter().map(|(t, ..)| t.to_string()).collect();
        assert_eq!(
            (triggers, problems),
            (vec!["on-rollout-started".to_string()], vec![])
        );
        for w in &mut status.workloads {
            w.state = WorkloadState::Current;
        }
        let (fired, _) = fire(&config, status, &subs, &BTreeMap::new());
        let triggers: Vec<String> = fired.iter().map(|(t, ..)| t.to_string()).collect();
        assert_eq!(triggers, ["on-rollout-completed", "on-rollout-started"]);
    }

    /// Issue 36: a hold by a change window is an event of its own (`on-rollout-waiting`), told once
    /// per hold: the same hold keeps its key, the next hold (a later opening) gets another, and it
    /// names the window and when it opens.
    #[test]
    fn a_hold_by_a_window_is_told_once_per_hold() {
        let held = |reason: &str, opens: Option<&str>| {
            let mut status = status(RolloutPhase::Waiting, 1);
            let rollout = status.rollout.as_mut().unwrap();
            rollout.reason = Some(reason.into());
            rollout.next_window = opens.map(fixtures::time);
            status
        };
        let waiting = |status: &ConfigMapSetStatus| {
            let events = keys(events(status));
            events
                .into_iter()
                .filter(|(e, _)| *e == Event::RolloutWaiting)
                .collect::<Vec<_>>()
        };
        let first = held("holiday-freeze", Some("2026-12-27T00:00:00Z"));
        assert_eq!(
            waiting(&first),
            [ev(
                Event::RolloutWaiting,
                "app-2/1@T~holiday-freeze~2026-12-27T00:00:00Z"
            )]
        );
        assert_eq!(
            waiting(&first),
            waiting(&first.clone()),
            "the same hold, the same key"
        );
        let next = held("holiday-freeze", Some("2027-01-03T00:00:00Z"));
        assert_ne!(waiting(&first), waiting(&next), "a later hold is told again");
        assert_eq!(
            waiting(&held("OutsideWindow", None)),
            [ev(Event::RolloutWaiting, "app-2/1@T~OutsideWindow~never")]
        );
        assert_eq!(waiting(&status(RolloutPhase::Progressing, 1)), []);

        let config = fixtures::config_with(&[]);
        let set = Set::new(first);
        let subs = [sub("on-rollout-waiting", "slack", "ops")];
        let (told, problems) = fired(&config, &set.view(), &subs, |_| None);
        assert_eq!(problems, []);
        assert_eq!(
            told[0].messages[0].text,
            "ConfigMapSet shop/app: rollout of app-2 waits in wave 1, held by change window holiday-freeze; \
             it goes on at 2026-12-27T00:00:00Z."
        );
        let set = Set::new(held("OutsideWindow", None));
        let (told, _) = fired(&config, &set.view(), &subs, |_| None);
        assert_eq!(
            told[0].messages[0].text,
            "ConfigMapSet shop/app: rollout of app-2 waits in wave 1, held outside its change windows; \
             no window opens."
        );
    }

    /// Issue 36: a condition's templates are rendered once per service, not once per recipient.
    #[test]
    fn templates_render_once_per_condition_and_service() {
        let config = fixtures::config_with(&[]);
        let set = Set::new(failed_status());
        let mut subs: Vec<Subscription> = (0..10)
            .map(|i| sub("on-rollout-failed", "slack", &format!("c{i}")))
            .collect();
        subs.push(sub("on-rollout-failed", "teams", "prod"));
        render::RENDERED.with(|n| n.set(0));
        let (told, _) = fired(&config, &set.view(), &subs, |_| None);
        assert_eq!(told.len(), 11);
        assert_eq!(
            render::RENDERED.with(|n| n.get()),
            2,
            "once for Slack, once for Teams"
        );
        assert!(told[..10].iter().all(|n| n.messages == told[0].messages));
    }
}
