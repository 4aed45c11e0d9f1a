//! Shortlist's measurement core: request records in, the report of docs/metrics.md out.
//!
//! This crate is pure: it reads no clock, file, network or environment. Inputs arrive as
//! `BufRead` streams or values; every number it produces names its population.
//!
//! Principal types and how they relate:
//! - [`record::RecordsReader`] streams a `shortlist.records.v1` file, validating each
//!   [`record::Attempt`] (line-numbered errors).
//! - [`slo::Slo`] (from `*.slo.toml`) judges an attempt clause by clause.
//! - [`analyze::Analyzer`] accumulates attempts and produces an [`analyze::Report`]: latencies as
//!   [`percentile::Distribution`]s (nearest-rank percentiles with their [`percentile::Population`]),
//!   throughput, goodput, attainment and the sanity checks.
//! - [`hist::BucketHistogram`] (explicit buckets, ours or Prometheus) and [`hdr::LatencyHdr`]
//!   merge exactly or refuse; their percentiles are bucket ranges ([`hist::QuantileRange`]).
//! - [`lines::LineLimit`] bounds the lines every line-oriented reader takes in
//!   ([`lines::MAX_LINE_BYTES`] unless told otherwise).
//! - [`parts::analyze_parts`] merges the raw records of a load step split across load workers and
//!   checks each worker's client on its own.
//! - [`capacity`] finds the knee and the highest rate meeting an attainment target.
//!
//! ```
//! use shortlist_measure::analyze::{analyze, AnalyzeOptions};
//! use shortlist_measure::slo::Slo;
//!
//! let records = r#"{"format": "shortlist.records.v1", "loop": "open", "window_s": [0, 2]}
//! {"id": "a", "scheduled_s": 0.0, "sent_s": 0.0001, "chunks": [[0.3, 1], [0.34, 1]], "last_token_s": 0.34, "output_tokens": 2, "status": "ok"}
//! {"id": "b", "scheduled_s": 1.0, "sent_s": 1.0001, "status": "error", "error": "503"}
//! "#;
//! let slo = Slo::from_toml("chat.slo.toml", "name = \"chat\"\nttft_ms = 600\n").unwrap();
//! let report = analyze("run.records.jsonl", records.as_bytes(), AnalyzeOptions::new(slo)).unwrap();
//! assert_eq!(report.requests.scheduled, 2);
//! assert_eq!(report.requests.qualified, 1);
//! assert_eq!(report.throughput.requests_per_s, 0.5); // 1 completed over a 2 s window
//! assert_eq!(report.goodput.attainment, Some(0.5));
//! assert_eq!(report.latency.ttft.p50, Some(0.3)); // measured from the scheduled instant
//! ```

pub mod analyze;
pub mod capacity;
pub mod error;
pub mod hdr;
pub mod hist;
pub mod interval;
pub mod lines;
pub mod parts;
pub mod percentile;
pub mod record;
pub mod samples;
pub mod slo;

pub use error::{MeasureError, MergeError};
