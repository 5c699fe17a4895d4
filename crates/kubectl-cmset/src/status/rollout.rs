//! The rollout of the set's current revision as `status.rollout` records it, with the spec's
//! settings that explain it: the wave in progress and its stabilization window, a pause or a wait for
//! promotion, the change window that holds it and when moves resume, a WindowOverride that lets it
//! through, why it failed, and each query of its metric analysis. The `Rollout:` and `Analysis:` lines
//! of the text, and `rollout` of `-o json|yaml`. A set without a recorded rollout has none of them.

use cmset_api::{RolloutPhase, RolloutStatus, Strategy};
use cmset_core::set::SetRef;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;

use super::known::Known;
use crate::age::human_duration;
use crate::revisions::ObjectName;
use crate::style::Role;

/// How a rollout stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    Progressing,
    Checking,
    Paused,
    AwaitingPromotion,
    Waiting,
    Complete,
    Failed,
}

impl Phase {
    fn of(phase: RolloutPhase) -> Self {
        match phase {
            RolloutPhase::Progressing => Self::Progressing,
            RolloutPhase::Checking => Self::Checking,
            RolloutPhase::Paused => Self::Paused,
            RolloutPhase::AwaitingPromotion => Self::AwaitingPromotion,
            RolloutPhase::Waiting => Self::Waiting,
            RolloutPhase::Complete => Self::Complete,
            RolloutPhase::Failed => Self::Failed,
        }
    }
}

/// The rollout of the set's current revision, wave by wave (`status.rollout`, with the spec's
/// `rollout` settings that explain it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutReport {
    /// The revision rolled out. Serialized as `configMap` or `secret`.
    #[serde(flatten)]
    pub object: ObjectName,
    pub revision: Option<i64>,
    pub phase: Phase,
    /// The wave in progress; when the rollout failed, the wave it failed in.
    pub wave: i32,
    /// The waves of this rollout, lowest first.
    pub waves: Vec<i32>,
    /// `spec.rollout.stabilizationSeconds` (0 when left out).
    pub stabilization_seconds: i32,
    /// `spec.rollout.autoRollback`.
    pub auto_rollback: bool,
    /// `spec.rollout.strategy`, when it is `Immediate` (only change windows hold the rollout); left out for
    /// `Waves`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// Since when every workload of the wave in progress is complete and healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave_healthy_since: Option<Time>,
    /// For how many seconds, as of when the plugin ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave_healthy_seconds: Option<i64>,
    /// Seconds until the stabilization window ends and the next wave moves (or the rollout completes),
    /// while the rollout progresses and its wave is healthy; 0 when due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stabilization_left_seconds: Option<i64>,
    /// Why it failed, naming the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Since when it has been paused or awaiting promotion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_since: Option<Time>,
    /// For how many seconds, as of when the plugin ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_seconds: Option<i64>,
    /// While `waiting`: `OutsideWindow`, or the name of the Deny window that holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// While `waiting`: when the change windows next let moves happen; absent when none opens within
    /// the years cmset looks ahead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_window: Option<Time>,
    /// Seconds from when the plugin ran until `nextWindow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_window_seconds: Option<i64>,
    /// The WindowOverride that lets the rollout through the change windows (`kubectl cmset promote
    /// --override-window`), as the controller recorded it in the set's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_override: Option<String>,
    /// Who created that WindowOverride, as cmset's webhook recorded it, or "not recorded".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_override_by: Option<String>,
    /// The set carries the annotation `cmset.dev/window-override` of earlier versions: it is ignored and
    /// lets nothing through.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub window_override_ignored: bool,
    /// Each query of the rollout's metric analysis: its last value, its condition and its verdict
    /// (`status.rollout.analysis`, as the operator recorded it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub analysis: Vec<cmset_api::AnalysisRunStatus>,
}

/// The rollout the set's status records.
pub(super) fn rollout_status(set: SetRef<'_>) -> Option<&RolloutStatus> {
    set.status()?.rollout.as_ref()
}

/// `message` without `prefix`, which would repeat what the plugin already says around it.
pub(super) fn without_prefix<'m>(message: &'m str, prefix: &str) -> &'m str {
    message.strip_prefix(prefix).unwrap_or(message)
}

/// "wave 1", "waves 1 and 2", "waves 1, 2 and 3".
pub(super) fn waves_phrase(waves: &[i32]) -> String {
    match waves {
        [] => "no wave".to_string(),
        [one] => format!("wave {one}"),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(i32::to_string).collect();
            format!("waves {} and {last}", init.join(", "))
        }
    }
}

/// Which window holds a `Waiting` rollout: the controller's message, else its reason in words.
pub(super) fn window_phrase(r: &RolloutStatus) -> String {
    match (
        r.message.as_deref().filter(|m| !m.is_empty()),
        r.reason.as_deref(),
    ) {
        (Some(m), _) => m.to_string(),
        (None, Some("OutsideWindow") | None) => "outside every Allow window".to_string(),
        (None, Some(deny)) => format!("Deny window {deny}"),
    }
}

/// The rollout the set's status records, with the spec's settings and the times as of `now`.
pub(super) fn rollout_report(set: SetRef<'_>, known: &Known, now: Timestamp) -> Option<RolloutReport> {
    let r = rollout_status(set)?;
    let spec = set.rollout();
    let stabilization_seconds = spec.map_or(0, |s| s.stabilization_seconds);
    let healthy = r
        .wave_healthy_since
        .as_ref()
        .map(|since| (now.as_second() - since.0.as_second()).max(0));
    let phase = Phase::of(r.phase);
    let left = healthy
        .filter(|_| phase == Phase::Progressing)
        .map(|h| (i64::from(stabilization_seconds) - h).max(0));
    // Only while the rollout is under way: a finished one needs no override.
    let granted = cmset_core::policy::break_glass::granted(set).filter(|_| r.phase.is_under_way());
    Some(RolloutReport {
        object: ObjectName::new(known.kind, &r.revision),
        revision: known.number(&r.revision),
        phase,
        wave: r.wave,
        waves: r.waves.clone(),
        stabilization_seconds,
        auto_rollback: spec.is_some_and(|s| s.auto_rollback),
        strategy: spec.map(|s| s.strategy).filter(|s| *s == Strategy::Immediate),
        started_at: r.started_at.clone(),
        wave_healthy_since: r.wave_healthy_since.clone(),
        wave_healthy_seconds: healthy,
        stabilization_left_seconds: left,
        message: r.message.clone(),
        held_since: r.held_since.clone(),
        held_seconds: r
            .held_since
            .as_ref()
            .map(|since| (now.as_second() - since.0.as_second()).max(0)),
        reason: r.reason.clone(),
        next_window: r.next_window.clone(),
        next_window_seconds: r
            .next_window
            .as_ref()
            .map(|t| (t.0.as_second() - now.as_second()).max(0)),
        window_override: granted.map(|(name, _)| name.to_string()),
        window_override_by: granted.map(|(_, by)| by.to_string()),
        window_override_ignored: set.window_override().is_some(),
        analysis: r.analysis.clone(),
    })
}

/// One line per query of the analysis: wave, template (and workload), verdict, last value against
/// its condition, measurements, and what the last one said.
pub(super) fn analysis_lines(runs: &[cmset_api::AnalysisRunStatus]) -> Vec<(String, Option<Role>)> {
    use cmset_api::AnalysisVerdict;
    runs.iter()
        .map(|run| {
            let role = match run.verdict {
                AnalysisVerdict::Passed => Some(Role::Good),
                AnalysisVerdict::Failed => Some(Role::Bad),
                AnalysisVerdict::Inconclusive => Some(Role::Attention),
                AnalysisVerdict::Running => None,
            };
            let of = match (&run.workload_kind, &run.workload, run.workloads.as_slice()) {
                (Some(kind), Some(name), _) => format!(" of {kind} {name}"),
                // A group of runs measured alike: how many, and the first few.
                (Some(kind), None, names) if names.len() > 1 => {
                    let shown: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
                    let more = if names.len() > 3 { ", …" } else { "" };
                    format!(" of {} {kind}s ({}{more})", names.len(), shown.join(", "))
                }
                _ => String::new(),
            };
            let value = run.last_value.as_deref().unwrap_or("no value yet");
            let mut text = format!(
                "wave {}: {}{of} {}: {value} (wants {}), {} measured, {} failed",
                run.wave,
                run.template,
                run.verdict.as_str(),
                run.condition,
                run.measurements,
                run.failures
            );
            if let Some(message) = &run.message {
                text.push_str(&format!(": {message}"));
            }
            (text, role)
        })
        .collect()
}

/// The rollout's lines of text, each with its role: what stands, then what follows from it. `id`
/// (`configmapset/app`) names the set in the commands suggested.
pub(super) fn rollout_lines(r: &RolloutReport, id: &str) -> Vec<(String, Option<Role>)> {
    let name = r.object.name();
    let revision = match r.revision {
        Some(n) => format!("revision {n} ({name})"),
        None => name.to_string(),
    };
    let mut lines = Vec::new();
    match r.phase {
        Phase::Progressing => {
            let of = if r.waves.is_empty() {
                String::new()
            } else {
                format!(" of {:?}", r.waves)
            };
            lines.push((
                format!("{revision}: wave {}{of} in progress", r.wave),
                Some(Role::Attention),
            ));
            if let (Some(healthy), Some(left)) = (r.wave_healthy_seconds, r.stabilization_left_seconds) {
                let next = match r.waves.iter().find(|&&w| w > r.wave) {
                    Some(next) => format!("wave {next} moves"),
                    None => "the rollout completes".to_string(),
                };
                let when = if left > 0 {
                    format!("{} left", human_duration(left))
                } else {
                    "due now".to_string()
                };
                lines.push((
                    format!(
                        "wave {} healthy for {}; {next} after stabilizationSeconds {} ({when})",
                        r.wave,
                        human_duration(healthy),
                        r.stabilization_seconds
                    ),
                    None,
                ));
            }
        }
        Phase::Checking => {
            lines.push((
                format!("{revision}: checking before wave {} moves", r.wave),
                Some(Role::Attention),
            ));
            // The controller's message lists each check: running, passed, or failed and why.
            if let Some(m) = r.message.as_deref().filter(|m| !m.is_empty()) {
                lines.push((m.to_string(), None));
            }
        }
        Phase::Waiting => {
            let since = r
                .held_seconds
                .map_or(String::new(), |s| format!(" for {}", human_duration(s)));
            lines.push((
                format!(
                    "{revision}: wave {} waiting: held by a change window{since}",
                    r.wave
                ),
                Some(Role::Attention),
            ));
            let why = match (
                r.message.as_deref().filter(|m| !m.is_empty()),
                r.reason.as_deref(),
            ) {
                (Some(m), Some(reason)) => format!("{m} (reason {reason})"),
                (Some(m), None) => m.to_string(),
                (None, Some("OutsideWindow")) => "outside every Allow window (reason OutsideWindow)".into(),
                (None, Some(deny)) => format!("Deny window {deny} is open (reason {deny})"),
                (None, None) => "a change window".to_string(),
            };
            lines.push((format!("held by: {why}"), None));
            // The next window as the controller computed it; `windows` recomputes it live.
            let resume = match (&r.next_window, r.next_window_seconds) {
                (Some(t), Some(s)) if s > 0 => format!("moves resume at {} (in {})", t.0, human_duration(s)),
                (Some(t), _) => format!("moves resume at {} (due now)", t.0),
                (None, _) => "no window opens within 10 years: moves do not resume by themselves".to_string(),
            };
            lines.push((resume, None));
            lines.push((
                format!("to let this rollout through now: kubectl cmset promote --override-window {id}"),
                None,
            ));
        }
        Phase::Paused | Phase::AwaitingPromotion => {
            let (what, how) = if r.phase == Phase::Paused {
                ("paused", "kubectl cmset resume")
            } else {
                ("done; the next wave awaits promotion", "kubectl cmset promote")
            };
            let since = r
                .held_seconds
                .map_or(String::new(), |s| format!(" for {}", human_duration(s)));
            lines.push((
                format!("{revision}: wave {} {what}{since}", r.wave),
                Some(Role::Attention),
            ));
            lines.push((format!("to go on: {how}"), None));
        }
        Phase::Complete => {
            let waves = if r.waves.len() > 1 {
                format!(" in {}", waves_phrase(&r.waves))
            } else {
                String::new()
            };
            lines.push((format!("{revision}: complete{waves}"), Some(Role::Good)));
        }
        Phase::Failed => {
            // The controller's message starts by saying what failed where, as the line does.
            let why = r
                .message
                .as_deref()
                .map(|m| without_prefix(m, &format!("the rollout of {name} failed in wave {}: ", r.wave)))
                .filter(|m| !m.is_empty())
                .map_or(String::new(), |m| format!(": {m}"));
            lines.push((
                format!("{revision}: failed in wave {}{why}", r.wave),
                Some(Role::Bad),
            ));
            let later: Vec<i32> = r.waves.iter().copied().filter(|&w| w > r.wave).collect();
            let mut then = Vec::new();
            if !later.is_empty() {
                then.push(format!("{} will not receive it", waves_phrase(&later)));
            }
            then.push(if r.auto_rollback {
                "failed workloads are moved back to the revision they ran before (autoRollback)".to_string()
            } else {
                "autoRollback is off: failed workloads stay on it".to_string()
            });
            lines.push((then.join("; "), None));
        }
    }
    if let (Some(name), Some(by)) = (&r.window_override, &r.window_override_by) {
        lines.push((
            format!("let through the change windows by WindowOverride {name} (requested by {by})"),
            Some(Role::Attention),
        ));
    }
    if r.window_override_ignored {
        lines.push((
            "the annotation cmset.dev/window-override is ignored: it lets nothing through; break glass with \
             kubectl cmset promote --override-window (a WindowOverride)"
                .to_string(),
            Some(Role::Attention),
        ));
    }
    if r.strategy == Some(Strategy::Immediate) {
        lines.push((
            "strategy: Immediate: every new revision reaches every reader at once; only change windows hold it"
                .to_string(),
            None,
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use cmset_api::{ConfigMapSet, WorkloadState, labels};
    use cmset_core::set::SetRef;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use serde_json::json;

    use super::*;
    use crate::revisions::fixtures::*;
    use crate::revisions::revisions_of;
    use crate::status::fixtures::*;
    use crate::status::{State, render_text, status_report_at};
    use crate::style::Palette;

    #[test]
    fn a_paused_rollout_and_one_awaiting_promotion_say_since_when_and_what_goes_on() {
        let mut set = mid_rollout();
        let rollout = set.status.as_mut().unwrap().rollout.as_mut().unwrap();
        rollout.phase = RolloutPhase::Paused;
        rollout.held_since = Some(ago(90));
        let report = rollout_report_of(&set, &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("Rollout:      revision 4 (app-dddddddddd): wave 0 paused for 90s\n              to go on: kubectl cmset resume\n"),
            "{text}"
        );
        assert!(text.contains("held: the rollout is paused in wave 0"), "{text}");
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["rollout"]["phase"], "paused");
        assert_eq!(value["rollout"]["heldSince"], "2026-01-01T00:08:30Z");
        assert_eq!(value["rollout"]["heldSeconds"], 90);

        let rollout = set.status.as_mut().unwrap().rollout.as_mut().unwrap();
        rollout.phase = RolloutPhase::AwaitingPromotion;
        let report = rollout_report_of(&set, &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("wave 0 done; the next wave awaits promotion for 90s\n              to go on: kubectl cmset promote\n"),
            "{text}"
        );
        assert!(text.contains("waiting: wave 0 must complete"), "{text}");
        assert_eq!(
            serde_json::to_value(&report).unwrap()["rollout"]["phase"],
            "awaitingPromotion"
        );
    }

    #[test]
    fn a_set_mid_rollout() {
        let report = rollout_report_of(&mid_rollout(), &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert_eq!(
            text,
            "\
ConfigMapSet: app (namespace demo)
Current:      revision 4, ConfigMap app-dddddddddd
Ready:        False (RollingOut): revision 4 is rolling out in wave 0
Rollout:      revision 4 (app-dddddddddd): wave 0 of [0, 1, 2] in progress
              wave 0 healthy for 12s; wave 1 moves after stabilizationSeconds 30 (18s left)
Generation:   3, observed 3

WORKLOAD            WAVE   REVISION   CONFIGMAP        WHY
Deployment/api      1      3          app-cccccccccc   waiting: wave 0 must complete and stay healthy first
Deployment/legacy   -      -          app              not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it
Deployment/web      0      4          app-dddddddddd   current (updated by cmset); healthy
StatefulSet/db      2      3          app-cccccccccc   waiting: waves 0 and 1 must complete and stay healthy first
"
        );
        let coloured = render_text(&report, Palette::COLOR);
        assert!(
            coloured
                .contains("\u{1b}[33mrevision 4 (app-dddddddddd): wave 0 of [0, 1, 2] in progress\u{1b}[0m")
        );
        assert!(coloured.contains("\u{1b}[33mwaiting: wave 0 must complete"));

        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(
            value["rollout"],
            json!({
                "configMap": NEW,
                "revision": 4,
                "phase": "progressing",
                "wave": 0,
                "waves": [0, 1, 2],
                "stabilizationSeconds": 30,
                "autoRollback": true,
                "startedAt": "2026-01-01T00:08:00Z",
                "waveHealthySince": "2026-01-01T00:09:48Z",
                "waveHealthySeconds": 12,
                "stabilizationLeftSeconds": 18,
            })
        );
        assert_eq!(
            value["workloads"][0],
            json!({
                "kind": "Deployment",
                "name": "api",
                "optedIn": true,
                "wave": 1,
                "configMap": OLD,
                "revision": 3,
                "state": "waiting",
                "explanation": "waiting: wave 0 must complete and stay healthy first",
            })
        );
        // Not opted in: no wave.
        assert_eq!(value["workloads"][1].get("wave"), None);
        let yaml = crate::output::structured(&report, crate::cli::Output::Yaml)
            .unwrap()
            .unwrap();
        assert!(
            yaml.contains("rollout:\n  configMap: app-dddddddddd\n  revision: 4\n  phase: progressing\n")
        );
        assert!(yaml.contains("  state: waiting\n"), "{yaml}");
    }

    #[test]
    fn the_stabilization_window_of_the_last_wave_and_when_it_is_due() {
        let mut set = mid_rollout();
        let status = set.status.as_mut().unwrap();
        let r = status.rollout.as_mut().unwrap();
        r.wave = 2;
        r.wave_healthy_since = Some(ago(45));
        let report = rollout_report_of(&set, &rollout_workloads(NEW, NEW, NEW));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains(
                "Rollout:      revision 4 (app-dddddddddd): wave 2 of [0, 1, 2] in progress\n              \
                 wave 2 healthy for 45s; the rollout completes after stabilizationSeconds 30 (due now)\n"
            ),
            "{text}"
        );
        assert_eq!(report.rollout.unwrap().stabilization_left_seconds, Some(0));
        // Without spec.rollout, the window is 0 seconds; without a healthy wave, there is no window yet.
        set.spec.rollout = None;
        set.status
            .as_mut()
            .unwrap()
            .rollout
            .as_mut()
            .unwrap()
            .wave_healthy_since = None;
        let report = rollout_report_of(&set, &rollout_workloads(NEW, NEW, NEW));
        let r = report.rollout.as_ref().unwrap();
        assert_eq!(
            (
                r.stabilization_seconds,
                r.auto_rollback,
                r.stabilization_left_seconds
            ),
            (0, false, None)
        );
        let text = render_text(&report, Palette::PLAIN);
        assert!(!text.contains("healthy for"), "{text}");
    }

    #[test]
    fn a_failed_rollout_with_a_rolled_back_workload() {
        let (set, workloads) = failed_rollout(OLD);
        let report = rollout_report_of(&set, &workloads);
        let text = render_text(&report, Palette::PLAIN);
        assert_eq!(
            text,
            "\
ConfigMapSet: app (namespace demo)
Current:      revision 4, ConfigMap app-dddddddddd
Ready:        False (RolloutFailed): the rollout of revision 4 failed in wave 0
Rollout:      revision 4 (app-dddddddddd): failed in wave 0: Deployment web reported ProgressDeadlineExceeded (its Progressing condition)
              waves 1 and 2 will not receive it; failed workloads are moved back to the revision they ran before (autoRollback)
Generation:   3, observed 3

WORKLOAD            WAVE   REVISION   CONFIGMAP        WHY
Deployment/api      1      3          app-cccccccccc   held: the rollout of revision 4 failed in wave 0
Deployment/legacy   -      -          app              not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it
Deployment/web      0      3          app-cccccccccc   rolled back to revision 3 by cmset: it reported ProgressDeadlineExceeded (its Progressing condition)
Deployment/worker   0      4          app-dddddddddd   current (updated by cmset)
StatefulSet/db      2      3          app-cccccccccc   held: the rollout of revision 4 failed in wave 0
"
        );
        let coloured = render_text(&report, Palette::COLOR);
        assert!(coloured.contains("\u{1b}[1m\u{1b}[31mrevision 4 (app-dddddddddd): failed in wave 0"));
        assert!(coloured.contains("\u{1b}[1m\u{1b}[31mrolled back to revision 3 by cmset"));

        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["rollout"]["phase"], "failed");
        assert_eq!(value["rollout"]["wave"], 0);
        assert_eq!(
            value["rollout"]["message"],
            format!(
                "the rollout of {NEW} failed in wave 0: Deployment web reported ProgressDeadlineExceeded (its \
                 Progressing condition)"
            )
        );
        assert_eq!(value["rollout"].get("stabilizationLeftSeconds"), None);
        let web = &value["workloads"][2];
        assert_eq!(
            (&web["name"], &web["state"], &web["wave"], &web["revision"]),
            (&json!("web"), &json!("rolledBack"), &json!(0), &json!(3))
        );
    }

    const HELD_BY: &str = "Deny window spec.rollout.windows[0] (freeze), open until 2026-01-01T06:00:00Z";

    /// Wave 0 is done; a Deny window (`freeze`) holds wave 1 from moving, for 5 minutes now and until
    /// 06:00 (5h50m after [`NOW`]).
    fn held_by_a_window() -> ConfigMapSet {
        let mut r = rollout(RolloutPhase::Waiting, 1, None);
        r.held_since = Some(ago(300));
        r.reason = Some("freeze".into());
        r.message = Some(HELD_BY.into());
        r.next_window = Some(Time("2026-01-01T06:00:00Z".parse().unwrap()));
        let held = format!("held by a change window: {HELD_BY}");
        rollout_set(
            r,
            condition(
                "False",
                "Waiting",
                "revision 4 waits in wave 1 for a change window",
            ),
            vec![
                entry(
                    "Deployment",
                    "web",
                    NEW,
                    WorkloadState::Current,
                    0,
                    Some("healthy"),
                ),
                entry("Deployment", "api", OLD, WorkloadState::Waiting, 1, Some(&held)),
                entry(
                    "StatefulSet",
                    "db",
                    OLD,
                    WorkloadState::Waiting,
                    2,
                    Some("waiting for wave 1 to complete"),
                ),
            ],
        )
    }

    #[test]
    fn a_rollout_held_by_a_change_window_says_which_and_until_when() {
        let report = rollout_report_of(&held_by_a_window(), &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains(
                "\
Rollout:      revision 4 (app-dddddddddd): wave 1 waiting: held by a change window for 5m
              held by: Deny window spec.rollout.windows[0] (freeze), open until 2026-01-01T06:00:00Z (reason freeze)
              moves resume at 2026-01-01T06:00:00Z (in 5h50m)
              to let this rollout through now: kubectl cmset promote --override-window configmapset/app
"
            ),
            "{text}"
        );
        // Its own wave is the one held: the window is why it waits.
        let api = report.workloads.iter().find(|w| w.name == "api").unwrap();
        assert_eq!(api.state, State::Waiting);
        assert_eq!(api.explanation, format!("held by a change window: {HELD_BY}"));
        let db = report.workloads.iter().find(|w| w.name == "db").unwrap();
        assert_eq!(
            db.explanation,
            "waiting: wave 1 must complete and stay healthy first"
        );
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["rollout"]["phase"], "waiting");
        assert_eq!(value["rollout"]["reason"], "freeze");
        assert_eq!(value["rollout"]["nextWindow"], "2026-01-01T06:00:00Z");
        assert_eq!(value["rollout"]["nextWindowSeconds"], 5 * 3600 + 50 * 60);
        assert_eq!(value["rollout"]["heldSeconds"], 300);
        assert_eq!(value["rollout"].get("windowOverrideBy"), None);
    }

    #[test]
    fn a_window_that_never_opens_and_one_outside_every_allow() {
        let mut set = held_by_a_window();
        let r = set.status.as_mut().unwrap().rollout.as_mut().unwrap();
        r.message = None;
        r.reason = Some("OutsideWindow".into());
        r.next_window = None;
        r.held_since = None;
        let report = rollout_report_of(&set, &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains(
                "\
Rollout:      revision 4 (app-dddddddddd): wave 1 waiting: held by a change window
              held by: outside every Allow window (reason OutsideWindow)
              no window opens within 10 years: moves do not resume by themselves
"
            ),
            "{text}"
        );
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["rollout"].get("nextWindow"), None);
    }

    #[test]
    fn an_override_in_force_and_the_immediate_strategy_are_said() {
        let mut set = held_by_a_window();
        set.metadata.annotations = Some(
            [
                (labels::WINDOW_OVERRIDE, format!("{NEW}@2026-01-01T00:08:00Z")),
                (labels::WINDOW_OVERRIDE_BY, "ana 2026-01-01T00:09:00Z".to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        );
        let r = set.status.as_mut().unwrap().rollout.as_mut().unwrap();
        r.phase = RolloutPhase::Progressing;
        r.reason = None;
        r.message = None;
        r.next_window = None;
        r.held_since = None;
        // The old annotation is said to be ignored, and names no one.
        let report = rollout_report_of(&set, &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("the annotation cmset.dev/window-override is ignored: it lets nothing through"),
            "{text}"
        );
        assert!(!text.contains("by ana"), "{text}");
        // A WindowOverride let it through, as the controller recorded: the override and who are shown.
        set.metadata.annotations = None;
        let granted = |by: Option<&str>| Condition {
            type_: "WindowOverride".into(),
            status: "True".into(),
            reason: "Granted".into(),
            message: cmset_core::policy::break_glass::granted_message(
                &cmset_core::policy::break_glass::OverrideView {
                    name: "app-break".into(),
                    set_kind: cmset_core::set::SetKind::ConfigMapSet,
                    set_name: "app".into(),
                    set_uid: "set-uid".into(),
                    revision: NEW.into(),
                    started_at: "2026-01-01T00:08:00Z".parse().unwrap(),
                    requested_by: by.map(str::to_string),
                },
            ),
            observed_generation: None,
            last_transition_time: Time("2026-01-01T00:09:01Z".parse().unwrap()),
        };
        set.status.as_mut().unwrap().conditions.push(granted(Some("ana")));
        let report = rollout_report_of(&set, &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains(
                "              let through the change windows by WindowOverride app-break (requested by ana)\n"
            ),
            "{text}"
        );
        assert!(!text.contains("is ignored"), "{text}");
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["rollout"]["windowOverride"], "app-break");
        assert_eq!(value["rollout"]["windowOverrideBy"], "ana");
        // Created while the webhook did not answer: "not recorded".
        let conditions = &mut set.status.as_mut().unwrap().conditions;
        conditions.pop();
        conditions.push(granted(None));
        let report = rollout_report_of(&set, &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("by WindowOverride app-break (requested by not recorded)"),
            "{text}"
        );

        let mut set = mid_rollout();
        set.spec.rollout.as_mut().unwrap().strategy = Strategy::Immediate;
        let report = rollout_report_of(&set, &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("              strategy: Immediate: every new revision reaches every reader at once; only change windows hold it\n"),
            "{text}"
        );
        assert_eq!(
            serde_json::to_value(&report).unwrap()["rollout"]["strategy"],
            "Immediate"
        );
        // Waves, the default, is not said.
        let report = rollout_report_of(&mid_rollout(), &rollout_workloads(NEW, OLD, OLD));
        assert_eq!(
            serde_json::to_value(&report).unwrap()["rollout"].get("strategy"),
            None
        );
    }

    #[test]
    fn a_complete_rollout() {
        let set = rollout_set(
            rollout(RolloutPhase::Complete, 2, None),
            condition(
                "True",
                "RolledOut",
                "every opted-in workload runs revision 4 or is pinned",
            ),
            vec![
                entry("Deployment", "web", NEW, WorkloadState::Current, 0, None),
                entry("Deployment", "api", NEW, WorkloadState::Current, 1, None),
                entry("StatefulSet", "db", NEW, WorkloadState::Current, 2, None),
            ],
        );
        let report = rollout_report_of(&set, &rollout_workloads(NEW, NEW, NEW));
        assert_eq!(
            render_text(&report, Palette::PLAIN),
            "\
ConfigMapSet: app (namespace demo)
Current:      revision 4, ConfigMap app-dddddddddd
Ready:        True (RolledOut): every opted-in workload runs revision 4 or is pinned
Rollout:      revision 4 (app-dddddddddd): complete in waves 0, 1 and 2
Generation:   3, observed 3

WORKLOAD            WAVE   REVISION   CONFIGMAP        WHY
Deployment/api      1      4          app-dddddddddd   current (updated by cmset)
Deployment/legacy   -      -          app              not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it
Deployment/web      0      4          app-dddddddddd   current (updated by cmset)
StatefulSet/db      2      4          app-dddddddddd   current (updated by cmset)
"
        );
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["rollout"]["phase"], "complete");
        assert_eq!(value["rollout"].get("waveHealthySince"), None);
        let coloured = render_text(&report, Palette::COLOR);
        assert!(coloured.contains("\u{1b}[32mrevision 4 (app-dddddddddd): complete in waves 0, 1 and 2"));
    }

    #[test]
    fn a_set_without_waves_prints_as_before() {
        // An explicit wave 0 is no wave at all: no rollout line, no WAVE column, no `wave` or `rollout`
        // in JSON, and the same output at any time.
        let mut set = ready_set(vec![
            workload("Deployment", "web", "app-cccccccccc", WorkloadState::Current),
            workload("StatefulSet", "db", "app-ffffffffff", WorkloadState::Pinned),
        ]);
        let mut db = waved(sts(deployment("db", Some("true"), &["app-ffffffffff"])), "0");
        db.uid = "db-uid".into();
        let workloads = [
            db,
            waved(deployment("web", Some("true"), &["app-cccccccccc"]), "0"),
            deployment("legacy", None, &["app"]),
        ];
        let cms = cms();
        let report = |set: &ConfigMapSet| {
            let set = SetRef::from(set);
            status_report_at(set, &revisions_of(set, &cms), &workloads, now())
        };
        let before = "\
ConfigMapSet: app (namespace demo)
Current:      revision 3, ConfigMap app-cccccccccc
Ready:        True (RolledOut): every opted-in workload runs revision 3 or is pinned
Generation:   3, observed 3

WORKLOAD            REVISION   CONFIGMAP        WHY
Deployment/legacy   -          app              not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it
Deployment/web      3          app-cccccccccc   current (updated by cmset)
StatefulSet/db      1          app-ffffffffff   pinned to revision 1 by a rollback; moves again when the set's content changes
";
        let r = report(&set);
        assert_eq!(render_text(&r, Palette::PLAIN), before);
        let json = serde_json::to_string(&r).unwrap();
        assert!(!json.contains("wave") && !json.contains("rollout"), "{json}");
        assert_eq!(r, full_report());
        // A spec.rollout alone changes nothing until the status records a rollout.
        set.spec.rollout = Some(Default::default());
        assert_eq!(render_text(&report(&set), Palette::PLAIN), before);
        // A workload in a later wave shows the column, even before a rollout is recorded.
        set.spec.rollout = None;
        let mut workloads = workloads.clone();
        workloads[1] = waved(deployment("web", Some("true"), &["app-cccccccccc"]), "3");
        let set = SetRef::from(&set);
        let r = status_report_at(set, &revisions_of(set, &cms), &workloads, now());
        let text = render_text(&r, Palette::PLAIN);
        assert!(
            text.contains("\nWORKLOAD            WAVE   REVISION   CONFIGMAP        WHY\n"),
            "{text}"
        );
        assert!(
            text.contains("\nDeployment/web      3      3          app-cccccccccc   current"),
            "{text}"
        );
        assert!(text.contains("\nStatefulSet/db      0      1 "), "{text}");
        assert!(text.contains("\nDeployment/legacy   -      - "), "{text}");
    }

    #[test]
    fn a_secret_set_s_rollout_shows_no_secret_value() {
        let set = mid_rollout();
        let mut s = secret_set(None, None, vec![]);
        s.spec.rollout = set.spec.rollout;
        s.status = set.status;
        let mut secrets = secrets();
        secrets.push(secret_revision(
            NEW,
            Some(4),
            T,
            None,
            &[("password", SECRET_TEXT)],
        ));
        let workloads = [
            secret_deployment("web", true, "envFrom", NEW),
            waved(secret_deployment("api", true, "volume", OLD), "1"),
            waved(secret_deployment("db", true, "secretKeyRef", OLD), "2"),
        ];
        let set = SetRef::from(&s);
        let report = status_report_at(set, &revisions_of(set, &secrets), &workloads, now());
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("Rollout:      revision 4 (app-dddddddddd): wave 0 of [0, 1, 2] in progress\n"),
            "{text}"
        );
        assert!(
            text.contains("\nWORKLOAD         WAVE   REVISION   SECRET           WHY\n"),
            "{text}"
        );
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["rollout"]["secret"], NEW);
        let yaml = crate::output::structured(&report, crate::cli::Output::Yaml)
            .unwrap()
            .unwrap();
        for out in [text, value.to_string(), yaml] {
            assert!(!out.contains("configMap") && !out.contains("ConfigMap "), "{out}");
            assert_no_secret_values(&out);
        }
    }

    #[test]
    fn each_analysis_query_shows_its_value_condition_and_verdict() {
        use cmset_api::{AnalysisRunStatus, AnalysisVerdict};
        let runs = [
            AnalysisRunStatus {
                template: "error-rate".into(),
                wave: 0,
                query: "q".into(),
                condition: "result < 0.05".into(),
                last_value: Some("0.01".into()),
                verdict: AnalysisVerdict::Passed,
                measurements: 3,
                ..AnalysisRunStatus::default()
            },
            AnalysisRunStatus {
                template: "latency".into(),
                workload_kind: Some("Deployment".into()),
                workload: Some("web".into()),
                wave: 1,
                condition: "result <= 0.3".into(),
                verdict: AnalysisVerdict::Inconclusive,
                measurements: 1,
                message: Some("no data".into()),
                ..AnalysisRunStatus::default()
            },
        ];
        let lines = analysis_lines(&runs);
        assert_eq!(
            lines[0],
            (
                "wave 0: error-rate Passed: 0.01 (wants result < 0.05), 3 measured, 0 failed".to_string(),
                Some(Role::Good)
            )
        );
        assert_eq!(
            lines[1].0,
            "wave 1: latency of Deployment web Inconclusive: no value yet (wants result <= 0.3), 1 measured, 0 failed: no data"
        );
        assert_eq!(lines[1].1, Some(Role::Attention));

        let group = AnalysisRunStatus {
            template: "restarts".into(),
            workload_kind: Some("Deployment".into()),
            workloads: (0..2_487).map(|n| format!("reader-{n:04}")).collect(),
            wave: 1,
            condition: "result == 0".into(),
            last_value: Some("0".into()),
            verdict: AnalysisVerdict::Running,
            measurements: 1,
            ..AnalysisRunStatus::default()
        };
        assert_eq!(
            analysis_lines(&[group])[0].0,
            "wave 1: restarts of 2487 Deployments (reader-0000, reader-0001, reader-0002, …) Running: 0 \
             (wants result == 0), 1 measured, 0 failed"
        );
    }
}
