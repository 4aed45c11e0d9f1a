//! Studies fixed in advance, and the one-page selection record they end in (pure: no clock, file,
//! network or environment — the caller passes the lock time and the measured values).
//!
//! Principal types and how they relate:
//! - [`study::Study`] is a checked `*.study.toml`: question, eval set version, workload, SLO,
//!   traffic, memory budget, candidates and [`rule::Rule`] disqualifiers (unknown metric names are
//!   refused). [`study::Study::lock`] freezes it into a [`study::LockedStudy`] under the SHA-256
//!   of its canonical JSON; [`study::LockedStudy::verify`] recomputes it.
//! - A candidate's measurements arrive as [`rule::MetricValues`]; each rule gives a
//!   [`rule::RuleVerdict`] (pass, trip, or not measured) with its evidence.
//! - [`memory::fit`] and [`cost::estimate`] do the arithmetic of sections 4 and 7.
//! - [`record::SelectionRecord`] holds the seven sections; `seal` stamps its own hash.
//! - [`diff::changes`] says which criteria differ between two versions of a study.
//! - [`schedule::next_due`] and [`schedule::due_at`] say when a scheduled study is due (cron in a
//!   time zone, daylight-saving gaps and folds run once).
//! - [`performance::Measured`] turns analyzed load steps into section 5 (knee, capacity,
//!   overload, excluded steps), and [`assemble::assemble_record`] builds the whole record from
//!   typed inputs: the locked study, the candidate, what one generation's runs measured.
//!
//! ```
//! use shortlist_study::study::Study;
//!
//! let text = r#"
//! format = "shortlist.study.v1"
//! name = "support"
//! question = "Which model answers support chats?"
//! evalset = { path = "evalsets/support-assistant.yaml", sha256 = "0000000000000000000000000000000000000000000000000000000000000000" }
//! workload = { kind = "uniform", requests = 100, input_tokens = 100000, output_tokens = 20000, rate_rps = 8.0, seed = 7 }
//! slo = { name = "chat", ttft_ms = 600, max_itl_ms = 150 }
//! traffic = { ordinary_rps = 2.0, peak_rps = 8.0 }
//! memory = { context_tokens = 4096, concurrency = 8, device = "cpu", device_memory_gib = 24.0 }
//!
//! [[candidate]]
//! name = "small"
//! source = "gguf:small.gguf"
//! price_per_device_hour = 0.1
//!
//! [[disqualifier]]
//! metric = "high_value_failures"
//! op = ">"
//! value = 0
//! "#;
//! let locked = Study::from_toml("support.study.toml", text).unwrap().lock("2026-11-29T10:00:00Z");
//! assert_eq!(locked.sha256.len(), 64);
//! locked.verify().unwrap();
//! ```

pub mod assemble;
pub mod cost;
pub mod diff;
pub mod drift;
pub mod error;
pub mod form;
pub mod memory;
pub mod performance;
pub mod record;
pub mod rule;
pub mod schedule;
pub mod study;

pub use error::StudyError;
