//! A numeric answer within tolerance.
//!
//! Numbers are read from the text with their sign and decimals; currency signs and other words
//! around them are ignored. With `decimal: point` (default) a comma separates thousands (`1,299.50`);
//! with `decimal: comma` a dot or a space separates thousands and the comma is the decimal mark
//! (`1.299,50`). `pick` says which number counts: `any` (default), `first` or `last`.

use std::sync::LazyLock;

use regex::Regex;

use super::{Scorer, Verdict};
use crate::response::Response;

/// Which number in the text is the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// Passes if any number is within tolerance.
    Any,
    /// The first number.
    First,
    /// The last number.
    Last,
}

/// The decimal mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decimal {
    /// `1,299.50`.
    Point,
    /// `1.299,50`.
    Comma,
}

/// A numeric check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NumberCheck {
    value: f64,
    tolerance: f64,
    pick: Pick,
    decimal: Decimal,
}

impl NumberCheck {
    /// `tolerance` is absolute and must be finite and ≥ 0; `value` must be finite.
    pub fn new(value: f64, tolerance: f64, pick: Pick, decimal: Decimal) -> Result<Self, String> {
        if !value.is_finite() {
            return Err("value must be a finite number".into());
        }
        if !(tolerance.is_finite() && tolerance >= 0.0) {
            return Err("tolerance must be a finite number ≥ 0".into());
        }
        Ok(Self {
            value,
            tolerance,
            pick,
            decimal,
        })
    }
}

static POINT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?").expect("static regex"));
static COMMA: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"-?(?:\d{1,3}(?:[. \u{a0}]\d{3})+|\d+)(?:,\d+)?").expect("static regex")
});

/// All numbers in `text`, in order.
pub fn numbers(text: &str, decimal: Decimal) -> Vec<f64> {
    let re = match decimal {
        Decimal::Point => &*POINT,
        Decimal::Comma => &*COMMA,
    };
    re.find_iter(text)
        .filter_map(|m| {
            let s = m.as_str();
            let clean: String = match decimal {
                Decimal::Point => s.replace(',', ""),
                Decimal::Comma => s.replace(['.', ' ', '\u{a0}'], "").replace(',', "."),
            };
            clean.parse::<f64>().ok()
        })
        .collect()
}

impl Scorer for NumberCheck {
    fn score(&self, response: &Response) -> Verdict {
        let found = numbers(response.text(), self.decimal);
        let close = |x: &f64| (x - self.value).abs() <= self.tolerance;
        let ok = match self.pick {
            Pick::Any => found.iter().any(close),
            Pick::First => found.first().is_some_and(close),
            Pick::Last => found.last().is_some_and(close),
        };
        if found.is_empty() {
            return Verdict::fail_code("no_number", "the output contains no number");
        }
        Verdict::from_bool(ok, || {
            format!(
                "expected {} ± {}, found {:?}",
                self.value, self.tolerance, found
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(c: NumberCheck, t: &str) -> bool {
        c.score(&Response::text_only(t)).passed()
    }

    #[test]
    fn extraction() {
        assert_eq!(
            numbers("$1,299.50 or -3 and 7", Decimal::Point),
            vec![1299.5, -3.0, 7.0]
        );
        assert_eq!(
            numbers("1.299,50 € und 12,5 %", Decimal::Comma),
            vec![1299.5, 12.5]
        );
    }

    #[test]
    fn tolerance_and_pick() {
        let c = NumberCheck::new(348.0, 0.01, Pick::Any, Decimal::Point).unwrap();
        assert!(ok(c, "The annual price is $348.00 per year."));
        assert!(!ok(c, "The annual price is $349."));
        assert!(!ok(c, "It is free."));
        let last = NumberCheck::new(10.0, 0.0, Pick::Last, Decimal::Point).unwrap();
        assert!(ok(last, "5 seats at $2 is 10"));
        assert!(!ok(last, "10 seats, 3 left"));
        let first = NumberCheck::new(10.0, 0.5, Pick::First, Decimal::Point).unwrap();
        assert!(ok(first, "10.4 then 3"));
        assert!(NumberCheck::new(f64::NAN, 0.0, Pick::Any, Decimal::Point).is_err());
        assert!(NumberCheck::new(1.0, -1.0, Pick::Any, Decimal::Point).is_err());
    }
}
