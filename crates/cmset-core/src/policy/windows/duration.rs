//! Go durations (`time.ParseDuration`), the form Argo CD's sync windows give `duration` in.

use jiff::SignedDuration;

/// Parses a Go duration that must be more than zero: `30m`, `1h30m`, `1.5h`, `300ms`. The error says
/// what is wrong and what is allowed; the caller names the field.
pub fn parse(text: &str) -> Result<SignedDuration, String> {
    const FORM: &str = "write a Go duration such as 30m, 1h30m, 1.5h or 72h (units ns, us, ms, s, m, h)";
    if text.is_empty() {
        return Err(format!("must not be empty; {FORM}"));
    }
    if text.starts_with(['-', '+']) || text == "0" {
        return Err(format!("{text:?} must be more than zero; {FORM}"));
    }
    let mut nanos: i128 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(format!("{text:?} is not a duration; {FORM}"));
        }
        let per_unit: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            // Go has no days: a day is not always 24 hours, so say which is meant.
            "d" => {
                return Err(format!(
                    "{text:?}: days are not a unit; write hours, e.g. 24h for a day"
                ));
            }
            "" => return Err(format!("{text:?} has a number without a unit; {FORM}")),
            _ => return Err(format!("{text:?} has an unknown unit; {FORM}")),
        };
        let too_long = || format!("{text:?} is too long; {FORM}");
        // Digits beyond nanoseconds cannot matter; 18 keeps the arithmetic inside i128.
        let whole: i128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_long())?
        };
        let mut part = whole.checked_mul(per_unit).ok_or_else(too_long)?;
        let mut scale = per_unit;
        for digit in fraction.bytes().take(18) {
            scale /= 10;
            part += i128::from(digit - b'0') * scale;
        }
        nanos = nanos.checked_add(part).ok_or_else(too_long)?;
        if nanos > i128::from(i64::MAX) {
            return Err(too_long());
        }
        rest = tail;
    }
    if nanos == 0 {
        return Err(format!("{text:?} must be more than zero; {FORM}"));
    }
    Ok(SignedDuration::from_nanos(nanos as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let good = [
            ("300ms", SignedDuration::from_millis(300)),
            ("1.5h", SignedDuration::from_mins(90)),
            ("2h45m", SignedDuration::from_mins(165)),
            ("72h", SignedDuration::from_hours(72)),
            ("1h30m15s", SignedDuration::from_secs(5415)),
            ("10us", SignedDuration::from_micros(10)),
            ("10µs", SignedDuration::from_micros(10)),
            ("10μs", SignedDuration::from_micros(10)),
            ("5ns", SignedDuration::from_nanos(5)),
            (".5s", SignedDuration::from_millis(500)),
            ("1.s", SignedDuration::from_secs(1)),
        ];
        for (text, want) in good {
            assert_eq!(parse(text), Ok(want), "{text}");
        }
        let bad = [
            ("", "must not be empty"),
            ("0", "more than zero"),
            ("0s", "more than zero"),
            ("-1h", "more than zero"),
            ("1d", "write hours, e.g. 24h"),
            ("10", "without a unit"),
            ("1y", "unknown unit"),
            ("h", "not a duration"),
            (".h", "not a duration"),
            ("1h 30m", "unknown unit"),
            ("99999999999999999999h", "too long"),
            ("3000000h", "too long"),
        ];
        for (text, want) in bad {
            let error = parse(text).expect_err(text);
            assert!(error.contains(want), "{text}: {error}");
        }
    }
}
