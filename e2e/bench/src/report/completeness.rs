//! Which figures a configuration should have produced but did not (`--strict` fails the run on them).

use super::results::{ConfigResults, Convergence, Cost};
use crate::install::ReplicaMemory;
use crate::metrics::Admission;

/// What a configuration's run could measure, so what its results must hold.
#[derive(Clone, Copy, Debug, Default)]
pub struct Expected {
    /// The webhook configuration: admissions were answered.
    pub webhook: bool,
    /// The replicas ran under the run's own identity: its requests were counted.
    pub identity: bool,
    /// The replay floor was taken before the burst.
    pub replay: bool,
    /// The API server's audit log was read: every window says whose LISTs it saw.
    pub audit: bool,
}

/// The figures a configuration should have produced but did not (for `--strict`): every stage that
/// ran has its numbers, its floor and its ratios; with the webhook, admissions were answered and their
/// latency is known; without it, none was.
pub fn missing(c: &ConfigResults, expected: Expected) -> Vec<String> {
    let Expected {
        webhook,
        identity,
        replay,
        audit,
    } = expected;
    let mut out = vec![];
    let mut need = |ok: bool, what: &str| {
        if !ok {
            out.push(format!("[{}] no figure: {what}", c.name));
        }
    };
    let admission_ok = |a: Option<&Admission>| match a {
        None => false,
        Some(a) if webhook => a.admissions > 0.0 && a.p50_ms.is_some() && a.p99_ms.is_some(),
        Some(a) => a.admissions == 0.0,
    };
    let replicas_ok = |r: &[ReplicaMemory]| r.len() == 2 && r.iter().all(|m| m.memory.is_some());
    // At the install's start the webhook is called only once its CA is registered: a small namespace
    // may converge before that, so convergence needs admissions only to be absent without a webhook.
    let convergence = |need: &mut dyn FnMut(bool, &str), c: &Convergence, what: &str| {
        need(c.sets_per_s.is_some(), &format!("{what}: sets/s"));
        need(c.x_floor.is_some(), &format!("{what}: × floor"));
        need(
            webhook || admission_ok(c.admission.as_ref()),
            &format!("{what}: admissions (none)"),
        );
        need(replicas_ok(&c.replicas), &format!("{what}: RSS of both replicas"));
    };
    let cost = |need: &mut dyn FnMut(bool, &str), cost: &Cost, what: &str| {
        need(
            cost.cpu_x_floor.is_some(),
            &format!("{what}: CPU per change × floor"),
        );
        need(cost.writes.is_some(), &format!("{what}: writes per change"));
        need(
            !identity
                || cost
                    .writes
                    .as_ref()
                    .is_some_and(|w| w.operator_identity_per_change.is_some()),
            &format!("{what}: the operator identity's requests per change"),
        );
        need(
            admission_ok(cost.admission.as_ref()),
            &format!("{what}: admissions ({})", if webhook { "some" } else { "none" }),
        );
        need(
            cost.cpu_share.is_some(),
            &format!("{what}: CPU as a share of the machine's"),
        );
        need(
            !audit || cost.lists.is_some(),
            &format!("{what}: LISTs by client"),
        );
    };
    if let Some(i) = &c.initial {
        convergence(&mut need, i, "initial convergence");
    }
    if let Some(ch) = &c.churn {
        need(
            ch.latency.as_ref().is_some_and(|l| l.p99_x_floor.is_some()),
            "churn latency × floor",
        );
        need(
            ch.timed_out == 0 && ch.converged == ch.changes,
            "churn: every change converged",
        );
        cost(&mut need, &ch.cost, "churn");
    }
    if let Some(b) = &c.burst {
        need(b.x_floor.is_some(), "burst changes/s × floor");
        cost(&mut need, &b.cost, "burst");
        if replay {
            need(
                b.replay.as_ref().is_some_and(|r| r.rate.is_some()),
                "the replay floor's changes/s",
            );
            need(b.share_of_replay.is_some(), "burst: share of the replay floor");
            need(
                b.replay.as_ref().is_some_and(|r| r.cost.cpu_share.is_some()),
                "the replay floor's CPU share",
            );
        }
    }
    if let Some(f) = &c.failover {
        need(f.to_first_write_s.is_some(), "failover: standby's first write");
        need(f.to_leader_s.is_some(), "failover: standby leads");
        need(f.to_first_rollout_s.is_some(), "failover: first Deployment moved");
        need(f.list_requests.is_some(), "failover: LIST requests");
        need(
            !identity || f.identity_list_requests.is_some(),
            "failover: the operator identity's LIST requests",
        );
        need(
            f.latency.as_ref().is_some_and(|l| l.max_x_floor.is_some()),
            "failover: churn latency × floor",
        );
        need(
            f.timed_out == 0 && f.unconverged == 0 && f.converged == f.changes,
            "failover: every change converged",
        );
    }
    if let Some(l) = &c.leak {
        need(
            l.replicas.len() == 2
                && l.replicas
                    .iter()
                    .all(|r| r.kept_kib_per_set.is_some() && r.after_pct_of_before.is_some()),
            "RSS of both replicas before and after the leak sets",
        );
    }
    if let Some(x) = &c.noop {
        need(
            x.operator_writes.is_some() && x.operator_writes_apiserver.is_some(),
            "no-op: operator writes",
        );
        need(x.cpu_ms_per_set.is_some(), "no-op: CPU per set");
        need(x.idle_s.is_some(), "no-op: the replicas idle again");
        need(x.spec_changed == 0, "no-op: applies that left the spec as it was");
    }
    if let Some(x) = &c.large_set {
        need(
            x.converged == x.changes && x.latency.is_some(),
            "large set: every change converged",
        );
        need(x.cost.cpu_x_floor.is_some(), "large set: CPU per change × floor");
        need(
            replicas_ok(&x.before) && replicas_ok(&x.after) && x.after_pct_of_before.len() == 2,
            "large set: RSS of both replicas before and after",
        );
        need(
            x.bystander.as_ref().is_some_and(|b| {
                [&b.alone, &b.during, &b.bare_alone, &b.bare_during]
                    .iter()
                    .all(|l| l.is_some())
                    && b.late + b.large_late == 0
            }),
            "large set: a small set's changes timed alone and while it changes, every one arrived",
        );
    }
    if let Some(x) = &c.flood {
        need(
            x.quiet_change.is_some() && x.flooded_change.is_some() && x.late == 0,
            "flood: every bystander change arrived, quiet and flooded",
        );
        need(
            x.quiet_admission.is_some() && x.flooded_admission.is_some(),
            "flood: the bystander's admissions, quiet and flooded",
        );
        need(x.flood_judged + x.flood_backtracking > 0, "flood: the flood ran");
    }
    if let Some(x) = &c.fanout {
        need(x.seconds.is_some(), "fan-out: every Deployment moved");
        need(x.x_floor.is_some(), "fan-out: × the floor of its patches");
        need(
            x.cost.cpu_ms_per_change.is_some() && x.cost.writes.is_some(),
            "fan-out: CPU and writes",
        );
    }
    if let Some(x) = &c.readers_churn {
        for (what, p) in [("others", &x.others), ("readers", &x.readers)] {
            need(
                p.pod_events_per_s > 0.0,
                &format!("readers' churn ({what}): pods were churned"),
            );
            need(
                p.cpu_ms_per_s_above_idle_leader.is_some() && p.cpu_ms_per_s_above_idle_standby.is_some(),
                &format!("readers' churn ({what}): CPU of both replicas above idle"),
            );
        }
        match &x.config {
            Some(c) => {
                need(c.latency.is_some(), "config changes with pods: latency");
                need(
                    c.pod_events_per_change > 0.0,
                    "config changes with pods: pods were rolled",
                );
                cost(&mut need, &c.cost, "config changes with pods");
            }
            None => need(false, "config changes with pods"),
        }
    }
    if let Some(m) = &c.memory {
        need(
            replicas_ok(&m.before_unrelated) && replicas_ok(&m.after_unrelated),
            "RSS of both replicas before and after the unrelated objects",
        );
    }
    for s in &c.scales {
        convergence(&mut need, &s.initial, &format!("scale {}", s.sets));
        match &s.burst {
            Some(b) => {
                need(b.x_floor.is_some(), &format!("scale {}: burst × floor", s.sets));
                cost(&mut need, &b.cost, &format!("scale {}: burst", s.sets));
            }
            None => need(false, &format!("scale {}: burst", s.sets)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::Memory;
    use crate::report::{Churn, FanOut, Floor, NoOp, Writes, latency};

    fn hook() -> Expected {
        Expected {
            webhook: true,
            ..Expected::default()
        }
    }

    #[test]
    fn strict_wants_every_figure() {
        let empty = ConfigResults {
            name: "webhook".into(),
            initial: Some(Convergence::default()),
            ..ConfigResults::default()
        };
        let m = missing(&empty, hook());
        assert!(
            m.iter().any(|s| s.contains("initial convergence: sets/s")),
            "{m:?}"
        );
        let quiet = Convergence {
            sets_per_s: Some(1.0),
            x_floor: Some(1.0),
            admission: Some(Admission::default()),
            replicas: vec![
                ReplicaMemory {
                    role: "leader".into(),
                    memory: Some(Memory::default()),
                };
                2
            ],
            ..Convergence::default()
        };
        let ok = ConfigResults {
            name: "no-webhook".into(),
            initial: Some(quiet),
            ..ConfigResults::default()
        };
        assert_eq!(missing(&ok, Expected::default()), Vec::<String>::new());
        let mut churned = ok.clone();
        churned.churn = Some(Churn {
            latency: latency(&[1.0], Some(&Floor::default())),
            cost: Cost {
                cpu_x_floor: Some(1.0),
                writes: Some(Writes::default()),
                admission: Some(Admission::default()),
                cpu_share: Some(crate::machine::CpuShare::default()),
                ..Cost::default()
            },
            ..Churn::default()
        });
        assert_eq!(missing(&churned, Expected::default()), Vec::<String>::new());
        let m = missing(&churned, hook());
        assert!(
            m.len() == 1 && m[0].contains("churn: admissions (some)"),
            "with the webhook, churn is admitted: {m:?}"
        );
        let mut noop = ok.clone();
        noop.noop = Some(NoOp {
            operator_writes: Some(0.0),
            operator_writes_apiserver: Some(0.0),
            cpu_ms_per_set: Some(0.1),
            idle_s: Some(3.0),
            spec_changed: 2,
            ..NoOp::default()
        });
        let m = missing(&noop, Expected::default());
        assert!(
            m.len() == 1 && m[0].contains("applies that left the spec as it was"),
            "an apply that changed the spec is no no-op: {m:?}"
        );
        let mut fanout = ok.clone();
        fanout.fanout = Some(FanOut {
            seconds: Some(1.0),
            ..FanOut::default()
        });
        let m = missing(&fanout, Expected::default());
        assert!(
            m.iter().any(|s| s.contains("fan-out: × the floor")),
            "the fan-out needs its floor: {m:?}"
        );
    }

    #[test]
    fn a_replayed_burst_needs_the_replay_and_its_share() {
        let cost = Cost {
            cpu_x_floor: Some(1.0),
            writes: Some(Writes::default()),
            admission: Some(Admission::default()),
            cpu_share: Some(crate::machine::CpuShare::default()),
            ..Cost::default()
        };
        let mut c = ConfigResults {
            name: "no-webhook".into(),
            burst: Some(crate::report::Burst {
                x_floor: Some(1.0),
                cost: cost.clone(),
                ..crate::report::Burst::default()
            }),
            ..ConfigResults::default()
        };
        assert_eq!(missing(&c, Expected::default()), Vec::<String>::new());
        let replayed = Expected {
            replay: true,
            audit: true,
            ..Expected::default()
        };
        let m = missing(&c, replayed);
        assert!(
            [
                "replay floor's changes/s",
                "share of the replay floor",
                "replay floor's CPU share",
                "LISTs by client"
            ]
            .iter()
            .all(|want| m.iter().any(|s| s.contains(want))),
            "{m:?}"
        );
        let burst = c.burst.as_mut().unwrap();
        burst.cost.lists = Some(vec![]);
        burst.share_of_replay = Some(0.9);
        burst.replay = Some(crate::report::Replay {
            rate: Some(100.0),
            cost,
            ..crate::report::Replay::default()
        });
        assert_eq!(missing(&c, replayed), Vec::<String>::new());
    }
}
