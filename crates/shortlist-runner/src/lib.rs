//! Runs studies: quality runs of a candidate over an eval set (this module set), and — as they
//! arrive — load runs, capacity sweeps and selection records, each a resumable step.
//!
//! Principal types and how they relate:
//! - [`candidate::CandidateSpec`] names a candidate (a GGUF file on the local engine or an
//!   OpenAI-compatible endpoint); [`candidate::open`] gives a [`candidate::Generator`].
//! - [`prompt::ChatRequest`] is one eval case as a chat request; models without a tool API get the
//!   tools in the system prompt ([`prompt::TOOL_INSTRUCTIONS`]) and their calls parsed back.
//! - [`quality::run_quality`] answers every case not yet in a [`quality::Progress`] file and
//!   scores the set into `shortlist_evals::results::RunResults`; the eval set's judge checks are
//!   asked of the [`judge::Judges`] given (other candidates) through
//!   [`judge::score_with_judges`].
//! - [`identity::read_gguf`] reads what a GGUF file says about itself (identity, weights bytes,
//!   KV layout) without loading weights.
//! - [`study::StudyRunner`] drives a study over the store: create, lock, verify, show, queue its
//!   jobs, execute them one at a time (resumable case by case), and assemble sealed records.
//!
//! ```
//! use shortlist_runner::candidate::CandidateSpec;
//! assert!(matches!(CandidateSpec::parse("gguf:model.gguf"), Ok(CandidateSpec::Gguf(_))));
//! assert!(matches!(CandidateSpec::parse("http://127.0.0.1:8000#smollm2"), Ok(CandidateSpec::Endpoint { .. })));
//! assert!(CandidateSpec::parse("model.bin").is_err());
//! ```

pub mod candidate;
pub mod error;
pub mod identity;
pub mod judge;
pub mod load;
pub mod prompt;
pub mod quality;
pub mod study;

pub use error::RunError;
