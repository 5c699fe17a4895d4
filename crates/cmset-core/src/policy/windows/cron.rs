//! Five-field cron, as robfig/cron's standard parser reads it (the parser Argo CD's sync windows use),
//! plus 7 for Sunday as Kubernetes CronJobs and most crons accept.

use jiff::civil::{Date, Time};

use super::schedule::{Days, Schedule, weekday_bit};

/// The day part of a cron expression.
#[derive(Clone, Debug)]
pub(crate) struct CronDays {
    /// Bit `d` set: day of month `d` fires.
    dom: u32,
    /// Bit `d` set: weekday `d` (Sunday = 0) fires.
    dow: u8,
    /// Whether the field was a bare `*` or `?` (robfig's star bit).
    dom_star: bool,
    dow_star: bool,
}

impl CronDays {
    pub(crate) fn matches(&self, date: Date) -> bool {
        let dom = self.dom & (1 << date.day()) != 0;
        let dow = self.dow & weekday_bit(date.weekday()) != 0;
        // robfig's dayMatches: when both day fields are restricted, either one fires.
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }
}

struct Field {
    name: &'static str,
    min: u32,
    /// Largest value `*` and `a/n` reach.
    max: u32,
    /// Largest value that may be written (7 for Sunday in day-of-week).
    max_written: u32,
    names: &'static [&'static str],
    /// Value of `names[0]`.
    first_name: u32,
}

const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    max_written: 59,
    names: &[],
    first_name: 0,
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    max_written: 23,
    names: &[],
    first_name: 0,
};
const DOM: Field = Field {
    name: "day-of-month",
    min: 1,
    max: 31,
    max_written: 31,
    names: &[],
    first_name: 0,
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    max_written: 12,
    names: &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
    first_name: 1,
};
const DOW: Field = Field {
    name: "day-of-week",
    min: 0,
    max: 6,
    max_written: 7,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    first_name: 0,
};

/// Parses five fields or a descriptor; the error says what is wrong and what is allowed.
pub(crate) fn parse(schedule: &str) -> Result<Schedule, String> {
    let text = schedule.trim();
    let expanded = match text.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        lower if lower.starts_with("@every") => {
            return Err(
                "@every is not supported: a window needs wall-clock times; write five cron fields".into(),
            );
        }
        lower if lower.starts_with('@') => {
            return Err(format!(
                "{text:?} is not a known descriptor; use @yearly, @annually, @monthly, @weekly, @daily, @midnight \
                 or @hourly, or five cron fields"
            ));
        }
        lower if lower.starts_with("tz=") || lower.starts_with("cron_tz=") => {
            return Err("a time zone inside the schedule is not supported; set timeZone instead".into());
        }
        _ => text,
    };
    let fields: Vec<&str> = expanded.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "{text:?} has {} fields; write five (minute hour day-of-month month day-of-week), e.g. 0 22 * * 1-5, \
             or an RRULE such as FREQ=WEEKLY;BYDAY=MO;BYHOUR=9",
            fields.len()
        ));
    }
    let (minutes, _) = parse_field(fields[0], &MINUTE)?;
    let (hours, _) = parse_field(fields[1], &HOUR)?;
    let (dom, dom_star) = parse_field(fields[2], &DOM)?;
    let (months, _) = parse_field(fields[3], &MONTH)?;
    let (mut dow, dow_star) = parse_field(fields[4], &DOW)?;
    if dow & (1 << 7) != 0 {
        dow = (dow | 1) & 0x7f;
    }
    let mut times = Vec::new();
    for hour in 0..24 {
        for minute in 0..60 {
            if hours & (1 << hour) != 0 && minutes & (1 << minute) != 0 {
                times.push(Time::constant(hour as i8, minute as i8, 0, 0));
            }
        }
    }
    Ok(Schedule {
        days: Days::Cron(CronDays {
            dom: dom as u32,
            dow: dow as u8,
            dom_star,
            dow_star,
        }),
        months: months as u16,
        times,
        start: None,
        until: None,
    })
}

/// One field: its bits, and whether it is unrestricted in robfig's sense.
fn parse_field(text: &str, field: &Field) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => (range, Some(step)),
            None => (part, None),
        };
        let (mut low, mut high, is_star) = if range == "*" || range == "?" {
            (field.min, field.max, true)
        } else if let Some((low, high)) = range.split_once('-') {
            (value(low, field)?, value(high, field)?, false)
        } else {
            let single = value(range, field)?;
            (single, single, false)
        };
        let step = match step {
            None => 1,
            Some(step) => {
                let step: u32 = step.parse().ok().filter(|step| *step > 0).ok_or_else(|| {
                    format!(
                        "{} field {text:?} has a step that is not a number above 0",
                        field.name
                    )
                })?;
                // robfig: `a/n` runs from a to the field's end.
                if !is_star && !range.contains('-') {
                    high = field.max.max(low);
                }
                step
            }
        };
        if !is_star {
            if low < field.min || high > field.max_written {
                return Err(format!(
                    "{} field {text:?} is out of range; allowed {}-{}",
                    field.name, field.min, field.max_written
                ));
            }
            if low > high {
                return Err(format!(
                    "{} field {text:?} has a range whose start is after its end",
                    field.name
                ));
            }
        }
        star |= is_star && step == 1;
        while low <= high {
            bits |= 1 << low;
            low += step;
        }
    }
    Ok((bits, star))
}

fn value(text: &str, field: &Field) -> Result<u32, String> {
    if let Ok(number) = text.parse::<u32>() {
        return Ok(number);
    }
    let upper = text.to_ascii_uppercase();
    if let Some(index) = field.names.iter().position(|name| *name == upper) {
        return Ok(field.first_name + index as u32);
    }
    let allowed = if field.names.is_empty() {
        format!("numbers {}-{}", field.min, field.max_written)
    } else {
        format!(
            "numbers {}-{} or names {}-{}",
            field.min,
            field.max_written,
            field.names[0],
            field.names[field.names.len() - 1]
        )
    };
    Err(format!(
        "{} field has {text:?}, which is not a value; allowed: {allowed}, *, ranges a-b, steps /n, lists a,b",
        field.name
    ))
}
