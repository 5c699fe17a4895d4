//! Change windows: whether a rollout may move workloads at an instant, and until when.
//!
//! The semantics are Argo CD's sync windows. A window opens each time its schedule fires (wall-clock
//! time in its zone, UTC by default) and stays open for its duration: an opening that fires at `s`
//! covers `[s, s + duration)`. Moves are allowed at `t` when (no cluster Allow window applies, or one
//! is open) and (no Allow window of the set applies, or one is open) and no Deny window is open: the
//! set's windows and the cluster's (`ChangeWindow`) each must allow, so a set's windows only narrow.
//!
//! A schedule is five-field cron (robfig/cron's standard parser, as Argo CD) or an RFC 5545 RRULE.
//! Both reduce to one model, which days fire and at which times of day ([`schedule`]), so the search
//! walks days, not minutes, and a typical evaluation costs microseconds. Nothing is looked for past
//! [`HORIZON`]: a schedule that never fires (`0 0 30 2 *`) never opens.

mod cron;
pub mod duration;
mod rrule;
mod schedule;
#[cfg(test)]
mod tests;

use cmset_api::{ChangeWindowSpec, RolloutWindow, WindowKind};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::revisions::naming::{check_label_value, check_qualified_name};
use crate::status::problem::Problem;
use schedule::Schedule;

/// How far ahead (and, for long windows, behind) fires are looked for. Ten years and then some:
/// the next 29 February can be eight years away (2096, then 2104).
pub const HORIZON: SignedDuration = SignedDuration::from_hours(24 * 3660);

/// Most jumps one evaluation makes between windows before it gives up (each jump passes one opening).
const MAX_STEPS: usize = 4096;

/// Where a window is written: for messages, reasons and `kubectl cmset windows`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WindowSource {
    Set,
    Cluster { name: String },
}

/// A parsed window.
#[derive(Clone, Debug)]
pub struct Window {
    pub kind: WindowKind,
    pub name: Option<String>,
    pub source: WindowSource,
    pub index: usize,
    pub schedule: String,
    pub duration: String,
    /// The zone as written, or `UTC`.
    pub time_zone: String,
    tz: TimeZone,
    plan: Schedule,
    length: SignedDuration,
    /// The widest wall-clock gap between consecutive fires on days that fire one after another.
    widest_gap: SignedDuration,
}

impl Window {
    /// `field` is where it is written, e.g. "spec.rollout.windows[0]"; a problem names the sub-field,
    /// e.g. "spec.rollout.windows[0].timeZone".
    pub fn parse(
        window: &RolloutWindow,
        source: WindowSource,
        index: usize,
        field: &str,
    ) -> Result<Window, Problem> {
        Self::parse_each(window, source, index, field).map_err(|mut problems| problems.remove(0))
    }

    /// Like [`Window::parse`], with every problem rather than the first.
    fn parse_each(
        window: &RolloutWindow,
        source: WindowSource,
        index: usize,
        field: &str,
    ) -> Result<Window, Vec<Problem>> {
        let mut problems = Vec::new();
        if let Some(name) = &window.name
            && (name.is_empty() || name.len() > 63)
        {
            problems.push(Problem::new(
                format!("{field}.name"),
                "must be 1 to 63 characters",
            ));
        }
        let zone_name = window.time_zone.clone().unwrap_or_else(|| "UTC".to_string());
        let tz = match TimeZone::get(&zone_name) {
            Ok(tz) => Some(tz),
            Err(_) => {
                problems.push(Problem::new(
                    format!("{field}.timeZone"),
                    format!("{zone_name:?} is not a known IANA time zone; write e.g. Europe/Berlin, America/New_York or UTC"),
                ));
                None
            }
        };
        let length = duration::parse(&window.duration)
            .map_err(|message| problems.push(Problem::new(format!("{field}.duration"), message)))
            .ok();
        // The RRULE's DTSTART and UNTIL are read in the zone, so the schedule waits for a good one.
        let plan = tz.as_ref().and_then(|tz| {
            let parsed = if rrule::is_rrule(&window.schedule) {
                rrule::parse(&window.schedule, tz)
            } else {
                cron::parse(&window.schedule)
            };
            parsed
                .map_err(|message| problems.push(Problem::new(format!("{field}.schedule"), message)))
                .ok()
        });
        match (tz, length, plan) {
            (Some(tz), Some(length), Some(plan)) if problems.is_empty() => Ok(Window {
                kind: window.kind,
                name: window.name.clone(),
                source,
                index,
                schedule: window.schedule.clone(),
                duration: window.duration.clone(),
                time_zone: zone_name,
                tz,
                widest_gap: plan.widest_gap(),
                plan,
                length,
            }),
            _ => Err(problems),
        }
    }

    /// Where it is written, for people: "spec.rollout.windows[1]" or "ChangeWindow freeze,
    /// windows[0]", with its name in parentheses when it has one.
    pub fn label(&self) -> String {
        let place = match &self.source {
            WindowSource::Set => format!("spec.rollout.windows[{}]", self.index),
            WindowSource::Cluster { name } => format!("ChangeWindow {name}, windows[{}]", self.index),
        };
        match &self.name {
            Some(name) => format!("{place} ({name})"),
            None => place,
        }
    }

    /// status.rollout.reason when this Deny window holds a rollout: its name, or "DenyWindow".
    pub fn reason(&self) -> String {
        self.name.clone().unwrap_or_else(|| "DenyWindow".to_string())
    }

    /// When open at `t`: the end of the opening (the latest opening that started at or before `t`).
    pub fn open_at(&self, t: Timestamp) -> Option<Timestamp> {
        self.opening_at(t).map(|(_, end)| end)
    }

    /// The opening open at `t`, as its start and end.
    fn opening_at(&self, t: Timestamp) -> Option<(Timestamp, Timestamp)> {
        let reach = self.length.min(HORIZON);
        let not_before = t.checked_sub(reach).unwrap_or(Timestamp::MIN);
        let start = self.plan.last_fire_at_or_before(&self.tz, t, not_before)?;
        let end = start.checked_add(self.length).unwrap_or(Timestamp::MAX);
        (end > t).then_some((start, end))
    }

    /// Where the openings that follow the one open at `t` stop chaining (each starting before the
    /// last ends), as far as a walk of whole days can tell; never later than the truth. It spares
    /// stepping opening by opening through a window that is always open (`0 */3 * * *` for 4h), and
    /// gives None when it cannot tell cheaply.
    fn chain_end(&self, t: Timestamp, limit: Timestamp) -> Option<Timestamp> {
        if self.widest_gap > self.length || self.plan.start.is_some() || self.plan.until.is_some() {
            return None;
        }
        let (start, _) = self.opening_at(t)?;
        let last_date = self.tz.to_datetime(limit).date().tomorrow().ok()?;
        let mut date = self.tz.to_datetime(start).date();
        let mut last_day = None;
        while date <= last_date && self.plan.fires_on(date) {
            last_day = Some(date);
            date = date.tomorrow().ok()?;
        }
        let mut last_day = last_day?;
        // Turning clocks back widens the gap across the repeated hour (its times fire once): end the
        // walk the day before a change that widens some gap past the length. Turning them forward
        // only narrows gaps.
        let last = self.plan.last_fire_on(&self.tz, last_day);
        for transition in self.tz.following(start) {
            let at = transition.timestamp();
            if at > last {
                break;
            }
            let before = self
                .tz
                .to_offset(at.checked_sub(SignedDuration::from_secs(1)).ok()?);
            let widened = i64::from(before.seconds() - transition.offset().seconds());
            if widened > 0 && self.widest_gap + SignedDuration::from_secs(widened) > self.length {
                last_day = self.tz.to_datetime(at).date().yesterday().ok()?;
                if last_day < self.tz.to_datetime(start).date() {
                    return None;
                }
                break;
            }
        }
        let last = self.plan.last_fire_on(&self.tz, last_day);
        last.checked_add(self.length).ok()
    }

    /// The first opening that starts strictly after `t`, within the horizon.
    pub fn next_opening_after(&self, t: Timestamp) -> Option<Timestamp> {
        let limit = t.checked_add(HORIZON).unwrap_or(Timestamp::MAX);
        self.plan.first_fire_after(&self.tz, t, limit)
    }
}

/// Parses a list: every problem, each naming its field (`prefix` e.g. "spec.rollout.windows").
pub fn parse_all(
    windows: &[RolloutWindow],
    source: &WindowSource,
    prefix: &str,
) -> Result<Vec<Window>, Vec<Problem>> {
    let mut parsed = Vec::with_capacity(windows.len());
    let mut problems = Vec::new();
    for (index, window) in windows.iter().enumerate() {
        match Window::parse_each(window, source.clone(), index, &format!("{prefix}[{index}]")) {
            Ok(window) => parsed.push(window),
            Err(found) => problems.extend(found),
        }
    }
    if problems.is_empty() {
        Ok(parsed)
    } else {
        Err(problems)
    }
}

/// Checks a ChangeWindow's spec for the admission webhook: its windows, its namespace globs, its
/// selector and its exempt strategies.
pub fn validate_change_window(spec: &ChangeWindowSpec) -> Result<(), Vec<Problem>> {
    let mut problems = Vec::new();
    if spec.windows.is_empty() {
        problems.push(Problem::new("spec.windows", "must name at least one window"));
    }
    if spec.windows.len() > cmset_api::windows::MAX_WINDOWS as usize {
        problems.push(Problem::new(
            "spec.windows",
            format!(
                "names {} windows; at most {} are allowed",
                spec.windows.len(),
                cmset_api::windows::MAX_WINDOWS
            ),
        ));
    }
    // The object's name does not matter to parsing.
    let source = WindowSource::Cluster { name: String::new() };
    if let Err(found) = parse_all(&spec.windows, &source, "spec.windows") {
        problems.extend(found);
    }
    for (index, glob) in spec.namespaces.iter().enumerate() {
        let field = format!("spec.namespaces[{index}]");
        if glob.is_empty() {
            problems.push(Problem::new(
                field,
                "must not be empty; leave the list empty for every namespace",
            ));
        } else if glob.len() > 63
            || !glob
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-*?".contains(&b))
        {
            problems.push(Problem::new(
                field,
                format!("{glob:?} is not a namespace pattern: at most 63 of a-z, 0-9, '-', and the wildcards * and ?"),
            ));
        }
    }
    if let Some(selector) = &spec.selector {
        check_selector(selector, &mut problems);
    }
    for (index, strategy) in spec.exempt_strategies.iter().enumerate() {
        if spec.exempt_strategies[..index].contains(strategy) {
            problems.push(Problem::new(
                format!("spec.exemptStrategies[{index}]"),
                format!("names {strategy:?} twice"),
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// The checks Kubernetes makes of a label selector (`ValidateLabelSelector`).
fn check_selector(selector: &LabelSelector, problems: &mut Vec<Problem>) {
    for (key, value) in selector.match_labels.iter().flatten() {
        let field = format!("spec.selector.matchLabels[{key:?}]");
        check_qualified_name(&field, key, problems);
        check_label_value(&field, value, problems);
    }
    for (index, expression) in selector.match_expressions.iter().flatten().enumerate() {
        let field = format!("spec.selector.matchExpressions[{index}]");
        check_qualified_name(&format!("{field}.key"), &expression.key, problems);
        let values = expression.values.as_deref().unwrap_or_default();
        match expression.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                problems.push(Problem::new(
                    format!("{field}.values"),
                    "must not be empty with In or NotIn",
                ));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                problems.push(Problem::new(
                    format!("{field}.values"),
                    "must be empty with Exists or DoesNotExist",
                ));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => problems.push(Problem::new(
                format!("{field}.operator"),
                format!("{other:?} is not an operator; use In, NotIn, Exists or DoesNotExist"),
            )),
        }
        for (value_index, value) in values.iter().enumerate() {
            check_label_value(&format!("{field}.values[{value_index}]"), value, problems);
        }
    }
}

/// Whether a namespace glob list matches `namespace` (empty list: every namespace; `*` and `?`).
pub fn namespaces_match(globs: &[String], namespace: &str) -> bool {
    globs.is_empty()
        || globs
            .iter()
            .any(|glob| glob_match(glob.as_bytes(), namespace.as_bytes()))
}

/// Wildcard match with backtracking to the last `*` only: linear in practice, never exponential.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Moves are allowed now; `until`: the next instant at which they may be held (the next start of a
    /// Deny window or the end of the Allow coverage), None when nothing holds within the horizon.
    /// Never later than the truth: should Allow openings chain on past a few thousand links that no
    /// day-by-day walk can skip, it is the last end found, and evaluating again then goes on.
    Open { until: Option<Timestamp> },
    /// Moves are held. `reason`: the first open Deny window's `reason()`, else "OutsideWindow". `by`:
    /// which windows hold, for people. `opens_at`: the earliest instant >= now at which moves are
    /// allowed; None when none within the horizon.
    Held {
        reason: String,
        by: String,
        opens_at: Option<Timestamp>,
    },
}

/// The verdict at `now` for every window that applies (the set's and the cluster's together). The
/// set's Allow windows and the cluster's are two pools, each of which must allow (see [`AllowPools`]):
/// a set's windows can only narrow the cluster's.
pub fn evaluate(windows: &[Window], now: Timestamp) -> Verdict {
    let pools = AllowPools::of(windows);
    let denies: Vec<&Window> = windows.iter().filter(|w| w.kind == WindowKind::Deny).collect();
    let limit = now.checked_add(HORIZON).unwrap_or(Timestamp::MAX);
    let open_denies: Vec<(&Window, Timestamp)> = denies
        .iter()
        .filter_map(|w| w.open_at(now).map(|end| (*w, end)))
        .collect();
    let closed = pools.closed_at(now);

    if open_denies.is_empty() && closed.is_empty() {
        let next_deny = denies.iter().filter_map(|w| w.next_opening_after(now)).min();
        // Held again as soon as either pool's coverage ends.
        let coverage_end = pools
            .applying()
            .map(|pool| latest_end(pool, now).and_then(|end| coverage_end(pool, end, limit)))
            .collect::<Vec<_>>();
        let until = coverage_end.into_iter().chain([next_deny]).flatten().min();
        return Verdict::Open {
            until: until.filter(|until| *until <= limit),
        };
    }

    let (reason, by) = match open_denies.first() {
        Some((first, _)) => (
            first.reason(),
            open_denies
                .iter()
                .map(|(w, end)| format!("Deny window {}, open until {end}", w.label()))
                .collect::<Vec<_>>()
                .join("; "),
        ),
        None => ("OutsideWindow".to_string(), pools.outside(&closed)),
    };
    Verdict::Held {
        reason,
        by,
        opens_at: opens_at(&pools, &denies, now, limit),
    }
}

/// The Allow windows, by who wrote them. Moves need an open Allow of every pool that has one: the
/// set's own Allow (always open, say) cannot open a cluster rule, and a cluster Allow cannot open a
/// set's. All ChangeWindows together are one pool.
struct AllowPools<'a> {
    set: Vec<&'a Window>,
    cluster: Vec<&'a Window>,
}

impl<'a> AllowPools<'a> {
    fn of(windows: &'a [Window]) -> Self {
        let allows = windows.iter().filter(|w| w.kind == WindowKind::Allow);
        let (set, cluster) = allows.partition(|w| w.source == WindowSource::Set);
        Self { set, cluster }
    }

    /// The pools that have an Allow window.
    fn applying(&self) -> impl Iterator<Item = &[&'a Window]> {
        [self.set.as_slice(), self.cluster.as_slice()]
            .into_iter()
            .filter(|pool| !pool.is_empty())
    }

    /// The pools with an Allow window of which none is open at `t`.
    fn closed_at(&self, t: Timestamp) -> Vec<&[&'a Window]> {
        self.applying()
            .filter(|pool| pool.iter().all(|w| w.open_at(t).is_none()))
            .collect()
    }

    /// For people: which Allow windows hold, when the set's and the cluster's both have some.
    fn outside(&self, closed: &[&[&'a Window]]) -> String {
        let both = self.applying().count() > 1;
        match closed {
            [pool] if both => match pool.first().map(|w| &w.source) {
                Some(WindowSource::Cluster { .. }) => {
                    let mut names: Vec<&str> = pool
                        .iter()
                        .filter_map(|w| match &w.source {
                            WindowSource::Cluster { name } => Some(name.as_str()),
                            WindowSource::Set => None,
                        })
                        .collect();
                    names.dedup();
                    format!(
                        "outside every Allow window of the cluster (ChangeWindow {})",
                        names.join(", ")
                    )
                }
                _ => "outside every Allow window of spec.rollout.windows".to_string(),
            },
            _ => "outside every Allow window".to_string(),
        }
    }
}

/// The latest end among the windows open at `t`.
fn latest_end(windows: &[&Window], t: Timestamp) -> Option<Timestamp> {
    windows.iter().filter_map(|w| w.open_at(t)).max()
}

/// Where the Allow coverage that is open until `end` stops: openings that overlap or touch chain on.
/// None when it reaches past `limit`; after too many links, the last end known (a safe early answer).
fn coverage_end(allows: &[&Window], mut end: Timestamp, limit: Timestamp) -> Option<Timestamp> {
    for _ in 0..MAX_STEPS {
        if end > limit {
            return None;
        }
        let Some(mut next) = latest_end(allows, end) else {
            return Some(end);
        };
        for window in allows {
            if let Some(chained) = window.chain_end(end, limit) {
                next = next.max(chained);
            }
        }
        end = next;
    }
    Some(end)
}

/// The earliest instant at or after `now` at which moves are allowed: jump past open Deny windows and
/// to the next opening of an Allow pool that is closed, until all agree. Each jump goes to the first
/// instant at which the condition it failed could hold, so the answer is never later than the truth.
fn opens_at(
    pools: &AllowPools<'_>,
    denies: &[&Window],
    now: Timestamp,
    limit: Timestamp,
) -> Option<Timestamp> {
    let mut t = now;
    for _ in 0..MAX_STEPS {
        if t > limit {
            return None;
        }
        if let Some(mut end) = latest_end(denies, t) {
            for window in denies {
                if let Some(chained) = window.chain_end(t, limit) {
                    end = end.max(chained);
                }
            }
            t = end;
            continue;
        }
        let Some(closed) = pools.closed_at(t).into_iter().next() else {
            return Some(t);
        };
        t = closed.iter().filter_map(|w| w.next_opening_after(t)).min()?;
    }
    None
}
