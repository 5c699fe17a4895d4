//! The HTTP request each service sends, as data, and when to try it again. The I/O layer sends the
//! request with the [`Transport`] it carries (timeout, proxy, CA file) and asks
//! [`Transport::retry_after`] after each failure.

use std::time::Duration;

use base64::Engine;
use serde_json::{Map, Value as Json, json};

use super::Credential;
use super::config::{
    DEFAULT_RETRIES, DEFAULT_TIMEOUT, Service, ServiceKind, SlackDelivery, SlackService, TeamsFormat,
};
use super::render::{Message, Part};

/// How a service's requests travel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transport {
    /// For the whole request, connection included.
    pub timeout: Duration,
    /// Attempts after the first one that failed, at most [`super::config::MAX_RETRIES`].
    pub retries: u32,
    /// An `http://`, `https://` or `socks5://` proxy (it may hold a user and password).
    pub proxy: Option<Credential>,
    /// A PEM file of CA certificates to trust besides the system's.
    pub ca_file: Option<String>,
    /// Do not check the server's certificate (for tests only).
    pub insecure_skip_verify: bool,
}

impl Default for Transport {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            retries: DEFAULT_RETRIES,
            proxy: None,
            ca_file: None,
            insecure_skip_verify: false,
        }
    }
}

/// Wait before the first retry; each next one waits twice as long, up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl Transport {
    /// See [`retry_after`].
    pub fn retry_after(
        &self,
        attempt: u32,
        status: Option<u16>,
        header: Option<Duration>,
    ) -> Option<Duration> {
        retry_after(self.retries, attempt, status, header)
    }
}

/// How long to wait before trying again after attempt number `attempt` (1 for the first) failed with
/// HTTP `status` (`None`: no answer, such as a refused connection or a timeout), or `None` to stop.
/// Only no answer, 408, 429 and 5xx are tried again, at most `retries` times. The wait doubles from
/// [`FIRST_BACKOFF`] up to [`MAX_BACKOFF`]; a server's `Retry-After` is honoured when it is no longer
/// than that, and a longer one stops the retries (the notification stays undelivered, so the next
/// reconcile tries it again).
pub fn retry_after(
    retries: u32,
    attempt: u32,
    status: Option<u16>,
    header: Option<Duration>,
) -> Option<Duration> {
    if attempt == 0 || attempt > retries {
        return None;
    }
    let retryable = match status {
        None => true,
        Some(code) => code == 408 || code == 429 || (500..=599).contains(&code),
    };
    if !retryable {
        return None;
    }
    if let Some(wait) = header {
        return (wait <= MAX_BACKOFF).then_some(wait);
    }
    let doublings = (attempt - 1).min(16);
    Some((FIRST_BACKOFF * 2u32.pow(doublings)).min(MAX_BACKOFF))
}

/// A header's value: plain, or one that grants access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderValue {
    Plain(String),
    Secret(Credential),
}

impl HeaderValue {
    /// The value itself, for sending.
    pub fn expose(&self) -> &str {
        match self {
            Self::Plain(v) => v,
            Self::Secret(c) => c.expose(),
        }
    }
}

/// One request to send. Its `Debug` shows no credential: the URL and secret headers are redacted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    pub url: Credential,
    pub headers: Vec<(String, HeaderValue)>,
    pub body: Vec<u8>,
    pub transport: Transport,
}

const JSON: &str = "application/json; charset=utf-8";

/// The request that delivers `message` to `recipient` through `service`. Fails when the recipient is
/// not one the service knows (the configuration changed since the subscription was read) or the
/// message was rendered for another kind of service.
pub fn request(service: &Service, recipient: &str, message: &Message) -> Result<HttpRequest, String> {
    let (method, url, mut headers, body) = match (&service.kind, &message.part) {
        (ServiceKind::Slack(slack), Part::Slack { attachments, blocks }) => {
            slack_request(slack, service, recipient, message, attachments, blocks)?
        }
        (ServiceKind::Teams(teams), part @ Part::Teams { .. }) => {
            let url = teams
                .recipient_urls
                .get(recipient)
                .ok_or_else(|| format!("recipient {recipient:?} is not one of service {}'s", service.name))?;
            (
                "POST".to_string(),
                url.clone(),
                Vec::new(),
                teams_body(teams.format, &message.text, part),
            )
        }
        (ServiceKind::Webhook(webhook), Part::Webhook { method, path, body }) => {
            let url = match path.as_deref() {
                None | Some("") => webhook.url.expose().to_string(),
                Some(path) => join_path(webhook.url.expose(), path),
            };
            let mut headers: Vec<(String, HeaderValue)> = webhook
                .headers
                .iter()
                .map(|(name, value)| (name.clone(), HeaderValue::Secret(value.clone())))
                .collect();
            if let Some(auth) = &webhook.basic_auth {
                let pair = format!("{}:{}", auth.username.expose(), auth.password.expose());
                let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
                headers.push((
                    "Authorization".to_string(),
                    HeaderValue::Secret(Credential::new(format!("Basic {encoded}"))),
                ));
            }
            (
                method.clone(),
                Credential::new(url),
                headers,
                body.clone().into_bytes(),
            )
        }
        _ => {
            return Err(format!(
                "template {} was not rendered for service {}",
                message.template, service.name
            ));
        }
    };
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("content-type"))
    {
        headers.push(("Content-Type".to_string(), HeaderValue::Plain(JSON.to_string())));
    }
    Ok(HttpRequest {
        method,
        url,
        headers,
        body,
        transport: service.transport.clone(),
    })
}

type Parts = (String, Credential, Vec<(String, HeaderValue)>, Vec<u8>);

fn slack_request(
    slack: &SlackService,
    service: &Service,
    recipient: &str,
    message: &Message,
    attachments: &Option<Json>,
    blocks: &Option<Json>,
) -> Result<Parts, String> {
    let mut body = Map::new();
    let (url, headers) = match &slack.delivery {
        SlackDelivery::Bot { token, api_url, .. } => {
            body.insert("channel".into(), recipient.into());
            let auth = Credential::new(format!("Bearer {}", token.expose()));
            (
                Credential::new(api_url.clone()),
                vec![("Authorization".to_string(), HeaderValue::Secret(auth))],
            )
        }
        SlackDelivery::Webhooks(urls) => {
            let url = urls
                .get(recipient)
                .ok_or_else(|| format!("recipient {recipient:?} is not one of service {}'s", service.name))?;
            (url.clone(), Vec::new())
        }
    };
    body.insert("text".into(), message.text.clone().into());
    if let Some(attachments) = attachments {
        body.insert("attachments".into(), attachments.clone());
    }
    if let Some(blocks) = blocks {
        body.insert("blocks".into(), blocks.clone());
    }
    if let Some(username) = &slack.username {
        body.insert("username".into(), username.clone().into());
    }
    if let Some(icon) = &slack.icon {
        let field = if icon.starts_with(':') && icon.ends_with(':') {
            "icon_emoji"
        } else {
            "icon_url"
        };
        body.insert(field.into(), icon.clone().into());
    }
    Ok((
        "POST".to_string(),
        url,
        headers,
        Json::Object(body).to_string().into_bytes(),
    ))
}

/// `url` and `path` with one `/` between them; a path starting with `?` is a query, appended as it is.
fn join_path(url: &str, path: &str) -> String {
    if path.starts_with('?') {
        return format!("{url}{path}");
    }
    format!("{}/{}", url.trim_end_matches('/'), path.trim_start_matches('/'))
}

fn teams_body(format: TeamsFormat, message: &str, part: &Part) -> Vec<u8> {
    let Part::Teams {
        title,
        text,
        summary,
        facts,
        body,
    } = part
    else {
        return Vec::new();
    };
    if let Some(body) = body {
        return body.to_string().into_bytes();
    }
    let text = text.as_deref().unwrap_or(message);
    let card = match format {
        TeamsFormat::MessageCard => {
            let first_line = message.lines().next().unwrap_or_default();
            let summary = summary.as_deref().or(title.as_deref()).unwrap_or(first_line);
            let mut card = json!({
                "@type": "MessageCard",
                "@context": "https://schema.org/extensions",
                "summary": summary,
                "text": text,
            });
            if let Some(title) = title {
                card["title"] = title.clone().into();
            }
            if let Some(facts) = facts {
                card["sections"] = json!([{ "facts": facts }]);
            }
            card
        }
        TeamsFormat::AdaptiveCard => {
            let mut blocks = Vec::new();
            if let Some(title) = title {
                blocks.push(json!({"type": "TextBlock", "text": title, "weight": "Bolder", "size": "Medium", "wrap": true}));
            }
            blocks.push(json!({"type": "TextBlock", "text": text, "wrap": true}));
            if let Some(Json::Array(facts)) = facts {
                let facts: Vec<Json> = facts
                    .iter()
                    .map(|f| json!({"title": f["name"], "value": f["value"]}))
                    .collect();
                blocks.push(json!({"type": "FactSet", "facts": facts}));
            }
            json!({
                "type": "message",
                "attachments": [{
                    "contentType": "application/vnd.microsoft.card.adaptive",
                    "content": {
                        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                        "type": "AdaptiveCard",
                        "version": "1.4",
                        "body": blocks,
                    },
                }],
            })
        }
    };
    card.to_string().into_bytes()
}

/// What went wrong with an answer that arrived, or `None` when it means the message was delivered.
/// A Slack bot token's `chat.postMessage` answers 200 with `"ok": false` on failure; the error code it
/// names (`channel_not_found`) is kept, anything else it says is not.
pub fn response_error(service: &Service, status: u16, body: &[u8]) -> Option<String> {
    if !(200..300).contains(&status) {
        return Some(format!("HTTP {status}"));
    }
    let ServiceKind::Slack(SlackService {
        delivery: SlackDelivery::Bot { .. },
        ..
    }) = &service.kind
    else {
        return None;
    };
    let answer: Json = serde_json::from_slice(body).ok()?;
    if answer["ok"] == Json::Bool(false) {
        let code: String = answer["error"]
            .as_str()
            .unwrap_or("unknown")
            .chars()
            .filter(|c| c.is_ascii_lowercase() || *c == '_')
            .take(64)
            .collect();
        return Some(format!("Slack answered {code}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::config::Config;
    use crate::notify::fixtures::{self, HOOK, TOKEN};
    use crate::notify::render::{self, Template};

    fn message(text: &str, part: Part) -> Message {
        Message {
            template: "t".into(),
            text: text.into(),
            part,
        }
    }

    fn slack_part() -> Part {
        Part::Slack {
            attachments: None,
            blocks: None,
        }
    }

    fn teams_part() -> Part {
        Part::Teams {
            title: None,
            text: None,
            summary: None,
            facts: None,
            body: None,
        }
    }

    fn header<'a>(request: &'a HttpRequest, name: &str) -> Option<&'a str> {
        request
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.expose())
    }

    fn body(request: &HttpRequest) -> Json {
        serde_json::from_slice(&request.body).unwrap()
    }

    fn config() -> Config {
        fixtures::config_with(&[])
    }

    #[test]
    fn a_slack_bot_posts_to_chat_post_message() {
        let config = config();
        let blocks = json!([{"type": "divider"}]);
        let part = Part::Slack {
            attachments: None,
            blocks: Some(blocks.clone()),
        };
        let request = request(&config.services["slack"], "#deploys", &message("hi", part)).unwrap();
        assert_eq!(request.method, "POST");
        assert_eq!(request.url.expose(), "https://slack.com/api/chat.postMessage");
        assert_eq!(
            header(&request, "authorization"),
            Some(format!("Bearer {TOKEN}").as_str())
        );
        assert_eq!(
            header(&request, "content-type"),
            Some("application/json; charset=utf-8")
        );
        assert_eq!(
            body(&request),
            json!({"channel": "#deploys", "text": "hi", "blocks": blocks, "username": "cmset", "icon_emoji": ":rocket:"})
        );
        assert_eq!(request.transport, Transport::default());
    }

    #[test]
    fn a_slack_webhook_posts_to_the_recipients_url() {
        let config = config();
        let request = request(&config.services["hooks"], "ops", &message("hi", slack_part())).unwrap();
        assert_eq!(request.url.expose(), HOOK);
        assert_eq!(header(&request, "authorization"), None);
        assert_eq!(body(&request), json!({"text": "hi"}));
        assert_eq!(
            super::request(&config.services["hooks"], "nope", &message("hi", slack_part())),
            Err("recipient \"nope\" is not one of service hooks's".to_string())
        );
    }

    #[test]
    fn teams_gets_a_message_card_or_an_adaptive_card_or_the_templates_body() {
        let config = config();
        let teams = &config.services["teams"];
        let plain = request(teams, "prod", &message("line one\nline two", teams_part())).unwrap();
        assert_eq!(plain.url.expose(), "https://teams.example.com/webhook/prod");
        assert_eq!(
            body(&plain),
            json!({
                "@type": "MessageCard",
                "@context": "https://schema.org/extensions",
                "summary": "line one",
                "text": "line one\nline two",
            })
        );
        let facts = json!([{"name": "Wave", "value": "1"}]);
        let rich = Part::Teams {
            title: Some("Rollout failed".into()),
            text: None,
            summary: None,
            facts: Some(facts.clone()),
            body: None,
        };
        assert_eq!(
            body(&request(teams, "prod", &message("m", rich.clone())).unwrap()),
            json!({
                "@type": "MessageCard",
                "@context": "https://schema.org/extensions",
                "title": "Rollout failed",
                "summary": "Rollout failed",
                "text": "m",
                "sections": [{"facts": facts}],
            })
        );
        let mut adaptive = teams.clone();
        if let ServiceKind::Teams(t) = &mut adaptive.kind {
            t.format = TeamsFormat::AdaptiveCard;
        }
        assert_eq!(
            body(&request(&adaptive, "prod", &message("m", rich)).unwrap()),
            json!({
                "type": "message",
                "attachments": [{
                    "contentType": "application/vnd.microsoft.card.adaptive",
                    "content": {
                        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                        "type": "AdaptiveCard",
                        "version": "1.4",
                        "body": [
                            {"type": "TextBlock", "text": "Rollout failed", "weight": "Bolder", "size": "Medium", "wrap": true},
                            {"type": "TextBlock", "text": "m", "wrap": true},
                            {"type": "FactSet", "facts": [{"title": "Wave", "value": "1"}]},
                        ],
                    },
                }],
            })
        );
        let raw = Part::Teams {
            title: None,
            text: None,
            summary: None,
            facts: None,
            body: Some(json!({"type": "message", "text": "raw"})),
        };
        assert_eq!(
            body(&request(teams, "prod", &message("m", raw)).unwrap()),
            json!({"type": "message", "text": "raw"})
        );
    }

    #[test]
    fn a_webhook_carries_its_headers_basic_auth_path_and_body() {
        let config = config();
        let audit = &config.services["audit"];
        let part = Part::Webhook {
            method: "PUT".into(),
            path: Some("/sets/shop/app".into()),
            body: "{\"a\":1}".into(),
        };
        let request = request(audit, "", &message("m", part)).unwrap();
        assert_eq!(request.method, "PUT");
        assert_eq!(
            request.url.expose(),
            "https://audit.example.com/api/sets/shop/app"
        );
        assert_eq!(header(&request, "x-token"), Some(TOKEN));
        // base64("cmset:pa55word-secret")
        assert_eq!(
            header(&request, "authorization"),
            Some("Basic Y21zZXQ6cGE1NXdvcmQtc2VjcmV0")
        );
        assert_eq!(request.body, b"{\"a\":1}");
        assert_eq!(request.transport.retries, 5);
        for (url, path, want) in [
            ("https://h/api/", "/x", "https://h/api/x"),
            ("https://h/api", "x", "https://h/api/x"),
            ("https://h/api", "?since=1", "https://h/api?since=1"),
        ] {
            assert_eq!(join_path(url, path), want);
        }
    }

    #[test]
    fn debug_output_shows_no_credential() {
        let config = config();
        let bot = request(&config.services["slack"], "ops", &message("hi", slack_part())).unwrap();
        let hook = request(&config.services["hooks"], "ops", &message("hi", slack_part())).unwrap();
        let part = Part::Webhook {
            method: "POST".into(),
            path: None,
            body: String::new(),
        };
        let audit = request(&config.services["audit"], "", &message("m", part)).unwrap();
        for request in [bot, hook, audit] {
            let debug = format!("{request:?}");
            for secret in [TOKEN, HOOK, "pa55word-secret", "Y21zZXQ6cGE1NXdvcmQtc2VjcmV0"] {
                assert!(!debug.contains(secret), "{debug}");
            }
        }
    }

    #[test]
    fn a_message_rendered_for_another_kind_is_refused() {
        let config = config();
        assert_eq!(
            request(&config.services["slack"], "ops", &message("m", teams_part())),
            Err("template t was not rendered for service slack".to_string())
        );
    }

    #[test]
    fn built_in_templates_make_valid_requests_for_every_service() {
        let config = config();
        let set = fixtures::Set::new(fixtures::failed_status());
        for event in crate::notify::Event::ALL {
            let context = render::context(&set.view(), event, event.trigger());
            let template: Template = render::built_in(event.template()).unwrap();
            for (service, recipient) in [
                ("slack", "ops"),
                ("hooks", "dev"),
                ("teams", "prod"),
                ("audit", ""),
            ] {
                let service = &config.services[service];
                let message = render::render(&template, &context, service).unwrap();
                let request = request(service, recipient, &message).unwrap();
                let json: Json = serde_json::from_slice(&request.body).unwrap();
                assert!(json.is_object(), "{event:?} {}", service.name);
            }
        }
    }

    #[test]
    fn retries_back_off_and_stop() {
        let s = Duration::from_secs;
        for (attempt, status, header, want) in [
            (1, None, None, Some(s(1))),
            (2, Some(503), None, Some(s(2))),
            (3, Some(500), None, Some(s(4))),
            (3, Some(429), Some(s(7)), Some(s(7))),
            (3, Some(429), Some(s(31)), None),
            (2, Some(408), None, Some(s(2))),
            (4, Some(500), None, None),
            (1, Some(400), None, None),
            (1, Some(404), None, None),
            (1, Some(200), None, None),
            (0, None, None, None),
        ] {
            assert_eq!(
                retry_after(3, attempt, status, header),
                want,
                "{attempt} {status:?}"
            );
        }
        // The backoff is capped at 30 s.
        assert_eq!(retry_after(10, 6, None, None), Some(s(30)));
        assert_eq!(retry_after(10, 10, None, None), Some(s(30)));
        let transport = Transport {
            retries: 0,
            ..Transport::default()
        };
        assert_eq!(transport.retry_after(1, None, None), None);
    }

    #[test]
    fn slack_failures_inside_a_200_are_found() {
        let config = config();
        let bot = &config.services["slack"];
        for (status, body, want) in [
            (200, &br#"{"ok": true}"#[..], None),
            (
                200,
                br#"{"ok": false, "error": "channel_not_found"}"#,
                Some("Slack answered channel_not_found"),
            ),
            (
                200,
                br#"{"ok": false, "error": "invalid_auth <b>!"}"#,
                Some("Slack answered invalid_authb"),
            ),
            (500, b"", Some("HTTP 500")),
        ] {
            assert_eq!(response_error(bot, status, body).as_deref(), want);
        }
        // A webhook's 200 is a success whatever it says.
        assert_eq!(response_error(&config.services["hooks"], 200, b"ok"), None);
    }
}
