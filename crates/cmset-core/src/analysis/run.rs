//! Runs: one rendered query during one wave. Which runs a wave has, when each is measured next, what a
//! measurement showed, and the verdicts of a run and of the wave.
//!
//! A run's whole memory is its [`AnalysisRunStatus`] in the set's status (counts, last value, last
//! verdict, when it was last measured), so an operator that restarts continues every run as it stood.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cmset_api::{AnalysisRunStatus, AnalysisVerdict};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;

use super::condition::Condition;
use super::response::{QueryOutcome, format_value, parse_value};
use super::{Analysis, WaveSubject, Workload};

/// What one measurement showed.
#[derive(Clone, Debug, PartialEq)]
pub enum Measurement {
    /// Every sample satisfies the condition; `value` is the one closest to the threshold.
    Passed { value: f64, samples: usize },
    /// `failing` of `samples` samples do not; `value` is the one furthest past the threshold.
    Failed {
        value: f64,
        failing: usize,
        samples: usize,
    },
    /// Nothing can be concluded: no data, a NaN sample (and none failing), or the query failed.
    Inconclusive { value: Option<f64>, why: String },
}

impl Measurement {
    /// Judges `outcome` by `condition`. A sample that fails decides even next to a NaN one: it is
    /// evidence that the condition does not hold; NaN alone proves nothing.
    pub fn judge(outcome: &QueryOutcome, condition: &Condition) -> Self {
        let samples = match outcome {
            QueryOutcome::Samples(samples) if !samples.is_empty() => samples,
            QueryOutcome::Samples(_) | QueryOutcome::NoData => {
                return Self::Inconclusive {
                    value: None,
                    why: "the query returned no data".to_string(),
                };
            }
            QueryOutcome::Error(why) => {
                return Self::Inconclusive {
                    value: None,
                    why: format!("the query failed: {why}"),
                };
            }
        };
        let distance = |v: &&f64| (**v - condition.threshold()).abs();
        let failing: Vec<&f64> = samples
            .iter()
            .filter(|v| !v.is_nan() && !condition.holds(**v))
            .collect();
        if let Some(worst) = failing
            .iter()
            .copied()
            .max_by(|a, b| distance(a).total_cmp(&distance(b)))
        {
            return Self::Failed {
                value: *worst,
                failing: failing.len(),
                samples: samples.len(),
            };
        }
        if samples.iter().any(|v| v.is_nan()) {
            return Self::Inconclusive {
                value: Some(f64::NAN),
                why: "the result is NaN".to_string(),
            };
        }
        let closest = samples
            .iter()
            .min_by(|a, b| distance(a).total_cmp(&distance(b)))
            .copied()
            .unwrap_or_default();
        Self::Passed {
            value: closest,
            samples: samples.len(),
        }
    }

    /// The value shown in status.
    pub fn value(&self) -> Option<f64> {
        match self {
            Self::Passed { value, .. } | Self::Failed { value, .. } => Some(*value),
            Self::Inconclusive { value, .. } => *value,
        }
    }

    /// One line for status: what the measurement showed against `condition`.
    pub fn describe(&self, condition: &Condition) -> String {
        match self {
            Self::Passed { value, samples: 1 } => format!("{} meets {condition}", format_value(*value)),
            Self::Passed { value, samples } => format!(
                "all {samples} series meet {condition} (closest {})",
                format_value(*value)
            ),
            Self::Failed {
                value, samples: 1, ..
            } => format!("{} fails {condition}", format_value(*value)),
            Self::Failed {
                value,
                failing,
                samples,
            } => format!(
                "{failing} of {samples} series fail {condition} (worst {})",
                format_value(*value)
            ),
            Self::Inconclusive { why, .. } => why.clone(),
        }
    }
}

/// Where the wave stands, as a run's verdict depends on it. The wave's rules (see [`crate::rollout::waves`])
/// decide both; the analysis only reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaveStage {
    /// The wave's stabilization window is over: its workloads have been healthy that long.
    pub window_over: bool,
    /// The wave's progress deadline has passed.
    pub deadline_passed: bool,
}

/// The last measurement of a run, as its status records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Latest {
    Passed,
    Failed,
    Inconclusive,
}

/// Read back from the last value alone: a failing measurement shows a failing sample, a passing one a
/// passing sample, and an inconclusive one NaN or nothing (see [`Measurement::judge`]).
fn latest(run: &AnalysisRunStatus, condition: &Condition) -> Option<Latest> {
    if run.measurements == 0 {
        return None;
    }
    Some(match run.last_value.as_deref().and_then(parse_value) {
        Some(v) if v.is_nan() => Latest::Inconclusive,
        Some(v) if condition.holds(v) => Latest::Passed,
        Some(_) => Latest::Failed,
        None => Latest::Inconclusive,
    })
}

/// A fresh run of `analysis` for `subject` (and `workload`), its query rendered from them. When a value
/// fails its check the run has no query: it is never sent, and it holds the wave as an inconclusive
/// measurement does, saying why.
pub fn new_run(
    analysis: &Analysis,
    subject: &WaveSubject<'_>,
    workload: Option<&Workload<'_>>,
) -> AnalysisRunStatus {
    let (query, verdict, message) = match analysis.render(subject, workload) {
        Ok(query) => (query, AnalysisVerdict::Running, None),
        Err(unsafe_value) => (
            String::new(),
            AnalysisVerdict::Inconclusive,
            Some(unsafe_value.to_string()),
        ),
    };
    AnalysisRunStatus {
        template: analysis.template.clone(),
        workload_kind: workload.map(|w| w.kind.as_str().to_string()),
        workload: workload.map(|w| w.name.to_string()),
        wave: subject.wave,
        query,
        condition: analysis.condition.to_string(),
        verdict,
        message,
        ..AnalysisRunStatus::default()
    }
}

/// A run whose subject failed its check (see [`new_run`]): nothing is sent for it.
fn unsendable(run: &AnalysisRunStatus) -> bool {
    run.query.is_empty()
}

/// What tells runs apart: the template, wave and workload, the rendered query and the condition. A
/// template edited during a rollout thus starts its runs afresh.
type RunKey<'r> = (&'r str, i32, Option<&'r str>, Option<&'r str>, &'r str, &'r str);

fn key(run: &AnalysisRunStatus) -> RunKey<'_> {
    (
        &run.template,
        run.wave,
        run.workload_kind.as_deref(),
        run.workload.as_deref(),
        &run.query,
        &run.condition,
    )
}

/// `fresh`, as cmset computed it, with what `recorded` measured: the counts, the last value and when
/// it was taken, the verdict and its message. Nothing else of a recorded run is taken.
fn carry_measurements(mut fresh: AnalysisRunStatus, recorded: &AnalysisRunStatus) -> AnalysisRunStatus {
    fresh.measurements = recorded.measurements;
    fresh.failures = recorded.failures;
    fresh.last_value = recorded.last_value.clone();
    fresh.last_measured_at = recorded.last_measured_at.clone();
    fresh.streak = recorded.streak;
    fresh.streak_since = recorded.streak_since.clone();
    fresh.inconclusive = recorded.inconclusive;
    fresh.verdict = recorded.verdict;
    fresh.message = recorded.message.clone();
    fresh
}

/// The runs cmset computes for `wave`: one of each analysis, or one per workload of `workloads` for an
/// analysis whose query names a workload.
fn runs_of_wave(
    analyses: &[Analysis],
    subject: &WaveSubject<'_>,
    workloads: &[Workload<'_>],
) -> Vec<AnalysisRunStatus> {
    let mut workloads = workloads.to_vec();
    workloads.sort();
    workloads.dedup();
    let mut runs: Vec<AnalysisRunStatus> = Vec::new();
    // Looked up by key, not by walking the runs: a wave of thousands of workloads has thousands.
    let mut seen: BTreeSet<(String, Option<String>, Option<String>, String)> = BTreeSet::new();
    for analysis in analyses {
        let fresh: Vec<AnalysisRunStatus> = if analysis.names_workload() {
            workloads
                .iter()
                .map(|w| new_run(analysis, subject, Some(w)))
                .collect()
        } else {
            vec![new_run(analysis, subject, None)]
        };
        for run in fresh {
            // Within one wave, the template, workload and query tell runs apart (the wave and
            // condition are the analysis's own).
            let identity = (
                run.template.clone(),
                run.workload_kind.clone(),
                run.workload.clone(),
                run.query.clone(),
            );
            if seen.insert(identity) {
                runs.push(run);
            }
        }
    }
    runs
}

/// The runs of the rollout once `subject.wave` is analysed, all computed by cmset from `analyses`,
/// `subject` and `workloads` (the set's members by wave, as its index knows them): the runs of this
/// wave, each carrying on what the run `previous` records with the same identity (template, wave,
/// workload, query, condition) measured, and the recorded runs of other waves that are runs cmset
/// computes for their wave. Any other recorded run is dropped: the status is writable by the set's
/// namespace, and what it says is never sent to Prometheus. `previous` is what the status records of
/// this rollout (empty for a rollout that starts).
pub fn plan_runs(
    analyses: &[Analysis],
    subject: &WaveSubject<'_>,
    workloads: &BTreeMap<i32, Vec<Workload<'_>>>,
    previous: &[AnalysisRunStatus],
) -> Vec<AnalysisRunStatus> {
    let computed = |wave: i32| {
        let members = workloads.get(&wave).map(Vec::as_slice).unwrap_or_default();
        runs_of_wave(analyses, &WaveSubject { wave, ..*subject }, members)
    };
    let others: Vec<AnalysisRunStatus> = previous
        .iter()
        .filter(|r| r.wave != subject.wave)
        .cloned()
        .collect();
    let mut runs = known_runs(analyses, subject, workloads, &others);
    let recorded_by_key: BTreeMap<RunKey<'_>, &AnalysisRunStatus> =
        previous.iter().rev().map(|p| (key(p), p)).collect();
    let grouped = lending_groups(analyses, subject, workloads, previous);
    for run in computed(subject.wave) {
        // A run recorded on its own is newer than its group: a measurement is recorded on the run.
        let recorded = recorded_by_key
            .get(&key(&run))
            .or_else(|| grouped.get(&member_key(&run)?))
            .copied()
            .filter(|_| !unsendable(&run));
        runs.push(match recorded {
            Some(recorded) => carry_measurements(run, recorded),
            None => run,
        });
    }
    runs
}

/// The runs of `recorded` that are runs cmset computes for their wave (see [`plan_runs`]) and are
/// [`kept`] at `subject.wave`, as recorded; the others are dropped. For the runs of a rollout no wave
/// of which is being analysed now (it completed, failed, or waits on its workloads): the status shows
/// only what cmset measured.
pub fn known_runs(
    analyses: &[Analysis],
    subject: &WaveSubject<'_>,
    workloads: &BTreeMap<i32, Vec<Workload<'_>>>,
    recorded: &[AnalysisRunStatus],
) -> Vec<AnalysisRunStatus> {
    let waves: BTreeSet<i32> = recorded.iter().map(|r| r.wave).collect();
    let grouped = lending_groups(analyses, subject, workloads, recorded);
    let mut runs = Vec::new();
    for wave in waves {
        let members = workloads.get(&wave).map(Vec::as_slice).unwrap_or_default();
        let computed = runs_of_wave(analyses, &WaveSubject { wave, ..*subject }, members);
        let known: BTreeSet<RunKey<'_>> = computed.iter().map(key).collect();
        let wanted = |r: &&AnalysisRunStatus| r.wave == wave && kept(r, subject.wave);
        let on_its_own =
            |r: &AnalysisRunStatus| r.workloads.is_empty() && !unsendable(r) && known.contains(&key(r));
        let alone: BTreeSet<MemberKey<'_>> = recorded
            .iter()
            .filter(wanted)
            .filter(|r| on_its_own(r))
            .filter_map(member_key)
            .collect();
        for run in recorded.iter().filter(wanted) {
            if run.workloads.is_empty() {
                if on_its_own(run) {
                    runs.push(run.clone());
                }
                continue;
            }
            // A group keeps the members it lends to (a run recorded on its own is not its member any
            // more), and the query of its first.
            let mut members = computed.iter().filter(|c| {
                member_key(c).is_some_and(|k| {
                    !alone.contains(&k) && grouped.get(&k).is_some_and(|g| std::ptr::eq(*g, run))
                })
            });
            let Some(first) = members.next() else {
                continue;
            };
            let mut group = run.clone();
            group.query = first.query.clone();
            group.workloads = std::iter::once(first)
                .chain(members)
                .filter_map(|c| c.workload.clone())
                .collect();
            runs.push(group);
        }
    }
    runs
}

/// Where each run recorded on its own stands in a list of runs, by its identity (template, wave,
/// workload, query, condition): to record a measurement on it without walking the list, which holds
/// thousands of runs for thousands of workloads.
pub struct RunPlaces(BTreeMap<RunIdentity, usize>);

type RunIdentity = (String, i32, Option<String>, Option<String>, String, String);

fn identity(run: &AnalysisRunStatus) -> RunIdentity {
    let (template, wave, kind, workload, query, condition) = key(run);
    (
        template.to_string(),
        wave,
        kind.map(str::to_string),
        workload.map(str::to_string),
        query.to_string(),
        condition.to_string(),
    )
}

impl RunPlaces {
    pub fn of(runs: &[AnalysisRunStatus]) -> Self {
        let mut places = BTreeMap::new();
        for (at, run) in runs.iter().enumerate().filter(|(_, r)| r.workloads.is_empty()) {
            places.entry(identity(run)).or_insert(at);
        }
        Self(places)
    }

    /// The place of the run with `run`'s identity; `None` when none stands on its own (it is in a
    /// group, or not listed).
    pub fn of_run(&self, run: &AnalysisRunStatus) -> Option<usize> {
        self.0.get(&identity(run)).copied()
    }
}

/// Identifies a per-workload run within its wave: template, wave, workload kind and name.
type MemberKey<'r> = (&'r str, i32, &'r str, &'r str);

fn member_key(run: &AnalysisRunStatus) -> Option<MemberKey<'_>> {
    Some((
        &run.template,
        run.wave,
        run.workload_kind.as_deref()?,
        run.workload.as_deref()?,
    ))
}

/// The groups of `recorded` (see [`compact`]) that may lend their measurements, by the member runs
/// they lend to. A group lends only while cmset renders, for its first workload, the query it
/// records, under the condition it records: a template or argument edited since starts its runs
/// afresh, as for a run recorded on its own. The first group naming a workload wins.
fn lending_groups<'r>(
    analyses: &[Analysis],
    subject: &WaveSubject<'_>,
    workloads: &BTreeMap<i32, Vec<Workload<'_>>>,
    recorded: &'r [AnalysisRunStatus],
) -> BTreeMap<MemberKey<'r>, &'r AnalysisRunStatus> {
    let mut lenders = BTreeMap::new();
    for group in recorded.iter().filter(|r| !r.workloads.is_empty()) {
        let (Some(kind), Some(first)) = (group.workload_kind.as_deref(), group.workloads.first()) else {
            continue;
        };
        let Some(analysis) = analyses
            .iter()
            .find(|a| a.template == group.template && a.names_workload())
        else {
            continue;
        };
        // The kind as cmset serves it, from the wave's members: a group of another kind lends to none.
        let members = workloads.get(&group.wave).map(Vec::as_slice).unwrap_or_default();
        let Some(kind) = members.iter().map(|w| w.kind).find(|k| k.as_str() == kind) else {
            continue;
        };
        let wave_subject = WaveSubject {
            wave: group.wave,
            ..*subject
        };
        let rendered = analysis.render(&wave_subject, Some(&Workload { kind, name: first }));
        if rendered.as_deref() != Ok(group.query.as_str())
            || analysis.condition.to_string() != group.condition
        {
            continue;
        }
        for name in &group.workloads {
            lenders
                .entry((group.template.as_str(), group.wave, kind.as_str(), name.as_str()))
                .or_insert(group);
        }
    }
    lenders
}

/// Per-workload runs of one template in one wave beyond this many are written in groups.
pub const LISTED_RUNS_PER_TEMPLATE: usize = 20;

/// `runs` as the status writes them: where a wave has more than [`LISTED_RUNS_PER_TEMPLATE`]
/// per-workload runs of one template, those that stand alike (same verdict, counts, streak and
/// times, none failed or inconclusive: their last values all passed) become one entry listing their
/// workloads, in the place of the first. Runs that failed, were inconclusive or cannot be sent stay
/// on their own, so a person sees each of them. 5,000 workloads measured at the same instants take a
/// few entries instead of 5,000.
pub fn compact(runs: Vec<AnalysisRunStatus>) -> Vec<AnalysisRunStatus> {
    let mut per_template: BTreeMap<(String, i32), usize> = BTreeMap::new();
    for run in runs.iter().filter(|r| groupable(r)) {
        *per_template.entry((run.template.clone(), run.wave)).or_default() += 1;
    }
    let crowded = |run: &AnalysisRunStatus| {
        per_template
            .get(&(run.template.clone(), run.wave))
            .is_some_and(|n| *n > LISTED_RUNS_PER_TEMPLATE)
    };
    let mut out: Vec<AnalysisRunStatus> = Vec::with_capacity(runs.len());
    let mut groups: BTreeMap<Alike, usize> = BTreeMap::new();
    for mut run in runs {
        if !groupable(&run) || !crowded(&run) {
            out.push(run);
            continue;
        }
        let name = run.workload.take().unwrap_or_default();
        match groups.get(&alike(&run)) {
            Some(&at) => out[at].workloads.push(name),
            None => {
                groups.insert(alike(&run), out.len());
                run.workloads = vec![name];
                out.push(run);
            }
        }
    }
    // A group of one is a run of its own.
    for run in &mut out {
        if run.workloads.len() == 1 {
            run.workload = run.workloads.pop();
        }
    }
    out
}

/// A per-workload run recorded on its own, that may join a group: measured only with passing results
/// (or not yet), and sendable.
fn groupable(run: &AnalysisRunStatus) -> bool {
    run.workload.is_some()
        && run.workloads.is_empty()
        && !unsendable(run)
        && run.failures == 0
        && run.inconclusive == 0
        && matches!(run.verdict, AnalysisVerdict::Running | AnalysisVerdict::Passed)
}

/// What runs of a group share: template, wave, kind, condition, verdict, counts, streak and times.
type Alike = (
    String,
    i32,
    Option<String>,
    String,
    AnalysisVerdict,
    i32,
    i32,
    Option<i64>,
    Option<i64>,
);

fn alike(run: &AnalysisRunStatus) -> Alike {
    (
        run.template.clone(),
        run.wave,
        run.workload_kind.clone(),
        run.condition.clone(),
        run.verdict,
        run.measurements,
        run.streak,
        run.streak_since.as_ref().map(|t| t.0.as_second()),
        run.last_measured_at.as_ref().map(|t| t.0.as_second()),
    )
}

/// Whether the status keeps `run` while the rollout is in wave `wave`: every run of that wave (and of
/// any later one), and of an earlier wave the runs that name no workload (one per analysis and wave)
/// and those that did not pass. An earlier wave's passed per-workload runs are dropped: with thousands
/// of workloads they would outgrow the object, and they decide nothing any more (the wave passed;
/// its per-wave runs and the metrics keep the record).
pub fn kept(run: &AnalysisRunStatus, wave: i32) -> bool {
    let per_workload = run.workload.is_some() || !run.workloads.is_empty();
    run.wave >= wave || !per_workload || run.verdict != AnalysisVerdict::Passed
}

/// Whether `run` is over: it failed, or has more failed (or inconclusive) measurements than its
/// template tolerates. It is never measured again.
fn finished(run: &AnalysisRunStatus, analysis: &Analysis) -> bool {
    run.verdict == AnalysisVerdict::Failed
        || run.failures > analysis.failure_limit
        || analysis
            .inconclusive_limit
            .is_some_and(|limit| run.inconclusive > limit)
}

/// How long until `run` is due to be measured: zero when it is due now, `None` when it is never
/// measured again (it failed, or nothing can be sent for it). A run is measured every
/// `intervalSeconds`; its first measurement after its wave became healthy (at `healthy_since`) waits
/// `initialDelaySeconds` from then.
pub fn due_in(
    run: &AnalysisRunStatus,
    analysis: &Analysis,
    now: &Time,
    healthy_since: Option<&Time>,
) -> Option<Duration> {
    if unsendable(run) || finished(run, analysis) {
        return None;
    }
    let after = |t: &Time, seconds: i64| t.0.checked_add(SignedDuration::from_secs(seconds)).ok();
    let next = run
        .last_measured_at
        .as_ref()
        .and_then(|last| after(last, analysis.interval_seconds));
    let first = healthy_since
        .filter(|_| run.streak == 0)
        .and_then(|since| after(since, analysis.initial_delay_seconds));
    let Some(due) = next.into_iter().chain(first).max() else {
        return Some(Duration::ZERO);
    };
    let left = due.duration_since(now.0);
    Some(Duration::try_from(left).unwrap_or_default())
}

/// Whether `run` is to be measured now.
pub fn due(run: &AnalysisRunStatus, analysis: &Analysis, now: &Time, healthy_since: Option<&Time>) -> bool {
    due_in(run, analysis, now, healthy_since) == Some(Duration::ZERO)
}

/// Measurements taken before the wave last became healthy (at `healthy_since`: it was unhealthy again
/// in between) count for nothing towards passing it: the streak starts over.
pub fn restart_streak(run: &mut AnalysisRunStatus, healthy_since: &Time) {
    let stale = run
        .streak_since
        .as_ref()
        .is_none_or(|since| since.0 < healthy_since.0);
    if run.streak > 0 && stale {
        run.streak = 0;
        run.streak_since = None;
    }
}

/// Records a measurement of `run` taken at `now`: its count, its failure, its value, what it showed.
/// A run that is over records nothing more, so failures never exceed `failureLimit + 1`. Call
/// [`settle`] afterwards for its verdict.
pub fn record(run: &mut AnalysisRunStatus, analysis: &Analysis, outcome: &QueryOutcome, now: &Time) {
    if unsendable(run) || finished(run, analysis) {
        return;
    }
    let measurement = Measurement::judge(outcome, &analysis.condition);
    run.measurements = run.measurements.saturating_add(1);
    match measurement {
        Measurement::Failed { .. } => run.failures = run.failures.saturating_add(1),
        Measurement::Inconclusive { .. } => run.inconclusive = run.inconclusive.saturating_add(1),
        Measurement::Passed { .. } => {}
    }
    run.last_value = measurement.value().map(format_value);
    run.message = Some(measurement.describe(&analysis.condition));
    // Whole seconds, as the API keeps them: what is decided before the status is written is what a
    // restarted operator reads back.
    let at = whole_second(now);
    if run.streak == 0 {
        run.streak_since = Some(at.clone());
    }
    run.streak = run.streak.saturating_add(1);
    run.last_measured_at = Some(at);
}

/// A run's verdict and its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunVerdict {
    pub verdict: AnalysisVerdict,
    pub message: Option<String>,
}

/// The verdict of `run` at `stage`:
/// - `Failed` once its failures exceed the failure limit, and for good;
/// - `Failed` once its inconclusive measurements exceed the inconclusive limit, if it has one;
/// - `Passed` when the window is over, its last measurement passed, and `count` measurements were
///   taken since the wave became healthy (until then the window stretches);
/// - `Failed` when the deadline has passed and its last measurement is inconclusive or there is none;
/// - `Inconclusive` while its last measurement is (the wave waits);
/// - `Running` otherwise.
///
/// The message is the last measurement's, or on failure why the run failed.
pub fn verdict(run: &AnalysisRunStatus, analysis: &Analysis, stage: WaveStage) -> RunVerdict {
    let failed = |message: String| RunVerdict {
        verdict: AnalysisVerdict::Failed,
        message: Some(message),
    };
    if run.verdict == AnalysisVerdict::Failed {
        return RunVerdict {
            verdict: AnalysisVerdict::Failed,
            message: run.message.clone(),
        };
    }
    let last = run.message.as_deref().unwrap_or_default();
    if unsendable(run) {
        if stage.deadline_passed {
            return failed(format!("nothing measured by the progress deadline: {last}"));
        }
        return RunVerdict {
            verdict: AnalysisVerdict::Inconclusive,
            message: run.message.clone(),
        };
    }
    if run.failures > analysis.failure_limit {
        return failed(format!(
            "{} of {} measurements failed, more than failureLimit {}; last: {last}",
            run.failures, run.measurements, analysis.failure_limit
        ));
    }
    if let Some(limit) = analysis.inconclusive_limit.filter(|l| run.inconclusive > *l) {
        return failed(format!(
            "{} of {} measurements were inconclusive, more than inconclusiveLimit {limit}; last: {last}",
            run.inconclusive, run.measurements
        ));
    }
    let latest = latest(run, &analysis.condition);
    // Only data from the change decides: `count` measurements since the wave became healthy.
    let enough = run.streak >= analysis.count;
    let verdict = match latest {
        Some(Latest::Passed) if stage.window_over && enough => AnalysisVerdict::Passed,
        None if stage.deadline_passed => {
            return failed("not measured by the progress deadline".to_string());
        }
        Some(Latest::Inconclusive) if stage.deadline_passed => {
            return failed(format!(
                "nothing conclusive by the progress deadline; last: {last}"
            ));
        }
        Some(Latest::Inconclusive) => AnalysisVerdict::Inconclusive,
        _ => AnalysisVerdict::Running,
    };
    RunVerdict {
        verdict,
        message: run.message.clone(),
    }
}

/// Writes [`verdict`] into `run`. Call it after [`record`] and whenever the stage may have changed.
pub fn settle(run: &mut AnalysisRunStatus, analysis: &Analysis, stage: WaveStage) {
    let RunVerdict { verdict, message } = verdict(run, analysis, stage);
    run.verdict = verdict;
    run.message = message;
}

/// The verdict of `wave`'s analysis from the verdicts of its runs in `runs`: `Failed` if any failed,
/// else `Passed` if all passed (a wave without runs has nothing to wait for), else `Inconclusive` if
/// any is, else `Running`.
pub fn wave_verdict(runs: &[AnalysisRunStatus], wave: i32) -> AnalysisVerdict {
    let verdicts: Vec<AnalysisVerdict> = runs
        .iter()
        .filter(|r| r.wave == wave)
        .map(|r| r.verdict)
        .collect();
    let any = |v: AnalysisVerdict| verdicts.contains(&v);
    if any(AnalysisVerdict::Failed) {
        AnalysisVerdict::Failed
    } else if verdicts.iter().all(|v| *v == AnalysisVerdict::Passed) {
        AnalysisVerdict::Passed
    } else if any(AnalysisVerdict::Inconclusive) {
        AnalysisVerdict::Inconclusive
    } else {
        AnalysisVerdict::Running
    }
}

/// `analysis error-rate` or `analysis error-rate of Deployment web`: the run, as messages name it.
pub fn run_name(run: &AnalysisRunStatus) -> String {
    match (&run.workload_kind, &run.workload) {
        (Some(kind), Some(name)) => format!("analysis {} of {kind} {name}", run.template),
        _ => format!("analysis {}", run.template),
    }
}

/// One clause per run of `wave` with `verdict`, naming it and saying why: for the rollout's message
/// and events (join them with [`crate::status::message::join_capped`]).
pub fn clauses(runs: &[AnalysisRunStatus], wave: i32, verdict: AnalysisVerdict) -> Vec<String> {
    runs.iter()
        .filter(|r| r.wave == wave && r.verdict == verdict)
        .map(|r| match &r.message {
            Some(message) => format!("{}: {message}", run_name(r)),
            None => run_name(r),
        })
        .collect()
}

fn whole_second(now: &Time) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(now.0.as_second()).unwrap_or(now.0))
}
