//! `kubectl cmset windows`: the change windows that apply to a set (its own, `spec.rollout.windows`,
//! and those of the cluster's `ChangeWindow`s that select it), whether each is open, when each next
//! opens, and the verdict now. The verdict is cmset's own ([`cmset_core::policy::windows::evaluate`]), asked
//! from the same windows as the controller asks it, so the two cannot disagree; what the controller
//! last recorded is in `kubectl cmset status`. It lists the set's break-glass WindowOverrides too:
//! which rollout each lets through, who created it (as cmset's webhook recorded it), when, and whether
//! it was used.

use cmset_api::{ChangeWindow, RolloutWindow, Strategy, WindowKind, WindowOverride};
use cmset_core::policy::break_glass::{OverrideView, used_override};
use cmset_core::policy::windows::{Verdict, Window, WindowSource, evaluate};
use cmset_core::rollout::window_hold::cluster_windows_for;
use cmset_core::set::{SetKind, SetRef};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;

use crate::address::resource;
use crate::age::relative;
use crate::revisions::serialize_kind;
use crate::style::{Palette, Role, visible};
use crate::table::{Cell, render};

/// How far ahead cmset looks for a window's next opening: said when none is found.
const NEVER: &str = "never within 10 years";

/// One window that applies to the set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowRow {
    /// `set` for the set's own windows, else the name of the ChangeWindow.
    pub source: String,
    /// Where it is written: `spec.rollout.windows[1]` of the set, `spec.windows[0]` of the ChangeWindow.
    pub field: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub kind: WindowKind,
    pub schedule: String,
    pub duration: String,
    pub time_zone: String,
    /// Open now.
    pub open: bool,
    /// While open: when this opening ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_until: Option<Time>,
    /// When it next opens (after now); absent when it does not within 10 years.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_opening: Option<Time>,
    /// Why cmset cannot read it (a set's window written before the webhook checked them): then none of
    /// the set's own windows count, as the controller counts them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// What the windows say now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerdictReport {
    /// Whether a workload may move to a new revision now (an override counts).
    pub moves_allowed: bool,
    /// While moves are allowed: when the windows may next hold them; absent when not within 10 years.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<Time>,
    /// While held: `OutsideWindow`, or the name of the Deny window that holds (what
    /// `status.rollout.reason` says).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// While held: which windows hold, for people.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// While held: when moves resume; absent when not within 10 years.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_at: Option<Time>,
    /// The rollout under way is let through by a WindowOverride (`kubectl cmset promote
    /// --override-window`): who created it, as cmset's webhook recorded it, or "not recorded".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overridden_by: Option<String>,
    /// The verdict in a sentence.
    pub summary: String,
}

/// Everything `windows` reports, as serialized for `-o json|yaml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowsReport {
    #[serde(serialize_with = "serialize_kind")]
    pub kind: SetKind,
    pub set: String,
    pub namespace: String,
    /// `Immediate` sets are held too, by the ChangeWindows that do not exempt the strategy.
    pub strategy: Strategy,
    /// The instant the windows were evaluated at.
    pub now: Time,
    /// The set's own windows first, then the ChangeWindows'.
    pub windows: Vec<WindowRow>,
    /// Why the cluster's ChangeWindows are not among them (their API is not installed, or the user
    /// may not list them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_windows_unlisted: Option<String>,
    /// Why the operator cannot see the cluster's ChangeWindows, as the set's condition
    /// `ChangeWindowsKnown` says: then it holds every move of the set, whatever these windows say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator_cannot_see: Option<String>,
    pub verdict: VerdictReport,
    /// The set's WindowOverrides (break glass), by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<OverrideRow>,
    /// Why the WindowOverrides are not listed (their API is not installed, or the user may not list
    /// them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overrides_unlisted: Option<String>,
}

/// One WindowOverride of the set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OverrideRow {
    pub name: String,
    /// The rollout it lets through: `<revision>@<startedAt>`.
    pub rollout: String,
    /// Who created it, as cmset's webhook recorded it, or "not recorded".
    pub requested_by: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<Time>,
    /// `used` (the controller let the rollout through by it), `unused` (it names the rollout under way,
    /// and the controller has not needed it yet), `expired` (it names an earlier rollout) or `void` (it
    /// names an earlier set of the same name: another uid).
    pub state: String,
}

fn row(w: &Window, now: Timestamp) -> WindowRow {
    let (source, field) = match &w.source {
        WindowSource::Set => ("set".to_string(), format!("spec.rollout.windows[{}]", w.index)),
        WindowSource::Cluster { name } => (name.clone(), format!("spec.windows[{}]", w.index)),
    };
    let open_until = w.open_at(now);
    WindowRow {
        source,
        field,
        name: w.name.clone(),
        kind: w.kind,
        schedule: w.schedule.clone(),
        duration: w.duration.clone(),
        time_zone: w.time_zone.clone(),
        open: open_until.is_some(),
        open_until: open_until.map(Time),
        next_opening: w.next_opening_after(now).map(Time),
        problem: None,
    }
}

/// A window of the set's that does not parse, shown as written.
fn invalid_row(w: &RolloutWindow, field: String, problem: String) -> WindowRow {
    WindowRow {
        source: "set".to_string(),
        field,
        name: w.name.clone(),
        kind: w.kind,
        schedule: w.schedule.clone(),
        duration: w.duration.clone(),
        time_zone: w.time_zone.clone().unwrap_or_else(|| "UTC".to_string()),
        open: false,
        open_until: None,
        next_opening: None,
        problem: Some(problem),
    }
}

/// The windows of `set` and of `change_windows` (or why those could not be listed) that apply to it,
/// evaluated at `now`.
pub fn windows_report(
    set: SetRef<'_>,
    change_windows: Result<&[ChangeWindow], &str>,
    now: Timestamp,
) -> WindowsReport {
    windows_report_with_overrides(set, change_windows, Ok(&[]), now)
}

/// [`windows_report`], with the namespace's WindowOverrides (or why they could not be listed).
pub fn windows_report_with_overrides(
    set: SetRef<'_>,
    change_windows: Result<&[ChangeWindow], &str>,
    overrides: Result<&[WindowOverride], &str>,
    now: Timestamp,
) -> WindowsReport {
    let (views, overrides_unlisted) = match overrides {
        Ok(listed) => (
            listed
                .iter()
                .filter_map(|o| OverrideView::of(o).map(|v| (v, o)))
                .filter(|(v, _)| v.set_kind == set.kind() && v.set_name == set.name())
                .collect::<Vec<_>>(),
            None,
        ),
        Err(why) => (Vec::new(), Some(why.to_string())),
    };
    let grants: Vec<OverrideView> = views.iter().map(|(v, _)| v.clone()).collect();
    let listed_overrides = override_rows(set, &views);
    let own = set.rollout().map(|r| r.windows.as_slice()).unwrap_or_default();
    let mut rows = Vec::new();
    let mut counted = Vec::new();
    let mut own_invalid = false;
    for (index, w) in own.iter().enumerate() {
        let field = format!("spec.rollout.windows[{index}]");
        match Window::parse(w, WindowSource::Set, index, &field) {
            Ok(parsed) => {
                rows.push(row(&parsed, now));
                counted.push(parsed);
            }
            Err(problem) => {
                own_invalid = true;
                rows.push(invalid_row(w, field, problem.to_string()));
            }
        }
    }
    // As the controller counts them: one bad window of the set's and none of its own count.
    if own_invalid {
        counted.clear();
    }
    let (cluster, unlisted) = match change_windows {
        Ok(listed) => (cluster_windows_for(set, listed), None),
        Err(why) => (Vec::new(), Some(why.to_string())),
    };
    rows.extend(cluster.iter().map(|w| row(w, now)));
    counted.extend(cluster);
    let operator_cannot_see = operator_cannot_see(set);
    let mut verdict = verdict(set, &counted, own_invalid, &grants, now);
    if let Some(why) = &operator_cannot_see {
        // The operator fails closed: only an override of the rollout under way goes through.
        verdict.moves_allowed = verdict.overridden_by.is_some();
        verdict.summary.push_str(&format!("; but the operator {why}"));
    }
    WindowsReport {
        kind: set.kind(),
        set: set.name().to_string(),
        namespace: set.metadata().namespace.clone().unwrap_or_default(),
        strategy: set.rollout().map_or(Strategy::Waves, |r| r.strategy),
        now: Time(now),
        windows: rows,
        change_windows_unlisted: unlisted,
        operator_cannot_see,
        verdict,
        overrides: listed_overrides,
        overrides_unlisted,
    }
}

/// The rows of the set's overrides: what each names, who and when, and whether it was used.
fn override_rows(set: SetRef<'_>, views: &[(OverrideView, &WindowOverride)]) -> Vec<OverrideRow> {
    let rollout = set.status().and_then(|s| s.rollout.as_ref());
    // The override the controller says it let the current rollout through by.
    let used = set
        .status()
        .and_then(|s| s.condition(cmset_core::policy::break_glass::CONDITION))
        .filter(|c| c.status == "True")
        .and_then(|c| used_override(&c.message).map(str::to_string));
    let mut rows: Vec<OverrideRow> = views
        .iter()
        .map(|(view, object)| {
            let state = if !view.is_for(set) {
                "void"
            } else if used.as_deref() == Some(view.name.as_str()) {
                "used"
            } else if rollout.is_some_and(|r| view.names(r)) {
                "unused"
            } else {
                "expired"
            };
            OverrideRow {
                name: view.name.clone(),
                rollout: view.rollout(),
                requested_by: view.by().to_string(),
                created: object.metadata.creation_timestamp.clone(),
                state: state.to_string(),
            }
        })
        .collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}

/// What the set's condition `ChangeWindowsKnown` says when the operator cannot see the cluster's
/// ChangeWindows (this report lists them with the user's credentials, which may see more).
fn operator_cannot_see(set: SetRef<'_>) -> Option<String> {
    let condition = set
        .status()?
        .condition(cmset_core::status::conditions::WINDOWS_KNOWN)?;
    (condition.status == "False").then(|| {
        format!(
            "cannot see the cluster's ChangeWindows ({}: {}) and holds every move of this set",
            condition.reason, condition.message
        )
    })
}

fn verdict(
    set: SetRef<'_>,
    windows: &[Window],
    own_invalid: bool,
    overrides: &[OverrideView],
    now: Timestamp,
) -> VerdictReport {
    let at = |t: Timestamp| format!("{t} ({})", relative(t, now));
    let mut report = VerdictReport {
        moves_allowed: true,
        until: None,
        reason: None,
        held_by: None,
        resume_at: None,
        overridden_by: None,
        summary: String::new(),
    };
    // An override names one rollout of this very set: it counts only while that rollout is under way.
    let judged = cmset_core::policy::break_glass::judge(set, overrides);
    let under_way = set
        .status()
        .and_then(|s| s.rollout.as_ref())
        .filter(|r| r.phase.is_under_way());
    let grant = under_way.and_then(|r| judged.for_rollout(r));
    let overriding = under_way.filter(|_| grant.is_some());
    report.overridden_by = grant.map(|g| g.by().to_string());
    let ignored = judged.legacy_annotation;
    report.summary = match evaluate(windows, now) {
        Verdict::Open { .. } if windows.is_empty() => "moves allowed: no change window applies".to_string(),
        Verdict::Open { until } => {
            report.until = until.map(Time);
            match until {
                Some(until) => format!("moves allowed until {}", at(until)),
                None => "moves allowed, and not held within 10 years".to_string(),
            }
        }
        Verdict::Held { reason, by, opens_at } => {
            let resume = match opens_at {
                Some(t) => format!("moves resume at {}", at(t)),
                None => "moves do not resume within 10 years".to_string(),
            };
            let mut summary = format!("held by {by}; {resume}");
            if let (Some(who), Some(r)) = (&report.overridden_by, overriding) {
                let name = grant.map(|g| g.name.as_str()).unwrap_or_default();
                summary.push_str(&format!(
                    "; but the rollout of {} is let through by WindowOverride {name} (requested by {who})",
                    r.revision
                ));
            }
            if ignored {
                summary.push_str(
                    "; the annotation cmset.dev/window-override is ignored and lets nothing through: break \
                     glass with kubectl cmset promote --override-window",
                );
            }
            report.moves_allowed = overriding.is_some();
            report.reason = Some(reason);
            report.held_by = Some(by);
            report.resume_at = opens_at.map(Time);
            summary
        }
    };
    if own_invalid {
        report
            .summary
            .push_str("; the set's own windows are invalid and none of them counts (see PROBLEM)");
    }
    report
}

/// The report as text: a table of the windows, then the verdict, then why the cluster's windows are
/// missing, if they are.
pub fn render_text(report: &WindowsReport, palette: Palette) -> String {
    let now = report.now.0;
    let id = format!("{}/{}", resource(report.kind), report.set);
    let mut out = String::new();
    if report.windows.is_empty() {
        out.push_str(&format!("No change window applies to {}.\n", visible(&id)));
    } else {
        let rows: Vec<Vec<Cell>> = report
            .windows
            .iter()
            .map(|w| {
                let (state, role) = match (&w.problem, &w.open_until) {
                    (Some(problem), _) => (format!("invalid: {problem}"), Some(Role::Bad)),
                    (None, Some(until)) => {
                        // An open Deny holds; an open Allow lets moves happen.
                        let role = match w.kind {
                            WindowKind::Deny => Role::Attention,
                            WindowKind::Allow => Role::Good,
                        };
                        (
                            format!("open until {} ({})", until.0, relative(until.0, now)),
                            Some(role),
                        )
                    }
                    (None, None) if w.open => ("open".to_string(), None),
                    (None, None) => ("closed".to_string(), None),
                };
                let next = match (&w.problem, &w.next_opening) {
                    (Some(_), _) => "-".to_string(),
                    (None, Some(t)) => format!("{} ({})", t.0, relative(t.0, now)),
                    (None, None) => NEVER.to_string(),
                };
                vec![
                    Cell::new(w.source.as_str()),
                    Cell::new(w.name.as_deref().unwrap_or("-")),
                    Cell::new(w.kind.as_str()),
                    Cell::new(w.schedule.as_str()),
                    Cell::new(w.duration.as_str()),
                    Cell::new(w.time_zone.as_str()),
                    Cell::styled(state, role),
                    Cell::new(next),
                ]
            })
            .collect();
        let headers = [
            "SOURCE",
            "NAME",
            "KIND",
            "SCHEDULE",
            "DURATION",
            "TIME ZONE",
            "STATE",
            "NEXT OPENING",
        ];
        out.push_str(&render(&headers, &rows, palette));
        out.push('\n');
    }
    let role = if report.verdict.moves_allowed {
        Role::Good
    } else {
        Role::Attention
    };
    out.push_str(&palette.paint(Some(role), &visible(&report.verdict.summary)));
    out.push('\n');
    if let Some(why) = &report.change_windows_unlisted {
        out.push_str(&format!("note: {}\n", visible(why)));
    }
    if !report.overrides.is_empty() {
        let rows: Vec<Vec<Cell>> = report
            .overrides
            .iter()
            .map(|o| {
                let role = match o.state.as_str() {
                    "used" | "unused" => Some(Role::Attention),
                    _ => None,
                };
                vec![
                    Cell::new(o.name.as_str()),
                    Cell::new(o.rollout.as_str()),
                    Cell::new(o.requested_by.as_str()),
                    Cell::new(
                        o.created
                            .as_ref()
                            .map_or("-".to_string(), |t| format!("{} ({})", t.0, relative(t.0, now))),
                    ),
                    Cell::styled(o.state.clone(), role),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&render(
            &["WINDOW OVERRIDE", "ROLLOUT", "REQUESTED BY", "CREATED", "STATE"],
            &rows,
            palette,
        ));
    }
    if let Some(why) = &report.overrides_unlisted {
        out.push_str(&format!("note: {}\n", visible(why)));
    }
    out
}

#[cfg(test)]
mod tests {
    use cmset_api::{ChangeWindowSpec, ConfigMapSet, RolloutPhase, RolloutSpec, RolloutStatus, labels};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use serde_json::json;

    use super::*;
    use crate::revisions::fixtures::set;

    /// Friday 2026-11-27, 17:30 UTC (18:30 in Berlin).
    const NOW: &str = "2026-11-27T17:30:00Z";

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    fn window(
        name: Option<&str>,
        kind: WindowKind,
        schedule: &str,
        duration: &str,
        zone: Option<&str>,
    ) -> RolloutWindow {
        RolloutWindow {
            name: name.map(str::to_string),
            kind,
            schedule: schedule.into(),
            duration: duration.into(),
            time_zone: zone.map(str::to_string),
        }
    }

    /// The Friday-evening freeze (Berlin) and business hours (UTC) of the set's own.
    fn with_windows(strategy: Strategy) -> ConfigMapSet {
        let mut s = set(Some("app-2222222222"), Some(2), Vec::new());
        s.spec.rollout = Some(RolloutSpec {
            windows: vec![
                window(
                    Some("freeze"),
                    WindowKind::Deny,
                    "0 18 * * 5",
                    "63h",
                    Some("Europe/Berlin"),
                ),
                window(
                    Some("business-hours"),
                    WindowKind::Allow,
                    "0 8 * * 1-5",
                    "10h",
                    None,
                ),
            ],
            strategy,
            ..Default::default()
        });
        s
    }

    fn change_window(name: &str, namespaces: &[&str], windows: Vec<RolloutWindow>) -> ChangeWindow {
        ChangeWindow::new(
            name,
            ChangeWindowSpec {
                namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
                selector: None,
                windows,
                exempt_strategies: Vec::new(),
            },
        )
    }

    /// Christmas in New York, for every namespace; and one for another namespace only.
    fn cluster() -> Vec<ChangeWindow> {
        vec![
            change_window(
                "holidays",
                &[],
                vec![window(
                    None,
                    WindowKind::Deny,
                    "0 0 24 12 *",
                    "48h",
                    Some("America/New_York"),
                )],
            ),
            change_window(
                "other-team",
                &["other-*"],
                vec![window(None, WindowKind::Deny, "* * * * *", "1h", None)],
            ),
        ]
    }

    /// Source, field, open, open until, next opening.
    type Seen<'a> = (&'a str, &'a str, bool, Option<String>, Option<String>);

    #[test]
    fn rows_of_the_set_and_of_the_cluster_at_a_fixed_instant() {
        let s = with_windows(Strategy::Waves);
        let listed = cluster();
        let report = windows_report((&s).into(), Ok(&listed), now());
        let rows: Vec<_> = report
            .windows
            .iter()
            .map(|w| -> Seen<'_> {
                (
                    w.source.as_str(),
                    w.field.as_str(),
                    w.open,
                    w.open_until.as_ref().map(|t| t.0.to_string()),
                    w.next_opening.as_ref().map(|t| t.0.to_string()),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                // Friday 18:00 in Berlin is 17:00 UTC (CET): open for 63 hours, until Monday 08:00 UTC.
                (
                    "set",
                    "spec.rollout.windows[0]",
                    true,
                    Some("2026-11-30T08:00:00Z".into()),
                    Some("2026-12-04T17:00:00Z".into())
                ),
                (
                    "set",
                    "spec.rollout.windows[1]",
                    true,
                    Some("2026-11-27T18:00:00Z".into()),
                    Some("2026-11-30T08:00:00Z".into())
                ),
                // Midnight in New York is 05:00 UTC (EST); the other team's window is not this set's.
                (
                    "holidays",
                    "spec.windows[0]",
                    false,
                    None,
                    Some("2026-12-24T05:00:00Z".into())
                ),
            ]
        );
        let v = &report.verdict;
        assert!(!v.moves_allowed);
        assert_eq!(v.reason.as_deref(), Some("freeze"));
        assert_eq!(
            v.resume_at.as_ref().map(|t| t.0.to_string()).as_deref(),
            Some("2026-11-30T08:00:00Z")
        );
        assert!(v.held_by.as_deref().unwrap().contains("freeze"), "{v:?}");

        let text = render_text(&report, Palette::PLAIN);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            [
                "SOURCE", "NAME", "KIND", "SCHEDULE", "DURATION", "TIME", "ZONE", "STATE", "NEXT", "OPENING"
            ]
        );
        assert!(
            lines[1].starts_with(
                "set        freeze           Deny    0 18 * * 5    63h        Europe/Berlin      "
            ),
            "{text}"
        );
        assert!(
            lines[1]
                .ends_with("open until 2026-11-30T08:00:00Z (in 2d14h)   2026-12-04T17:00:00Z (in 6d23h)"),
            "{text}"
        );
        assert!(
            lines[3].starts_with("holidays   -                Deny    0 0 24 12 *"),
            "{text}"
        );
        assert!(
            lines[3].ends_with("closed                                       2026-12-24T05:00:00Z (in 26d)"),
            "{text}"
        );
        assert_eq!(lines[4], "");
        assert!(lines[5].starts_with("held by "), "{text}");
        assert!(
            lines[5].ends_with("; moves resume at 2026-11-30T08:00:00Z (in 2d14h)"),
            "{text}"
        );
        assert_eq!(lines.len(), 6, "{text}");
    }

    fn window_override(name: &str, uid: &str, started: &str, by: Option<&str>) -> WindowOverride {
        let mut o = WindowOverride::new(
            name,
            cmset_api::WindowOverrideSpec {
                set: cmset_api::OverriddenSet {
                    kind: cmset_api::OverriddenKind::ConfigMapSet,
                    name: "app".into(),
                    uid: uid.into(),
                },
                rollout: cmset_api::OverriddenRollout {
                    revision: "app-2222222222".into(),
                    started_at: Time(started.parse().unwrap()),
                },
                reason: None,
                requested_by: by.map(str::to_string),
            },
        );
        o.metadata.creation_timestamp = Some(Time("2026-11-27T17:20:00Z".parse().unwrap()));
        o
    }

    #[test]
    fn an_override_of_the_rollout_under_way_lets_it_through() {
        let mut s = with_windows(Strategy::Waves);
        s.metadata.uid = Some("set-uid".into());
        let started = "2026-11-27T17:00:00Z";
        s.status.as_mut().unwrap().rollout = Some(RolloutStatus {
            revision: "app-2222222222".into(),
            phase: RolloutPhase::Progressing,
            started_at: Some(Time(started.parse().unwrap())),
            ..Default::default()
        });
        // The old annotation: ignored, and said so.
        s.metadata.annotations = Some(
            [(labels::WINDOW_OVERRIDE, format!("app-2222222222@{started}"))]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        );
        let report = windows_report((&s).into(), Ok(&[]), now());
        assert!(!report.verdict.moves_allowed);
        assert_eq!(report.verdict.overridden_by, None);
        assert!(
            report.verdict.summary.ends_with(
                "; the annotation cmset.dev/window-override is ignored and lets nothing through: break glass \
                 with kubectl cmset promote --override-window"
            ),
            "{}",
            report.verdict.summary
        );
        s.metadata.annotations = None;
        let overrides = [
            window_override("app-break", "set-uid", started, Some("ana")),
            window_override("app-earlier", "set-uid", "2026-11-20T10:00:00Z", Some("bo")),
            window_override("app-void", "an-earlier-uid", started, None),
        ];
        let report = windows_report_with_overrides((&s).into(), Ok(&[]), Ok(&overrides), now());
        assert!(report.verdict.moves_allowed);
        assert_eq!(report.verdict.overridden_by.as_deref(), Some("ana"));
        assert!(
            report.verdict.summary.ends_with(
                "; but the rollout of app-2222222222 is let through by WindowOverride app-break (requested by ana)"
            ),
            "{}",
            report.verdict.summary
        );
        let states: Vec<(&str, &str, &str)> = report
            .overrides
            .iter()
            .map(|o| (o.name.as_str(), o.requested_by.as_str(), o.state.as_str()))
            .collect();
        assert_eq!(
            states,
            vec![
                ("app-break", "ana", "unused"),
                ("app-earlier", "bo", "expired"),
                ("app-void", "not recorded", "void"),
            ]
        );
        // Used, as the controller's condition says.
        s.status.as_mut().unwrap().conditions.push(Condition {
            type_: "WindowOverride".into(),
            status: "True".into(),
            reason: "Granted".into(),
            message: format!(
                "WindowOverride app-break lets the rollout app-2222222222@{started} through the change windows \
                 (requested by ana)"
            ),
            observed_generation: None,
            last_transition_time: Time(started.parse().unwrap()),
        });
        let report = windows_report_with_overrides((&s).into(), Ok(&[]), Ok(&overrides), now());
        assert_eq!(report.overrides[0].state, "used");
        let text = render_text(&report, Palette::PLAIN);
        assert!(text.contains("WINDOW OVERRIDE"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("app-break ") && l.contains(" ana ") && l.ends_with("used")),
            "{text}"
        );
        // A rollout that is over is let through by nothing.
        s.status.as_mut().unwrap().rollout.as_mut().unwrap().phase = RolloutPhase::Complete;
        let report = windows_report_with_overrides((&s).into(), Ok(&[]), Ok(&overrides), now());
        assert!(!report.verdict.moves_allowed);
        assert_eq!(report.verdict.overridden_by, None);
    }

    #[test]
    fn an_immediate_set_is_held_by_the_windows_unless_a_changewindow_exempts_it() {
        let mut s = with_windows(Strategy::Immediate);
        s.spec.rollout.as_mut().unwrap().windows.clear();
        // Friday 17:30 UTC: a freeze of the cluster's, open until Monday.
        let freeze = || {
            change_window(
                "freeze",
                &[],
                vec![window(None, WindowKind::Deny, "0 17 * * 5", "63h", None)],
            )
        };
        let report = windows_report((&s).into(), Ok(&[freeze()]), now());
        assert!(!report.verdict.moves_allowed, "{:?}", report.verdict);
        assert_eq!(
            report.verdict.summary,
            "held by Deny window ChangeWindow freeze, windows[0], open until 2026-11-30T08:00:00Z; \
             moves resume at 2026-11-30T08:00:00Z (in 2d14h)"
        );
        assert_eq!(serde_json::to_value(&report).unwrap()["strategy"], "Immediate");

        let mut exempting = freeze();
        exempting.spec.exempt_strategies = vec![Strategy::Immediate];
        let report = windows_report((&s).into(), Ok(&[exempting.clone()]), now());
        assert!(report.verdict.moves_allowed);
        assert!(report.windows.is_empty(), "{:?}", report.windows);
        // A set of waves under the same ChangeWindow is held.
        let waves = set(Some("app-2222222222"), Some(2), Vec::new());
        let report = windows_report((&waves).into(), Ok(&[exempting]), now());
        assert!(!report.verdict.moves_allowed);
    }

    #[test]
    fn without_windows_and_without_the_cluster_s() {
        let s = set(Some("app-2222222222"), Some(2), Vec::new());
        let report = windows_report(
            (&s).into(),
            Err(
                "the ChangeWindow API (changewindows.cmset.dev) is not installed: only the set's own windows are shown",
            ),
            now(),
        );
        assert_eq!(
            render_text(&report, Palette::PLAIN),
            "No change window applies to configmapset/app.\n\
             moves allowed: no change window applies\n\
             note: the ChangeWindow API (changewindows.cmset.dev) is not installed: only the set's own \
             windows are shown\n"
        );
        assert_eq!(
            serde_json::to_value(&report).unwrap(),
            json!({
                "kind": "ConfigMapSet",
                "set": "app",
                "namespace": "demo",
                "strategy": "Waves",
                "now": NOW,
                "windows": [],
                "changeWindowsUnlisted": "the ChangeWindow API (changewindows.cmset.dev) is not installed: only \
                                          the set's own windows are shown",
                "verdict": {"movesAllowed": true, "summary": "moves allowed: no change window applies"},
            })
        );
    }

    #[test]
    fn a_set_window_that_does_not_parse_is_shown_and_none_of_the_set_s_count() {
        let mut s = with_windows(Strategy::Waves);
        s.spec.rollout.as_mut().unwrap().windows[1].time_zone = Some("Mars/Olympus".into());
        let report = windows_report((&s).into(), Ok(&[]), now());
        let bad = &report.windows[1];
        assert!(
            bad.problem
                .as_deref()
                .unwrap()
                .contains("spec.rollout.windows[1].timeZone"),
            "{bad:?}"
        );
        // The freeze is open, but counts for nothing, as the controller counts it.
        assert!(report.windows[0].open);
        assert!(report.verdict.moves_allowed, "{:?}", report.verdict);
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("invalid: spec.rollout.windows[1].timeZone: "),
            "{text}"
        );
        assert!(text.contains("none of them counts (see PROBLEM)"), "{text}");
    }

    #[test]
    fn a_set_whose_operator_cannot_see_the_cluster_s_windows_is_held_and_says_so() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
        let mut s = set(Some("app-2222222222"), Some(2), Vec::new());
        s.status
            .get_or_insert_with(Default::default)
            .conditions
            .push(Condition {
                type_: "ChangeWindowsKnown".into(),
                status: "False".into(),
                reason: "ChangeWindowsForbidden".into(),
                message: "the operator may not list them (403 Forbidden)".into(),
                observed_generation: Some(2),
                last_transition_time: Time(now()),
            });
        // The user sees no window at all; the operator, which cannot look, holds.
        let report = windows_report((&s).into(), Ok(&[]), now());
        assert!(!report.verdict.moves_allowed);
        let why = report.operator_cannot_see.as_deref().expect("said");
        assert!(
            why.contains("ChangeWindowsForbidden") && why.contains("403 Forbidden"),
            "{why}"
        );
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("but the operator cannot see the cluster's ChangeWindows"),
            "{text}"
        );
        assert_eq!(
            serde_json::to_value(&report).unwrap()["operatorCannotSee"].as_str(),
            Some(why)
        );
    }
}
