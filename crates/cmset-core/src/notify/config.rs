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
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::notify::fixtures::{self, HOOK, SERVICES, TOKEN, data, secret};

    fn problems_of(entries: &[(&str, &str)]) -> Vec<Problem> {
        parse(&data(entries), &secret()).1
    }

    #[test]
    fn services_read_with_their_options_and_secrets() {
        let (config, problems) = parse(&data(SERVICES), &secret());
        assert_eq!(problems, []);
        assert_eq!(
            config.services.keys().collect::<Vec<_>>(),
            ["audit", "hooks", "slack", "teams"]
        );
        let slack = &config.services["slack"];
        assert_eq!(slack.key, "service.slack");
        assert_eq!(slack.transport, Transport::default());
        assert_eq!(
            slack.kind,
            ServiceKind::Slack(SlackService {
                delivery: SlackDelivery::Bot {
                    channels: vec![],
                    token: Credential::new(TOKEN),
                    api_url: SLACK_POST_MESSAGE_URL.into(),
                },
                username: Some("cmset".into()),
                icon: Some(":rocket:".into()),
            })
        );
        let ServiceKind::Slack(SlackService {
            delivery: SlackDelivery::Webhooks(hooks),
            ..
        }) = &config.services["hooks"].kind
        else {
            panic!("hooks is not a Slack webhook service");
        };
        assert_eq!(hooks["ops"].expose(), HOOK);
        assert_eq!(hooks["dev"].expose(), "https://hooks.example.com/dev");
        let audit = &config.services["audit"];
        assert_eq!(
            audit.kind,
            ServiceKind::Webhook(WebhookService {
                url: Credential::new("https://audit.example.com/api"),
                headers: vec![("X-Token".into(), Credential::new(TOKEN))],
                basic_auth: Some(BasicAuth {
                    username: Credential::new("cmset"),
                    password: Credential::new("pa55word-secret"),
                }),
            })
        );
        assert_eq!(audit.transport.timeout, Duration::from_secs(2));
        assert_eq!(audit.transport.retries, 5);
        let ServiceKind::Teams(teams) = &config.services["teams"].kind else {
            panic!("teams is not a Teams service");
        };
        assert_eq!(teams.format, TeamsFormat::MessageCard);
        assert!(teams.recipient_urls.contains_key("prod"));
    }

    #[test]
    fn transport_options_are_read() {
        let (config, problems) = parse(
            &data(&[(
                "service.teams.flows",
                "recipientUrls: {prod: https://flows.example.com/x}\nformat: adaptiveCard\n\
                 proxy: http://proxy.internal:3128\ncaFile: /etc/cmset/ca.pem\n\
                 insecureSkipVerify: true\ntimeout: 1m\nretries: 0\n",
            )]),
            &secret(),
        );
        assert_eq!(problems, []);
        let flows = &config.services["flows"];
        assert_eq!(
            flows.transport,
            Transport {
                timeout: Duration::from_secs(60),
                retries: 0,
                proxy: Some(Credential::new("http://proxy.internal:3128")),
                ca_file: Some("/etc/cmset/ca.pem".into()),
                insecure_skip_verify: true,
            }
        );
        let ServiceKind::Teams(teams) = &flows.kind else {
            panic!("flows is not a Teams service");
        };
        assert_eq!(teams.format, TeamsFormat::AdaptiveCard);
    }

    #[test]
    fn a_bad_key_is_reported_and_the_others_are_kept() {
        for (key, value, message) in [
            (
                "service.email",
                "to: a",
                "the service type must be webhook, slack or teams",
            ),
            (
                "service.webhook",
                "url: https://x",
                "a webhook needs a name: service.webhook.<name>",
            ),
            (
                "service.webhook.a.b",
                "url: https://x",
                "the service name must be 1 to 63 letters, digits, `-` or `_`, starting and ending with a \
                 letter or digit",
            ),
            ("service.webhook.w", "method: POST", "`url` is required"),
            (
                "service.webhook.w",
                "url: ftp://x",
                "`url` must be an http:// or https:// URL",
            ),
            (
                "service.webhook.w",
                "url: https://",
                "`url` must be an http:// or https:// URL",
            ),
            (
                "service.webhook.w",
                "url: https://x\nretries: 11",
                "`retries` must be at most 10",
            ),
            (
                "service.webhook.w",
                "url: https://x\nretries: -1",
                "`retries` must be a whole number, 0 or more",
            ),
            (
                "service.webhook.w",
                "url: https://x\ntimeout: soon",
                "`timeout`: \"soon\" is not a duration such as 10s, 1m30s or 500ms",
            ),
            (
                "service.webhook.w",
                "url: https://x\nmethd: GET",
                "the value has an unknown field `methd`",
            ),
            (
                "service.webhook.w",
                "url: https://x\nheaders: [{name: 'a b', value: x}]",
                "`headers[0].name` is not an HTTP header name",
            ),
            (
                "service.webhook.w",
                "url: https://x\nproxy: ftp://p",
                "`proxy` must be an http://, https:// or socks5:// URL",
            ),
            (
                "service.slack",
                "token: t\nchannels: []",
                "`channels` lists no channel: leave it out to let sets name any",
            ),
            (
                "service.slack",
                "token: t\nchannels: ['#ops', 'a b']",
                "`channels`: \"a b\" is not a channel glob (letters, digits, #, @, ., _, -, * and ?)",
            ),
            (
                "service.slack",
                "webhooks: {ops: https://x}\nchannels: ['#ops']",
                "`channels` goes with `token`: with `webhooks`, sets name a webhook",
            ),
            (
                "service.slack",
                "token: $nope",
                "`token` refers to `$nope`, which the Secret cmset-notifications-secret does not have",
            ),
            (
                "service.slack",
                "username: x",
                "give `token` (a bot token) or `webhooks` (incoming webhooks)",
            ),
            (
                "service.slack",
                "token: t\nwebhooks: {a: https://x}",
                "give either `token` or `webhooks`, not both",
            ),
            ("service.slack", "webhooks: {}", "`webhooks` names no recipient"),
            (
                "service.teams",
                "format: messageCard",
                "`recipientUrls` is required",
            ),
            (
                "service.teams",
                "recipientUrls: {a: https://x}\nformat: card",
                "`format` must be messageCard or adaptiveCard",
            ),
            (
                "service.slack",
                "token: [",
                "is not valid YAML: did not find expected node content at line 2 column 1, while parsing a flow node",
            ),
            ("service.slack", "xoxb-inline", "must be a mapping of fields"),
            ("template.t", "slack: {}", "`message` is required"),
            (
                "template.t",
                "message: '{{ oops'",
                "`message` does not compile: unexpected end of input, expected end of variable block (line 1)",
            ),
            (
                "template.t",
                "message: m\nwebhook: {audit: {method: HEAD}}",
                "`webhook.audit.method` must be GET, POST, PUT, PATCH or DELETE",
            ),
            (
                "template.t.x",
                "message: m",
                "the template name must be 1 to 63 letters, digits, `-` or `_`, starting and ending with a letter or digit",
            ),
            (
                "trigger.mine",
                "- send: [t]",
                "`[0].on` is required for a trigger of your own",
            ),
            (
                "trigger.mine",
                "- on: Deployed",
                "`[0].on` must be one of RolloutStarted, WaveStarted, RolloutPaused, AwaitingPromotion, \
                 RolloutWaiting, AnalysisFailed, CheckFailed, RolloutFailed, RolledBack, RolloutCompleted, \
                 ValidationFailed",
            ),
            (
                "trigger.mine",
                "- on: RolloutFailed\n  when: 'phase =='",
                "`[0].when` does not compile: unexpected end of input, expected expression (line 1)",
            ),
            ("trigger.mine", "[]", "has no condition"),
            (
                "trigger.on-rollout-failed",
                "- sned: [x]",
                "`[0]` has an unknown field `sned`",
            ),
            (
                "defaultTriggers",
                "[on-nothing]",
                "names trigger `on-nothing`, which is not defined",
            ),
            (
                "subscriptions",
                "{recipients: [slack:ops]}",
                "must be a list of {recipients, triggers, selector}",
            ),
            (
                "notifications",
                "x",
                "is not a notification key: expected service.<type>[.<name>], template.<name>, trigger.<name>, subscriptions or defaultTriggers",
            ),
        ] {
            let mut entries = SERVICES.to_vec();
            entries.retain(|(k, _)| *k != key);
            entries.push((key, value));
            let (config, problems) = parse(&data(&entries), &secret());
            assert_eq!(problems, [Problem::new(key, message)], "{key}: {value}");
            // Every good service is still there.
            let kept = SERVICES.iter().filter(|(k, _)| *k != key).count();
            assert_eq!(config.services.len(), kept, "{key}: {value}");
        }
    }

    #[test]
    fn two_services_may_not_share_a_name() {
        assert_eq!(
            problems_of(&[
                ("service.slack.alerts", "token: t"),
                ("service.teams.alerts", "recipientUrls: {a: https://x}"),
            ]),
            [Problem::new(
                "service.teams.alerts",
                "the service name `alerts` is already taken by service.slack.alerts"
            )]
        );
    }

    #[test]
    fn templates_triggers_and_defaults_are_read() {
        let config = fixtures::config_with(&[
            (
                "template.short",
                "message: '{{ set.name }} {{ phase }}'\nslack:\n  blocks: '[]'\nteams:\n  title: t\n\
                 webhook:\n  audit:\n    method: PUT\n    path: /sets/{{ set.name }}\n    body: '{}'\n",
            ),
            (
                "trigger.on-rollout-failed",
                "- when: set.labels.tier == 'prod'\n  send: [short]\n  oncePer: revision\n",
            ),
            (
                "trigger.on-prod-failure",
                "on: RolloutFailed\ndescription: production only\n",
            ),
            ("defaultTriggers", "- on-rollout-failed\n- on-prod-failure\n"),
        ]);
        let short = &config.templates["short"];
        assert_eq!(short.message, "{{ set.name }} {{ phase }}");
        assert_eq!(short.webhook["audit"].method, "PUT");
        assert_eq!(
            short.webhook["audit"].path.as_deref(),
            Some("/sets/{{ set.name }}")
        );
        let failed = config.trigger("on-rollout-failed").unwrap();
        assert_eq!(
            failed.conditions,
            [Condition {
                on: Event::RolloutFailed,
                when: Some("set.labels.tier == 'prod'".into()),
                send: vec!["short".into()],
                once_per: Some("revision".into()),
                description: None,
            }]
        );
        let mine = config.trigger("on-prod-failure").unwrap();
        assert_eq!(mine.conditions[0].send, ["rollout-failed"]);
        assert_eq!(mine.conditions[0].description.as_deref(), Some("production only"));
        assert_eq!(
            config.default_triggers(),
            ["on-rollout-failed", "on-prod-failure"]
        );
        // A built-in trigger not overridden is still there.
        assert_eq!(
            config.trigger("on-rollout-completed").unwrap().conditions[0].on,
            Event::RolloutCompleted
        );
    }

    #[test]
    fn without_default_triggers_every_built_in_one_is_the_default() {
        assert_eq!(
            Config::default().default_triggers(),
            [
                "on-rollout-started",
                "on-wave-started",
                "on-rollout-paused",
                "on-awaiting-promotion",
                "on-rollout-waiting",
                "on-analysis-failed",
                "on-check-failed",
                "on-rollout-failed",
                "on-rolled-back",
                "on-rollout-completed",
                "on-validation-failed",
            ]
        );
    }

    #[test]
    fn a_trigger_that_sends_an_unknown_template_is_kept_and_reported() {
        let (config, problems) = parse(
            &data(&[("trigger.on-rollout-failed", "- send: [gone]")]),
            &secret(),
        );
        assert_eq!(
            problems,
            [Problem::new(
                "trigger.on-rollout-failed",
                "sends template `gone`, which is not defined (the built-in template of the event is sent instead)"
            )]
        );
        assert_eq!(config.triggers["on-rollout-failed"].conditions[0].send, ["gone"]);
    }

    #[test]
    fn subscriptions_keep_their_good_recipients() {
        let mut entries = SERVICES.to_vec();
        entries.push((
            "subscriptions",
            r"
- recipients: [slack:ops, 'hooks:ops', teams:prod, audit, 'teams:nope', 'slack:https://x/y']
  triggers: [on-rollout-failed]
  selector: team=payments
- recipients: [nowhere:x]
",
        ));
        let (config, problems) = parse(&data(&entries), &secret());
        assert_eq!(
            problems,
            [
                Problem::new(
                    "subscriptions",
                    "`[0].recipients[4]`: is not one of the recipients of service teams (prod)"
                ),
                Problem::new(
                    "subscriptions",
                    "`[0].recipients[5]`: is a URL, which a set cannot name: name a channel or a recipient the \
                     admin configured"
                ),
                Problem::new(
                    "subscriptions",
                    "`[1].recipients[0]`: names a service that is not configured (configured: audit, hooks, slack, teams)"
                ),
            ]
        );
        let subs = &config.subscriptions;
        assert_eq!(subs.len(), 2);
        // Naming a service missing for now: held (its records stay), not subscribed.
        assert!(subs[1].recipients.is_empty());
        assert_eq!(
            subs[1].held,
            [Target {
                service: "nowhere".into(),
                recipient: "x".into()
            }]
        );
        assert!(subs[0].held.is_empty());
        let targets: Vec<(&str, &str)> = subs[0]
            .recipients
            .iter()
            .map(|t| (t.service.as_str(), t.recipient.as_str()))
            .collect();
        assert_eq!(
            targets,
            [
                ("slack", "ops"),
                ("hooks", "ops"),
                ("teams", "prod"),
                ("audit", "")
            ]
        );
        assert_eq!(subs[0].triggers, ["on-rollout-failed"]);
        assert_eq!(subs[0].selector, Selector::parse("team=payments").unwrap());
    }

    /// Everything a secret value could leak through: problems and the `Debug` of the configuration.
    fn leaks(entries: &[(&str, &str)], secret: &BTreeMap<String, Vec<u8>>, value: &str) -> Option<String> {
        let (config, problems) = parse(&data(entries), secret);
        let debug = format!("{config:?}");
        if debug.contains(value) {
            return Some(debug);
        }
        problems
            .into_iter()
            .map(|p| p.to_string())
            .find(|p| p.contains(value))
    }

    #[test]
    fn no_secret_value_shows_in_problems_or_debug_output() {
        let mut entries = SERVICES.to_vec();
        // Secret values put where they are wrong: as a URL that is not one, as a recipient, as a
        // header with a line break.
        entries.extend_from_slice(&[
            ("service.webhook.bad", "url: $slack-token"),
            (
                "service.webhook.bad2",
                "url: https://x\nheaders: [{name: A, value: \"$slack-token\\n\"}]",
            ),
            ("service.slack.bad3", "webhooks: {ops: $slack-token}"),
            ("service.webhook.bad4", "url: https://x\nproxy: $slack-token"),
            (
                "subscriptions",
                "- recipients: ['hooks:https://hooks.example.com/services/T0/B0/sekrit']",
            ),
        ]);
        for value in [TOKEN, HOOK, "pa55word-secret"] {
            assert_eq!(leaks(&entries, &secret(), value), None, "{value}");
        }
        assert_eq!(problems_of(&entries).len(), 6);
    }

    proptest! {
        /// Whatever the configuration says, a value that only the Secret holds never shows.
        #[test]
        fn a_secret_value_never_shows(
            value in "[A-Za-z0-9:/._-]{8,30}",
            field in prop_oneof![
                Just("url"), Just("token"), Just("proxy"), Just("timeout"), Just("username"),
                Just("webhooks"), Just("recipientUrls"), Just("headers"), Just("basicAuth"),
            ],
            kind in prop_oneof![Just("service.slack"), Just("service.teams"), Just("service.webhook.w")],
            quoted in any::<bool>(),
        ) {
            let secret = BTreeMap::from([("k".to_string(), value.clone().into_bytes())]);
            let reference = if quoted { "'$k'" } else { "$k" };
            let yaml = match field {
                "webhooks" | "recipientUrls" => format!("{field}: {{r: {reference}}}"),
                "headers" => format!("headers: [{{name: X, value: {reference}}}]"),
                "basicAuth" => format!("basicAuth: {{username: u, password: {reference}}}"),
                _ => format!("{field}: {reference}"),
            };
            let entries = [(kind, yaml.as_str())];
            prop_assert_eq!(leaks(&entries, &secret, &value), None);
        }

        #[test]
        fn parsing_never_panics(key in "(service|template|trigger)\\.[a-z.]{0,12}|subscriptions|defaultTriggers", value in "\\PC{0,60}") {
            let _ = parse(&data(&[(key.as_str(), value.as_str())]), &secret());
        }
    }

    /// Issue 36: the admin aims a bot token. With `channels`, a set may name only a channel one of
    /// the globs matches (`#` or not); without, any; other services are not concerned.
    #[test]
    fn a_slack_bots_channels_bound_what_sets_may_name() {
        let (config, problems) = parse(
            &fixtures::data(&[
                (
                    "service.slack.aimed",
                    "token: $slack-token\nchannels: ['#team-a-*', 'C0A?', deploys]",
                ),
                ("service.slack.open", "token: $slack-token"),
                ("service.webhook.hook", "url: https://x"),
            ]),
            &fixtures::secret(),
        );
        assert_eq!(problems, []);
        let aimed = &config.services["aimed"];
        for (recipient, allowed) in [
            ("#team-a-alerts", true),
            ("team-a-", true),
            ("#deploys", true),
            ("deploys", true),
            ("C0A1", true),
            ("C0A12", false),
            ("#team-b-alerts", false),
            ("#general", false),
            ("@alice", false),
            ("#deploys-all", false),
        ] {
            assert_eq!(may_name(aimed, recipient), allowed, "{recipient}");
        }
        assert!(may_name(&config.services["open"], "#general"));
        assert!(may_name(&config.services["hook"], ""));
        assert!(glob_matches(b"*a*a*a", b"bababa"));
        assert!(!glob_matches(b"*a*a*ab", "a".repeat(4000).as_bytes()));
    }
}
