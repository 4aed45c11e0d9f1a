//! Shortlist's load generator: replay a workload against a target, open or closed loop, and
//! record every attempt as `shortlist.records.v1` for `shortlist analyze`.
//!
//! Principal types and how they relate:
//! - [`workload::Workload`] holds the requests ([`workload::RequestSpec`]) and their arrival times.
//! - [`target::Target`] sends one request and streams what comes back into an
//!   [`target::Observation`], stamped on the run's one monotonic [`clock::RunClock`]. Targets:
//!   [`http::OpenAiTarget`] (OpenAI-compatible SSE), [`sim::SimTarget`] (a discrete-event batching
//!   server on virtual time).
//! - [`driver::drive`] runs the loop of [`driver::RunOptions`] (open, open with a cap, closed) and
//!   turns each attempt into a [`records::RecordLine`]; [`run::run`] adds the records file, live
//!   figures ([`live::LiveStats`]) and a clean stop.
//! - [`mock`] serves an OpenAI-compatible mock; [`calibrate`] measures this client's own ceiling
//!   against it.
//!
//! ```
//! use std::sync::Arc;
//! use shortlist_loadgen::driver::{Pacing, RunOptions};
//! use shortlist_loadgen::run::{run, virtual_runtime, RunOutput};
//! use shortlist_loadgen::sim::{SimConfig, SimTarget};
//! use shortlist_loadgen::workload::Workload;
//! use shortlist_measure::slo::Slo;
//!
//! let runtime = virtual_runtime().unwrap();
//! let result = runtime.block_on(async {
//!     let target = SimTarget::spawn(SimConfig::parse("sim:max_batch=4").unwrap());
//!     let workload = Arc::new(Workload::constant_rate(20, 8.0, 500, 10));
//!     let options = RunOptions { pacing: Pacing::Virtual, ..RunOptions::open() };
//!     let output = RunOutput { path: None, keep: true, progress: false };
//!     let (_stop, stop) = tokio::sync::watch::channel(false);
//!     run(target, workload, options, Slo::success_only(), output, Default::default(), stop).await
//! }).unwrap();
//! assert_eq!(result.records.len(), 20);
//! assert!(result.records.iter().all(|r| r.attempt.output_tokens == 10));
//! ```

pub mod calibrate;
pub mod clock;
pub mod driver;
pub mod error;
pub mod http;
pub mod live;
pub mod mock;
pub mod records;
pub mod run;
pub mod sim;
pub mod sse;
pub mod target;
pub mod workload;

pub use error::{LoadgenError, TargetError};
