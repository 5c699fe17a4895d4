//! How one figure is written in a cell of the summary: numbers to three significant places, a
//! multiple of the floor, memory by replica, admissions, a total and its parts.

use std::collections::BTreeMap;

use super::results::{Floor, Latency};
use crate::install::ReplicaMemory;
use crate::metrics::Admission;
use crate::operator::Memory;

pub(super) fn num(v: f64) -> String {
    let v = v + 0.0; // -0.0 prints as "-0"
    if !v.is_finite() {
        "-".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

pub(super) fn opt(v: Option<f64>) -> String {
    v.map(num).unwrap_or_else(|| "-".into())
}

pub(super) fn ratio(v: Option<f64>) -> String {
    v.map(|v| format!("{}×", num(v))).unwrap_or_default()
}

pub(super) fn mib_of(m: Option<Memory>) -> String {
    m.map(|m| num(m.rss_kib as f64 / 1024.0))
        .unwrap_or_else(|| "-".into())
}

/// `leader 37.8 / standby 20.1 MiB` (or `single 37.8 MiB`), with the anonymous part where read:
/// `leader 37.8 (anon 14.0) / ...`.
pub(super) fn replicas_mib(replicas: &[ReplicaMemory]) -> String {
    if replicas.is_empty() {
        return "-".into();
    }
    let parts: Vec<String> = replicas
        .iter()
        .map(|r| {
            let anon = r.memory.and_then(|m| m.anon_kib);
            match anon {
                Some(kib) => format!(
                    "{} {} (anon {})",
                    r.role,
                    mib_of(r.memory),
                    num(kib as f64 / 1024.0)
                ),
                None => format!("{} {}", r.role, mib_of(r.memory)),
            }
        })
        .collect();
    format!("{} MiB", parts.join(" / "))
}

/// `leader 100.4%, standby 99.1%`.
pub fn pct_by_role(pct: &BTreeMap<String, f64>) -> String {
    if pct.is_empty() {
        return "-".into();
    }
    pct.iter()
        .map(|(role, v)| format!("{role} {}%", num(*v)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `p50 / p99 ms (n admissions)`, or why there is none.
pub(super) fn admission_latency(a: Option<&Admission>) -> String {
    match a {
        None => "-".into(),
        Some(a) if a.admissions == 0.0 => "no admissions".into(),
        Some(a) => format!(
            "{} / {} ms ({} admissions)",
            opt(a.p50_ms),
            opt(a.p99_ms),
            num(a.admissions)
        ),
    }
}

/// `1.00 (LIST configmapsets 1.00)`.
pub(super) fn admission_requests(a: Option<&Admission>) -> String {
    match a {
        Some(a) if a.admissions > 0.0 => {
            let total = opt(a.requests_per_admission_total);
            if a.requests_per_admission.is_empty() {
                total
            } else {
                let parts: Vec<String> = a
                    .requests_per_admission
                    .iter()
                    .map(|(k, v)| format!("{k} {}", num(*v)))
                    .collect();
                format!("{total} ({})", parts.join(", "))
            }
        }
        Some(_) => "no admissions".into(),
        None => "-".into(),
    }
}

/// One summary row: figure, value, value as a multiple of its stage's floor.
pub(super) type Row = (String, String, String);

/// `total (part, part, …)`, or the total alone when there are no parts.
pub(super) fn total_and_parts(total: f64, parts: &[String]) -> String {
    let total = num(total);
    if parts.is_empty() {
        total
    } else {
        format!("{total} ({})", parts.join(", "))
    }
}

pub(super) fn latency_cells(l: &Latency) -> (String, String) {
    (
        format!(
            "{} / {} / {} / {} ms",
            num(l.p50_ms),
            num(l.p90_ms),
            num(l.p99_ms),
            num(l.max_ms)
        ),
        match (l.p50_x_floor, l.p90_x_floor, l.p99_x_floor, l.max_x_floor) {
            (Some(a), Some(b), Some(c), Some(d)) => {
                format!("{} / {} / {} / {}×", num(a), num(b), num(c), num(d))
            }
            _ => String::new(),
        },
    )
}

pub(super) fn floor_cell(f: Option<&Floor>) -> String {
    f.map_or("-".into(), |f| {
        format!("{} ms, {} /s", num(f.seq_p50_ms), num(f.concurrent_rate))
    })
}

/// `operator 9.1%, kube-apiserver 48.2%, ...; busy 93.0% of 2 cores × 10.4 s`: each process's share
/// of the machine's CPU in the window, largest first.
pub(super) fn cpu_share(share: Option<&crate::machine::CpuShare>) -> String {
    let Some(s) = share else {
        return "-".into();
    };
    let mut parts: Vec<(&String, &f64)> = s.by_process.iter().collect();
    parts.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
    let mut cells: Vec<String> = parts.iter().map(|(k, v)| format!("{k} {}%", num(**v))).collect();
    cells.push(format!("the rest {}%", num(s.rest_pct)));
    let cores = if s.window_s > 0.0 {
        s.capacity_s / s.window_s
    } else {
        0.0
    };
    format!(
        "{}; busy {}% of {} cores × {} s",
        cells.join(", "),
        num(s.busy_pct),
        num(cores.round()),
        num(s.window_s)
    )
}

/// `3 LIST configmapsets by cmset-admin (kube-controller-manager) in b-1; ...`,
/// or why there is no count.
pub(super) fn lists_by_client(lists: Option<&[crate::audit::ListCount]>) -> String {
    match lists {
        None => "- (no audit log: a local control plane started by e2e/cluster/cluster.sh writes one)".into(),
        Some([]) => "none".into(),
        Some(lists) => lists
            .iter()
            .map(|l| {
                format!(
                    "{} {} {} by {} ({}) in {}",
                    l.count,
                    l.verb.to_uppercase(),
                    l.resource,
                    l.user,
                    if l.agent.is_empty() { "-" } else { &l.agent },
                    l.namespace
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// `etcd 1.93, kube-apiserver 6.80`: a figure per name, in the map's order.
pub(super) fn named_values(values: &BTreeMap<String, f64>) -> String {
    values
        .iter()
        .map(|(k, v)| format!("{k} {}", num(*v)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_memory_names_the_anonymous_part_where_it_was_read() {
        let replica = |role: &str, anon_kib: Option<u64>| ReplicaMemory {
            role: role.into(),
            memory: Some(Memory {
                rss_kib: 40_243,
                anon_kib,
                ..Memory::default()
            }),
        };
        assert_eq!(
            replicas_mib(&[replica("leader", Some(16_384)), replica("standby", None)]),
            "leader 39.3 (anon 16.0) / standby 39.3 MiB"
        );
        assert_eq!(replicas_mib(&[]), "-");
    }

    #[test]
    fn the_machines_share_whose_reads_and_named_figures_read_as_the_table_prints_them() {
        let share = crate::machine::CpuShare {
            window_s: 10.0,
            capacity_s: 20.0,
            busy_pct: 90.0,
            by_process: BTreeMap::from([("operator".into(), 10.0), ("kube-apiserver".into(), 60.0)]),
            rest_pct: 20.0,
        };
        assert_eq!(
            cpu_share(Some(&share)),
            "kube-apiserver 60.0%, operator 10.0%, the rest 20.0%; busy 90.0% of 2.00 cores × 10.0 s"
        );
        assert_eq!(cpu_share(None), "-");
        let read = crate::audit::ListCount {
            verb: "get".into(),
            user: "cmset-admin".into(),
            agent: String::new(),
            resource: "configmapsets".into(),
            namespace: "b-1".into(),
            count: 3,
        };
        assert_eq!(
            lists_by_client(Some(&[read])),
            "3 GET configmapsets by cmset-admin (-) in b-1"
        );
        assert_eq!(lists_by_client(Some(&[])), "none");
        assert!(lists_by_client(None).starts_with("- (no audit log"));
        let others = BTreeMap::from([("kube-apiserver".to_string(), 6.8), ("etcd".to_string(), 1.934)]);
        assert_eq!(named_values(&others), "etcd 1.93, kube-apiserver 6.80");
    }
}
