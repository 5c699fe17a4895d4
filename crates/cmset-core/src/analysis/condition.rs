//! A template's success condition: `result`, a comparison and a number, e.g. `result < 0.05`.

use std::fmt;
use std::str::FromStr;

/// How a sample is compared with the threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Comparison {
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    Equal,
    NotEqual,
}

impl Comparison {
    /// Longest first, so that `<=` is not read as `<` followed by `=`.
    const ALL: [Comparison; 6] = [
        Self::LessOrEqual,
        Self::GreaterOrEqual,
        Self::Equal,
        Self::NotEqual,
        Self::Less,
        Self::Greater,
    ];

    pub fn symbol(self) -> &'static str {
        match self {
            Self::Less => "<",
            Self::LessOrEqual => "<=",
            Self::Greater => ">",
            Self::GreaterOrEqual => ">=",
            Self::Equal => "==",
            Self::NotEqual => "!=",
        }
    }

    fn holds(self, value: f64, threshold: f64) -> bool {
        match self {
            Self::Less => value < threshold,
            Self::LessOrEqual => value <= threshold,
            Self::Greater => value > threshold,
            Self::GreaterOrEqual => value >= threshold,
            Self::Equal => value == threshold,
            Self::NotEqual => value != threshold,
        }
    }
}

/// A parsed success condition. It keeps the threshold as written, so that it is shown as the
/// template's author wrote it.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    comparison: Comparison,
    threshold: f64,
    literal: String,
}

/// A success condition that is not `result`, a comparison and a number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionError {
    pub text: String,
}

impl fmt::Display for ConditionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "successCondition {:?} is not `result`, one of <, <=, >, >=, ==, != and a number (e.g. `result < 0.05`)",
            self.text
        )
    }
}

impl std::error::Error for ConditionError {}

impl Condition {
    /// Parses exactly the language of [`cmset_api::analysis::SUCCESS_CONDITION_PATTERN`], the pattern
    /// the API server checks: spaces around the parts, a decimal number with an optional sign and
    /// exponent.
    pub fn parse(text: &str) -> Result<Self, ConditionError> {
        let error = || ConditionError {
            text: text.to_string(),
        };
        let rest = text.trim_matches(' ').strip_prefix("result").ok_or_else(error)?;
        let rest = rest.trim_start_matches(' ');
        let comparison = Comparison::ALL
            .into_iter()
            .find(|c| rest.starts_with(c.symbol()))
            .ok_or_else(error)?;
        let literal = rest[comparison.symbol().len()..].trim_start_matches(' ');
        if !is_decimal(literal) {
            return Err(error());
        }
        let threshold = literal.parse::<f64>().map_err(|_| error())?;
        Ok(Self {
            comparison,
            threshold,
            literal: literal.to_string(),
        })
    }

    /// Whether `value` satisfies the condition. NaN satisfies none (not even `!=`): it proves nothing.
    pub fn holds(&self, value: f64) -> bool {
        !value.is_nan() && self.comparison.holds(value, self.threshold)
    }

    pub fn comparison(&self) -> Comparison {
        self.comparison
    }

    pub fn threshold(&self) -> f64 {
        self.threshold
    }
}

impl FromStr for Condition {
    type Err = ConditionError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for Condition {
    /// `result < 0.05`: single spaces, the threshold as written.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "result {} {}", self.comparison.symbol(), self.literal)
    }
}

/// `[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?`, in full.
fn is_decimal(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut at = 0;
    let digits = |at: &mut usize| {
        let start = *at;
        while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
            *at += 1;
        }
        *at - start
    };
    if matches!(bytes.first(), Some(b'+' | b'-')) {
        at += 1;
    }
    let mut mantissa = digits(&mut at);
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        mantissa += digits(&mut at);
    }
    if mantissa == 0 {
        return false;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        if digits(&mut at) == 0 {
            return false;
        }
    }
    at == bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_comparison_and_number_form() {
        let table = [
            ("result < 0.05", Comparison::Less, 0.05, "result < 0.05"),
            ("result<=1", Comparison::LessOrEqual, 1.0, "result <= 1"),
            (
                "  result   >   -2.5e3 ",
                Comparison::Greater,
                -2500.0,
                "result > -2.5e3",
            ),
            ("result >= .5", Comparison::GreaterOrEqual, 0.5, "result >= .5"),
            ("result == 1.", Comparison::Equal, 1.0, "result == 1."),
            ("result != +0", Comparison::NotEqual, 0.0, "result != +0"),
            ("result < 1E-3", Comparison::Less, 0.001, "result < 1E-3"),
        ];
        for (text, comparison, threshold, shown) in table {
            let condition = Condition::parse(text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(condition.comparison(), comparison, "{text}");
            assert_eq!(condition.threshold(), threshold, "{text}");
            assert_eq!(condition.to_string(), shown, "{text}");
        }
    }

    #[test]
    fn rejects_anything_else() {
        for text in [
            "",
            "result",
            "result <",
            "< 1",
            "value < 1",
            "result < NaN",
            "result < inf",
            "result =< 1",
            "result = 1",
            "result < 1 2",
            "result < .",
            "result < 1e",
            "result < 1e+",
            "result < 0x10",
            "result < 1_000",
            "result\t< 1",
            "result < 1 and result > 0",
            "Result < 1",
        ] {
            let error = Condition::parse(text).unwrap_err();
            assert!(error.to_string().contains("is not `result`"), "{text}: {error}");
        }
    }

    #[test]
    fn holds_compares_and_nan_never_holds() {
        let holds = |text: &str, value: f64| Condition::parse(text).unwrap().holds(value);
        assert!(holds("result < 0.05", 0.01));
        assert!(!holds("result < 0.05", 0.05));
        assert!(holds("result <= 0.05", 0.05));
        assert!(holds("result > 0", f64::INFINITY));
        assert!(!holds("result >= 0", -1.0));
        assert!(holds("result == 1", 1.0));
        assert!(holds("result != 1", 2.0));
        for text in ["result < 1", "result != 1", "result > -1", "result == 0"] {
            assert!(!holds(text, f64::NAN), "{text}");
        }
    }
}
