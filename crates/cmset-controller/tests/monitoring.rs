//! `config/monitoring` against the operator: every metric its alerts and its dashboard query is one cmset
//! exposes (read from an encoded registry, not from a list kept by hand), the PrometheusRule carries
//! exactly the plain rules file, and the ServiceMonitor selects the metrics Service. promtool checks the
//! same files' syntax and the alerts' behaviour (`make monitoring-check`).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use cmset_controller::platform::metrics::{
    KindLabel, Metrics, RequestLabels, ResultLabel, RolloutGauges, RolloutLabel, SetLabels,
};
use prometheus_client::registry::Registry;
use serde_json::Value as Json;
use serde_yaml_ng::Value as Yaml;

fn repo_file(path: &str) -> String {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

fn yaml(path: &str) -> Yaml {
    serde_yaml_ng::from_str(&repo_file(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn dashboard() -> Json {
    serde_json::from_str(&repo_file("config/monitoring/dashboard.json")).expect("dashboard.json")
}

/// Gives every metric a series: a family with none is left out of a scrape altogether.
fn touch_every_metric(m: &Metrics) {
    m.reconciled("set", Duration::from_millis(3));
    m.failed("set", "PatchWorkload");
    m.wrote("patch_workload");
    m.revisions_created.inc();
    m.revisions_pruned.inc();
    let kind = KindLabel { kind: "Deployment" };
    m.workloads_updated.get_or_create(&kind).inc();
    m.workloads_rolled_back.get_or_create(&kind).inc();
    m.rollouts.get_or_create(&RolloutLabel { event: "started" }).inc();
    m.leader.set(1);
    m.admissions
        .get_or_create(&ResultLabel { result: "patched" })
        .inc();
    m.admission_duration.observe(0.001);
    m.admission_requests
        .get_or_create(&RequestLabels {
            verb: "get",
            resource: "configmaps",
        })
        .inc();
    let set = SetLabels {
        namespace: "team-a".into(),
        kind: "ConfigMapSet",
        name: "web".into(),
    };
    m.observe_rollout(
        &set,
        Some(&RolloutGauges {
            phase: "Progressing",
            wave: 0,
            wave_opened_at: Some(1),
            progress_deadline_seconds: 600,
        }),
    );
    m.analysis_measured(&set, "error-rate", "", "passed", Some(0.0));
    m.observe_budget(Some(1), 1, 1);
}

/// The names of every series a scrape of cmset exposes (with `_total`, `_bucket`, ... as scraped).
fn exposed_names() -> BTreeSet<String> {
    let metrics = Metrics::default();
    touch_every_metric(&metrics);
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

/// Every PromQL expression of the alerts and the dashboard, with where it comes from.
fn expressions() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for group in yaml("config/monitoring/rules.yaml")["groups"]
        .as_sequence()
        .unwrap()
    {
        for rule in group["rules"].as_sequence().unwrap() {
            let name = rule["alert"].as_str().or(rule["record"].as_str()).unwrap();
            out.push((format!("rule {name}"), rule["expr"].as_str().unwrap().to_string()));
        }
    }
    for panel in panels(&dashboard()) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or_default();
            out.push((
                format!("panel {title:?} {}", target["refId"]),
                target["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    out
}

/// The dashboard's panels, rows' nested panels included.
fn panels(dashboard: &Json) -> Vec<&Json> {
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| std::iter::once(p).chain(p["panels"].as_array().into_iter().flatten()))
        .collect()
}

/// Words of PromQL that are not metric names.
const KEYWORDS: &str =
    "and or unless by without on ignoring group_left group_right bool offset atan2 inf nan Inf NaN";
/// Aggregations, which may be followed by `by (...)` before their parenthesis.
const AGGREGATIONS: &str =
    "sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio";
/// Keywords followed by a parenthesised list of label names.
const LABEL_LISTS: &str = "by without on ignoring group_left group_right";

/// The metric names an expression selects: identifiers that are neither functions (followed by `(`),
/// aggregations, keywords, label names (in `{...}` or a `by (...)` list), strings, numbers nor
/// durations. (Enough for the expressions cmset ships, which it checks; not a PromQL parser.)
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let skip_string = |i: usize| -> usize {
        let quote = chars[i];
        let mut j = i + 1;
        while j < chars.len() && chars[j] != quote {
            j += if chars[j] == '\\' { 2 } else { 1 };
        }
        j + 1
    };
    // From an opening bracket to just after its closing one, strings inside skipped.
    let skip_group = |i: usize, close: char| -> usize {
        let mut j = i + 1;
        while j < chars.len() && chars[j] != close {
            j = if matches!(chars[j], '"' | '\'' | '`') {
                skip_string(j)
            } else {
                j + 1
            };
        }
        j + 1
    };
    let next_non_space = |mut j: usize| {
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        j
    };
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '"' | '\'' | '`') {
            i = skip_string(i);
        } else if c == '{' {
            i = skip_group(i, '}');
        } else if c == '[' {
            i = skip_group(i, ']');
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c.is_ascii_digit() || c == '.' {
            // Numbers (0.99, 1e3) and durations (5m).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let after = next_non_space(i);
            let called = after < chars.len() && chars[after] == '(';
            let is = |words: &str| words.split_whitespace().any(|w| w == word);
            if is(LABEL_LISTS) && called {
                i = skip_group(after, ')');
            } else if !called && !is(KEYWORDS) && !is(AGGREGATIONS) {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn metric_names_are_told_from_functions_labels_and_keywords() {
    let names = |e: &str| metric_names(e).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"histogram_quantile(0.99, sum by (controller, le) (rate(cmset_reconcile_duration_seconds_bucket{job=~"a|b"}[5m])))"#
        ),
        ["cmset_reconcile_duration_seconds_bucket"]
    );
    assert_eq!(
        names(
            r#"time() - max by (set) (a_seconds) > on (set) group_left (x) b{phase="Failed}"} and c offset 5m or absent(d)"#
        ),
        ["a_seconds", "b", "c", "d"]
    );
    assert_eq!(
        names(
            r#"sum without (instance) (x) / ignoring (le) y == bool 1 unless count by (a) (z) or vector(0) or 1e3"#
        ),
        ["x", "y", "z"]
    );
    assert_eq!(
        names(r#"label_replace(up, "dst", "$1", "src", "(not_a_metric)")"#),
        ["up"]
    );
}

#[test]
fn every_metric_the_alerts_and_the_dashboard_query_is_one_cmset_exposes() {
    let exposed = exposed_names();
    // Sanity: the registry is read, with the suffixes a scrape shows.
    for name in [
        "cmset_rollout_phase",
        "cmset_reconcile_duration_seconds_bucket",
        "cmset_api_writes_total",
    ] {
        assert!(exposed.contains(name), "{name} not in {exposed:?}");
    }
    // Not cmset's: the API server's own metrics and Prometheus' `up`; the process_* names every client
    // library shares (cmset's are tested in metrics::process).
    let foreign = |n: &str| n == "up" || n.starts_with("apiserver_") || n.starts_with("process_");
    let mut unknown = Vec::new();
    let expressions = expressions();
    assert!(expressions.len() > 20, "{expressions:?}");
    for (source, expr) in &expressions {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{source}: no metric in {expr}");
        for name in names {
            if !exposed.contains(&name) && !foreign(&name) {
                unknown.push(format!("{source}: {name}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "metrics cmset does not expose (or that touch_every_metric does not give a series):\n{}",
        unknown.join("\n")
    );
}

#[test]
fn the_prometheus_rule_carries_exactly_the_rules_file() {
    let rule = yaml("config/monitoring/prometheus_rule.yaml");
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    assert_eq!(
        rule["spec"]["groups"],
        yaml("config/monitoring/rules.yaml")["groups"],
        "prometheus_rule.yaml's spec.groups differ from rules.yaml's groups: change both"
    );
}

#[test]
fn every_alert_has_a_severity_a_summary_and_a_description() {
    let rules = yaml("config/monitoring/rules.yaml");
    let mut alerts = BTreeSet::new();
    for group in rules["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            let Some(name) = rule["alert"].as_str() else {
                continue;
            };
            alerts.insert(name.to_string());
            let severity = rule["labels"]["severity"].as_str();
            assert!(
                matches!(severity, Some("warning" | "critical")),
                "{name}: severity {severity:?}"
            );
            for annotation in ["summary", "description"] {
                let text = rule["annotations"][annotation].as_str().unwrap_or_default();
                assert!(!text.trim().is_empty(), "{name}: no {annotation}");
            }
        }
    }
    let expected: BTreeSet<String> = [
        "CmsetRolloutFailed",
        "CmsetRolloutStuck",
        "CmsetReconcileErrors",
        "CmsetWebhookFailingOpen",
        "CmsetNoLeader",
        "CmsetBudgetSaturated",
        "CmsetChangeWindowsUnknown",
    ]
    .map(String::from)
    .into();
    assert_eq!(alerts, expected);
}

#[test]
fn the_service_monitor_selects_the_metrics_service_and_honours_the_sets_namespaces() {
    let monitor = yaml("config/monitoring/service_monitor.yaml");
    let service = yaml("config/manager/service.yaml");
    assert_eq!(
        service["metadata"]["name"].as_str(),
        Some("cmset-controller-metrics")
    );
    let labels = service["metadata"]["labels"].as_mapping().unwrap();
    let selector = monitor["spec"]["selector"]["matchLabels"].as_mapping().unwrap();
    assert!(!selector.is_empty());
    for (key, value) in selector {
        assert_eq!(
            labels.get(key),
            Some(value),
            "the Service lacks the selected label {key:?}"
        );
    }
    let namespaces = monitor["spec"]["namespaceSelector"]["matchNames"]
        .as_sequence()
        .unwrap();
    assert!(namespaces.contains(&service["metadata"]["namespace"]));
    let ports: Vec<&Yaml> = service["spec"]["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| &p["name"])
        .collect();
    for endpoint in monitor["spec"]["endpoints"].as_sequence().unwrap() {
        assert!(
            ports.contains(&&endpoint["port"]),
            "no Service port {:?}",
            endpoint["port"]
        );
        assert_eq!(endpoint["path"].as_str(), Some("/metrics"));
        // Else each set's `namespace` label turns into `exported_namespace` and the alerts lose it.
        assert_eq!(endpoint["honorLabels"].as_bool(), Some(true));
    }
}

#[test]
fn the_dashboard_reads_from_its_datasource_variable() {
    let dashboard = dashboard();
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    assert!(
        variables
            .iter()
            .any(|v| v["name"] == "datasource" && v["type"] == "datasource" && v["query"] == "prometheus"),
        "{variables:?}"
    );
    let mut ids = BTreeSet::new();
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(ids.insert(panel["id"].as_u64().unwrap()), "{title}: id taken");
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
        }
    }
}

/// The table of panels in docs/monitoring.md lists every panel of the dashboard with its queries, as
/// they are.
#[test]
fn the_monitoring_page_lists_every_panel_and_its_queries() {
    let page = repo_file("docs/monitoring.md");
    let dashboard = dashboard();
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().unwrap_or_default();
        let exprs: Vec<String> = panel["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["expr"].as_str())
            .map(|e| format!("`{}`", e.replace('|', "\\|")))
            .collect();
        if exprs.is_empty() {
            continue;
        }
        let row = format!("| {title} | {} |", exprs.join("<br>"));
        assert!(page.contains(&row), "docs/monitoring.md lacks the row\n{row}");
    }
}
