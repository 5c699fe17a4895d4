//! The model cron and RRULE schedules share: which days fire, and at which wall-clock times of day.
//!
//! Both parsers reduce to it, so the search for fire times (and its DST handling) is written once.
//! The search walks day by day, never minute by minute: on a day that fires, a binary search over the
//! times of day finds the fire wanted, since wall-clock times map to instants in order.

use jiff::civil::{Date, DateTime, Time, Weekday};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use super::cron::CronDays;
use super::rrule::RuleDays;

/// When a schedule fires.
#[derive(Clone, Debug)]
pub(crate) struct Schedule {
    pub(crate) days: Days,
    /// Bit `m` set: month `m` (1 to 12) may fire. Lets the search skip whole months.
    pub(crate) months: u16,
    /// Times of day, sorted, without duplicates, never empty.
    pub(crate) times: Vec<Time>,
    /// No fire before this wall-clock time (an RRULE's DTSTART).
    pub(crate) start: Option<DateTime>,
    /// No fire after this instant (an RRULE's UNTIL, or the last of its COUNT fires).
    pub(crate) until: Option<Timestamp>,
}

#[derive(Clone, Debug)]
pub(crate) enum Days {
    Cron(CronDays),
    Rule(RuleDays),
}

impl Days {
    fn matches(&self, date: Date) -> bool {
        match self {
            Days::Cron(days) => days.matches(date),
            Days::Rule(days) => days.matches(date),
        }
    }
}

impl Schedule {
    fn month_may_fire(&self, date: Date) -> bool {
        self.months & (1 << date.month()) != 0
    }

    /// Whether `date` fires at every time of day (no start cuts it).
    pub(crate) fn fires_on(&self, date: Date) -> bool {
        self.times_on(date).len() == self.times.len()
    }

    /// The last fire of a day that fires.
    pub(crate) fn last_fire_on(&self, tz: &TimeZone, date: Date) -> Timestamp {
        self.times
            .last()
            .map_or(Timestamp::MAX, |time| Self::fire(tz, date, *time))
    }

    /// The widest wall-clock gap between consecutive fires when consecutive days fire: between two
    /// times of a day, or from a day's last time to the next day's first.
    pub(crate) fn widest_gap(&self) -> SignedDuration {
        let seconds = |time: &Time| {
            i64::from(time.hour()) * 3600 + i64::from(time.minute()) * 60 + i64::from(time.second())
        };
        let inner = self
            .times
            .windows(2)
            .map(|pair| seconds(&pair[1]) - seconds(&pair[0]))
            .max()
            .unwrap_or(0);
        let wrap = match (self.times.first(), self.times.last()) {
            (Some(first), Some(last)) => 86_400 - seconds(last) + seconds(first),
            _ => 86_400,
        };
        SignedDuration::from_secs(inner.max(wrap))
    }

    /// The times `date` fires at (before the DST mapping), honouring the start.
    fn times_on(&self, date: Date) -> &[Time] {
        if !self.month_may_fire(date) || !self.days.matches(date) {
            return &[];
        }
        match self.start {
            Some(start) if date < start.date() => &[],
            Some(start) if date == start.date() => {
                let first = self.times.partition_point(|time| *time < start.time());
                &self.times[first..]
            }
            _ => &self.times,
        }
    }

    /// The instant a wall-clock time fires at: a time skipped by a DST gap fires at the shifted
    /// (later) instant; a time that happens twice fires at its first occurrence only.
    fn fire(tz: &TimeZone, date: Date, time: Time) -> Timestamp {
        tz.to_ambiguous_timestamp(date.to_datetime(time))
            .compatible()
            .unwrap_or(Timestamp::MAX)
    }

    /// The first fire strictly after `t` and no later than `limit`.
    pub(crate) fn first_fire_after(
        &self,
        tz: &TimeZone,
        t: Timestamp,
        limit: Timestamp,
    ) -> Option<Timestamp> {
        // A day's fires can fall on the neighbouring local day across a DST change: start a day early.
        let mut date = tz.to_datetime(t).date().yesterday().ok()?;
        if let Some(start) = self.start {
            date = date.max(start.date());
        }
        let last = tz.to_datetime(limit).date().tomorrow().ok()?;
        while date <= last {
            if !self.month_may_fire(date) {
                date = date.last_of_month().tomorrow().ok()?;
                continue;
            }
            let times = self.times_on(date);
            let after = times.partition_point(|time| Self::fire(tz, date, *time) <= t);
            if let Some(time) = times.get(after) {
                let fire = Self::fire(tz, date, *time);
                if fire > limit || self.until.is_some_and(|until| fire > until) {
                    return None;
                }
                return Some(fire);
            }
            date = date.tomorrow().ok()?;
        }
        None
    }

    /// The last fire at or before `t` and no earlier than `not_before`.
    pub(crate) fn last_fire_at_or_before(
        &self,
        tz: &TimeZone,
        t: Timestamp,
        not_before: Timestamp,
    ) -> Option<Timestamp> {
        let bound = self.until.map_or(t, |until| until.min(t));
        let mut date = tz.to_datetime(bound).date().tomorrow().ok()?;
        let first = tz.to_datetime(not_before).date().yesterday().ok()?;
        while date >= first {
            if self.start.is_some_and(|start| date < start.date()) {
                return None;
            }
            if !self.month_may_fire(date) {
                date = date.first_of_month().yesterday().ok()?;
                continue;
            }
            let times = self.times_on(date);
            let after = times.partition_point(|time| Self::fire(tz, date, *time) <= bound);
            if after > 0 {
                let fire = Self::fire(tz, date, times[after - 1]);
                return (fire >= not_before).then_some(fire);
            }
            date = date.yesterday().ok()?;
        }
        None
    }
}

/// Days since 1970-01-01, for periods counted from a DTSTART.
pub(crate) fn day_number(date: Date) -> i64 {
    // Howard Hinnant's days_from_civil.
    let (y, m, d) = (
        i64::from(date.year()),
        i64::from(date.month()),
        i64::from(date.day()),
    );
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Bit for a weekday, Sunday = bit 0 (cron's numbering).
pub(crate) fn weekday_bit(weekday: Weekday) -> u8 {
    1 << weekday.to_sunday_zero_offset()
}
