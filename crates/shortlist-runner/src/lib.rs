//! The application layer: one async service under every front end (the command line, the web
//! app, the scheduler, workers on other hosts), and the runs it orchestrates.
//!
//! Principal types and how they relate:
//! - [`config::Config`] is resolved once by a front end (database URL, models folder, compute
//!   threads, worker name) and passed down; nothing below reads the environment.
//! - [`service::StudyService`] holds one [`shortlist_store::Store`] (one pool): typed commands —
//!   create, lock, verify a study, request a run (a new or resumed generation of queued jobs) —
//!   and queries that return the view structs of [`service::views`].
//! - [`worker::Worker`] executes queued jobs one step at a time
//!   ([`worker::Worker::try_execute_next_job`]); each job body ([`jobs`]: memory fit, quality,
//!   load with its capacity sweep, record) runs on a thread of its own, never on the runtime's
//!   workers, and writes typed [`progress::ProgressEvent`]s to the store at a bounded rate.
//! - Failures carry an [`error::ErrorClass`]: bad input is never retried, transient failures are
//!   retried with backoff, corrupt stored data names its row.
//! - [`capacity`] is the one capacity policy (calibration, client-bound refusal, load steps, the
//!   sweep plan), shared by `shortlist capacity`, `bench` and the study's load job;
//!   [`serving::Served`] the one loopback serving of a GGUF candidate.
//! - [`candidate::CandidateSpec`] names a candidate (a GGUF file on the local engine or an
//!   OpenAI-compatible endpoint); [`candidate::open`] gives a [`candidate::Generator`], and
//!   [`candidate::ask`] asks one case with the retry policy that keeps errors apart from answers.
//! - [`quality::run_quality_on`] is the file-based quality run of `shortlist eval run`
//!   (resumable through a progress file), with [`judge::Judges`] for judge checks.
//!
//! ```
//! use shortlist_runner::candidate::CandidateSpec;
//! assert!(matches!(CandidateSpec::parse("gguf:model.gguf"), Ok(CandidateSpec::Gguf(_))));
//! assert!(matches!(CandidateSpec::parse("http://127.0.0.1:8000#smollm2"), Ok(CandidateSpec::Endpoint { .. })));
//! assert!(CandidateSpec::parse("model.bin").is_err());
//! ```

pub mod candidate;
pub mod capacity;
pub mod config;
pub mod engines;
pub mod error;
pub mod fingerprint;
pub mod identity;
pub mod jobs;
pub mod judge;
pub mod placement;
pub mod progress;
pub mod prompt;
pub mod quality;
pub mod service;
pub mod serving;
pub mod time;
pub mod worker;
pub mod workload;

pub use error::{ErrorClass, RunError, ServiceError};
