//! Each stage's figures as rows of the summary (figure, value, value as a multiple of its floor), stage
//! by stage in the order the table shows them, then memory, scale and restarts; and the floor each
//! stage was measured against.

use super::cells::{
    Row, admission_latency, admission_requests, cpu_share, floor_cell, latency_cells, lists_by_client,
    mib_of, named_values, num, opt, pct_by_role, ratio, replicas_mib, total_and_parts,
};
use super::results::{ConfigResults, Cost, Latency, Leak};
use crate::operator::Memory;

fn cost_rows(row: &mut impl FnMut(&str, String, String), stage: &str, cost: &Cost) {
    row(
        &format!("{stage}: admission p50 / p99, server side"),
        admission_latency(cost.admission.as_ref()),
        String::new(),
    );
    row(
        &format!("{stage}: API requests per admission"),
        admission_requests(cost.admission.as_ref()),
        String::new(),
    );
    let by_role: Vec<String> = cost
        .cpu_ms_per_change_by_role
        .iter()
        .map(|(k, v)| format!("{k} {}", num(*v)))
        .collect();
    row(
        &format!("{stage}: operator CPU per change"),
        format!(
            "{} ms{}",
            opt(cost.cpu_ms_per_change),
            if by_role.is_empty() {
                String::new()
            } else {
                format!(" ({})", by_role.join(", "))
            }
        ),
        ratio(cost.cpu_x_floor),
    );
    if let Some(w) = &cost.writes
        && let Some(total) = w.operator_identity_per_change
    {
        let parts: Vec<String> = w
            .operator_identity
            .iter()
            .map(|(k, v)| format!("{k} {}", num(*v)))
            .collect();
        row(
            &format!("{stage}: the operator identity's API requests per change, by verb and resource"),
            total_and_parts(total, &parts),
            String::new(),
        );
    }
    if !cost.watch_events_per_change.is_empty() {
        let mut by_count: Vec<(&String, &f64)> = cost.watch_events_per_change.iter().collect();
        by_count.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
        let parts: Vec<String> = by_count
            .iter()
            .filter(|(_, v)| **v >= 0.005)
            .map(|(k, v)| format!("{k} {}", num(**v)))
            .collect();
        row(
            &format!("{stage}: watch events per change and replica, by kind"),
            total_and_parts(cost.watch_events_per_change.values().sum(), &parts),
            String::new(),
        );
    }
    if !cost.reconciles_per_change.is_empty() {
        let parts: Vec<String> = cost
            .reconciles_per_change
            .iter()
            .map(|(k, v)| format!("{k} {}", num(*v)))
            .collect();
        row(
            &format!("{stage}: reconciles per change, by controller"),
            total_and_parts(cost.reconciles_per_change.values().sum(), &parts),
            String::new(),
        );
    }
    if cost.cpu_share.is_some() {
        row(
            &format!("{stage}: CPU as a share of the machine's"),
            cpu_share(cost.cpu_share.as_ref()),
            String::new(),
        );
    }
    row(
        &format!("{stage}: LISTs, and GETs of cmset's kinds, by client (the API server's audit log)"),
        lists_by_client(cost.lists.as_deref()),
        String::new(),
    );
    if let Some(w) = &cost.writes {
        row(
            &format!("{stage}: operator writes per change (excluding events)"),
            format!(
                "{} ({})",
                num(w.operator_per_change),
                num(w.operator_excl_events_per_change)
            ),
            String::new(),
        );
    }
}

pub(super) fn rows(r: &ConfigResults) -> Vec<Row> {
    let mut rows: Vec<Row> = vec![];
    let mut row = |a: &str, b: String, c: String| rows.push((a.to_string(), b, c));
    if let Some(c) = &r.initial {
        row(
            "initial convergence",
            match c.sets_per_s {
                Some(v) => format!("{} sets/s ({} sets in {} s)", num(v), c.sets, opt(c.seconds)),
                None => format!("TIMEOUT ({} of {} converged)", c.converged, c.sets),
            },
            ratio(c.x_floor),
        );
        row(
            "initial convergence: admission p50 / p99, server side",
            admission_latency(c.admission.as_ref()),
            String::new(),
        );
        row(
            "initial convergence: API requests per admission",
            admission_requests(c.admission.as_ref()),
            String::new(),
        );
    }
    if let Some(c) = &r.churn {
        let label = "churn latency p50 / p90 / p99 / max";
        match &c.latency {
            Some(l) => {
                let (value, x) = latency_cells(l);
                let timed_out = if c.timed_out > 0 {
                    format!(", {} TIMED OUT", c.timed_out)
                } else {
                    String::new()
                };
                row(
                    label,
                    format!(
                        "{value} ({} changes at {}/s{timed_out})",
                        c.changes,
                        num(c.achieved_rate)
                    ),
                    x,
                );
            }
            None => row(label, "no change converged".into(), String::new()),
        }
        cost_rows(&mut row, "churn", &c.cost);
    }
    if let Some(p) = r.burst.as_ref().and_then(|b| b.replay.as_ref()) {
        row(
            "replay floor: the burst's requests, sent without cmset",
            match p.rate {
                Some(v) => format!(
                    "{} changes/s ({} changes in {} s; PATCHes {} in flight, cmset's requests {} + {}; {})",
                    num(v),
                    p.changes,
                    opt(p.seconds),
                    p.concurrency,
                    p.set_reconciles,
                    p.workload_reconciles,
                    if p.webhook {
                        "a null webhook registered"
                    } else {
                        "no webhook"
                    }
                ),
                None => format!("TIMEOUT ({} of {} converged)", p.converged, p.changes),
            },
            String::new(),
        );
        row(
            "replay floor: CPU as a share of the machine's",
            cpu_share(p.cost.cpu_share.as_ref()),
            String::new(),
        );
        if !p.cost.other_cpu_ms_per_change.is_empty() {
            row(
                "replay floor: CPU ms per change of the others",
                named_values(&p.cost.other_cpu_ms_per_change),
                String::new(),
            );
        }
    }
    if let Some(b) = &r.burst {
        if let Some(share) = b.share_of_replay {
            row(
                "burst: share of the replay floor's rate (goal ≥ 90%)",
                format!("{}%", num(100.0 * share)),
                String::new(),
            );
        }
        row(
            "burst: every set changed at once",
            match b.rate {
                Some(v) => format!(
                    "{} changes/s ({} changes in {} s)",
                    num(v),
                    b.changes,
                    opt(b.seconds)
                ),
                None => format!("TIMEOUT ({} of {} converged)", b.converged, b.changes),
            },
            ratio(b.x_floor),
        );
        cost_rows(&mut row, "burst", &b.cost);
        if let Some(w) = &b.cost.writes {
            row(
                "burst: operator's own count of its writes per change",
                num(w.operator_self_per_change),
                String::new(),
            );
            row(
                "burst: kube-controller-manager writes per change",
                num(w.controller_manager_per_change),
                String::new(),
            );
        }
        if !b.cost.other_cpu_ms_per_change.is_empty() {
            row(
                "burst: CPU ms per change of the others",
                named_values(&b.cost.other_cpu_ms_per_change),
                String::new(),
            );
        }
    }
    if let Some(f) = &r.failover {
        row(
            &format!(
                "failover: leader frozen → standby's first write (target ≤ {} s)",
                num(f.target_s)
            ),
            match (f.to_first_write_s, f.within_target) {
                (Some(s), Some(true)) => format!("{} s, within target", num(s)),
                (Some(s), _) => format!("{} s, OVER TARGET", num(s)),
                (None, _) => "NOT MEASURED".into(),
            },
            String::new(),
        );
        row(
            "failover: → standby leads / → first Deployment moves",
            format!("{} / {} s", opt(f.to_leader_s), opt(f.to_first_rollout_s)),
            String::new(),
        );
        let lists: Vec<String> = f
            .list_by_resource
            .iter()
            .map(|(k, v)| format!("{k} {}", num(*v)))
            .collect();
        row(
            "failover: LIST requests from freeze to first write (of cmset's kinds)",
            match (f.list_requests, f.list_requests_cmset_kinds) {
                (Some(n), Some(k)) => format!("{} ({})", num(n), num(k)),
                _ => "-".into(),
            },
            String::new(),
        );
        row(
            "failover: LIST requests by resource",
            if lists.is_empty() {
                "-".into()
            } else {
                lists.join(", ")
            },
            String::new(),
        );
        if let Some(n) = f.identity_list_requests {
            let parts: Vec<String> = f
                .identity_list_by_resource
                .iter()
                .map(|(k, v)| format!("{k} {}", num(*v)))
                .collect();
            row(
                "failover: the operator identity's LIST requests from freeze to first write",
                if parts.is_empty() {
                    num(n)
                } else {
                    format!("{} ({})", num(n), parts.join(", "))
                },
                String::new(),
            );
        }
        let label = "failover: churn latency p50 / p90 / p99 / max";
        match &f.latency {
            Some(l) => {
                let (value, x) = latency_cells(l);
                row(label, format!("{value} ({} changes)", f.changes), x);
            }
            None => row(label, "no change converged".into(), String::new()),
        }
        row(
            "failover: every change reached its Deployment",
            if f.timed_out == 0 && f.unconverged == 0 && f.converged == f.changes {
                format!("yes ({} of {})", f.converged, f.changes)
            } else {
                format!(
                    "NO: {} of {} arrived, {} Deployments off their set's revision",
                    f.converged, f.changes, f.unconverged
                )
            },
            String::new(),
        );
        row(
            "failover: the old leader after SIGCONT",
            f.old_leader.clone(),
            String::new(),
        );
    }
    if let Some(x) = &r.restart {
        row(
            "writes after a restart of both replicas (until ready + window)",
            format!(
                "{} (API server: {}; window {} s)",
                num(x.operator_self_writes),
                num(x.operator_apiserver_total),
                num(x.window_s - x.ready_s)
            ),
            String::new(),
        );
    }
    if let Some(x) = &r.noop {
        row(
            &format!(
                "no-op: {} unchanged sets applied again: operator writes, own count (API server) (goal 0)",
                x.applies
            ),
            format!(
                "{} ({}){}",
                opt(x.operator_writes),
                opt(x.operator_writes_apiserver),
                if x.spec_changed > 0 {
                    format!("; {} applies CHANGED THE SPEC", x.spec_changed)
                } else {
                    String::new()
                }
            ),
            String::new(),
        );
        row(
            "no-op: operator CPU per set applied (goal ≤ 0.3 ms)",
            format!("{} ms", opt(x.cpu_ms_per_set)),
            ratio(x.cost.cpu_x_floor),
        );
    }
    if let Some(x) = &r.large_set {
        row(
            &format!(
                "large set: {} KiB changed {} times, latency p50 / p90 / p99 / max",
                x.kib, x.changes
            ),
            x.latency
                .as_ref()
                .map_or("no change converged".into(), |l| latency_cells(l).0),
            x.latency.as_ref().map(|l| latency_cells(l).1).unwrap_or_default(),
        );
        row(
            "large set: operator CPU per change",
            format!("{} ms", opt(x.cost.cpu_ms_per_change)),
            ratio(x.cost.cpu_x_floor),
        );
        row(
            "large set: RSS before → after its changes (goal: flat)",
            format!(
                "{} → {} ({})",
                replicas_mib(&x.before),
                replicas_mib(&x.after),
                pct_by_role(&x.after_pct_of_before)
            ),
            String::new(),
        );
        if let Some(b) = &x.bystander {
            let p50_p99_max = |l: &Option<Latency>| {
                l.as_ref().map_or("-".into(), |l| {
                    format!("{} / {} / {}", num(l.p50_ms), num(l.p99_ms), num(l.max_ms))
                })
            };
            row(
                // The counts vary by run and configuration: in the cell, so that the row lines up.
                &format!(
                    "large set: a small set's change p50 / p99 / max ms, alone → while the large set changes {} times (goal: no stall)",
                    b.large_changes
                ),
                format!(
                    "{} → {} (p99 × {}; {} → {} changes){}",
                    p50_p99_max(&b.alone),
                    p50_p99_max(&b.during),
                    b.p99_ratio.map_or("-".into(), num),
                    b.changes_alone,
                    b.changes_during,
                    if b.late + b.large_late > 0 {
                        format!("; {} LATE", b.late + b.large_late)
                    } else {
                        String::new()
                    }
                ),
                String::new(),
            );
            row(
                "large set: meanwhile the bare API's own create p50 / p99 / max ms, alone → during (what the large set costs the API server and the machine)",
                format!("{} → {}", p50_p99_max(&b.bare_alone), p50_p99_max(&b.bare_during)),
                String::new(),
            );
        }
    }
    if let Some(x) = &r.flood {
        let p50_p99 = |l: &Option<Latency>| {
            l.as_ref()
                .map_or("-".into(), |l| format!("{} / {}", num(l.p50_ms), num(l.p99_ms)))
        };
        row(
            &format!(
                "flood: a bystander's admission p50 / p99 ms, quiet → while another namespace applies costly sets ({} changes each; goal p99 < 1000)",
                x.changes
            ),
            format!(
                "{} → {}",
                p50_p99(&x.quiet_admission),
                p50_p99(&x.flooded_admission)
            ),
            String::new(),
        );
        row(
            "flood: a bystander's change p50 / p99 ms, quiet → flooded (goal: as fast)",
            format!(
                "{} → {} (p50 × {})",
                p50_p99(&x.quiet_change),
                p50_p99(&x.flooded_change),
                x.change_p50_ratio.map_or("-".into(), num)
            ),
            String::new(),
        );
        row(
            "flood: the bare API's own create p50 / p99 ms, quiet → flooded (what the flood costs the API server itself)",
            format!(
                "{} → {} (p50 × {})",
                p50_p99(&x.quiet_bare),
                p50_p99(&x.flooded_bare),
                x.bare_p50_ratio.map_or("-".into(), num)
            ),
            String::new(),
        );
        row(
            "flood: the costly sets applied meanwhile: judged in full / backtracking refused / over the judging budget / other failures",
            format!(
                "{} / {} / {} / {}",
                x.flood_judged, x.flood_backtracking, x.flood_over_budget, x.flood_other
            ),
            String::new(),
        );
    }
    if let Some(x) = &r.fanout {
        row(
            &format!(
                "fan-out: one set read by {} Deployments, one change → all moved (goal ≤ floor + 1 s)",
                x.workloads
            ),
            match (x.seconds, x.floor_seconds) {
                (Some(s), Some(f)) => format!(
                    "{} s; floor ({} patches, {} in flight) {} s; {:+.2} s beyond it",
                    num(s),
                    x.workloads,
                    x.concurrency,
                    num(f),
                    s - f
                ),
                (Some(s), None) => format!("{} s; no floor", num(s)),
                (None, _) => format!("TIMEOUT ({} of {} moved)", x.moved, x.workloads),
            },
            ratio(x.x_floor),
        );
        row(
            "fan-out: operator CPU / its own count of writes / its identity's API requests, for the one change",
            format!(
                "{} ms / {} / {}",
                opt(x.cost.cpu_ms_per_change),
                x.cost
                    .writes
                    .as_ref()
                    .map_or("-".into(), |w| num(w.operator_self_per_change)),
                opt(x
                    .cost
                    .writes
                    .as_ref()
                    .and_then(|w| w.operator_identity_per_change))
            ),
            String::new(),
        );
    }
    if let Some(x) = &r.readers_churn {
        for (what, p) in [
            ("others' churn (no set read)", &x.others),
            ("readers' churn (no config change)", &x.readers),
        ] {
            let writes = p.cost.writes.as_ref();
            let reconciles: f64 = p.cost.reconciles_per_change.values().sum();
            row(
                &format!(
                    "{what}: {} Deployments × {} pods, {} changes/s for {:.0} s: pod events/s; CPU ms/s above idle, leader / standby (goal < 5); operator writes/s {}; reconciles/s",
                    x.workloads,
                    x.replicas,
                    num(x.rate),
                    x.duration_s,
                    writes.map_or(String::new(), |w| format!("{:?}", w.operator_self)),
                ),
                format!(
                    "{}; {} / {}; {}; {}",
                    num(p.pod_events_per_s),
                    opt(p.cpu_ms_per_s_above_idle_leader),
                    opt(p.cpu_ms_per_s_above_idle_standby),
                    writes.map_or("-".into(), |w| num(w.operator_self_per_change)),
                    num(reconciles),
                ),
                String::new(),
            );
        }
        if let Some(c) = &x.config {
            let stage = format!(
                "config changes with pods ({} Deployments × {} pods, a set each, {} changes/s)",
                x.workloads,
                x.replicas,
                num(c.rate)
            );
            let (value, x_floor) = c
                .latency
                .as_ref()
                .map_or(("-".into(), String::new()), latency_cells);
            row(
                &format!("{stage}: latency p50 / p90 / p99 / max ({} changes)", c.changes),
                value,
                x_floor,
            );
            row(
                &format!("{stage}: pod events per change"),
                num(c.pod_events_per_change),
                String::new(),
            );
            cost_rows(&mut row, &stage, &c.cost);
        }
    }
    if let Some(c) = &r.initial {
        row(
            "RSS after initial convergence",
            replicas_mib(&c.replicas),
            String::new(),
        );
    }
    if let Some(l) = &r.leak {
        let parts: Vec<String> = l
            .replicas
            .iter()
            .map(|x| {
                format!(
                    "{} {} / {} / {} MiB",
                    x.role,
                    mib_of(x.before),
                    mib_of(x.peak),
                    mib_of(x.after)
                )
            })
            .collect();
        let kept: Vec<String> = l
            .replicas
            .iter()
            .map(|x| format!("{} {}", x.role, opt(x.kept_kib_per_set)))
            .collect();
        row(
            &format!("RSS before / with / after {} sets created and deleted", l.sets),
            parts.join("; "),
            String::new(),
        );
        row(
            "RSS kept per created-and-deleted set (KiB)",
            kept.join(", "),
            String::new(),
        );
        let pct: Vec<String> = l
            .replicas
            .iter()
            .map(|x| format!("{} {}%", x.role, opt(x.after_pct_of_before)))
            .collect();
        row(
            &format!(
                "RSS after {} sets created and deleted, % of before (goal ≤ 105%)",
                l.sets
            ),
            pct.join(", "),
            String::new(),
        );
    }
    if r.leak_cycles.len() > 1 {
        let cycles = &r.leak_cycles;
        let roles: Vec<String> = cycles[0].replicas.iter().map(|x| x.role.clone()).collect();
        let after = |c: &Leak, role: &str| -> Option<Memory> {
            c.replicas.iter().find(|x| x.role == role).and_then(|x| x.after)
        };
        let series: Vec<String> = roles
            .iter()
            .map(|role| {
                let mib: Vec<String> = cycles.iter().map(|c| mib_of(after(c, role))).collect();
                format!("{role} {}", mib.join(" → "))
            })
            .collect();
        row(
            &format!(
                "RSS after each of {} cycles of {} sets created and deleted (MiB)",
                cycles.len(),
                cycles[0].sets
            ),
            series.join("; "),
            String::new(),
        );
        let (last, middle) = (cycles.len() - 1, cycles.len() / 2 - 1);
        let plateau: Vec<String> = roles
            .iter()
            .map(|role| {
                let pct = after(&cycles[middle], role)
                    .zip(after(&cycles[last], role))
                    .map(|(m, l)| l.rss_kib as f64 * 100.0 / m.rss_kib.max(1) as f64);
                format!("{role} {}%", opt(pct))
            })
            .collect();
        let heap: Vec<String> = roles
            .iter()
            .map(|role| {
                let mib: Vec<String> = cycles
                    .iter()
                    .map(|c| {
                        after(c, role)
                            .and_then(|m| m.heap_in_use_kib)
                            .map_or("-".into(), |k| format!("{:.1}", k as f64 / 1024.0))
                    })
                    .collect();
                format!("{role} {}", mib.join(" → "))
            })
            .collect();
        row(
            "heap in use after each cycle (MiB; what RSS would be if the allocator kept no free memory)",
            heap.join("; "),
            String::new(),
        );
        row(
            &format!(
                "RSS after cycle {} as % of cycle {} (goal: within 2% of 100)",
                last + 1,
                middle + 1
            ),
            plateau.join(", "),
            String::new(),
        );
    }
    if let Some(m) = &r.memory {
        row(
            &format!(
                "RSS before / after {} unrelated ConfigMaps + {} Deployments",
                m.unrelated_configmaps, m.unrelated_deployments
            ),
            format!(
                "{} → {}",
                replicas_mib(&m.before_unrelated),
                replicas_mib(&m.after_unrelated)
            ),
            m.rss_ratio
                .map(|v| format!("{:+.1}%", (v - 1.0) * 100.0))
                .unwrap_or_default(),
        );
    }
    let smallest = r.scales.iter().min_by_key(|s| s.sets);
    if let (Some(small), Some(large)) = (smallest, r.scales.iter().max_by_key(|s| s.sets))
        && large.sets > small.sets
    {
        use crate::operator::Memory;
        // Each replica's growth of one reading from the smallest scale to the largest, per set.
        let per_added_set = |kib: fn(Memory) -> Option<u64>| -> String {
            let parts: Vec<String> = large
                .initial
                .replicas
                .iter()
                .map(|x| {
                    let before = small.initial.replicas.iter().find(|y| y.role == x.role);
                    let reading = |m: Option<Memory>| m.and_then(kib);
                    let per_set = reading(x.memory)
                        .zip(reading(before.and_then(|y| y.memory)))
                        .map(|(l, s)| (l as f64 - s as f64) / (large.sets - small.sets) as f64);
                    format!("{} {}", x.role, opt(per_set))
                })
                .collect();
            format!("{} ({} → {} sets)", parts.join(", "), small.sets, large.sets)
        };
        row(
            "RSS per added set, smallest to largest scale (KiB)",
            per_added_set(|m| Some(m.rss_kib)),
            String::new(),
        );
        // The heap the program holds, without the free pages glibc keeps or returns between
        // readings, which move RSS by megabytes either way.
        row(
            "heap in use per added set, smallest to largest scale (KiB)",
            per_added_set(|m| m.heap_in_use_kib),
            String::new(),
        );
        row(
            "anonymous RSS per added set, smallest to largest scale (KiB)",
            per_added_set(|m| m.anon_kib),
            String::new(),
        );
    }
    if let Some(s) = r.scales.iter().max_by_key(|s| s.sets) {
        let parts: Vec<String> = s
            .initial
            .replicas
            .iter()
            .map(|x| {
                format!(
                    "{} {}",
                    x.role,
                    x.memory
                        .map_or("-".into(), |m| num(m.rss_kib as f64 / s.sets as f64))
                )
            })
            .collect();
        row(
            "RSS per set at the largest scale (KiB)",
            format!("{} ({} sets)", parts.join(", "), s.sets),
            String::new(),
        );
    }
    let restarted: Vec<&String> = r
        .restarted
        .iter()
        .chain(r.scales.iter().flat_map(|s| &s.restarted))
        .collect();
    if !r.name.is_empty() && r.name != "legacy" {
        row(
            "replicas that exited unasked (started again before the next stage)",
            if restarted.is_empty() {
                "none".into()
            } else {
                restarted
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            },
            String::new(),
        );
    }
    rows
}

/// The floor each stage was measured against.
pub(super) fn floors(r: &ConfigResults) -> Vec<(String, String)> {
    let mut out = vec![];
    if let Some(c) = &r.initial {
        out.push(("initial convergence".into(), floor_cell(c.floor.as_ref())));
    }
    if let Some(c) = &r.churn {
        out.push(("churn".into(), floor_cell(c.floor.as_ref())));
    }
    if let Some(b) = &r.burst {
        out.push(("burst".into(), floor_cell(b.floor.as_ref())));
    }
    if let Some(f) = &r.failover {
        out.push(("failover".into(), floor_cell(f.floor.as_ref())));
    }
    if let Some(x) = &r.noop {
        out.push(("no-op".into(), floor_cell(x.floor.as_ref())));
    }
    if let Some(x) = &r.large_set {
        out.push(("large set".into(), floor_cell(x.floor.as_ref())));
    }
    if let Some(x) = &r.fanout {
        out.push(("fan-out".into(), floor_cell(x.floor.as_ref())));
    }
    for s in &r.scales {
        out.push((format!("scale {}", s.sets), floor_cell(s.initial.floor.as_ref())));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::ReplicaMemory;
    use crate::operator::Memory;
    use crate::report::{Bystander, Convergence, LargeSet, Scale};

    #[test]
    fn a_stage_reports_watch_events_by_kind_most_first_and_reconciles_by_controller() {
        let cost = Cost {
            watch_events_per_change: [
                ("Pod apply".to_string(), 1.5),
                ("Deployment apply".to_string(), 2.5),
            ]
            .into(),
            reconciles_per_change: [("set".to_string(), 6.5), ("workload".to_string(), 5.25)].into(),
            ..Cost::default()
        };
        let mut rows = Vec::new();
        cost_rows(
            &mut |figure, value, _| rows.push((figure.to_string(), value)),
            "churn",
            &cost,
        );
        let value = |figure: &str| rows.iter().find(|(f, _)| f == figure).map(|(_, v)| v.clone());
        assert_eq!(
            value("churn: watch events per change and replica, by kind").as_deref(),
            Some("4.00 (Deployment apply 2.50, Pod apply 1.50)")
        );
        assert_eq!(
            value("churn: reconciles per change, by controller").as_deref(),
            Some("11.8 (set 6.50, workload 5.25)")
        );
        // An operator that does not count them: no row.
        let mut rows = Vec::new();
        cost_rows(
            &mut |figure, value, _| rows.push((figure.to_string(), value)),
            "churn",
            &Cost::default(),
        );
        assert!(
            !rows
                .iter()
                .any(|(f, _)| f.contains("watch events") || f.contains("reconciles"))
        );
    }

    #[test]
    fn memory_per_added_set_from_the_smallest_to_the_largest_scale() {
        let at = |sets: usize, rss_kib: u64, heap_kib: Option<u64>| Scale {
            sets,
            initial: Convergence {
                replicas: vec![ReplicaMemory {
                    role: "leader".into(),
                    memory: Some(Memory {
                        rss_kib,
                        heap_in_use_kib: heap_kib,
                        anon_kib: heap_kib.map(|h| h + 3_000),
                        ..Memory::default()
                    }),
                }],
                ..Convergence::default()
            },
            ..Scale::default()
        };
        let mut c = ConfigResults {
            name: "webhook".into(),
            ..ConfigResults::default()
        };
        c.scales = vec![at(2000, 59_388, Some(35_079)), at(100, 27_196, Some(2_738))];
        let t = |c: &ConfigResults| {
            rows(c)
                .into_iter()
                .filter(|(name, ..)| name.contains("per added set"))
                .map(|(name, value, _)| format!("{name}: {value}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            t(&c),
            [
                "RSS per added set, smallest to largest scale (KiB): leader 16.9 (100 → 2000 sets)",
                "heap in use per added set, smallest to largest scale (KiB): leader 17.0 (100 → 2000 sets)",
                "anonymous RSS per added set, smallest to largest scale (KiB): leader 17.0 (100 → 2000 sets)",
            ]
        );
        // A replica that did not report its heap (an operator without the gauge) shows none.
        c.scales[1] = at(100, 27_196, None);
        assert!(t(&c)[1].ends_with("leader - (100 → 2000 sets)"), "{:?}", t(&c));
    }

    /// Rows are matched across configurations by their label: the bystander's counts, which differ
    /// between runs, are in the cell; the bare API's row follows it.
    #[test]
    fn the_large_set_s_bystander_rows_line_up_across_configurations() {
        let at = |ms: f64| Latency {
            p50_ms: ms,
            p99_ms: 2.0 * ms,
            max_ms: 3.0 * ms,
            ..Latency::default()
        };
        let config = |during: usize| ConfigResults {
            large_set: Some(LargeSet {
                bystander: Some(Bystander {
                    large_changes: 3,
                    changes_alone: 5,
                    changes_during: during,
                    alone: Some(at(10.0)),
                    during: Some(at(20.0)),
                    p99_ratio: Some(2.0),
                    bare_alone: Some(at(1.0)),
                    bare_during: Some(at(2.0)),
                    ..Bystander::default()
                }),
                ..LargeSet::default()
            }),
            ..ConfigResults::default()
        };
        let bystander = |c: &ConfigResults| {
            rows(c)
                .into_iter()
                .filter(|(name, ..)| name.contains("small set") || name.contains("bare API"))
                .collect::<Vec<_>>()
        };
        let (six, five) = (bystander(&config(6)), bystander(&config(5)));
        assert_eq!(six.len(), 2);
        assert_eq!(
            six.iter().map(|r| &r.0).collect::<Vec<_>>(),
            five.iter().map(|r| &r.0).collect::<Vec<_>>()
        );
        assert_eq!(
            six[0].1,
            "10.0 / 20.0 / 30.0 → 20.0 / 40.0 / 60.0 (p99 × 2.00; 5 → 6 changes)"
        );
        assert_eq!(six[1].1, "1.00 / 2.00 / 3.00 → 2.00 / 4.00 / 6.00");
        let mut late = config(6);
        if let Some(b) = late.large_set.as_mut().and_then(|x| x.bystander.as_mut()) {
            b.late = 1;
        }
        assert!(bystander(&late)[0].1.ends_with("; 1 LATE"));
    }
}
