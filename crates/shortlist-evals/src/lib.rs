//! Shortlist's eval-set core (pure: no clock, file, network or environment): eval sets, scorers,
//! statistics and importers.
//!
//! - [`EvalSet`] is a checked `shortlist.evalset.v1` file: [`Case`]s with a [`Category`], input,
//!   tools and [`Check`]s, versioned by the SHA-256 of a canonical form.
//! - Each check wraps one scorer from [`score`]; a scorer turns a [`Response`] (text, tool calls,
//!   finish reason) into a [`score::Verdict`].
//! - [`results::score_outputs`] scores a whole outputs file into [`results::RunResults`]: per-case
//!   verdicts, per-category pass rates with Wilson intervals ([`stats`]), weighted scores.
//! - [`results::compare`] pairs two result sets on shared cases with the exact McNemar test.
//! - [`diff::SetDiff`] says what changed from one version of a set to another, case by case;
//!   [`word_diff::WordDiff`] shows a changed text word by word.
//! - [`import`] converts promptfoo, OpenAI evals, inspect and BFCL files into eval sets.
//!
//! ```
//! use shortlist_evals::{EvalSet, Response};
//!
//! let set = EvalSet::from_yaml("mini.yaml", r#"
//! format: shortlist.evalset.v1
//! name: mini
//! cases:
//!   - id: capital
//!     category: ordinary
//!     input: What is the capital of France?
//!     checks: [{type: contains, value: Paris}]
//! "#).unwrap();
//! let case = &set.cases()[0];
//! let verdict = case.checks()[0].score(&Response::text_only("Paris."));
//! assert!(verdict.passed());
//! ```

pub mod diff;
pub mod error;
pub mod import;
pub mod response;
pub mod results;
pub mod score;
pub mod set;
pub mod stats;
pub mod wire;
pub mod word_diff;

pub use error::EvalError;
pub use response::{FinishReason, Response, ToolCall};
pub use set::{Case, Category, Check, EvalSet};
