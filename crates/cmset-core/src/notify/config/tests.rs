//! Parsing the notification configuration: every field, its errors, and secrets kept out of them.

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
