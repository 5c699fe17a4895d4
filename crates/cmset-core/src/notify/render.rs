//! Templates (MiniJinja, a Jinja dialect), the context they see, the built-in template of each event,
//! and rendering with a fallback: a template that fails is reported and the built-in one is sent.
//!
//! Undefined names are strict: `{{ set.nmae }}` is an error rather than empty text, so a typo shows up
//! as a reported problem (and the built-in message still goes out) instead of a silently blank message.
//! Every documented field is always present, `none` when it has no value; a label that may be missing
//! is read with `set.labels.team | default("")` or `is defined`.

use std::collections::BTreeMap;

use cmset_api::labels::PAUSED;
use cmset_api::{RolloutPhase, WorkloadState};
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde_json::{Value as Json, json};

use super::config::{Service, ServiceKind};
use super::triggers::Event;
use super::{Problem, SetView};

/// Work one template or expression may do (MiniJinja's fuel: about one unit per instruction), so a
/// runaway loop fails instead of holding the controller.
const FUEL: u64 = 1_000_000;

/// A notification template: the message, and what a service may use instead of or beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pub name: String,
    /// The text every service falls back on.
    pub message: String,
    pub slack: Option<SlackPart>,
    pub teams: Option<TeamsPart>,
    /// By webhook service name.
    pub webhook: BTreeMap<String, WebhookPart>,
}

/// Each renders to JSON text (Slack's `attachments` and `blocks` arrays).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlackPart {
    pub attachments: Option<String>,
    pub blocks: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TeamsPart {
    pub title: Option<String>,
    /// Default: the message.
    pub text: Option<String>,
    /// Default: the title, else the message's first line.
    pub summary: Option<String>,
    /// Renders to a JSON list of `{"name": ..., "value": ...}`.
    pub facts: Option<String>,
    /// Renders to the whole JSON body, sent as it is (for a Workflows webhook, say).
    pub body: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookPart {
    pub method: String,
    /// Appended to the service's URL.
    pub path: Option<String>,
    /// Default: `{"text": <message>, "context": <the whole context>}`.
    pub body: Option<String>,
}

/// A rendered template, for one service.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// The template that was rendered (the built-in one's name after a fallback).
    pub template: String,
    pub text: String,
    pub part: Part,
}

/// The parts of the template for the service's kind, rendered.
#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    Slack {
        attachments: Option<Json>,
        blocks: Option<Json>,
    },
    Teams {
        title: Option<String>,
        text: Option<String>,
        summary: Option<String>,
        facts: Option<Json>,
        body: Option<Json>,
    },
    Webhook {
        method: String,
        path: Option<String>,
        body: String,
    },
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_fuel(Some(FUEL));
    env
}

/// Whether a template text compiles (the error says where it does not).
pub(crate) fn check_template(source: &str) -> Result<(), String> {
    environment()
        .template_from_named_str("template", source)
        .map(|_| ())
        .map_err(|e| describe(&e))
}

/// Whether an expression (`when`, `oncePer`) compiles.
pub(crate) fn check_expression(source: &str) -> Result<(), String> {
    environment()
        .compile_expression(source)
        .map(|_| ())
        .map_err(|e| describe(&e))
}

fn describe(e: &minijinja::Error) -> String {
    match e.line() {
        Some(line) => format!("{} (line {line})", e.detail().unwrap_or(&e.kind().to_string())),
        None => e.detail().map_or_else(|| e.kind().to_string(), str::to_string),
    }
}

/// Renders one template text over the context.
fn render_text(source: &str, context: &Json) -> Result<String, String> {
    environment()
        .render_str(source, minijinja::Value::from(minijinja::value::Serde(context)))
        .map_err(|e| describe(&e))
}

/// Evaluates an expression over the context: `when` as true or false.
pub fn is_true(expression: &str, context: &Json) -> Result<bool, String> {
    let env = environment();
    let expr = env.compile_expression(expression).map_err(|e| describe(&e))?;
    let value = expr
        .eval(minijinja::Value::from(minijinja::value::Serde(context)))
        .map_err(|e| describe(&e))?;
    Ok(value.is_true())
}

/// Evaluates an expression over the context as text: `oncePer`.
pub fn text_of(expression: &str, context: &Json) -> Result<String, String> {
    let env = environment();
    let expr = env.compile_expression(expression).map_err(|e| describe(&e))?;
    let value = expr
        .eval(minijinja::Value::from(minijinja::value::Serde(context)))
        .map_err(|e| describe(&e))?;
    if value.is_undefined() {
        return Err("is undefined".to_string());
    }
    Ok(value.to_string())
}

fn render_json(field: &str, source: &str, context: &Json) -> Result<Json, String> {
    let text = render_text(source, context).map_err(|e| format!("`{field}`: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("`{field}` did not render to JSON: {e}"))
}

fn render_opt(field: &str, source: &Option<String>, context: &Json) -> Result<Option<String>, String> {
    source
        .as_deref()
        .map(|s| render_text(s, context).map_err(|e| format!("`{field}`: {e}")))
        .transpose()
}

fn render_opt_json(field: &str, source: &Option<String>, context: &Json) -> Result<Option<Json>, String> {
    source
        .as_deref()
        .map(|s| render_json(field, s, context))
        .transpose()
}

/// Renders `template` for `service`: the message and the part that service uses.
pub fn render(template: &Template, context: &Json, service: &Service) -> Result<Message, String> {
    let text = render_text(&template.message, context).map_err(|e| format!("`message`: {e}"))?;
    let part = match &service.kind {
        ServiceKind::Slack(_) => {
            let slack = template.slack.clone().unwrap_or_default();
            Part::Slack {
                attachments: render_opt_json("slack.attachments", &slack.attachments, context)?,
                blocks: render_opt_json("slack.blocks", &slack.blocks, context)?,
            }
        }
        ServiceKind::Teams(_) => {
            let teams = template.teams.clone().unwrap_or_default();
            Part::Teams {
                title: render_opt("teams.title", &teams.title, context)?,
                text: render_opt("teams.text", &teams.text, context)?,
                summary: render_opt("teams.summary", &teams.summary, context)?,
                facts: render_opt_json("teams.facts", &teams.facts, context)?,
                body: render_opt_json("teams.body", &teams.body, context)?,
            }
        }
        ServiceKind::Webhook(_) => match template.webhook.get(&service.name) {
            Some(part) => {
                let at = format!("webhook.{}", service.name);
                Part::Webhook {
                    method: part.method.clone(),
                    path: render_opt(&format!("{at}.path"), &part.path, context)?,
                    body: match &part.body {
                        Some(body) => render_text(body, context).map_err(|e| format!("`{at}.body`: {e}"))?,
                        None => default_webhook_body(&text, context),
                    },
                }
            }
            None => Part::Webhook {
                method: "POST".to_string(),
                path: None,
                body: default_webhook_body(&text, context),
            },
        },
    };
    Ok(Message {
        template: template.name.clone(),
        text,
        part,
    })
}

fn default_webhook_body(text: &str, context: &Json) -> String {
    json!({"text": text, "context": context}).to_string()
}

/// Renders the template named `name` for `service`; when it is not defined or fails, reports why and
/// renders the built-in template of `event` instead (never the ConfigMap's override of it, which may be
/// what failed). Always gives a message.
pub fn render_or_built_in(
    config: &super::Config,
    name: &str,
    event: Event,
    context: &Json,
    service: &Service,
) -> (Message, Option<Problem>) {
    let key = format!("template.{name}");
    let problem = match config.template(name) {
        Some(template) => match render(&template, context, service) {
            Ok(message) => return (message, None),
            Err(e) => Problem::new(
                key,
                format!(
                    "could not be rendered for service {}: {e}; the built-in template {} was sent",
                    service.name,
                    event.template()
                ),
            ),
        },
        None => Problem::new(
            key,
            format!(
                "is not defined; the built-in template {} was sent",
                event.template()
            ),
        ),
    };
    let built_in = built_in(event.template()).expect("every event has a built-in template");
    let message = render(&built_in, context, service).unwrap_or_else(|_| Message {
        // The built-in templates are tested over sparse statuses; this is a last resort.
        template: built_in.name.clone(),
        text: format!(
            "{}: {}",
            event.as_str(),
            context["set"]["name"].as_str().unwrap_or("")
        ),
        part: Part::Slack {
            attachments: None,
            blocks: None,
        },
    });
    (message, Some(problem))
}

/// The `kubectl cmset` command to run next: `promote` when a wave awaits promotion, `resume` when the
/// rollout is paused by the annotation `kubectl cmset pause` writes, `status` otherwise (a pause by the
/// spec is lifted by changing the spec).
pub fn next_command(set: &SetView<'_>) -> String {
    let phase = set.status.rollout.as_ref().map(|r| r.phase);
    let paused_by_annotation = set.annotations.get(PAUSED).is_some_and(|v| v == "true");
    let verb = match phase {
        Some(RolloutPhase::AwaitingPromotion) => "promote",
        Some(RolloutPhase::Paused) if paused_by_annotation => "resume",
        _ => "status",
    };
    format!(
        "kubectl cmset {verb} -n {} {}/{}",
        set.namespace,
        set.kind.as_str().to_ascii_lowercase(),
        set.name
    )
}

fn state_str(state: WorkloadState) -> &'static str {
    match state {
        WorkloadState::Pending => "Pending",
        WorkloadState::Current => "Current",
        WorkloadState::Pinned => "Pinned",
        WorkloadState::Waiting => "Waiting",
        WorkloadState::RolledBack => "RolledBack",
    }
}

/// What templates and expressions see. Every field is present; absent values are `none`.
pub fn context(set: &SetView<'_>, event: Event, trigger: &str) -> Json {
    let status = set.status;
    let rollout = status.rollout.as_ref();
    let revision = rollout
        .map(|r| r.revision.clone())
        .or_else(|| status.current_revision.clone());
    let previous = status
        .history
        .iter()
        .find(|h| Some(&h.name) != revision.as_ref())
        .map(|h| h.name.clone());
    let workloads: Vec<Json> = status
        .workloads
        .iter()
        .map(|w| {
            json!({
                "kind": w.kind,
                "name": w.name,
                "state": state_str(w.state),
                "revision": w.revision,
                "previousRevision": w.previous_revision,
                "wave": w.wave,
                "message": w.message,
            })
        })
        .collect();
    let runs: Vec<Json> = rollout
        .map(|r| r.analysis.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|a| {
            json!({
                "template": a.template,
                "workloadKind": a.workload_kind,
                "workload": a.workload,
                "workloads": a.workloads,
                "wave": a.wave,
                "query": a.query,
                "condition": a.condition,
                "lastValue": a.last_value,
                "verdict": a.verdict.as_str(),
                "measurements": a.measurements,
                "failures": a.failures,
                "message": a.message,
            })
        })
        .collect();
    json!({
        "set": {
            "name": set.name,
            "namespace": set.namespace,
            "kind": set.kind.as_str(),
            "labels": set.labels,
            "annotations": set.annotations,
        },
        "revision": revision,
        "previousRevision": previous,
        "wave": rollout.map(|r| r.wave),
        "waves": rollout.map(|r| r.waves.clone()).unwrap_or_default(),
        "phase": rollout.map(|r| r.phase.as_str()),
        "message": rollout.and_then(|r| r.message.clone()),
        "workloads": workloads,
        "analysisRuns": runs,
        "event": event.as_str(),
        "trigger": trigger,
        "next": next_command(set),
    })
}

const SUBJECT: &str = "{{ set.kind }} {{ set.namespace }}/{{ set.name }}";

/// Facts every built-in Teams card shows.
const FACTS: &str = r#"[{"name": "Revision", "value": {{ revision | tojson }}},
 {"name": "Wave", "value": {{ (wave ~ " of " ~ (waves | join(", "))) | tojson }}},
 {"name": "Phase", "value": {{ phase | tojson }}},
 {"name": "Next", "value": {{ next | tojson }}}]"#;

/// The built-in template of that name (each event's, named as its trigger without `on-`).
pub fn built_in(name: &str) -> Option<Template> {
    let event = Event::ALL.into_iter().find(|e| e.template() == name)?;
    let (title, body) = match event {
        Event::RolloutStarted => (
            "Rollout started",
            "rollout of {{ revision }} started{% if previousRevision %} (was {{ previousRevision }}){% endif %}.",
        ),
        Event::WaveStarted => (
            "Wave started",
            "wave {{ wave }} of the rollout of {{ revision }} started (waves {{ waves | join(', ') }}).",
        ),
        Event::RolloutPaused => (
            "Rollout paused",
            "rollout of {{ revision }} is paused in wave {{ wave }}. To go on: {{ next }}",
        ),
        Event::AwaitingPromotion => (
            "Awaiting promotion",
            "wave {{ wave }} of the rollout of {{ revision }} is done; the next wave waits for: {{ next }}",
        ),
        Event::AnalysisFailed => (
            "Analysis failed",
            "analysis of {{ revision }} failed in wave {{ wave }}:\
             {% for run in analysisRuns if run.verdict == 'Failed' %} {{ run.template }}\
             {% if run.workload %} ({{ run.workloadKind }} {{ run.workload }}){% endif %}\
             {% if run.message %}: {{ run.message }}{% endif %}{% if not loop.last %};{% endif %}{% endfor %}",
        ),
        Event::RolloutFailed => (
            "Rollout failed",
            "rollout of {{ revision }} failed in wave {{ wave }}{% if message %}: {{ message }}{% endif %}. \
             See: {{ next }}",
        ),
        Event::RolledBack => (
            "Rolled back",
            "rolled back after the rollout of {{ revision }} failed:\
             {% for w in workloads if w.state == 'RolledBack' %} {{ w.kind }} {{ w.name }} to \
             {{ w.revision }}{% if not loop.last %},{% endif %}{% endfor %}.",
        ),
        Event::RolloutCompleted => (
            "Rollout completed",
            "rollout of {{ revision }} completed{% if waves | length > 1 %} in {{ waves | length }} waves{% endif %}.",
        ),
    };
    Some(Template {
        name: name.to_string(),
        message: format!("{SUBJECT}: {body}"),
        slack: None,
        teams: Some(TeamsPart {
            title: Some(format!("{title}: {SUBJECT}")),
            text: None,
            summary: None,
            facts: Some(FACTS.to_string()),
            body: None,
        }),
        webhook: BTreeMap::new(),
    })
}
