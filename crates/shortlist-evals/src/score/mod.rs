//! Scorers: one small type per kind of check, each turning a [`Response`] into a [`Verdict`].
//!
//! A verdict is pass, fail (with a reason and, where a taxonomy exists, a stable error code), or
//! unscored — when the evidence needed is not there (a judge check with no judge verdict yet).

pub mod json;
pub mod judge;
pub mod language;
pub mod length;
pub mod number;
pub mod refusal;
pub mod text;
pub mod tool;

use serde::{Deserialize, Serialize};

use crate::response::Response;

/// The result of one check on one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The check held.
    Pass,
    /// The check did not hold.
    Fail,
    /// The check could not be decided from what was supplied.
    Unscored,
}

/// A check's outcome with its evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Pass, fail or unscored.
    pub outcome: Outcome,
    /// A stable, machine-readable error code for failures (e.g. `type_error:integer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Why, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Verdict {
    /// A pass without comment.
    pub fn pass() -> Self {
        Self {
            outcome: Outcome::Pass,
            code: None,
            reason: None,
        }
    }

    /// A failure with a reason.
    pub fn fail(reason: impl Into<String>) -> Self {
        Self {
            outcome: Outcome::Fail,
            code: None,
            reason: Some(reason.into()),
        }
    }

    /// A failure with an error code and a reason.
    pub fn fail_code(code: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            outcome: Outcome::Fail,
            code: Some(code.into()),
            reason: Some(reason.into()),
        }
    }

    /// Undecided, with the reason.
    pub fn unscored(reason: impl Into<String>) -> Self {
        Self {
            outcome: Outcome::Unscored,
            code: None,
            reason: Some(reason.into()),
        }
    }

    /// Pass if `ok`, else fail with `reason`.
    pub fn from_bool(ok: bool, reason: impl FnOnce() -> String) -> Self {
        if ok {
            Self::pass()
        } else {
            Self::fail(reason())
        }
    }

    /// True if the check held.
    pub fn passed(&self) -> bool {
        self.outcome == Outcome::Pass
    }
}

/// Anything that scores a response.
pub trait Scorer {
    /// Scores one response.
    fn score(&self, response: &Response) -> Verdict;
}
