//! The operator's own `/metrics`, as far as the bench reads them: writes by operation, the leader gauge,
//! and the admission webhook's counters and latency histogram. Counters of several replicas (and of
//! replicas that have since been replaced) add up; a stage's figures come from the difference of two
//! sums.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One scrape, or the sum of several.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scrape {
    /// `cmset_api_writes_total` by operation.
    pub writes: BTreeMap<String, f64>,
    /// `cmset_leader` (summed: the number of leaders among the replicas scraped).
    pub leader: f64,
    /// `cmset_admissions_total` by result.
    pub admissions: BTreeMap<String, f64>,
    /// `cmset_admission_api_requests_total` by (verb, resource).
    pub admission_requests: BTreeMap<(String, String), f64>,
    /// `cmset_admission_duration_seconds`: cumulative counts by upper bound (seconds; +Inf last).
    pub admission_buckets: Vec<(f64, f64)>,
    pub admission_seconds_sum: f64,
    /// `cmset_watch_events_total` by `kind event` (`Pod apply`, `ReplicaSet delete`, …).
    pub watch_events: BTreeMap<String, f64>,
    /// `cmset_reconciles_total` by controller (only a leader reconciles).
    pub reconciles: BTreeMap<String, f64>,
    /// `cmset_heap_in_use_bytes`: what the allocator has handed out and not been given back (absent
    /// for an operator that does not report it).
    pub heap_in_use_bytes: Option<f64>,
}

impl Scrape {
    pub fn parse(text: &str) -> Self {
        let mut s = Self::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, labels, value)) = split_sample(line) else {
                continue;
            };
            let label = |k: &str| label_value(labels, k).unwrap_or_default();
            match name {
                "cmset_api_writes_total" => *s.writes.entry(label("operation")).or_default() += value,
                "cmset_leader" => s.leader += value,
                "cmset_heap_in_use_bytes" => s.heap_in_use_bytes = Some(value),
                "cmset_admissions_total" => *s.admissions.entry(label("result")).or_default() += value,
                "cmset_admission_api_requests_total" => {
                    *s.admission_requests
                        .entry((label("verb"), label("resource")))
                        .or_default() += value;
                }
                "cmset_admission_duration_seconds_bucket" => {
                    let le = label("le");
                    let bound = if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        match le.parse() {
                            Ok(b) => b,
                            Err(_) => continue,
                        }
                    };
                    s.admission_buckets.push((bound, value));
                }
                "cmset_admission_duration_seconds_sum" => s.admission_seconds_sum += value,
                "cmset_reconciles_total" => *s.reconciles.entry(label("controller")).or_default() += value,
                "cmset_watch_events_total" => {
                    *s.watch_events
                        .entry(format!("{} {}", label("kind"), label("event")))
                        .or_default() += value;
                }
                _ => {}
            }
        }
        s.admission_buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        s
    }

    pub fn writes_total(&self) -> f64 {
        // `+ 0.0`: an empty sum is -0.0.
        self.writes.values().sum::<f64>() + 0.0
    }

    pub fn admissions_total(&self) -> f64 {
        self.admissions.values().sum::<f64>() + 0.0
    }

    /// `self + other`, label set by label set (histograms bucket by bucket: every replica runs the same
    /// binary, so the bounds are the same).
    pub fn add(&mut self, other: &Scrape) {
        merge(&mut self.writes, &other.writes, 1.0);
        merge(&mut self.admissions, &other.admissions, 1.0);
        merge(&mut self.admission_requests, &other.admission_requests, 1.0);
        merge(&mut self.watch_events, &other.watch_events, 1.0);
        merge(&mut self.reconciles, &other.reconciles, 1.0);
        self.leader += other.leader;
        self.admission_seconds_sum += other.admission_seconds_sum;
        self.admission_buckets = add_buckets(&self.admission_buckets, &other.admission_buckets, 1.0);
    }

    /// `self - before`: what happened in between (the leader gauge is `self`'s).
    pub fn since(&self, before: &Scrape) -> Scrape {
        let mut d = self.clone();
        merge(&mut d.writes, &before.writes, -1.0);
        merge(&mut d.admissions, &before.admissions, -1.0);
        merge(&mut d.admission_requests, &before.admission_requests, -1.0);
        merge(&mut d.watch_events, &before.watch_events, -1.0);
        merge(&mut d.reconciles, &before.reconciles, -1.0);
        d.admission_seconds_sum -= before.admission_seconds_sum;
        d.admission_buckets = add_buckets(&self.admission_buckets, &before.admission_buckets, -1.0);
        d
    }
}

fn merge<K: Ord + Clone>(into: &mut BTreeMap<K, f64>, from: &BTreeMap<K, f64>, sign: f64) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += sign * v;
    }
}

fn add_buckets(a: &[(f64, f64)], b: &[(f64, f64)], sign: f64) -> Vec<(f64, f64)> {
    let mut out: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    // Keyed by the bound's bits (bounds are never NaN or negative, so the bit order is the numeric one).
    for (bound, v) in a {
        out.entry(bound.to_bits()).or_insert((*bound, 0.0)).1 += v;
    }
    for (bound, v) in b {
        out.entry(bound.to_bits()).or_insert((*bound, 0.0)).1 += sign * v;
    }
    out.into_values().collect()
}

/// `name{labels} value [timestamp | # exemplar]` → (name, labels, value).
fn split_sample(line: &str) -> Option<(&str, &str, f64)> {
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let close = line.rfind('}')?;
            (&line[..open], &line[open + 1..close], &line[close + 1..])
        }
        None => {
            let (name, rest) = line.split_once(' ')?;
            (name, "", rest)
        }
    };
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some((name, labels, value))
}

/// The value of label `key` in `k="v",k2="v2"` (the operator's label values hold no quotes or commas).
fn label_value(labels: &str, key: &str) -> Option<String> {
    labels.split(',').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
    })
}

/// The admission webhook in one window, from the difference of two sums over the replicas.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Admission {
    /// AdmissionReviews answered, by every replica.
    pub admissions: f64,
    #[serde(default)]
    pub by_result: BTreeMap<String, f64>,
    /// From the handler's histogram (arrival to answer, server side), interpolated within a bucket
    /// as Prometheus' `histogram_quantile` does.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub mean_ms: Option<f64>,
    /// Requests the handler sent to the API server per admission, by `VERB resource`.
    #[serde(default)]
    pub requests_per_admission: BTreeMap<String, f64>,
    pub requests_per_admission_total: Option<f64>,
}

impl Admission {
    pub fn from_delta(d: &Scrape) -> Self {
        let n = d.admissions_total();
        let mut a = Admission {
            admissions: n,
            by_result: d
                .admissions
                .iter()
                .filter(|(_, v)| **v > 0.0)
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            ..Admission::default()
        };
        let count = d.admission_buckets.last().map_or(0.0, |b| b.1);
        if count > 0.0 {
            a.p50_ms = quantile(&d.admission_buckets, 0.5).map(|s| s * 1000.0);
            a.p99_ms = quantile(&d.admission_buckets, 0.99).map(|s| s * 1000.0);
            a.mean_ms = Some(d.admission_seconds_sum / count * 1000.0);
        }
        if n > 0.0 {
            a.requests_per_admission = d
                .admission_requests
                .iter()
                .filter(|(_, v)| **v > 0.0)
                .map(|((verb, resource), v)| (format!("{} {resource}", verb.to_uppercase()), v / n))
                .collect();
            a.requests_per_admission_total = Some(a.requests_per_admission.values().sum::<f64>() + 0.0);
        }
        a
    }
}

/// The `q`-quantile of a cumulative histogram: linear within the bucket it falls in (from the previous
/// bound, 0 for the first); in the +Inf bucket, the largest finite bound.
pub fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(bound, cumulative) in buckets {
        if cumulative >= rank {
            if bound.is_infinite() {
                return Some(lower);
            }
            let inside = cumulative - below;
            let fraction = if inside > 0.0 {
                (rank - below) / inside
            } else {
                1.0
            };
            return Some(lower + (bound - lower) * fraction);
        }
        (lower, below) = (bound, cumulative);
    }
    Some(lower)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPOSITION: &str = r#"# HELP cmset_api_writes Write requests sent to the API server, by operation.
# TYPE cmset_api_writes counter
cmset_api_writes_total{operation="create_revision"} 4
cmset_api_writes_total{operation="patch_workload"} 3
# TYPE cmset_leader gauge
cmset_leader 1
cmset_admissions_total{result="patched"} 6
cmset_admissions_total{result="unchanged"} 2
cmset_admission_api_requests_total{verb="list",resource="configmapsets"} 8
cmset_admission_duration_seconds_sum 0.04
cmset_admission_duration_seconds_count 8
cmset_admission_duration_seconds_bucket{le="5e-5"} 0
cmset_admission_duration_seconds_bucket{le="0.0001"} 0
cmset_admission_duration_seconds_bucket{le="0.0002"} 4
cmset_admission_duration_seconds_bucket{le="0.0004"} 6
cmset_admission_duration_seconds_bucket{le="+Inf"} 8
cmset_watch_events_total{kind="Pod",event="apply"} 12
cmset_watch_events_total{kind="Pod",event="delete"} 2
cmset_watch_events_total{kind="ConfigMapSet",event="apply"} 3
cmset_reconciles_total{controller="set"} 5
# EOF
"#;

    #[test]
    fn parses_the_operators_exposition() {
        let s = Scrape::parse(EXPOSITION);
        assert_eq!(s.writes_total(), 7.0);
        assert_eq!(s.leader, 1.0);
        assert_eq!(s.admissions_total(), 8.0);
        assert_eq!(
            s.admission_requests[&("list".to_string(), "configmapsets".to_string())],
            8.0
        );
        assert_eq!(s.admission_buckets.len(), 5);
        assert_eq!(s.admission_buckets[4], (f64::INFINITY, 8.0));
        assert_eq!(s.watch_events["Pod apply"], 12.0);
        assert_eq!(s.watch_events["Pod delete"], 2.0);
        assert_eq!(s.watch_events["ConfigMapSet apply"], 3.0);
        assert_eq!(s.reconciles["set"], 5.0);
    }

    #[test]
    fn sums_of_replicas_and_their_differences() {
        let one = Scrape::parse(EXPOSITION);
        let mut two = one.clone();
        two.add(&one);
        assert_eq!(two.writes_total(), 14.0);
        assert_eq!(two.leader, 2.0);
        assert_eq!(two.admission_buckets[2], (0.0002, 8.0));
        let d = two.since(&one);
        assert_eq!(d.admission_buckets, one.admission_buckets);
        assert_eq!(d.writes, one.writes);
        assert_eq!(d.watch_events, one.watch_events);
        assert_eq!(Scrape::default().since(&Scrape::default()), Scrape::default());
    }

    #[test]
    fn admission_figures_from_buckets() {
        let a = Admission::from_delta(&Scrape::parse(EXPOSITION));
        assert_eq!(a.admissions, 8.0);
        // Rank 4 of 8 is the last of the (0.1 ms, 0.2 ms] bucket.
        assert!((a.p50_ms.unwrap() - 0.2).abs() < 1e-9, "{a:?}");
        // Rank 7.92 falls in +Inf: the largest finite bound.
        assert!((a.p99_ms.unwrap() - 0.4).abs() < 1e-9, "{a:?}");
        assert!((a.mean_ms.unwrap() - 5.0).abs() < 1e-9);
        assert_eq!(a.requests_per_admission["LIST configmapsets"], 1.0);
        assert_eq!(a.requests_per_admission_total, Some(1.0));
        // Linear inside a bucket: rank 5 of 8 is halfway through (0.2 ms, 0.4 ms].
        let b = [(0.0002, 4.0), (0.0004, 6.0), (f64::INFINITY, 8.0)];
        assert!((quantile(&b, 0.625).unwrap() - 0.0003).abs() < 1e-12);
        let none = Admission::from_delta(&Scrape::default());
        assert_eq!((none.p50_ms, none.requests_per_admission_total), (None, None));
    }
}
