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
    AnalysisFailed,
    RolloutFailed,
    RolledBack,
    RolloutCompleted,
}

impl Event {
    pub const ALL: [Event; 8] = [
        Self::RolloutStarted,
        Self::WaveStarted,
        Self::RolloutPaused,
        Self::AwaitingPromotion,
        Self::AnalysisFailed,
        Self::RolloutFailed,
        Self::RolledBack,
        Self::RolloutCompleted,
    ];

    /// The name a trigger's `on` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RolloutStarted => "RolloutStarted",
            Self::WaveStarted => "WaveStarted",
            Self::RolloutPaused => "RolloutPaused",
            Self::AwaitingPromotion => "AwaitingPromotion",
            Self::AnalysisFailed => "AnalysisFailed",
            Self::RolloutFailed => "RolloutFailed",
            Self::RolledBack => "RolledBack",
            Self::RolloutCompleted => "RolloutCompleted",
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
            Self::AnalysisFailed => "on-analysis-failed",
            Self::RolloutFailed => "on-rollout-failed",
            Self::RolledBack => "on-rolled-back",
            Self::RolloutCompleted => "on-rollout-completed",
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
/// (as `kubectl cmset promote` names a rollout), left out with `@` when the status has none.
pub fn events(status: &ConfigMapSetStatus) -> Vec<(Event, String)> {
    let Some(rollout) = &status.rollout else {
        return Vec::new();
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
        _ => {}
    }
    if rollout
        .analysis
        .iter()
        .any(|a| a.verdict == AnalysisVerdict::Failed)
    {
        out.push((Event::AnalysisFailed, of_rollout.clone()));
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
    /// The index of the trigger's condition.
    pub condition: usize,
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
/// one, a service that is gone) come sorted and without repeats.
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
            let Some(event_key) = standing.get(&condition.on) else {
                continue;
            };
            let context = render::context(set, condition.on, name);
            let Some(once) = once_key(condition, index, event_key, &context, &key, &mut problems) else {
                continue;
            };
            for sub in &subs {
                let sub_key = SubscriptionKey {
                    trigger: name.to_string(),
                    condition: index,
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
                let messages = condition
                    .send
                    .iter()
                    .map(|template| {
                        let (message, problem) =
                            render::render_or_built_in(config, template, condition.on, &context, service);
                        problems.extend(problem);
                        message
                    })
                    .collect();
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
