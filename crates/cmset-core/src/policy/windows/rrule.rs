//! RFC 5545 recurrence rules, the subset a change window needs: FREQ DAILY, WEEKLY, MONTHLY or
//! YEARLY with INTERVAL, BYMONTH, BYMONTHDAY, BYDAY (with ordinals), BYHOUR, BYMINUTE, BYSECOND,
//! BYSETPOS (monthly), COUNT, UNTIL and WKST, and an optional DTSTART line in the window's zone.
//! Anything else is refused by name rather than half-understood.

use jiff::Timestamp;
use jiff::civil::{Date, DateTime, Time, Weekday};
use jiff::tz::TimeZone;

use super::schedule::{Days, Schedule, day_number};

/// Most fires COUNT may ask for: each is found at parse time.
const MAX_COUNT: u32 = 1000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Freq {
    Daily,
    Weekly,
    Monthly,
    Yearly,
}

/// The day part of a rule.
#[derive(Clone, Debug)]
pub(crate) struct RuleDays {
    freq: Freq,
    interval: u32,
    /// DTSTART's date: periods are counted from it.
    anchor: Option<Date>,
    wkst: Weekday,
    /// BYMONTHDAY (negative counts from the month's end); empty: any.
    month_days: Vec<i8>,
    /// BYDAY as (ordinal, weekday), ordinal 0 meaning every one; empty: any.
    weekdays: Vec<(i16, Weekday)>,
    /// Whether BYDAY ordinals count within the year (YEARLY without BYMONTH) rather than the month.
    ordinal_in_year: bool,
    /// BYSETPOS, over the days of each month that match.
    set_positions: Vec<i16>,
    /// BYMONTH as a bit set, for BYSETPOS's own count of a month's days.
    months: u16,
}

impl RuleDays {
    pub(crate) fn matches(&self, date: Date) -> bool {
        if self.interval > 1 && !self.in_period(date) {
            return false;
        }
        if self.set_positions.is_empty() {
            return self.base(date);
        }
        // BYSETPOS picks among the month's matching days (one time a day, checked at parse).
        let mut matching = [Date::MIN; 31];
        let mut count = 0usize;
        let mut day = date.first_of_month();
        for _ in 0..date.days_in_month() {
            if self.base(day) {
                matching[count] = day;
                count += 1;
            }
            day = day.tomorrow().unwrap_or(day);
        }
        self.set_positions.iter().any(|&position| {
            let index = if position > 0 {
                position as i64 - 1
            } else {
                count as i64 + position as i64
            };
            (0..count as i64).contains(&index) && matching[index as usize] == date
        })
    }

    fn in_period(&self, date: Date) -> bool {
        let Some(anchor) = self.anchor else { return true };
        let interval = i64::from(self.interval);
        let periods = match self.freq {
            Freq::Daily => day_number(date) - day_number(anchor),
            Freq::Weekly => (self.week_start(date) - self.week_start(anchor)) / 7,
            Freq::Monthly => {
                (i64::from(date.year()) * 12 + i64::from(date.month()))
                    - (i64::from(anchor.year()) * 12 + i64::from(anchor.month()))
            }
            Freq::Yearly => i64::from(date.year()) - i64::from(anchor.year()),
        };
        periods.rem_euclid(interval) == 0
    }

    /// Day number of the first day of `date`'s week, weeks starting on WKST.
    fn week_start(&self, date: Date) -> i64 {
        let back = i64::from(date.weekday().since(self.wkst));
        day_number(date) - back
    }

    fn base(&self, date: Date) -> bool {
        if self.months & (1 << date.month()) == 0 {
            return false;
        }
        let day = i16::from(date.day());
        let days_in_month = i16::from(date.days_in_month());
        if !self.month_days.is_empty()
            && !self.month_days.iter().any(|&wanted| {
                let wanted = i16::from(wanted);
                wanted == day || (wanted < 0 && days_in_month + 1 + wanted == day)
            })
        {
            return false;
        }
        if !self.weekdays.is_empty() {
            let weekday = date.weekday();
            let (index, length) = if self.ordinal_in_year {
                (date.day_of_year(), date.days_in_year())
            } else {
                (day, days_in_month)
            };
            let from_start = (index - 1) / 7 + 1;
            let from_end = (length - index) / 7 + 1;
            return self.weekdays.iter().any(|&(ordinal, wanted)| {
                wanted == weekday
                    && (ordinal == 0
                        || (ordinal > 0 && ordinal == from_start)
                        || (ordinal < 0 && -ordinal == from_end))
            });
        }
        true
    }
}

/// Whether `schedule` is written as an RRULE rather than as cron.
pub(crate) fn is_rrule(schedule: &str) -> bool {
    let upper = schedule.to_ascii_uppercase();
    upper.contains("FREQ=")
        || upper.trim_start().starts_with("RRULE")
        || upper.trim_start().starts_with("DTSTART")
}

pub(crate) fn parse(schedule: &str, tz: &TimeZone) -> Result<Schedule, String> {
    let mut rule = None;
    let mut dtstart = None;
    for line in schedule.lines().map(str::trim).filter(|line| !line.is_empty()) {
        let upper = line.to_ascii_uppercase();
        if let Some(rest) = upper.strip_prefix("DTSTART") {
            let Some(value) = rest.strip_prefix(':') else {
                return Err(
                    "DTSTART parameters (TZID, VALUE) are not supported; write DTSTART:20260105T090000, \
                            read in the window's timeZone"
                        .into(),
                );
            };
            if dtstart.replace(parse_date_time("DTSTART", value, tz)?).is_some() {
                return Err("DTSTART is given twice".into());
            }
        } else if upper.starts_with("RRULE:") || upper.contains("FREQ=") {
            let text = upper.strip_prefix("RRULE:").unwrap_or(&upper).to_string();
            if rule.replace(text).is_some() {
                return Err("more than one RRULE is not supported; write one rule per window".into());
            }
        } else {
            let name = upper.split([':', ';']).next().unwrap_or_default();
            return Err(format!(
                "{name:?} lines are not supported; write an RRULE line and optionally a DTSTART line"
            ));
        }
    }
    let Some(rule) = rule else {
        return Err("has no RRULE (FREQ=...)".into());
    };
    build(&rule, dtstart, tz)
}

fn build(rule: &str, dtstart: Option<DateTime>, tz: &TimeZone) -> Result<Schedule, String> {
    let mut freq = None;
    let mut interval = None;
    let mut count = None;
    let mut until = None;
    let mut months = None;
    let mut month_days = None;
    let mut weekdays = None;
    let mut hours = None;
    let mut minutes = None;
    let mut seconds = None;
    let mut set_positions = None;
    let mut wkst = None;
    for part in rule.split(';').filter(|part| !part.is_empty()) {
        let Some((name, value)) = part.split_once('=') else {
            return Err(format!("part {part:?} is not NAME=VALUE"));
        };
        let duplicate = match name {
            "FREQ" => freq
                .replace(match value {
                    "DAILY" => Freq::Daily,
                    "WEEKLY" => Freq::Weekly,
                    "MONTHLY" => Freq::Monthly,
                    "YEARLY" => Freq::Yearly,
                    _ => {
                        return Err(format!(
                            "FREQ={value} is not supported; use DAILY, WEEKLY, MONTHLY or YEARLY"
                        ));
                    }
                })
                .is_some(),
            "INTERVAL" => interval.replace(number::<u32>(name, value, 1, 10_000)?).is_some(),
            "COUNT" => count.replace(number::<u32>(name, value, 1, MAX_COUNT)?).is_some(),
            "UNTIL" => until.replace(parse_date_time(name, value, tz)?).is_some(),
            "BYMONTH" => months.replace(list::<u8>(name, value, 1, 12)?).is_some(),
            "BYMONTHDAY" => month_days.replace(signed_list(name, value, 31)?).is_some(),
            "BYDAY" => weekdays.replace(by_day(value)?).is_some(),
            "BYHOUR" => hours.replace(list::<i8>(name, value, 0, 23)?).is_some(),
            "BYMINUTE" => minutes.replace(list::<i8>(name, value, 0, 59)?).is_some(),
            "BYSECOND" => seconds.replace(list::<i8>(name, value, 0, 59)?).is_some(),
            "BYSETPOS" => set_positions.replace(signed_list(name, value, 31)?).is_some(),
            "WKST" => wkst
                .replace(weekday(value).ok_or_else(|| format!("WKST={value} is not a weekday (MO..SU)"))?)
                .is_some(),
            "BYYEARDAY" | "BYWEEKNO" => {
                return Err(format!(
                    "{name} is not supported; use BYMONTH, BYMONTHDAY or BYDAY"
                ));
            }
            _ => return Err(format!("{name} is not a supported RRULE part")),
        };
        if duplicate {
            return Err(format!("{name} is given twice"));
        }
    }
    let Some(freq) = freq else {
        return Err("FREQ is missing; use FREQ=DAILY, WEEKLY, MONTHLY or YEARLY".into());
    };
    let interval = interval.unwrap_or(1);
    if interval > 1 && dtstart.is_none() {
        return Err("INTERVAL above 1 needs a DTSTART line to count periods from".into());
    }
    if count.is_some() && dtstart.is_none() {
        return Err("COUNT needs a DTSTART line to count fires from".into());
    }
    if count.is_some() && until.is_some() {
        return Err("COUNT and UNTIL must not both be given".into());
    }
    let mut weekdays = weekdays.unwrap_or_default();
    if weekdays.iter().any(|(ordinal, _)| *ordinal != 0) && matches!(freq, Freq::Daily | Freq::Weekly) {
        return Err("BYDAY with an ordinal (e.g. -1FR) needs FREQ=MONTHLY or YEARLY".into());
    }
    let mut month_days = month_days
        .unwrap_or_default()
        .into_iter()
        .map(|day| day as i8)
        .collect::<Vec<_>>();
    if !month_days.is_empty() && freq == Freq::Weekly {
        return Err("BYMONTHDAY is not allowed with FREQ=WEEKLY".into());
    }
    let set_positions = set_positions.unwrap_or_default();
    let needs_start =
        |what: &str| format!("FREQ without {what} takes it from DTSTART; give {what} or a DTSTART line");
    let mut month_list = months.unwrap_or_default();
    let by_month = !month_list.is_empty();
    // RFC 5545: what the rule leaves out is taken from DTSTART.
    match freq {
        Freq::Daily => {}
        Freq::Weekly if weekdays.is_empty() => {
            let start = dtstart.ok_or_else(|| needs_start("BYDAY"))?;
            weekdays.push((0, start.weekday()));
        }
        Freq::Weekly => {}
        Freq::Monthly | Freq::Yearly if weekdays.is_empty() && month_days.is_empty() => {
            let start = dtstart.ok_or_else(|| needs_start("BYMONTHDAY or BYDAY"))?;
            month_days.push(start.day());
            if freq == Freq::Yearly && !by_month {
                month_list.push(start.month() as u8);
            }
        }
        Freq::Monthly | Freq::Yearly => {}
    }
    if !set_positions.is_empty() && freq != Freq::Monthly {
        return Err("BYSETPOS is supported with FREQ=MONTHLY only".into());
    }
    let start_time = dtstart.map(|start| start.time());
    let hours = hours.unwrap_or_else(|| vec![start_time.map_or(0, |time| time.hour())]);
    let minutes = minutes.unwrap_or_else(|| vec![start_time.map_or(0, |time| time.minute())]);
    let seconds = seconds.unwrap_or_else(|| vec![start_time.map_or(0, |time| time.second())]);
    let mut times = Vec::new();
    for &hour in &hours {
        for &minute in &minutes {
            for &second in &seconds {
                times.push(Time::constant(hour, minute, second, 0));
            }
        }
    }
    times.sort();
    times.dedup();
    if !set_positions.is_empty() && times.len() > 1 {
        return Err("BYSETPOS with more than one time a day is not supported".into());
    }
    let month_bits = if month_list.is_empty() {
        0x1ffe
    } else {
        month_list.iter().fold(0u16, |bits, month| bits | 1 << month)
    };
    let mut schedule = Schedule {
        days: Days::Rule(RuleDays {
            freq,
            interval,
            anchor: dtstart.map(|start| start.date()),
            wkst: wkst.unwrap_or(Weekday::Monday),
            month_days,
            weekdays,
            ordinal_in_year: freq == Freq::Yearly && !by_month,
            set_positions,
            months: month_bits,
        }),
        months: month_bits,
        times,
        start: dtstart,
        until: until.map(|until| {
            tz.to_ambiguous_timestamp(until)
                .compatible()
                .unwrap_or(Timestamp::MAX)
        }),
    };
    if let (Some(count), Some(start)) = (count, dtstart) {
        // COUNT becomes an UNTIL: the instant of the COUNT-th fire.
        let limit = Timestamp::MAX;
        let horizon_end = tz
            .to_ambiguous_timestamp(start)
            .compatible()
            .ok()
            .and_then(|t| t.checked_add(super::HORIZON).ok())
            .unwrap_or(limit);
        let mut last = tz
            .to_ambiguous_timestamp(start)
            .compatible()
            .map_err(|_| "DTSTART is out of range".to_string())?
            .checked_sub(jiff::SignedDuration::from_nanos(1))
            .map_err(|_| "DTSTART is out of range".to_string())?;
        for _ in 0..count {
            last = schedule.first_fire_after(tz, last, horizon_end).ok_or_else(|| {
                format!(
                    "COUNT={count} reaches more than 10 years past DTSTART (or never); give UNTIL instead"
                )
            })?;
        }
        schedule.until = Some(last);
    }
    Ok(schedule)
}

fn number<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
    name: &str,
    value: &str,
    min: T,
    max: T,
) -> Result<T, String> {
    value
        .parse::<T>()
        .ok()
        .filter(|number| *number >= min && *number <= max)
        .ok_or_else(|| format!("{name}={value} is not a number from {min} to {max}"))
}

fn list<T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy>(
    name: &str,
    value: &str,
    min: T,
    max: T,
) -> Result<Vec<T>, String> {
    value
        .split(',')
        .map(|item| {
            number(name, item, min, max)
                .map_err(|_| format!("{name}={value} must list numbers from {min} to {max}"))
        })
        .collect()
}

/// A list of non-zero numbers from -max to max.
fn signed_list(name: &str, value: &str, max: i16) -> Result<Vec<i16>, String> {
    value
        .split(',')
        .map(|item| {
            item.parse::<i16>()
                .ok()
                .filter(|number| *number != 0 && number.abs() <= max)
                .ok_or_else(|| format!("{name}={value} must list numbers from 1 to {max} or -{max} to -1"))
        })
        .collect()
}

fn by_day(value: &str) -> Result<Vec<(i16, Weekday)>, String> {
    value
        .split(',')
        .map(|item| {
            let bad = || {
                format!(
                    "BYDAY={value} must list weekdays MO..SU, optionally with an ordinal such as 2MO or -1FR"
                )
            };
            let split = item
                .len()
                .checked_sub(2)
                .filter(|at| item.is_char_boundary(*at))
                .ok_or_else(bad)?;
            let (ordinal, day) = item.split_at(split);
            let day = weekday(day).ok_or_else(bad)?;
            let ordinal = match ordinal {
                "" => 0,
                _ => ordinal
                    .parse::<i16>()
                    .ok()
                    .filter(|n| *n != 0 && n.abs() <= 53)
                    .ok_or_else(bad)?,
            };
            Ok((ordinal, day))
        })
        .collect()
}

fn weekday(text: &str) -> Option<Weekday> {
    Some(match text {
        "MO" => Weekday::Monday,
        "TU" => Weekday::Tuesday,
        "WE" => Weekday::Wednesday,
        "TH" => Weekday::Thursday,
        "FR" => Weekday::Friday,
        "SA" => Weekday::Saturday,
        "SU" => Weekday::Sunday,
        _ => return None,
    })
}

/// `20260105T090000` (wall-clock in the window's zone), `20260105T080000Z` (UTC) or `20260105`.
fn parse_date_time(name: &str, value: &str, tz: &TimeZone) -> Result<DateTime, String> {
    let bad = || {
        format!(
            "{name}:{value} is not a date-time; write e.g. 20260105T090000 (in the window's timeZone), 20260105T080000Z or 20260105"
        )
    };
    let (text, utc) = match value.strip_suffix('Z') {
        Some(text) => (text, true),
        None => (value, false),
    };
    let digits = |range: std::ops::Range<usize>| -> Result<i16, String> {
        let part = text.get(range).ok_or_else(bad)?;
        if !part.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(bad());
        }
        part.parse().map_err(|_| bad())
    };
    let date = Date::new(digits(0..4)?, digits(4..6)? as i8, digits(6..8)? as i8).map_err(|_| bad())?;
    let time = match text.len() {
        8 if !utc => Time::midnight(),
        15 if text.as_bytes()[8] == b'T' => Time::new(
            digits(9..11)? as i8,
            digits(11..13)? as i8,
            digits(13..15)? as i8,
            0,
        )
        .map_err(|_| bad())?,
        _ => return Err(bad()),
    };
    let local = date.to_datetime(time);
    if utc {
        let instant = TimeZone::UTC
            .to_ambiguous_timestamp(local)
            .compatible()
            .map_err(|_| bad())?;
        return Ok(tz.to_datetime(instant));
    }
    Ok(local)
}
