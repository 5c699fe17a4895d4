//! Ages as `kubectl get` prints them in its AGE column: `45s`, `5m30s`, `42m`, `3h20m`, `30h`, `3d5h`,
//! `120d`, `2y100d`, `9y`. The precision shrinks as the age grows, so the column stays narrow.

use jiff::Timestamp;

/// The age of something created at `created`, seen at `now`; `<unknown>` without a timestamp.
pub fn age(created: Option<Timestamp>, now: Timestamp) -> String {
    match created {
        Some(created) => human_duration(now.as_second() - created.as_second()),
        None => "<unknown>".to_string(),
    }
}

/// How far `at` is from `now`, for a time in the future (a window's opening): `in 2d5h`; `now` when
/// it has come (within a second); `5m ago` when past.
pub fn relative(at: Timestamp, now: Timestamp) -> String {
    match at.as_second() - now.as_second() {
        s if s > 0 => format!("in {}", human_duration(s)),
        0 => "now".to_string(),
        s => format!("{} ago", human_duration(-s)),
    }
}

/// `seconds` in kubectl's style. Up to a second in the future counts as now (clocks differ); more than
/// that is `<invalid>`.
pub fn human_duration(seconds: i64) -> String {
    const MINUTE: i64 = 60;
    const HOUR: i64 = 60 * MINUTE;
    const DAY: i64 = 24 * HOUR;
    const YEAR: i64 = 365 * DAY;

    // A number followed by a unit, then a remainder in a smaller unit unless it is zero.
    let two = |big: i64, big_unit: &str, small: i64, small_unit: &str| {
        if small == 0 {
            format!("{big}{big_unit}")
        } else {
            format!("{big}{big_unit}{small}{small_unit}")
        }
    };

    match seconds {
        s if s < -1 => "<invalid>".to_string(),
        s if s < 0 => "0s".to_string(),
        s if s < 2 * MINUTE => format!("{s}s"),
        s if s < 10 * MINUTE => two(s / MINUTE, "m", s % MINUTE, "s"),
        s if s < 3 * HOUR => format!("{}m", s / MINUTE),
        s if s < 8 * HOUR => two(s / HOUR, "h", (s % HOUR) / MINUTE, "m"),
        s if s < 2 * DAY => format!("{}h", s / HOUR),
        s if s < 8 * DAY => two(s / DAY, "d", (s % DAY) / HOUR, "h"),
        s if s < 2 * YEAR => format!("{}d", s / DAY),
        s if s < 8 * YEAR => two(s / YEAR, "y", (s % YEAR) / DAY, "d"),
        s => format!("{}y", s / YEAR),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_like_kubectl() {
        let m = 60;
        let h = 60 * m;
        let d = 24 * h;
        let y = 365 * d;
        let table = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (45, "45s"),
            (119, "119s"),
            (2 * m, "2m"),
            (5 * m + 30, "5m30s"),
            (9 * m + 59, "9m59s"),
            (10 * m + 59, "10m"),
            (42 * m, "42m"),
            (3 * h - 1, "179m"),
            (3 * h, "3h"),
            (3 * h + 20 * m + 59, "3h20m"),
            (8 * h, "8h"),
            (30 * h, "30h"),
            (2 * d, "2d"),
            (3 * d + 5 * h, "3d5h"),
            (8 * d, "8d"),
            (120 * d, "120d"),
            (2 * y, "2y"),
            (2 * y + 100 * d, "2y100d"),
            (9 * y, "9y"),
        ];
        for (seconds, want) in table {
            assert_eq!(human_duration(seconds), want, "{seconds}s");
        }
    }

    #[test]
    fn age_of_a_timestamp() {
        let now: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        let created: Timestamp = "2026-01-02T02:59:05Z".parse().unwrap();
        assert_eq!(age(Some(created), now), "5m");
        assert_eq!(age(None, now), "<unknown>");
    }

    #[test]
    fn relative_times() {
        let now: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        assert_eq!(relative(at("2026-01-04T08:04:05Z"), now), "in 2d5h");
        assert_eq!(relative(at("2026-01-02T03:04:05Z"), now), "now");
        assert_eq!(relative(at("2026-01-02T02:59:05Z"), now), "5m ago");
    }
}
