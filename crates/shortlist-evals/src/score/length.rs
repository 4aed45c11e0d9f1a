//! Length limits in characters (Unicode scalar values) and words (whitespace-separated), on the
//! trimmed text.

use super::{Scorer, Verdict};
use crate::response::Response;

/// Inclusive bounds; at least one is set and each minimum is ≤ its maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LengthCheck {
    chars: (Option<u64>, Option<u64>),
    words: (Option<u64>, Option<u64>),
}

impl LengthCheck {
    /// Validates the bounds.
    pub fn new(
        min_chars: Option<u64>,
        max_chars: Option<u64>,
        min_words: Option<u64>,
        max_words: Option<u64>,
    ) -> Result<Self, String> {
        if [min_chars, max_chars, min_words, max_words]
            .iter()
            .all(Option::is_none)
        {
            return Err(
                "a length check needs at least one of min_chars, max_chars, min_words, max_words"
                    .into(),
            );
        }
        for (lo, hi, what) in [
            (min_chars, max_chars, "chars"),
            (min_words, max_words, "words"),
        ] {
            if let (Some(lo), Some(hi)) = (lo, hi)
                && lo > hi
            {
                return Err(format!(
                    "min_{what} ({lo}) is greater than max_{what} ({hi})"
                ));
            }
        }
        Ok(Self {
            chars: (min_chars, max_chars),
            words: (min_words, max_words),
        })
    }
}

fn within(n: u64, (lo, hi): (Option<u64>, Option<u64>)) -> bool {
    lo.is_none_or(|lo| n >= lo) && hi.is_none_or(|hi| n <= hi)
}

impl Scorer for LengthCheck {
    fn score(&self, response: &Response) -> Verdict {
        let text = response.text().trim();
        let chars = text.chars().count() as u64;
        let words = text.split_whitespace().count() as u64;
        if !within(chars, self.chars) {
            return Verdict::fail_code(
                "length_chars",
                format!("{chars} characters, limits {:?}", self.chars),
            );
        }
        if !within(words, self.words) {
            return Verdict::fail_code(
                "length_words",
                format!("{words} words, limits {:?}", self.words),
            );
        }
        Verdict::pass()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        let c = LengthCheck::new(None, Some(20), None, Some(3)).unwrap();
        assert!(c.score(&Response::text_only("one two three")).passed());
        assert!(!c.score(&Response::text_only("one two three four")).passed());
        assert!(
            !c.score(&Response::text_only("abcdefghijklmnopqrstuvwxyz"))
                .passed()
        );
        let min = LengthCheck::new(Some(5), None, None, None).unwrap();
        assert!(!min.score(&Response::text_only(" ab ")).passed());
        assert!(LengthCheck::new(None, None, None, None).is_err());
        assert!(LengthCheck::new(Some(5), Some(4), None, None).is_err());
    }
}
