//! Reading the ConfigMap `cmset-notifications` (with the Secret `cmset-notifications-secret` for `$key`
//! references) into a [`Config`]. Each key is read on its own: a bad one is reported as a [`Problem`]
//! naming it and left out, and the others are kept.
//!
//! Keys: `service.<type>[.<name>]` (types `webhook`, `slack`, `teams`), `template.<name>`,
//! `trigger.<name>`, `subscriptions` and `defaultTriggers`. A service is named `<name>` when the key has
//! one and `<type>` otherwise (`service.slack` is `slack`, `service.slack.ops` is `ops`), as in the Argo
//! CD notifications engine; a webhook always needs a name.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use serde_yaml_ng::Value;

use super::render::{self, SlackPart, TeamsPart, Template, WebhookPart};
use super::request::Transport;
use super::selector::Selector;
use super::subscriptions::{self, DefaultSubscription, Target};
use super::triggers::{self, Condition, Event, Trigger};
use super::yaml::{self, Fields};
use super::{Credential, Problem};

/// Default request timeout of a service.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default number of retries after a failed attempt.
pub const DEFAULT_RETRIES: u32 = 3;
/// Most retries a service may ask for.
pub const MAX_RETRIES: u32 = 10;
/// Where a Slack bot token posts unless `apiURL` says otherwise.
pub const SLACK_POST_MESSAGE_URL: &str = "https://slack.com/api/chat.postMessage";

/// The notification configuration, as far as it is valid. Built-in triggers and templates are not
/// stored here: [`Config::trigger`] and [`Config::template`] fall back to them.
#[derive(Clone, Debug, Default)]
pub struct Config {
    pub services: BTreeMap<String, Service>,
    /// Templates of the ConfigMap; a name of a built-in one overrides it.
    pub templates: BTreeMap<String, Template>,
    /// Triggers of the ConfigMap; a name of a built-in one overrides it.
    pub triggers: BTreeMap<String, Trigger>,
    /// The `subscriptions` key: the admin's defaults, by label selector.
    pub subscriptions: Vec<DefaultSubscription>,
    /// The `defaultTriggers` key, if given: the triggers of a subscription that names none.
    pub default_triggers: Option<Vec<String>>,
}

impl Config {
    /// The trigger of that name: the ConfigMap's, else the built-in one.
    pub fn trigger(&self, name: &str) -> Option<Cow<'_, Trigger>> {
        match self.triggers.get(name) {
            Some(t) => Some(Cow::Borrowed(t)),
            None => triggers::built_in(name).map(Cow::Owned),
        }
    }

    /// The template of that name: the ConfigMap's, else the built-in one.
    pub fn template(&self, name: &str) -> Option<Cow<'_, Template>> {
        match self.templates.get(name) {
            Some(t) => Some(Cow::Borrowed(t)),
            None => render::built_in(name).map(Cow::Owned),
        }
    }

    /// The triggers a subscription that names none gets: `defaultTriggers`, or every built-in trigger.
    pub fn default_triggers(&self) -> Vec<String> {
        match &self.default_triggers {
            Some(names) => names.clone(),
            None => Event::ALL.iter().map(|e| e.trigger().to_string()).collect(),
        }
    }
}

/// One configured service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    /// The name subscriptions use.
    pub name: String,
    /// The ConfigMap key it came from.
    pub key: String,
    pub kind: ServiceKind,
    pub transport: Transport,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceKind {
    Webhook(WebhookService),
    Slack(SlackService),
    Teams(TeamsService),
}

/// `service.webhook.<name>`: any HTTP endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookService {
    pub url: Credential,
    pub headers: Vec<(String, Credential)>,
    pub basic_auth: Option<BasicAuth>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BasicAuth {
    pub username: Credential,
    pub password: Credential,
}

/// `service.slack[.<name>]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlackService {
    pub delivery: SlackDelivery,
    pub username: Option<String>,
    /// An emoji (`:rocket:`) or an image URL.
    pub icon: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlackDelivery {
    /// A bot token: the recipient is a channel, posted to through `chat.postMessage` at `api_url`.
    /// `channels`: the admin's globs of the channels a set may name (`#team-*`, `C0123*`); empty
    /// when the admin listed none, and then a set may name any channel the bot can post to.
    Bot {
        token: Credential,
        api_url: String,
        channels: Vec<String>,
    },
    /// Incoming webhooks by recipient name: the recipient must be one of them.
    Webhooks(BTreeMap<String, Credential>),
}

/// `service.teams[.<name>]`: incoming webhook or Workflows URLs by recipient name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TeamsService {
    pub recipient_urls: BTreeMap<String, Credential>,
    /// The card built when a template gives no raw `teams.body`.
    pub format: TeamsFormat,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TeamsFormat {
    /// A connector MessageCard, what incoming webhooks take.
    #[default]
    MessageCard,
    /// An Adaptive Card in a message, what a Workflows webhook takes.
    AdaptiveCard,
}

/// Reads the ConfigMap's `data`, resolving `$key` references from the Secret's `data`. Problems come
/// sorted by key.
pub fn parse(data: &BTreeMap<String, String>, secret: &BTreeMap<String, Vec<u8>>) -> (Config, Vec<Problem>) {
    let mut config = Config::default();
    let mut problems = Vec::new();
    let mut deferred = Vec::new();
    for (key, text) in data {
        let result = if let Some(rest) = key.strip_prefix("service.") {
            parse_service(key, rest, text, secret).and_then(|service| {
                if let Some(taken) = config.services.get(&service.name) {
                    return Err(format!(
                        "the service name `{}` is already taken by {}",
                        service.name, taken.key
                    ));
                }
                config.services.insert(service.name.clone(), service);
                Ok(())
            })
        } else if let Some(name) = key.strip_prefix("template.") {
            check_name(name, "template")
                .and_then(|()| parse_template(name, text))
                .map(|t| {
                    config.templates.insert(name.to_string(), t);
                })
        } else if key.starts_with("trigger.") || key == "subscriptions" || key == "defaultTriggers" {
            // Read once every template and service is known.
            deferred.push((key, text));
            Ok(())
        } else {
            Err(
                "is not a notification key: expected service.<type>[.<name>], template.<name>, \
                 trigger.<name>, subscriptions or defaultTriggers"
                    .to_string(),
            )
        };
        if let Err(message) = result {
            problems.push(Problem::new(key, message));
        }
    }
    for (key, text) in deferred.iter().filter(|(k, _)| k.starts_with("trigger.")) {
        let name = &key["trigger.".len()..];
        let result = check_name(name, "trigger").and_then(|()| parse_trigger(name, text));
        match result {
            Ok(trigger) => {
                for template in trigger.conditions.iter().flat_map(|c| &c.send) {
                    if config.template(template).is_none() {
                        problems.push(Problem::new(
                            *key,
                            format!(
                                "sends template `{template}`, which is not defined (the built-in \
                                 template of the event is sent instead)"
                            ),
                        ));
                    }
                }
                config.triggers.insert(name.to_string(), trigger);
            }
            Err(message) => problems.push(Problem::new(*key, message)),
        }
    }
    for (key, text) in deferred.iter().filter(|(k, _)| *k == "defaultTriggers") {
        match parse_default_triggers(&config, text) {
            Ok(names) => config.default_triggers = Some(names),
            Err(message) => problems.push(Problem::new(*key, message)),
        }
    }
    for (key, text) in deferred.iter().filter(|(k, _)| *k == "subscriptions") {
        match parse_subscriptions(&config, text) {
            Ok((subs, errors)) => {
                config.subscriptions = subs;
                problems.extend(errors.into_iter().map(|m| Problem::new(*key, m)));
            }
            Err(message) => problems.push(Problem::new(*key, message)),
        }
    }
    problems.sort();
    (config, problems)
}

/// Names of services, templates, triggers and recipients: they sit between dots in annotation keys,
/// so they have none.
pub(crate) fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn check_name(name: &str, what: &str) -> Result<(), String> {
    if is_name(name) {
        Ok(())
    } else {
        Err(format!(
            "the {what} name must be 1 to 63 letters, digits, `-` or `_`, starting and ending with a \
             letter or digit"
        ))
    }
}

fn parse_service(
    key: &str,
    rest: &str,
    text: &str,
    secret: &BTreeMap<String, Vec<u8>>,
) -> Result<Service, String> {
    let (type_, name) = match rest.split_once('.') {
        Some((type_, name)) => (type_, Some(name)),
        None => (rest, None),
    };
    if let Some(name) = name {
        check_name(name, "service")?;
    }
    let value = yaml::parse(text)?;
    let mut fields = Fields::of(&value, "")?;
    let kind = match type_ {
        "webhook" => {
            if name.is_none() {
                return Err("a webhook needs a name: service.webhook.<name>".to_string());
            }
            ServiceKind::Webhook(webhook(&mut fields, secret)?)
        }
        "slack" => ServiceKind::Slack(slack(&mut fields, secret)?),
        "teams" => ServiceKind::Teams(teams(&mut fields, secret)?),
        _ => return Err("the service type must be webhook, slack or teams".to_string()),
    };
    let transport = transport(&mut fields, secret)?;
    fields.finish()?;
    Ok(Service {
        name: name.unwrap_or(type_).to_string(),
        key: key.to_string(),
        kind,
        transport,
    })
}

/// A resolved string field that grants access.
fn credential(
    fields: &mut Fields<'_>,
    field: &str,
    secret: &BTreeMap<String, Vec<u8>>,
) -> Result<Option<Credential>, String> {
    fields
        .string(field)?
        .map(|text| resolve_field(field, &text, secret).map(Credential::new))
        .transpose()
}

fn resolve_field(field: &str, text: &str, secret: &BTreeMap<String, Vec<u8>>) -> Result<String, String> {
    yaml::resolve(text, secret).map_err(|e| format!("`{field}` {e}"))
}

/// An `http://` or `https://` URL with a host and no spaces. The message names the field only.
fn check_url(field: &str, url: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"));
    let host_ok = rest.is_some_and(|r| !r.is_empty() && !r.starts_with(['/', '?', '#']));
    if host_ok && !url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Ok(())
    } else {
        Err(format!("`{field}` must be an http:// or https:// URL"))
    }
}

fn url(
    fields: &mut Fields<'_>,
    field: &str,
    secret: &BTreeMap<String, Vec<u8>>,
) -> Result<Option<Credential>, String> {
    let url = credential(fields, field, secret)?;
    if let Some(url) = &url {
        check_url(field, url.expose())?;
    }
    Ok(url)
}

/// A mapping from recipient names to URLs (`webhooks`, `recipientUrls`).
fn named_urls(
    fields: &mut Fields<'_>,
    field: &str,
    secret: &BTreeMap<String, Vec<u8>>,
) -> Result<Option<BTreeMap<String, Credential>>, String> {
    let Some(map) = fields.string_map(field)? else {
        return Ok(None);
    };
    if map.is_empty() {
        return Err(format!("`{field}` names no recipient"));
    }
    let mut out = BTreeMap::new();
    for (name, text) in map {
        let path = format!("{field}.{name}");
        if !is_name(&name) {
            return Err(format!(
                "`{field}` has a recipient name that is not 1 to 63 letters, digits, `-` or `_`"
            ));
        }
        let url = resolve_field(&path, &text, secret)?;
        check_url(&path, &url)?;
        out.insert(name, Credential::new(url));
    }
    Ok(Some(out))
}

fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
}

fn webhook(fields: &mut Fields<'_>, secret: &BTreeMap<String, Vec<u8>>) -> Result<WebhookService, String> {
    let url = url(fields, "url", secret)?.ok_or("`url` is required")?;
    let mut headers = Vec::new();
    if let Some(list) = fields.value("headers") {
        let Value::Sequence(items) = list else {
            return Err("`headers` must be a list of {name, value}".to_string());
        };
        for (i, item) in items.iter().enumerate() {
            let path = format!("headers[{i}]");
            let mut header = Fields::of(item, &path)?;
            let name = header.required_string("name")?;
            if !is_header_name(&name) {
                return Err(format!("`{path}.name` is not an HTTP header name"));
            }
            let value = credential(&mut header, "value", secret)?
                .ok_or_else(|| format!("`{path}.value` is required"))?;
            if value.expose().contains(['\r', '\n']) {
                return Err(format!("`{path}.value` may not hold a line break"));
            }
            header.finish()?;
            headers.push((name, value));
        }
    }
    let basic_auth = match fields.fields("basicAuth")? {
        None => None,
        Some(mut auth) => {
            let username =
                credential(&mut auth, "username", secret)?.ok_or("`basicAuth.username` is required")?;
            let password =
                credential(&mut auth, "password", secret)?.ok_or("`basicAuth.password` is required")?;
            auth.finish()?;
            Some(BasicAuth { username, password })
        }
    };
    Ok(WebhookService {
        url,
        headers,
        basic_auth,
    })
}

fn slack(fields: &mut Fields<'_>, secret: &BTreeMap<String, Vec<u8>>) -> Result<SlackService, String> {
    let token = credential(fields, "token", secret)?;
    let api_url = url(fields, "apiURL", secret)?;
    let webhooks = named_urls(fields, "webhooks", secret)?;
    let channels = channel_globs(fields)?;
    if channels.is_some() && token.is_none() {
        return Err("`channels` goes with `token`: with `webhooks`, sets name a webhook".to_string());
    }
    let delivery = match (token, webhooks) {
        (Some(token), None) => SlackDelivery::Bot {
            token,
            api_url: api_url.map_or_else(|| SLACK_POST_MESSAGE_URL.to_string(), |u| u.expose().to_string()),
            channels: channels.unwrap_or_default(),
        },
        (None, Some(webhooks)) if api_url.is_none() => SlackDelivery::Webhooks(webhooks),
        (None, Some(_)) => return Err("`apiURL` goes with `token`, not with `webhooks`".to_string()),
        (Some(_), Some(_)) => return Err("give either `token` or `webhooks`, not both".to_string()),
        (None, None) => {
            return Err("give `token` (a bot token) or `webhooks` (incoming webhooks)".to_string());
        }
    };
    let username = fields.string("username")?;
    let icon = fields.string("icon")?;
    Ok(SlackService {
        delivery,
        username,
        icon,
    })
}

/// A Slack bot's `channels`: globs (`*`, `?`) of channel names or IDs, with or without `#`.
fn channel_globs(fields: &mut Fields<'_>) -> Result<Option<Vec<String>>, String> {
    let Some(globs) = fields.string_list("channels")? else {
        return Ok(None);
    };
    if globs.is_empty() {
        return Err("`channels` lists no channel: leave it out to let sets name any".to_string());
    }
    for glob in &globs {
        let plain = !glob.is_empty()
            && glob.len() <= 80
            && glob
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '#' | '@' | '.' | '_' | '-' | '*' | '?'));
        if !plain {
            return Err(format!(
                "`channels`: {glob:?} is not a channel glob (letters, digits, #, @, ., _, -, * and ?)"
            ));
        }
    }
    Ok(Some(globs))
}

/// Whether the admin lets a set name `recipient` through `service`: always, but for a Slack bot whose
/// `channels` are listed, where one of them must match (a leading `#` is ignored on both sides).
pub fn may_name(service: &Service, recipient: &str) -> bool {
    let ServiceKind::Slack(SlackService {
        delivery: SlackDelivery::Bot { channels, .. },
        ..
    }) = &service.kind
    else {
        return true;
    };
    let bare = |name: &str| name.strip_prefix('#').unwrap_or(name).to_string();
    channels.is_empty()
        || channels
            .iter()
            .any(|glob| glob_matches(bare(glob).as_bytes(), bare(recipient).as_bytes()))
}

/// `*` any run, `?` one character; backtracks to the last `*` only, so never exponential.
fn glob_matches(glob: &[u8], text: &[u8]) -> bool {
    let (mut g, mut t) = (0, 0);
    let mut last_star: Option<(usize, usize)> = None;
    while t < text.len() {
        match glob.get(g) {
            Some(b'*') => {
                last_star = Some((g, t));
                g += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                g += 1;
                t += 1;
            }
            _ => match last_star {
                Some((star, from)) => {
                    g = star + 1;
                    t = from + 1;
                    last_star = Some((star, from + 1));
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|&c| c == b'*')
}

fn teams(fields: &mut Fields<'_>, secret: &BTreeMap<String, Vec<u8>>) -> Result<TeamsService, String> {
    let recipient_urls = named_urls(fields, "recipientUrls", secret)?.ok_or("`recipientUrls` is required")?;
    let format = match fields.string("format")?.as_deref() {
        None | Some("messageCard") => TeamsFormat::MessageCard,
        Some("adaptiveCard") => TeamsFormat::AdaptiveCard,
        Some(_) => return Err("`format` must be messageCard or adaptiveCard".to_string()),
    };
    Ok(TeamsService {
        recipient_urls,
        format,
    })
}

fn transport(fields: &mut Fields<'_>, secret: &BTreeMap<String, Vec<u8>>) -> Result<Transport, String> {
    let timeout = match fields.string("timeout")? {
        Some(text) => yaml::duration(&text).map_err(|e| format!("`timeout`: {e}"))?,
        None => DEFAULT_TIMEOUT,
    };
    let retries = match fields.count("retries")? {
        Some(n) if n <= u64::from(MAX_RETRIES) => n as u32,
        Some(_) => return Err(format!("`retries` must be at most {MAX_RETRIES}")),
        None => DEFAULT_RETRIES,
    };
    let proxy = credential(fields, "proxy", secret)?;
    if let Some(proxy) = &proxy {
        let lower = proxy.expose().to_ascii_lowercase();
        if !["http://", "https://", "socks5://"]
            .iter()
            .any(|s| lower.starts_with(s))
        {
            return Err("`proxy` must be an http://, https:// or socks5:// URL".to_string());
        }
    }
    let ca_file = fields.string("caFile")?;
    let insecure_skip_verify = fields.bool("insecureSkipVerify")?.unwrap_or(false);
    Ok(Transport {
        timeout,
        retries,
        proxy,
        ca_file,
        insecure_skip_verify,
    })
}

/// Checks that a template text compiles; the message names the field.
fn template_text(fields: &mut Fields<'_>, field: &str, path: &str) -> Result<Option<String>, String> {
    let Some(text) = fields.string(field)? else {
        return Ok(None);
    };
    render::check_template(&text).map_err(|e| format!("`{path}` does not compile: {e}"))?;
    Ok(Some(text))
}

fn parse_template(name: &str, text: &str) -> Result<Template, String> {
    let value = yaml::parse(text)?;
    let mut fields = Fields::of(&value, "")?;
    let message = template_text(&mut fields, "message", "message")?.ok_or("`message` is required")?;
    let slack = match fields.fields("slack")? {
        None => None,
        Some(mut part) => {
            let slack = SlackPart {
                attachments: template_text(&mut part, "attachments", "slack.attachments")?,
                blocks: template_text(&mut part, "blocks", "slack.blocks")?,
            };
            part.finish()?;
            Some(slack)
        }
    };
    let teams = match fields.fields("teams")? {
        None => None,
        Some(mut part) => {
            let teams = TeamsPart {
                title: template_text(&mut part, "title", "teams.title")?,
                text: template_text(&mut part, "text", "teams.text")?,
                summary: template_text(&mut part, "summary", "teams.summary")?,
                facts: template_text(&mut part, "facts", "teams.facts")?,
                body: template_text(&mut part, "body", "teams.body")?,
            };
            part.finish()?;
            Some(teams)
        }
    };
    let mut webhook = BTreeMap::new();
    if let Some(value) = fields.value("webhook") {
        let Value::Mapping(services) = value else {
            return Err("`webhook` must map webhook service names to {method, path, body}".to_string());
        };
        for (service, part) in services {
            let Some(service) = service.as_str() else {
                return Err("`webhook` has a key that is not a string".to_string());
            };
            let path = format!("webhook.{service}");
            let mut part = Fields::of(part, &path)?;
            let method = match part.string("method")? {
                None => "POST".to_string(),
                Some(m) if ["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&m.as_str()) => m,
                Some(_) => return Err(format!("`{path}.method` must be GET, POST, PUT, PATCH or DELETE")),
            };
            let webhook_part = WebhookPart {
                method,
                path: template_text(&mut part, "path", &format!("{path}.path"))?,
                body: template_text(&mut part, "body", &format!("{path}.body"))?,
            };
            part.finish()?;
            webhook.insert(service.to_string(), webhook_part);
        }
    }
    fields.finish()?;
    Ok(Template {
        name: name.to_string(),
        message,
        slack,
        teams,
        webhook,
    })
}

fn parse_trigger(name: &str, text: &str) -> Result<Trigger, String> {
    let value = yaml::parse(text)?;
    let items = match &value {
        Value::Sequence(items) => items.clone(),
        Value::Mapping(_) => vec![value.clone()],
        _ => return Err("must be a list of conditions {on, when, send, oncePer, description}".to_string()),
    };
    if items.is_empty() {
        return Err("has no condition".to_string());
    }
    let built_in = Event::of_trigger(name);
    let mut conditions = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("[{i}]");
        let mut fields = Fields::of(item, &path)?;
        let on = match fields.string("on")? {
            Some(event) => Event::parse(&event).ok_or_else(|| {
                format!(
                    "`{path}.on` must be one of {}",
                    Event::ALL
                        .iter()
                        .map(|e| e.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?,
            None => built_in.ok_or_else(|| format!("`{path}.on` is required for a trigger of your own"))?,
        };
        let when = expression(&mut fields, "when", &path)?;
        let once_per = expression(&mut fields, "oncePer", &path)?;
        let send = fields
            .string_list("send")?
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| vec![on.template().to_string()]);
        for template in &send {
            check_name(template, "template").map_err(|e| format!("`{path}.send`: {e}"))?;
        }
        let description = fields.string("description")?;
        fields.finish()?;
        conditions.push(Condition {
            on,
            when,
            send,
            once_per,
            description,
        });
    }
    Ok(Trigger {
        name: name.to_string(),
        conditions,
    })
}

fn expression(fields: &mut Fields<'_>, field: &str, path: &str) -> Result<Option<String>, String> {
    let Some(expr) = fields.string(field)? else {
        return Ok(None);
    };
    render::check_expression(&expr).map_err(|e| format!("`{path}.{field}` does not compile: {e}"))?;
    Ok(Some(expr))
}

fn parse_default_triggers(config: &Config, text: &str) -> Result<Vec<String>, String> {
    let value = yaml::parse(text)?;
    let names = yaml::string_list(&value, "defaultTriggers")?;
    for name in &names {
        if config.trigger(name).is_none() {
            return Err(format!("names trigger `{name}`, which is not defined"));
        }
    }
    Ok(names)
}

/// The subscriptions that are valid, and a message for each one (or recipient) that is not.
fn parse_subscriptions(
    config: &Config,
    text: &str,
) -> Result<(Vec<DefaultSubscription>, Vec<String>), String> {
    let value = yaml::parse(text)?;
    let Value::Sequence(items) = &value else {
        return Err("must be a list of {recipients, triggers, selector}".to_string());
    };
    let mut subs = Vec::new();
    let mut errors = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("[{i}]");
        match parse_subscription(config, item, &path, &mut errors) {
            Ok(sub) => subs.push(sub),
            Err(message) => errors.push(message),
        }
    }
    Ok((subs, errors))
}

fn parse_subscription(
    config: &Config,
    item: &Value,
    path: &str,
    errors: &mut Vec<String>,
) -> Result<DefaultSubscription, String> {
    let mut fields = Fields::of(item, path)?;
    let recipients = fields.string_list("recipients")?.unwrap_or_default();
    let triggers = fields.string_list("triggers")?.unwrap_or_default();
    let selector = match fields.string("selector")? {
        Some(text) => Selector::parse(&text).map_err(|e| format!("`{path}.selector`: {e}"))?,
        None => Selector::default(),
    };
    fields.finish()?;
    for name in &triggers {
        if config.trigger(name).is_none() {
            return Err(format!("`{path}.triggers` names `{name}`, which is not defined"));
        }
    }
    let mut targets = Vec::new();
    let mut held = Vec::new();
    for (j, recipient) in recipients.iter().enumerate() {
        let (service, who) = recipient.split_once(':').unwrap_or((recipient.as_str(), ""));
        let (service, who) = (service.trim(), who.trim());
        match subscriptions::check_recipient(config, service, who) {
            Ok(target) => targets.push(target),
            Err(e) => {
                if !config.services.contains_key(service) {
                    held.push(Target {
                        service: service.to_string(),
                        recipient: who.to_string(),
                    });
                }
                errors.push(format!("`{path}.recipients[{j}]`: {e}"));
            }
        }
    }
    if targets.is_empty() && held.is_empty() {
        return Err(format!("`{path}` has no valid recipient"));
    }
    Ok(DefaultSubscription {
        recipients: targets,
        held,
        triggers,
        selector,
    })
}

#[cfg(test)]
mod tests;
