//! Shortlist's workload core (pure: no clock, file, network or environment access).
//!
//! A workload is a [`trace::TraceHeader`] followed by [`trace::Request`]s sorted by arrival time,
//! read and written one line at a time by [`trace::TraceReader`] and [`trace::TraceWriter`].
//! Traces come from three places: [`arrival`] processes (constant, Poisson, gamma, on/off,
//! diurnal, replay) that produce arrival times; [`synth`], the chapter's three practice traces with
//! exact token totals; and [`import`], converters of public traces (Azure, Mooncake, BurstGPT).
//! [`stats`] describes a trace (rates, burstiness, lengths, prefix reuse) and [`fit`] synthesizes a
//! new trace that keeps a source's joint structure. Every random choice takes a seed and uses
//! ChaCha, so the same seed gives the same trace on every machine.
//!
//! ```
//! use shortlist_workload::synth::{Shape, SynthSpec, synthesize};
//! use shortlist_workload::stats::TraceStats;
//!
//! let spec = SynthSpec::practice(Shape::PrefixGroups);
//! let (header, requests) = synthesize(&spec, 7).unwrap();
//! let stats = TraceStats::compute(&header, &requests);
//! assert_eq!(stats.requests, 100);
//! assert_eq!(stats.input_tokens.distinct, 100_000);
//! assert_eq!(stats.input_tokens.sent, 820_000);
//! assert_eq!(stats.output_tokens, 20_000);
//! ```

pub mod arrival;
pub mod error;
pub mod fit;
pub mod import;
pub mod stats;
pub mod synth;
pub mod trace;

pub use error::WorkloadError;
pub use trace::{Mode, Request, RequestFields, TraceHeader, TraceReader, TraceWriter};
