//! The process's own resources under the names every Prometheus client library uses
//! (`process_resident_memory_bytes`, `process_cpu_seconds_total`, ...), read from `/proc/self` at each
//! scrape, so that dashboards and alerts written for any exporter work on cmset as they are.
//!
//! Only Linux has `/proc`; elsewhere (and for any file that cannot be read) the metric is left out of
//! the scrape rather than reported as zero.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks per second in `/proc/<pid>/stat`: `USER_HZ`, fixed at 100 by the kernel's ABI on every
/// architecture Kubernetes runs on (the Prometheus Go client assumes the same).
const USER_HZ: f64 = 100.0;

#[derive(Debug, Default)]
pub struct ProcessCollector;

/// The figures one scrape reports; each is absent when its source could not be read.
#[derive(Debug, Default, PartialEq)]
struct Sample {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<u64>,
    virtual_bytes: Option<u64>,
    start_time_seconds: Option<f64>,
    open_fds: Option<u64>,
    max_fds: Option<u64>,
}

impl Sample {
    fn read() -> Self {
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let stat = stat.as_deref().and_then(Stat::parse);
        let boot_time = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| boot_time(&s));
        Self {
            cpu_seconds: stat.map(|s| (s.user_ticks + s.system_ticks) as f64 / USER_HZ),
            resident_bytes: std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| resident_bytes(&s)),
            virtual_bytes: stat.map(|s| s.virtual_bytes),
            start_time_seconds: stat
                .zip(boot_time)
                .map(|(s, boot)| boot as f64 + s.start_ticks as f64 / USER_HZ),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|entries| entries.count() as u64),
            max_fds: std::fs::read_to_string("/proc/self/limits")
                .ok()
                .and_then(|s| max_open_files(&s)),
        }
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let sample = Sample::read();
        if let Some(v) = sample.cpu_seconds {
            let counter = ConstCounter::new(v);
            let m = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                counter.metric_type(),
            )?;
            counter.encode(m)?;
        }
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                sample.resident_bytes.map(|v| v as f64),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                sample.virtual_bytes.map(|v| v as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                sample.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                sample.open_fds.map(|v| v as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                sample.max_fds.map(|v| v as f64),
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                let gauge = ConstGauge::new(v);
                let m = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
                gauge.encode(m)?;
            }
        }
        Ok(())
    }
}

/// The fields of `/proc/self/stat` reported here.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Stat {
    user_ticks: u64,
    system_ticks: u64,
    start_ticks: u64,
    virtual_bytes: u64,
}

impl Stat {
    /// The command name (field 2) is in parentheses and may itself hold spaces and parentheses: the
    /// fields are counted from the last `)`.
    fn parse(stat: &str) -> Option<Self> {
        let (_, rest) = stat.rsplit_once(')')?;
        // `rest` starts at field 3 (the state).
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        Some(Self {
            user_ticks: field(14)?,
            system_ticks: field(15)?,
            start_ticks: field(22)?,
            virtual_bytes: field(23)?,
        })
    }
}

/// `VmRSS` of `/proc/self/status` (in kB, whatever the page size).
fn resident_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kilobytes = line.split_whitespace().next()?.parse::<u64>().ok()?;
    Some(kilobytes * 1024)
}

/// `btime` of `/proc/stat`: when the machine booted, in seconds since the epoch.
fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// The soft limit on open files, from `/proc/self/limits` (`unlimited` reports nothing).
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // A command name with a space and a parenthesis of its own.
        let stat = "4242 (cmset (ctl) x) S 1 4242 4242 0 -1 4194560 2500 0 0 0 731 269 0 0 20 0 9 0 \
                    123456 52428800 3000 18446744073709551615 1 1 0 0 0 0 0 4096 17987 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            Stat::parse(stat),
            Some(Stat {
                user_ticks: 731,
                system_ticks: 269,
                start_ticks: 123456,
                virtual_bytes: 52428800,
            })
        );
        assert_eq!(Stat::parse("4242 (cut short) S 1"), None);
    }

    #[test]
    fn status_limits_and_boot_time_are_read_by_their_keys() {
        let status = "Name:\tcmset-controller\nVmPeak:\t  60000 kB\nVmRSS:\t   24576 kB\nThreads:\t9\n";
        assert_eq!(resident_bytes(status), Some(24576 * 1024));
        assert_eq!(resident_bytes("Name:\tx\n"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            1048576              1048576              files     \n";
        assert_eq!(max_open_files(limits), Some(1048576));
        assert_eq!(
            max_open_files("Max open files            unlimited            unlimited            files"),
            None
        );
        assert_eq!(
            boot_time("cpu  1 2 3\nintr 5\nbtime 1732500000\nprocesses 9\n"),
            Some(1732500000)
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_read_from_proc() {
        let sample = Sample::read();
        assert!(sample.resident_bytes.is_some_and(|b| b > 0), "{sample:?}");
        assert!(sample.cpu_seconds.is_some(), "{sample:?}");
        assert!(sample.open_fds.is_some_and(|n| n > 0), "{sample:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = sample.start_time_seconds.expect("a start time");
        assert!(
            started <= now + 1.0 && started > now - 86_400.0,
            "started at {started}, now {now}"
        );
    }
}
