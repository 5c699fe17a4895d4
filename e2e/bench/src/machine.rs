//! The machine's CPU over a window (`/proc/stat`), so that each process's CPU can be given as a share
//! of what the machine had: a figure that holds on a machine shared with other work, where CPU per
//! change alone does not say whether the operator or the API server was the limit.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The machine's CPU time since boot, all cores together.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MachineCpu {
    /// Every state: the capacity of the window between two readings.
    pub total: Duration,
    /// Idle and waiting for I/O.
    pub idle: Duration,
}

impl MachineCpu {
    pub fn now() -> Option<Self> {
        Self::parse(
            &std::fs::read_to_string("/proc/stat").ok()?,
            crate::operator::clock_ticks(),
        )
    }

    /// The first line of `/proc/stat`: `cpu user nice system idle iowait irq softirq steal ...` in
    /// clock ticks. Guest time is already counted in user time, so it is not added again.
    fn parse(stat: &str, ticks_per_s: u64) -> Option<Self> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let fields: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        let ticks = |n: u64| Duration::from_secs_f64(n as f64 / ticks_per_s.max(1) as f64);
        let total: u64 = fields.iter().take(8).sum();
        let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
        Some(Self {
            total: ticks(total),
            idle: ticks(idle),
        })
    }
}

/// Each process's CPU over a window as a share of the machine's (all cores) in the same window.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct CpuShare {
    pub window_s: f64,
    /// The machine's CPU time in the window (cores × seconds, as /proc/stat counts it).
    pub capacity_s: f64,
    /// % of the capacity that was busy (any process).
    pub busy_pct: f64,
    /// % of the capacity each process used, by name (`operator` is every replica together).
    pub by_process: BTreeMap<String, f64>,
    /// % busy that none of the named processes accounts for (the simulated node, the shell, others).
    pub rest_pct: f64,
}

impl CpuShare {
    /// `processes`: each named process's CPU in the window; `operator`'s parts are summed into it.
    pub fn of(
        before: MachineCpu,
        after: MachineCpu,
        window: Duration,
        processes: &BTreeMap<String, Duration>,
    ) -> Option<Self> {
        let capacity = after.total.checked_sub(before.total)?;
        if capacity.is_zero() {
            return None;
        }
        let idle = after.idle.saturating_sub(before.idle);
        let pct = |d: Duration| 100.0 * d.as_secs_f64() / capacity.as_secs_f64();
        let busy_pct = pct(capacity.saturating_sub(idle));
        let by_process: BTreeMap<String, f64> = processes
            .iter()
            .map(|(name, cpu)| (name.clone(), pct(*cpu)))
            .collect();
        let named: f64 = by_process.values().sum();
        Some(Self {
            window_s: window.as_secs_f64(),
            capacity_s: capacity.as_secs_f64(),
            busy_pct,
            by_process,
            rest_pct: (busy_pct - named).max(0.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_cpu_line_of_proc_stat() {
        let stat = "cpu  100 5 50 800 20 3 2 0 7 0\ncpu0 50 2 25 400 10 1 1 0 0 0\nintr 1 2\n";
        let m = MachineCpu::parse(stat, 100).expect("parsed");
        // user+nice+system+idle+iowait+irq+softirq+steal; guest (7) is inside user already.
        assert_eq!(m.total, Duration::from_millis(9_800));
        assert_eq!(m.idle, Duration::from_millis(8_200));
        assert_eq!(MachineCpu::parse("intr 1\n", 100), None);
        assert!(MachineCpu::now().is_some(), "this machine has /proc/stat");
    }

    #[test]
    fn shares_are_of_the_windows_capacity() {
        let before = MachineCpu {
            total: Duration::from_secs(100),
            idle: Duration::from_secs(50),
        };
        // 10 s of two cores: 20 s of capacity, 5 s of it idle.
        let after = MachineCpu {
            total: Duration::from_secs(120),
            idle: Duration::from_secs(55),
        };
        let processes = BTreeMap::from([
            ("operator".to_string(), Duration::from_secs(2)),
            ("kube-apiserver".to_string(), Duration::from_secs(10)),
        ]);
        let share = CpuShare::of(before, after, Duration::from_secs(10), &processes).expect("share");
        assert_eq!(share.capacity_s, 20.0);
        assert_eq!(share.busy_pct, 75.0);
        assert_eq!(share.by_process["operator"], 10.0);
        assert_eq!(share.by_process["kube-apiserver"], 50.0);
        assert_eq!(share.rest_pct, 15.0);
        assert_eq!(CpuShare::of(after, after, Duration::ZERO, &processes), None);
    }
}
