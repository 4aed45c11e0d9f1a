//! Text scorers: equals, contains (all/any), starts-with and regex, each optionally
//! case-insensitive and negatable.
//!
//! Equals and starts-with compare the output with surrounding whitespace trimmed, because models
//! routinely add a trailing newline that no reader would count as a difference.

use regex::Regex;

use super::{Scorer, Verdict};
use crate::response::Response;

/// How a list of needles combines in a contains check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every needle must occur.
    All,
    /// At least one needle must occur.
    Any,
}

/// What a [`TextCheck`] tests.
#[derive(Debug, Clone)]
pub enum TextOp {
    /// The trimmed output equals the text.
    Equals(String),
    /// The output contains the needles.
    Contains {
        /// The needles (at least one).
        needles: Vec<String>,
        /// All or any.
        mode: Mode,
    },
    /// The trimmed output starts with the text.
    StartsWith(String),
    /// The regex matches anywhere (compiled with the case flag already applied).
    Regex(Regex),
}

/// A text comparison on the response's text.
#[derive(Debug, Clone)]
pub struct TextCheck {
    op: TextOp,
    ignore_case: bool,
    negate: bool,
}

impl TextCheck {
    /// Builds a text check. For `Regex`, pass a regex compiled with `(?i)` when `ignore_case`.
    pub fn new(op: TextOp, ignore_case: bool, negate: bool) -> Result<Self, String> {
        if let TextOp::Contains { needles, .. } = &op {
            if needles.is_empty() {
                return Err("contains needs at least one value".into());
            }
            if needles.iter().any(String::is_empty) {
                return Err("an empty string is contained in every output; remove it".into());
            }
        }
        Ok(Self {
            op,
            ignore_case,
            negate,
        })
    }

    fn holds(&self, text: &str) -> (bool, String) {
        let fold = |s: &str| {
            if self.ignore_case {
                s.to_lowercase()
            } else {
                s.to_owned()
            }
        };
        match &self.op {
            TextOp::Equals(want) => {
                let got = fold(text.trim());
                (
                    got == fold(want.trim()),
                    format!("output is not equal to {want:?}"),
                )
            }
            TextOp::StartsWith(want) => {
                let got = fold(text.trim());
                (
                    got.starts_with(&fold(want)),
                    format!("output does not start with {want:?}"),
                )
            }
            TextOp::Contains { needles, mode } => {
                let hay = fold(text);
                let missing: Vec<&String> =
                    needles.iter().filter(|n| !hay.contains(&fold(n))).collect();
                match mode {
                    Mode::All => (missing.is_empty(), format!("output lacks {missing:?}")),
                    Mode::Any => (
                        missing.len() < needles.len(),
                        format!("output contains none of {needles:?}"),
                    ),
                }
            }
            TextOp::Regex(re) => (
                re.is_match(text),
                format!("output does not match /{}/", re.as_str()),
            ),
        }
    }
}

impl Scorer for TextCheck {
    fn score(&self, response: &Response) -> Verdict {
        let (holds, why_not) = self.holds(response.text());
        match (holds, self.negate) {
            (true, false) | (false, true) => Verdict::pass(),
            (false, false) => Verdict::fail(why_not),
            (true, true) => Verdict::fail("output matches what it must not (negated check)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(op: TextOp, ic: bool, neg: bool, text: &str) -> bool {
        TextCheck::new(op, ic, neg)
            .unwrap()
            .score(&Response::text_only(text))
            .passed()
    }

    #[test]
    fn equals_trims_and_folds_case_on_request() {
        assert!(run(
            TextOp::Equals("Paris".into()),
            false,
            false,
            " Paris\n"
        ));
        assert!(!run(TextOp::Equals("Paris".into()), false, false, "paris"));
        assert!(run(TextOp::Equals("Paris".into()), true, false, "paris"));
        assert!(!run(
            TextOp::Equals("Paris".into()),
            false,
            false,
            "Paris, France"
        ));
    }

    #[test]
    fn contains_all_and_any() {
        let all = || TextOp::Contains {
            needles: vec!["30".into(), "days".into()],
            mode: Mode::All,
        };
        let any = || TextOp::Contains {
            needles: vec!["30".into(), "thirty".into()],
            mode: Mode::Any,
        };
        assert!(run(all(), false, false, "within 30 days"));
        assert!(!run(all(), false, false, "within 30 weeks"));
        assert!(run(any(), false, false, "thirty days"));
        assert!(!run(any(), false, false, "a month"));
        assert!(run(any(), true, false, "THIRTY days"));
        assert!(!run(any(), false, false, "THIRTY days"));
    }

    #[test]
    fn negation_inverts() {
        let op = || TextOp::Contains {
            needles: vec!["SECRET-42".into()],
            mode: Mode::All,
        };
        assert!(run(op(), false, true, "I can't share internal codes."));
        assert!(!run(op(), false, true, "The code is SECRET-42."));
    }

    #[test]
    fn starts_with_and_regex() {
        assert!(run(
            TextOp::StartsWith("Yes".into()),
            false,
            false,
            "  Yes, you can."
        ));
        assert!(!run(TextOp::StartsWith("Yes".into()), false, false, "No."));
        let re = Regex::new(r"INV-\d{6}").unwrap();
        assert!(run(
            TextOp::Regex(re.clone()),
            false,
            false,
            "see INV-004211"
        ));
        assert!(!run(TextOp::Regex(re), false, false, "see INV-42"));
    }

    #[test]
    fn empty_needles_are_rejected() {
        assert!(
            TextCheck::new(
                TextOp::Contains {
                    needles: vec![],
                    mode: Mode::All
                },
                false,
                false
            )
            .is_err()
        );
        assert!(
            TextCheck::new(
                TextOp::Contains {
                    needles: vec![String::new()],
                    mode: Mode::Any
                },
                false,
                false
            )
            .is_err()
        );
    }
}
