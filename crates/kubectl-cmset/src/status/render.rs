//! The report as text: a few lines about the set (current revision, Ready, validation, the rollout and
//! its analysis, subscriptions, generation), then a table of workloads, with a WAVE column only for a
//! set rolled out in waves. Each part's lines are made where that part is decided; this module lays
//! them out and colours them.

use crate::address::resource;
use crate::revisions::column;
use crate::style::{Palette, Role, visible};
use crate::table::{Cell, render};

use super::known::revision_phrase;
use super::notifications::notification_lines;
use super::rollout::{analysis_lines, rollout_lines};
use super::{StatusReport, WaveLabel, kinds_phrase};

/// The report as text: a few lines about the set, then a table of workloads.
pub fn render_text(report: &StatusReport, palette: Palette) -> String {
    let mut out = String::new();
    // A field without a name continues the one before it.
    let mut field = |name: &str, value: String, role: Option<Role>| {
        let label = if name.is_empty() {
            String::new()
        } else {
            format!("{name}:")
        };
        out.push_str(&format!("{label:<14}{}\n", palette.paint(role, &visible(&value))));
    };
    let revision_kind = report.kind.revision_kind();
    field(
        report.kind.as_str(),
        format!("{} (namespace {})", report.set, report.namespace),
        None,
    );
    match &report.current_revision {
        Some(c) => field(
            "Current",
            format!(
                "{}, {revision_kind} {}",
                revision_phrase(c.revision, "revision ?"),
                c.object.name()
            ),
            None,
        ),
        None => field("Current", "none yet".to_string(), Some(Role::Attention)),
    }
    match &report.ready {
        Some(c) => {
            let role = match c.status.as_str() {
                "True" => Role::Good,
                "False" => Role::Bad,
                _ => Role::Attention,
            };
            let mut text = format!("{} ({})", c.status, c.reason);
            if !c.message.is_empty() {
                text.push_str(&format!(": {}", c.message));
            }
            field("Ready", text, Some(role));
        }
        None => field(
            "Ready",
            "unknown: no Ready condition yet".to_string(),
            Some(Role::Attention),
        ),
    }
    if let Some(valid) = &report.validation {
        let (text, role) = match valid.status.as_str() {
            "True" => (
                "passed: the current revision's content passes spec.validation".to_string(),
                Role::Good,
            ),
            // Ready says the same in full when it is the cause; said here so it is not missed.
            _ => (format!("failed: {}", valid.message), Role::Bad),
        };
        field("Validation", text, Some(role));
    }
    if let Some(rollout) = &report.rollout {
        let id = format!("{}/{}", resource(report.kind), report.set);
        for (i, (text, role)) in rollout_lines(rollout, &id).into_iter().enumerate() {
            field(if i == 0 { "Rollout" } else { "" }, text, role);
        }
        for (i, (text, role)) in analysis_lines(&rollout.analysis).into_iter().enumerate() {
            field(if i == 0 { "Analysis" } else { "" }, text, role);
        }
    }
    for (i, (text, role)) in notification_lines(&report.notifications).into_iter().enumerate() {
        field(if i == 0 { "Subscribed" } else { "" }, text, role);
    }
    let number = |g: Option<i64>| g.map_or("none".to_string(), |g| g.to_string());
    if report.status_behind_spec {
        field(
            "Generation",
            format!(
                "{}, observed {}: status is behind the spec",
                number(report.generation),
                number(report.observed_generation)
            ),
            Some(Role::Bad),
        );
    } else {
        field(
            "Generation",
            format!(
                "{}, observed {}",
                number(report.generation),
                number(report.observed_generation)
            ),
            None,
        );
    }
    out.push('\n');

    if report.workloads.is_empty() {
        out.push_str(&format!(
            "No {} in namespace {} references {}.\n",
            kinds_phrase(|k| k.to_string()),
            visible(&report.namespace),
            visible(&report.set)
        ));
        return out;
    }
    // The WAVE column only for a set rolled out in waves: other sets print as they always did.
    let waves = report.rollout.is_some() || report.workloads.iter().any(|w| w.wave.is_some());
    let rows: Vec<Vec<Cell>> = report
        .workloads
        .iter()
        .map(|w| {
            let mut row = vec![Cell::new(format!("{}/{}", w.kind, w.name))];
            if waves {
                row.push(Cell::new(
                    w.wave.as_ref().map_or("-".to_string(), WaveLabel::text),
                ));
            }
            row.extend([
                Cell::new(w.revision.map_or("-".to_string(), |n| n.to_string())),
                Cell::new(w.object.name()),
                Cell::styled(&w.explanation, Some(w.state.role())),
            ]);
            row
        })
        .collect();
    let headers: &[&str] = if waves {
        &["WORKLOAD", "WAVE", "REVISION", column(revision_kind), "WHY"]
    } else {
        &["WORKLOAD", "REVISION", column(revision_kind), "WHY"]
    };
    out.push_str(&render(headers, &rows, palette));
    out
}

#[cfg(test)]
mod tests {
    use cmset_core::set::SetRef;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use serde_json::json;

    use super::*;
    use crate::revisions::fixtures::*;
    use crate::revisions::revisions_of;
    use crate::status::fixtures::*;
    use crate::status::status_report;

    #[test]
    fn text() {
        let text = render_text(&full_report(), Palette::PLAIN);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "ConfigMapSet: app (namespace demo)");
        assert_eq!(lines[1], "Current:      revision 3, ConfigMap app-cccccccccc");
        assert_eq!(
            lines[2],
            "Ready:        True (RolledOut): every opted-in workload runs revision 3 or is pinned"
        );
        assert_eq!(lines[3], "Generation:   3, observed 3");
        assert_eq!(lines[4], "");
        assert_eq!(
            lines[5..].join("\n"),
            "\
WORKLOAD            REVISION   CONFIGMAP        WHY
Deployment/legacy   -          app              not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it
Deployment/web      3          app-cccccccccc   current (updated by cmset)
StatefulSet/db      1          app-ffffffffff   pinned to revision 1 by a rollback; moves again when the set's content changes"
        );
        let coloured = render_text(&full_report(), Palette::COLOR);
        assert!(coloured.contains("\u{1b}[32mcurrent (updated by cmset)\u{1b}[0m"));
        assert!(coloured.contains("\u{1b}[32mTrue (RolledOut)"));
        assert!(!crate::style::has_escapes(&text));
    }

    #[test]
    fn status_behind_spec_is_said() {
        let mut set = ready_set(vec![]);
        set.metadata.generation = Some(4);
        let report = status_report(SetRef::from(&set), &[], &[]);
        assert!(report.status_behind_spec);
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("Generation:   4, observed 3: status is behind the spec\n"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "No Deployment, StatefulSet, DaemonSet, CronJob, Job or Rollout in namespace demo \
                 references app.\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_secret_set_s_status_text_and_json() {
        let report = secret_report(&[
            secret_deployment("web", true, "envFrom", "app-cccccccccc"),
            secret_deployment("legacy", false, "volume", "app"),
            deployment("configmaps", Some("true"), &["app-cccccccccc"]),
        ]);
        let text = render_text(&report, Palette::PLAIN);
        assert_eq!(
            text,
            "\
SecretSet:    app (namespace demo)
Current:      revision 3, Secret app-cccccccccc
Ready:        True (RolledOut): every opted-in workload runs revision 3 or is pinned
Generation:   3, observed 3

WORKLOAD            REVISION   SECRET           WHY
Deployment/legacy   -          app              not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it
Deployment/web      3          app-cccccccccc   current (updated by cmset)
"
        );
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["kind"], "SecretSet");
        assert_eq!(
            value["currentRevision"],
            json!({"secret": "app-cccccccccc", "revision": 3})
        );
        assert_eq!(
            value["workloads"][1],
            json!({
                "kind": "Deployment",
                "name": "web",
                "optedIn": true,
                "secret": "app-cccccccccc",
                "revision": 3,
                "state": "current",
                "explanation": "current (updated by cmset)",
            })
        );
        let yaml = crate::output::structured(&report, crate::cli::Output::Yaml)
            .unwrap()
            .unwrap();
        assert!(yaml.starts_with("kind: SecretSet\nset: app\n"), "{yaml}");
        for out in [text, value.to_string(), yaml] {
            assert!(!out.contains("configMap") && !out.contains("ConfigMap "), "{out}");
            assert_no_secret_values(&out);
        }
    }

    #[test]
    fn validation_is_shown_when_the_set_declares_it() {
        let mut set = ready_set(vec![]);
        let refused = "content not made into revision app-dddddddddd (workloads stay on revision 3 (app-cccccccccc)): \
                       key \"app.json\": is not valid JSON at line 2 column 1: trailing comma";
        set.status.as_mut().unwrap().conditions = vec![Condition {
            type_: "Valid".into(),
            ..condition("False", "ValidationFailed", refused)
        }];
        let cms = cms();
        let report = status_report((&set).into(), &revisions_of((&set).into(), &cms), &[]);
        assert_eq!(
            report.validation.as_ref().map(|v| v.status.as_str()),
            Some("False")
        );
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains(&format!("Validation:   failed: {refused}\n")),
            "{text}"
        );
        set.status.as_mut().unwrap().conditions = vec![Condition {
            type_: "Valid".into(),
            ..condition("True", "ContentValid", "")
        }];
        let report = status_report((&set).into(), &revisions_of((&set).into(), &cms), &[]);
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("Validation:   passed: the current revision's content passes spec.validation\n"),
            "{text}"
        );
        // No validation declared: no line, no field.
        set.status.as_mut().unwrap().conditions.clear();
        let report = status_report((&set).into(), &revisions_of((&set).into(), &cms), &[]);
        assert!(!render_text(&report, Palette::PLAIN).contains("Validation:"));
        assert!(serde_json::to_value(&report).unwrap().get("validation").is_none());
    }

    #[test]
    fn every_kind_is_listed_by_kind_and_name() {
        let report = report_of_every_kind();
        let listed: Vec<String> = report
            .workloads
            .iter()
            .map(|w| format!("{}/{}", w.kind, w.name))
            .collect();
        assert_eq!(
            listed,
            [
                "CronJob/cronjob-x",
                "DaemonSet/daemonset-x",
                "Deployment/deployment-x",
                "Job/job-x",
                "Rollout/rollout-x",
                "StatefulSet/statefulset-x",
            ]
        );
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains(
                "\nCronJob/cronjob-x           3          app-cccccccccc   current (updated by cmset)\n"
            ),
            "{text}"
        );
        assert!(text.contains("\nRollout/rollout-x           3 "), "{text}");
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["workloads"][3]["kind"], "Job");
    }
}
