//! The forecast and the controllers' loop agree: the same world, the same scripted clock and the same
//! health give the same moves at the same times.
//!
//! The loop here is the controllers', as the wave scenarios drive it: every second of the scripted
//! clock the set is planned and its plan carried out, then every workload is reconciled the way the
//! workload controller does (its target, the windows' and waves' gate, the plan of its references),
//! and a moved workload becomes healthy `ready_after` seconds after its move; with a budget, a move asks
//! for a slot first, as the index keeps it. The forecast jumps from
//! one instant to the next it expects anything to change at; ticking every second finds whatever it
//! would have skipped.

use std::collections::BTreeMap;
use std::time::Duration;

use cmset_api::{ConfigMapSet, ConfigMapSetSpec, ConfigMapTemplate, RolloutSpec, RolloutWindow, WindowKind};
use cmset_core::policy::break_glass::judge;
use cmset_core::policy::budget::{Admit, Budget};
use cmset_core::policy::windows::{Window, WindowSource};
use cmset_core::revisions::revision::inline_identity;
use cmset_core::rollout::forecast::{BudgetView, Clock, SetObject, World, forecast};
use cmset_core::rollout::pinning::{SetTarget, plan_workload};
use cmset_core::rollout::plan::{SetInput, plan_set};
use cmset_core::rollout::waves::gate;
use cmset_core::rollout::window_hold::{ClusterView, window_state};
use cmset_core::set::{SetRef, SourceState};
use cmset_core::workloads::health::{Health, Wave};
use cmset_core::workloads::observe::{RevisionView, WorkloadView};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use support::revision_of;

mod support;

const START: i64 = 1_800_000_000;

fn deployment(name: &str, wave: i32, reads: &str) -> WorkloadView {
    support::deployment_reading(name, Wave::Number(wave), reads)
}

/// What one case varies.
#[derive(Clone, Debug)]
struct Case {
    waves: Vec<i32>,
    stabilization: i32,
    ready_after: i64,
    /// A Deny window opening every `every` minutes for `open` minutes, in the set or the cluster.
    deny: Option<(u32, u32, bool)>,
    /// Seconds into the scripted clock's first minute the change lands.
    offset: i64,
    /// The cluster-wide rollout budget's cap, if any.
    cap: Option<usize>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(0i32..3, 1..4),
        0i32..40,
        0i64..30,
        prop::option::of((2u32..6, 1u32..3, any::<bool>())),
        0i64..600,
        prop::option::of(1usize..3),
    )
        .prop_map(|(waves, stabilization, ready_after, deny, offset, cap)| Case {
            waves,
            stabilization,
            ready_after,
            deny: deny.map(|(every, open, cluster)| (every, open.min(every - 1), cluster)),
            offset,
            cap,
        })
}

fn deny_window(every: u32, open: u32) -> RolloutWindow {
    RolloutWindow {
        name: Some("freeze".into()),
        kind: WindowKind::Deny,
        schedule: format!("*/{every} * * * *"),
        duration: format!("{open}m"),
        time_zone: None,
    }
}

/// The set at revision 1, every workload on it, healthy; then its content changes.
fn world(case: &Case) -> (ConfigMapSet, Vec<RevisionView>, Vec<WorkloadView>, Vec<Window>) {
    let windows = match case.deny {
        Some((every, open, false)) => vec![deny_window(every, open)],
        _ => vec![],
    };
    let mut set = ConfigMapSet::new(
        "app",
        ConfigMapSetSpec {
            template: ConfigMapTemplate {
                data: Some(BTreeMap::from([("mode".to_string(), "v1".to_string())])),
                ..ConfigMapTemplate::default()
            },
            revision_history_limit: 10,
            rollout: Some(RolloutSpec {
                stabilization_seconds: case.stabilization,
                progress_deadline_seconds: 3600,
                windows,
                ..RolloutSpec::default()
            }),
            ..ConfigMapSetSpec::default()
        },
    );
    set.metadata.namespace = Some("team".into());
    set.metadata.uid = Some("set-uid".into());
    set.metadata.generation = Some(1);
    let first = cmset_core::revisions::naming::revision_name("app", &inline_identity((&set).into()).unwrap());
    let revisions = vec![revision_of(&set, &first, 1)];
    let workloads: Vec<WorkloadView> = case
        .waves
        .iter()
        .enumerate()
        .map(|(i, wave)| deployment(&format!("w{i}"), *wave, &first))
        .collect();
    let cluster = match case.deny {
        Some((every, open, true)) => {
            let source = WindowSource::Cluster {
                name: "freeze".into(),
            };
            cmset_core::policy::windows::parse_all(&[deny_window(every, open)], &source, "spec.windows")
                .unwrap()
        }
        _ => vec![],
    };
    // Settle revision 1 with no rollout under way (as a set long rolled out).
    let mut settled = set.clone();
    let plan = plan_set(&SetInput {
        set: (&settled).into(),
        source: SourceState::Inline,
        revisions: &revisions,
        workloads: &workloads,
        history: &[],
        pod_refs: Some(&Default::default()),
        now: Time(Timestamp::from_second(START - 3600).unwrap()),
        budget_waiting: &Default::default(),
        analysis: None,
        windows: &Default::default(),
        schemas: &Default::default(),
        check_jobs: &Default::default(),
        content_budget: Default::default(),
    });
    settled.status = Some(plan.status);
    settled
        .spec
        .template
        .data
        .as_mut()
        .unwrap()
        .insert("mode".into(), "v2".into());
    settled.metadata.generation = Some(2);
    (settled, revisions, workloads, cluster)
}

/// The controllers' loop, one reconcile of everything per second: every move, with its second.
fn controllers(case: &Case, horizon: i64) -> Vec<(String, String, String, i64)> {
    let (mut set, mut revisions, mut workloads, cluster) = world(case);
    let mut ready_at: BTreeMap<String, i64> = BTreeMap::new();
    let mut moves = Vec::new();
    // The budget as the index keeps it: a move asks for a slot with its turn (the revision's
    // creation, then the workload), holds it while rolling out, and frees it once healthy.
    let mut budget = case
        .cap
        .map(|cap| Budget::<String, (i64, String)>::new(Some(cap)));
    let mut waiting: BTreeMap<String, String> = BTreeMap::new();
    let mut generations: BTreeMap<String, i64> = BTreeMap::new();
    let start = START + case.offset;
    for now in start..=start + horizon {
        let at = Timestamp::from_second(now).unwrap();
        for w in &mut workloads {
            if ready_at.get(&w.uid).is_some_and(|t| *t <= now) {
                ready_at.remove(&w.uid);
                w.health = Health::Healthy;
                if let Some(budget) = &mut budget {
                    budget.observe(&w.uid, generations[&w.uid], false);
                }
            }
        }
        for _ in 0..8 {
            let windows =
                window_state((&set).into(), &cluster, at).with_break_glass(judge((&set).into(), &[]));
            let plan = plan_set(&SetInput {
                set: (&set).into(),
                source: SourceState::Inline,
                revisions: &revisions,
                workloads: &workloads,
                history: &[],
                pod_refs: Some(&Default::default()),
                now: Time(at),
                budget_waiting: &waiting,
                analysis: None,
                windows: &windows,
                schemas: &Default::default(),
                check_jobs: &Default::default(),
                content_budget: Default::default(),
            });
            if let Some(new) = &plan.create {
                revisions.push(revision_of(&set, new.name(), plan.status.revision.unwrap()));
            }
            let before = set.status.clone();
            set.status = Some(plan.status);
            // The workload controller: the set's target, the gate, the references' plan.
            let view: SetRef<'_> = (&set).into();
            let identity = inline_identity(view);
            let lowest = workloads
                .iter()
                .filter_map(|w| w.wave.number())
                .min()
                .unwrap_or(0);
            let held =
                window_state(view, &cluster, at).holds(view, view.status().and_then(|s| s.rollout.as_ref()));
            let mut moved = Vec::new();
            for (i, w) in workloads.iter().enumerate() {
                let Some(target) = SetTarget::observed(view, identity.as_deref(), &revisions, &w.uid) else {
                    continue;
                };
                let g = gate(view, &target.current, w, lowest, held);
                let current = target.current.clone();
                let changes = plan_workload(w, &[target.gated(g)]).changes;
                if changes.is_empty() {
                    continue;
                }
                let generation = *generations.get(&w.uid).unwrap_or(&1);
                if let Some(budget) = &mut budget {
                    let created = revisions
                        .iter()
                        .find(|r| r.name == current)
                        .and_then(|r| r.created)
                        .unwrap_or(i64::MAX);
                    let turn = (created, format!("Deployment/{}", w.name));
                    if let Admit::Wait(line) = budget.request(&w.uid, turn, generation) {
                        waiting.insert(w.uid.clone(), line.to_string());
                        continue;
                    }
                }
                waiting.remove(&w.uid);
                for change in changes {
                    moved.push((i, change.from, change.to));
                }
            }
            let quiet = moved.is_empty() && before == set.status;
            for (i, from, to) in moved {
                let w = &mut workloads[i];
                w.pod_spec.containers[0].env_from.as_mut().unwrap()[0]
                    .config_map_ref
                    .as_mut()
                    .unwrap()
                    .name = to.clone();
                w.health = Health::Progressing;
                ready_at.insert(w.uid.clone(), now + case.ready_after);
                let generation = generations.entry(w.uid.clone()).or_insert(1);
                *generation += 1;
                if let Some(budget) = &mut budget {
                    budget.observe(&w.uid, *generation, true);
                }
                if case.ready_after == 0 {
                    w.health = Health::Healthy;
                    ready_at.remove(&w.uid);
                    if let Some(budget) = &mut budget {
                        budget.observe(&w.uid, *generation, false);
                    }
                }
                moves.push((w.name.clone(), from, to, now - start));
            }
            if quiet {
                break;
            }
        }
    }
    moves
}

/// The forecast of the same change: every move, with its second.
fn forecasted(case: &Case, horizon: i64) -> Vec<(String, String, String, i64)> {
    let (set, revisions, workloads, cluster) = world(case);
    let start = Timestamp::from_second(START + case.offset).unwrap();
    let result = forecast(
        World {
            set: SetObject::ConfigMap(set),
            source: SourceState::Inline,
            revisions,
            workloads,
            history: &[],
            pod_refs: Some(&Default::default()),
            cluster: ClusterView::Known(cluster),
            overrides: &[],
            budget: case.cap.map(|cap| BudgetView {
                cap,
                moving_elsewhere: 0,
                waiting_ahead: 0,
            }),
            schemas: &Default::default(),
        },
        Clock {
            start,
            ready_after: Duration::from_secs(case.ready_after as u64),
            horizon: Duration::from_secs(horizon as u64),
        },
    );
    result
        .moves
        .into_iter()
        .map(|m| {
            let at = m.at.as_second() - start.as_second();
            (m.name, m.from, m.to, at)
        })
        .filter(|m| m.3 <= horizon)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn the_forecast_finds_the_controllers_moves_at_the_same_times(case in case()) {
        let horizon = 900;
        let mut expected = controllers(&case, horizon);
        let mut got = forecasted(&case, horizon);
        expected.sort_by(|a, b| (a.3, &a.0).cmp(&(b.3, &b.0)));
        got.sort_by(|a, b| (a.3, &a.0).cmp(&(b.3, &b.0)));
        prop_assert!(!expected.is_empty(), "the change moves someone within the horizon");
        prop_assert_eq!(got, expected);
    }
}
