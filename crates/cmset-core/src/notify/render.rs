//! Templates (MiniJinja, a Jinja dialect), the context they see, the built-in template of each event,
//! and rendering with a fallback: a template that fails is reported and the built-in one is sent.
//!
//! A name the context does not have is refused when the configuration is read. Beyond that, templates
//! are strict: printing, comparing or looping over something undefined (`{{ set.nmae }}`, a label the
//! set lacks) is an error, reported, and the built-in message goes out instead of a silently blank one.
//! Expressions (`when`, `oncePer`) are lenient: a missing label is undefined, which equals nothing and
//! is false, so `set.labels.tier == 'prod'` is simply false on a set without that label. Every
//! documented field is always present; one without a value is `none`, which prints as empty text.
//!
//! Text in the context may come from a tenant (annotations, messages that quote a workload or a
//! query) while the template is the admin's. For Slack and Teams, which read markup, every text value of
//! the context is escaped before rendering ([`escaped_for`]): `&`, `<`, `>` as entities (Slack's
//! mrkdwn reads `<!channel>`, `<@U123>` and `<url|text>` from them), and for Teams also `[` and `]`
//! (markdown links) and `*`, `_` (emphasis). So a set cannot mention `@channel` or plant a link; the
//! template's own markup works as written. Webhooks get the text as it is, inside JSON.

use std::collections::BTreeMap;

use cmset_api::labels::PAUSED;
use cmset_api::{RolloutPhase, WorkloadState};
use minijinja::{AutoEscape, Environment, ErrorKind, UndefinedBehavior};
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

/// The top-level names of the context ([`context`]).
pub const FIELDS: [&str; 14] = [
    "set",
    "revision",
    "previousRevision",
    "wave",
    "waves",
    "phase",
    "message",
    "reason",
    "nextWindow",
    "workloads",
    "analysisRuns",
    "event",
    "trigger",
    "next",
];

/// Templates are strict about undefined values, expressions lenient (see the module documentation).
fn environment(undefined: UndefinedBehavior) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(undefined);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_fuel(Some(FUEL));
    env.set_formatter(|out, state, value| {
        if value.is_undefined() {
            return Err(minijinja::Error::new(
                ErrorKind::UndefinedError,
                "undefined value",
            ));
        }
        if value.is_none() {
            return Ok(());
        }
        minijinja::escape_formatter(out, state, value)
    });
    env
}

/// Names used at the top level that neither the context nor the engine provides.
fn unknown_names(env: &Environment<'_>, used: std::collections::HashSet<String>) -> Result<(), String> {
    let mut unknown: Vec<String> = used
        .into_iter()
        .filter(|name| !FIELDS.contains(&name.as_str()) && !env.globals().any(|(g, _)| g == name))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    unknown.sort();
    Err(format!(
        "uses {}, which the context does not have (it has {})",
        unknown
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", "),
        FIELDS.join(", ")
    ))
}

/// Whether a template text compiles and uses only names of the context.
pub(crate) fn check_template(source: &str) -> Result<(), String> {
    let env = environment(UndefinedBehavior::Strict);
    let template = env
        .template_from_named_str("template", source)
        .map_err(|e| describe(&e))?;
    unknown_names(&env, template.undeclared_variables(false))
}

/// Whether an expression (`when`, `oncePer`) compiles and uses only names of the context.
pub(crate) fn check_expression(source: &str) -> Result<(), String> {
    let env = environment(UndefinedBehavior::Lenient);
    let expr = env.compile_expression(source).map_err(|e| describe(&e))?;
    unknown_names(&env, expr.undeclared_variables(false))
}

fn describe(e: &minijinja::Error) -> String {
    match e.line() {
        Some(line) => format!("{} (line {line})", e.detail().unwrap_or(&e.kind().to_string())),
        None => e.detail().map_or_else(|| e.kind().to_string(), str::to_string),
    }
}

/// Renders one template text over the context.
fn render_text(source: &str, context: &Json) -> Result<String, String> {
    environment(UndefinedBehavior::Strict)
        .render_str(source, minijinja::Value::from(minijinja::value::Serde(context)))
        .map_err(|e| describe(&e))
}

fn evaluate(expression: &str, context: &Json) -> Result<minijinja::Value, String> {
    let env = environment(UndefinedBehavior::Lenient);
    let expr = env.compile_expression(expression).map_err(|e| describe(&e))?;
    expr.eval(minijinja::Value::from(minijinja::value::Serde(context)))
        .map_err(|e| describe(&e))
}

/// Evaluates an expression over the context: `when` as true or false.
pub fn is_true(expression: &str, context: &Json) -> Result<bool, String> {
    Ok(evaluate(expression, context)?.is_true())
}

/// Evaluates an expression over the context as text: `oncePer`. Undefined or `none` is an error.
pub fn text_of(expression: &str, context: &Json) -> Result<String, String> {
    let value = evaluate(expression, context)?;
    if value.is_undefined() || value.is_none() {
        return Err("gave no value".to_string());
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

#[cfg(test)]
thread_local! {
    /// Templates rendered by this thread: what the tests of rendering once count.
    pub(crate) static RENDERED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Slack's mrkdwn escaping: the three characters its markup is made of.
fn escape_slack(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Teams reads HTML entities and markdown in card text: entities for `&`, `<` and `>`, a backslash
/// before what makes a link or emphasis.
fn escape_teams(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '[' | ']' | '*' | '_' | '\\' | '`' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

fn escape_strings(value: &Json, escape: fn(&str) -> String) -> Json {
    match value {
        Json::String(text) => Json::String(escape(text)),
        Json::Array(items) => Json::Array(items.iter().map(|v| escape_strings(v, escape)).collect()),
        Json::Object(fields) => Json::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), escape_strings(v, escape)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The context as a template for `service` sees it: every text value escaped for Slack's or Teams'
/// markup, as it is for a webhook.
pub fn escaped_for(service: &Service, context: &Json) -> Json {
    match &service.kind {
        ServiceKind::Slack(_) => escape_strings(context, escape_slack),
        ServiceKind::Teams(_) => escape_strings(context, escape_teams),
        ServiceKind::Webhook(_) => context.clone(),
    }
}

/// Renders `template` for `service`: the message and the part that service uses, over the context
/// escaped for that service ([`escaped_for`]).
pub fn render(template: &Template, context: &Json, service: &Service) -> Result<Message, String> {
    #[cfg(test)]
    RENDERED.with(|n| n.set(n.get() + 1));
    let escaped = escaped_for(service, context);
    let context = &escaped;
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
        "message": match event {
            Event::ValidationFailed => super::triggers::refusal(status).map(str::to_string),
            _ => rollout.and_then(|r| r.message.clone()),
        },
        "reason": rollout.and_then(|r| r.reason.clone()),
        "nextWindow": rollout.and_then(|r| r.next_window.as_ref()).map(|t| t.0.to_string()),
        "workloads": workloads,
        // Readers counted instead of listed, in a large fan-out (see `crate::revisions::fit`).
        "settledWorkloads": status.settled_workloads.as_ref().map_or(0, |s| s.count),
        "omittedWorkloads": status.omitted_workloads,
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
        Event::RolloutWaiting => (
            "Rollout waiting",
            "rollout of {{ revision }} waits in wave {{ wave }}, held \
             {% if reason == 'OutsideWindow' %}outside its change windows\
             {% else %}by change window {{ reason }}{% endif %}; \
             {% if nextWindow %}it goes on at {{ nextWindow }}{% else %}no window opens{% endif %}.",
        ),
        Event::AnalysisFailed => (
            "Analysis failed",
            "analysis of {{ revision }} failed in wave {{ wave }}:\
             {% for run in analysisRuns if run.verdict == 'Failed' %} {{ run.template }}\
             {% if run.workload %} ({{ run.workloadKind }} {{ run.workload }}){% endif %}\
             {% if run.message %}: {{ run.message }}{% endif %}{% if not loop.last %};{% endif %}{% endfor %}",
        ),
        Event::CheckFailed => ("Check failed", "{{ message }}. See: {{ next }}"),
        Event::RolloutFailed => (
            "Rollout failed",
            // The status's message already starts with what the first words say: said once.
            "rollout of {{ revision }} failed in wave {{ wave }}{% if message %}: \
             {{ message | replace('the rollout of ' ~ revision ~ ' failed in wave ' ~ wave ~ ': ', '') }}\
             {% endif %}. See: {{ next }}",
        ),
        Event::RolledBack => (
            "Rolled back",
            "rolled back after the rollout of {{ revision }} failed:\
             {% for w in workloads if w.state == 'RolledBack' %} {{ w.kind }} {{ w.name }} to \
             {{ w.previousRevision if w.revision == revision and w.previousRevision else w.revision }}\
             {% if not loop.last %},{% endif %}{% endfor %}.",
        ),
        Event::ValidationFailed => ("Content refused", "{{ message }}"),
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

#[cfg(test)]
mod tests {
    use cmset_api::RolloutStatus;

    use super::*;
    use crate::notify::fixtures::{self, Set, failed_status, status};
    use crate::notify::{Config, config};
    use crate::set::SetKind;

    fn template(message: &str) -> Template {
        Template {
            name: "t".into(),
            message: message.into(),
            slack: None,
            teams: None,
            webhook: BTreeMap::new(),
        }
    }

    fn service(config: &Config, name: &str) -> Service {
        config.services[name].clone()
    }

    /// Every documented field, in one template.
    const EVERY_FIELD: &str = "\
set: {{ set.kind }} {{ set.namespace }}/{{ set.name }} team={{ set.labels.team }} note={{ set.annotations.note }}
revision: {{ revision }} (was {{ previousRevision }})
wave: {{ wave }} of {{ waves | join(',') }}, phase {{ phase }}: {{ message }}
{% for w in workloads %}workload: {{ w.kind }}/{{ w.name }} {{ w.state }} on {{ w.revision }} \
(was {{ w.previousRevision }}) wave {{ w.wave }}: {{ w.message }}
{% endfor %}{% for r in analysisRuns %}run: {{ r.template }} {{ r.workloadKind }}/{{ r.workload }} \
{{ r.workloads | length }} grouped, wave {{ r.wave }}: {{ r.query }} {{ r.condition }} = {{ r.lastValue }} \
{{ r.verdict }} {{ r.failures }}/{{ r.measurements }}: {{ r.message }}
{% endfor %}event: {{ event }} trigger: {{ trigger }}
next: {{ next }}";

    #[test]
    fn every_field_renders() {
        let mut set = Set::new(failed_status());
        set.annotations.insert("note".into(), "hello".into());
        let config = fixtures::config_with(&[]);
        let context = context(&set.view(), Event::RolloutFailed, "on-rollout-failed");
        let message = render(&template(EVERY_FIELD), &context, &service(&config, "slack")).unwrap();
        assert_eq!(
            message.text,
            "\
set: ConfigMapSet shop/app team=payments note=hello
revision: app-2 (was app-1)
wave: 1 of 0,1,2, phase Failed: Deployment web is not healthy
workload: Deployment/web RolledBack on app-1 (was app-1) wave 0: 
workload: StatefulSet/db Waiting on app-1 (was ) wave 2: waits for wave 2
run: error-rate Deployment/web 0 grouped, wave 1: rate(errors[5m]) result &lt; 0.05 = 0.2 Failed 2/3: 0.2 is not &lt; 0.05
event: RolloutFailed trigger: on-rollout-failed
next: kubectl cmset status -n shop configmapset/app"
        );
    }

    #[test]
    fn undefined_names_are_errors_unless_defaulted() {
        let set = Set::new(status(RolloutPhase::Progressing, 0));
        let context = context(&set.view(), Event::RolloutStarted, "on-rollout-started");
        let config = fixtures::config_with(&[]);
        let slack = service(&config, "slack");
        for (source, want) in [
            ("{{ set.nmae }}", Err("`message`: undefined value (line 1)")),
            (
                "{{ set.labels.tier }}",
                Err("`message`: undefined value (line 1)"),
            ),
            ("{{ set.labels.tier | default('none set') }}", Ok("none set")),
            (
                "{% if set.labels.tier is defined %}x{% else %}y{% endif %}",
                Ok("y"),
            ),
            ("{{ message }}", Ok("")),
            (
                "{% if set.labels.tier == 'prod' %}x{% endif %}",
                Err("`message`: undefined value (line 1)"),
            ),
            ("{% if not message %}no message{% endif %}", Ok("no message")),
        ] {
            let got = render(&template(source), &context, &slack).map(|m| m.text);
            assert_eq!(got, want.map(str::to_string).map_err(str::to_string), "{source}");
        }
    }

    #[test]
    fn next_names_the_plugin_verb_that_moves_the_rollout_on() {
        for (phase, paused_annotation, kind, want) in [
            (
                RolloutPhase::AwaitingPromotion,
                false,
                SetKind::ConfigMapSet,
                "kubectl cmset promote -n shop configmapset/app",
            ),
            (
                RolloutPhase::Paused,
                true,
                SetKind::ConfigMapSet,
                "kubectl cmset resume -n shop configmapset/app",
            ),
            // Paused by the spec: `resume` would not lift it.
            (
                RolloutPhase::Paused,
                false,
                SetKind::ConfigMapSet,
                "kubectl cmset status -n shop configmapset/app",
            ),
            (
                RolloutPhase::Failed,
                false,
                SetKind::SecretSet,
                "kubectl cmset status -n shop secretset/app",
            ),
            (
                RolloutPhase::Progressing,
                false,
                SetKind::ConfigMapSet,
                "kubectl cmset status -n shop configmapset/app",
            ),
        ] {
            let mut set = Set::new(status(phase, 1));
            if paused_annotation {
                set.annotations.insert(PAUSED.into(), "true".into());
            }
            let mut view = set.view();
            view.kind = kind;
            assert_eq!(next_command(&view), want, "{phase:?}");
        }
    }

    #[test]
    fn built_in_messages_read_well() {
        let config = fixtures::config_with(&[]);
        let slack = service(&config, "slack");
        for (event, status, want) in [
            (
                Event::RolloutStarted,
                status(RolloutPhase::Progressing, 0),
                "ConfigMapSet shop/app: rollout of app-2 started (was app-1).",
            ),
            (
                Event::WaveStarted,
                status(RolloutPhase::Progressing, 1),
                "ConfigMapSet shop/app: wave 1 of the rollout of app-2 started (waves 0, 1, 2).",
            ),
            (
                Event::RolloutPaused,
                status(RolloutPhase::Paused, 1),
                "ConfigMapSet shop/app: rollout of app-2 is paused in wave 1. To go on: kubectl cmset status -n \
                 shop configmapset/app",
            ),
            (
                Event::AwaitingPromotion,
                status(RolloutPhase::AwaitingPromotion, 1),
                "ConfigMapSet shop/app: wave 1 of the rollout of app-2 is done; the next wave waits for: kubectl \
                 cmset promote -n shop configmapset/app",
            ),
            (
                Event::AnalysisFailed,
                failed_status(),
                // Slack shows `&lt;` as `<`: the run's message is escaped for its mrkdwn.
                "ConfigMapSet shop/app: analysis of app-2 failed in wave 1: error-rate (Deployment web): 0.2 is \
                 not &lt; 0.05",
            ),
            (
                Event::RolloutFailed,
                failed_status(),
                "ConfigMapSet shop/app: rollout of app-2 failed in wave 1: Deployment web is not healthy. See: \
                 kubectl cmset status -n shop configmapset/app",
            ),
            (
                Event::RolledBack,
                failed_status(),
                "ConfigMapSet shop/app: rolled back after the rollout of app-2 failed: Deployment web to app-1.",
            ),
            // The status's message as the planner writes it: its opening is not said twice.
            (
                Event::RolloutFailed,
                {
                    let mut status = failed_status();
                    status.rollout.as_mut().unwrap().message =
                        Some("the rollout of app-2 failed in wave 1: Deployment web is not healthy".into());
                    status
                },
                "ConfigMapSet shop/app: rollout of app-2 failed in wave 1: Deployment web is not healthy. See: \
                 kubectl cmset status -n shop configmapset/app",
            ),
            // Decided, not yet moved: the workload still names the failed revision; the message names
            // where it goes back to.
            (
                Event::RolledBack,
                {
                    let mut status = failed_status();
                    status.workloads[0].revision = "app-2".into();
                    status.workloads[0].previous_revision = Some("app-1".into());
                    status
                },
                "ConfigMapSet shop/app: rolled back after the rollout of app-2 failed: Deployment web to app-1.",
            ),
            (
                Event::RolloutCompleted,
                status(RolloutPhase::Complete, 2),
                "ConfigMapSet shop/app: rollout of app-2 completed in 3 waves.",
            ),
        ] {
            let set = Set::new(status);
            let context = context(&set.view(), event, event.trigger());
            let message = render(&built_in(event.template()).unwrap(), &context, &slack).unwrap();
            assert_eq!(message.text, want, "{event:?}");
        }
    }

    #[test]
    fn built_in_templates_render_for_every_service_over_a_bare_status() {
        let config = fixtures::config_with(&[]);
        let bare = cmset_api::ConfigMapSetStatus {
            rollout: Some(RolloutStatus {
                revision: "app-9".into(),
                ..RolloutStatus::default()
            }),
            ..cmset_api::ConfigMapSetStatus::default()
        };
        for status in [bare, failed_status(), status(RolloutPhase::Complete, 2)] {
            let set = Set::new(status);
            for event in Event::ALL {
                let context = context(&set.view(), event, event.trigger());
                for service in config.services.values() {
                    let rendered = render(&built_in(event.template()).unwrap(), &context, service);
                    assert!(rendered.is_ok(), "{event:?} for {}: {rendered:?}", service.name);
                }
            }
        }
    }

    #[test]
    fn a_failing_template_is_reported_and_the_built_in_one_sent() {
        let (config, problems) = config::parse(
            &fixtures::data(&[
                ("service.slack", "token: t"),
                ("template.typo", "message: '{{ set.nmae }}'"),
                ("template.bad-blocks", "message: m\nslack:\n  blocks: 'not json'"),
                ("template.rollout-failed", "message: '{{ set.labels.tier }}'"),
            ]),
            &fixtures::secret(),
        );
        assert_eq!(problems, []);
        let slack = service(&config, "slack");
        let set = Set::new(failed_status());
        let context = context(&set.view(), Event::RolloutFailed, "on-rollout-failed");
        let built_in_text = render(&built_in("rollout-failed").unwrap(), &context, &slack)
            .unwrap()
            .text;
        for (name, problem) in [
            (
                "typo",
                "could not be rendered for service slack: `message`: undefined value (line 1); the built-in \
                 template rollout-failed was sent",
            ),
            (
                "bad-blocks",
                "could not be rendered for service slack: `slack.blocks` did not render to JSON: expected ident \
                 at line 1 column 2; the built-in template rollout-failed was sent",
            ),
            // The override of the built-in template fails: the compiled-in one is sent.
            (
                "rollout-failed",
                "could not be rendered for service slack: `message`: undefined value (line 1); the built-in \
                 template rollout-failed was sent",
            ),
            (
                "gone",
                "is not defined; the built-in template rollout-failed was sent",
            ),
        ] {
            let (message, got) = render_or_built_in(&config, name, Event::RolloutFailed, &context, &slack);
            assert_eq!(
                got,
                Some(Problem::new(format!("template.{name}"), problem)),
                "{name}"
            );
            assert_eq!(message.template, "rollout-failed");
            assert_eq!(message.text, built_in_text);
        }
    }

    #[test]
    fn parts_render_for_their_service_only() {
        let config = fixtures::config_with(&[(
            "template.parts",
            r#"
message: "{{ set.name }} {{ phase }}"
slack:
  blocks: '[{"type": "section", "text": {"type": "mrkdwn", "text": {{ revision | tojson }}}}]'
teams:
  title: "{{ set.name }}"
  facts: '[{"name": "Wave", "value": "{{ wave }}"}]'
webhook:
  audit:
    method: PUT
    path: "/sets/{{ set.namespace }}/{{ set.name }}"
    body: '{"revision": "{{ revision }}"}'
"#,
        )]);
        let set = Set::new(status(RolloutPhase::Complete, 2));
        let context = context(&set.view(), Event::RolloutCompleted, "on-rollout-completed");
        let template = config.template("parts").unwrap();
        let part = |name: &str| render(&template, &context, &service(&config, name)).unwrap().part;
        assert_eq!(
            part("slack"),
            Part::Slack {
                attachments: None,
                blocks: Some(json!([{"type": "section", "text": {"type": "mrkdwn", "text": "app-2"}}])),
            }
        );
        assert_eq!(
            part("teams"),
            Part::Teams {
                title: Some("app".into()),
                text: None,
                summary: None,
                facts: Some(json!([{"name": "Wave", "value": "2"}])),
                body: None,
            }
        );
        assert_eq!(
            part("audit"),
            Part::Webhook {
                method: "PUT".into(),
                path: Some("/sets/shop/app".into()),
                body: r#"{"revision": "app-2"}"#.into(),
            }
        );
        // A template with no webhook part sends the message and the context as JSON.
        let Part::Webhook { method, path, body } =
            render(&template_for_webhook(), &context, &service(&config, "audit"))
                .unwrap()
                .part
        else {
            panic!("not a webhook part");
        };
        assert_eq!((method.as_str(), path), ("POST", None));
        let body: Json = serde_json::from_str(&body).unwrap();
        assert_eq!(body["text"], "app Complete");
        assert_eq!(body["context"], context);
    }

    fn template_for_webhook() -> Template {
        template("{{ set.name }} {{ phase }}")
    }

    #[test]
    fn names_the_context_lacks_are_refused_when_read() {
        let has = FIELDS.join(", ");
        assert_eq!(
            check_template("{{ revison }} {% for w in workloads %}{{ w.name }}{% endfor %}{{ sett.name }}"),
            Err(format!(
                "uses `revison`, `sett`, which the context does not have (it has {has})"
            ))
        );
        assert_eq!(
            check_expression("phase == 'Failed' and lables.tier"),
            Err(format!(
                "uses `lables`, which the context does not have (it has {has})"
            ))
        );
        // The engine's own functions, and names the template sets itself, are fine.
        assert_eq!(
            check_template("{% set n = namespace(x=1) %}{{ n.x }}{% for i in range(2) %}{{ i }}{% endfor %}"),
            Ok(())
        );
        assert_eq!(
            check_expression("wave >"),
            Err("unexpected end of input, expected expression (line 1)".into())
        );
    }

    #[test]
    fn expressions_are_judged_over_the_context() {
        let set = Set::new(status(RolloutPhase::Progressing, 1));
        let context = context(&set.view(), Event::WaveStarted, "on-wave-started");
        for (expr, want) in [
            ("set.labels.team == 'payments'", Ok(true)),
            ("wave >= 2", Ok(false)),
            (
                "workloads | selectattr('state', 'eq', 'Waiting') | list | length > 0",
                Ok(true),
            ),
            ("'tier' in set.labels", Ok(false)),
            ("set.labels.tier == 'prod'", Ok(false)),
            (
                "set.labels.tier.x == 'prod'",
                Err("undefined value (line 1)".to_string()),
            ),
        ] {
            assert_eq!(is_true(expr, &context), want, "{expr}");
        }
        assert_eq!(
            text_of("revision ~ '/' ~ wave", &context),
            Ok("app-2/1".to_string())
        );
        assert_eq!(text_of("message", &context), Err("gave no value".to_string()));
    }

    /// Issue 36: text a tenant writes (an annotation, a workload's message) cannot mention a whole
    /// channel or plant a link through Slack's mrkdwn or Teams' markdown; the admin's template markup
    /// stays as written; a webhook gets the text as it is.
    #[test]
    fn tenant_text_is_escaped_for_slack_and_teams_markup() {
        let mut set = Set::new(failed_status());
        let planted = "<!channel> see <https://evil.example|docs> & [click](https://evil.example) *now*";
        set.annotations.insert("note".into(), planted.into());
        set.status.rollout.as_mut().unwrap().message = Some("<@U0ADMIN> approve".into());
        let config = fixtures::config_with(&[]);
        let context = context(&set.view(), Event::RolloutFailed, "on-rollout-failed");
        let source = "<!here> {{ set.annotations.note }} / {{ message }}";
        let cases = [
            (
                "slack",
                "<!here> &lt;!channel&gt; see &lt;https://evil.example|docs&gt; &amp; \
                 [click](https://evil.example) *now* / &lt;@U0ADMIN&gt; approve",
            ),
            (
                "teams",
                "<!here> &lt;!channel&gt; see &lt;https://evil.example|docs&gt; &amp; \
                 \\[click\\](https://evil.example) \\*now\\* / &lt;@U0ADMIN&gt; approve",
            ),
            (
                "audit",
                "<!here> <!channel> see <https://evil.example|docs> & [click](https://evil.example) \
                 *now* / <@U0ADMIN> approve",
            ),
        ];
        for (name, want) in cases {
            let message = render(&template(source), &context, &service(&config, name)).unwrap();
            assert_eq!(message.text, want, "{name}");
        }
        // Inside JSON parts too: Slack blocks built with `tojson` carry the escaped text.
        let blocks = Template {
            slack: Some(SlackPart {
                attachments: None,
                blocks: Some(
                    r#"[{"type": "section", "text": {"type": "mrkdwn", "text": {{ set.annotations.note | tojson }}}}]"#
                        .into(),
                ),
            }),
            ..template("x")
        };
        let message = render(&blocks, &context, &service(&config, "slack")).unwrap();
        let Part::Slack {
            blocks: Some(blocks), ..
        } = message.part
        else {
            panic!("no blocks");
        };
        let text = blocks[0]["text"]["text"].as_str().unwrap();
        assert!(text.starts_with("&lt;!channel&gt;"), "{text}");
        // Expressions see the text as written.
        assert!(is_true("'<!channel>' in set.annotations.note", &context).unwrap());
    }
}
