//! The one-page selection record: one serializable type with the seven sections of
//! docs/formats.md ("Selection record"), rendered alike by the web page and the PDF.

use serde::{Deserialize, Serialize};

use crate::cost::{CostEstimate, NoCost};
use crate::memory::MemoryFit;
use crate::rule::{Outcome, RuleVerdict};
use crate::study::{LockedStudy, sha256_hex};

/// The format tag of selection records.
pub const RECORD_FORMAT: &str = "shortlist.record.v1";

/// The study a record was judged by, and when its criteria were frozen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudyStamp {
    pub name: String,
    pub version: u32,
    pub question: String,
    pub lock_sha256: String,
    pub locked_at: String,
}

impl StudyStamp {
    /// The stamp of a locked study.
    pub fn of(locked: &LockedStudy) -> StudyStamp {
        let f = locked.study.file();
        StudyStamp {
            name: f.name.clone(),
            version: f.version,
            question: f.question.clone(),
            lock_sha256: locked.sha256.clone(),
            locked_at: locked.locked_at.clone(),
        }
    }
}

/// Section 1: exactly what was evaluated.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Identity {
    pub candidate: String,
    pub source: String,
    pub architecture: String,
    pub parameters: Option<u64>,
    pub quantization: String,
    pub precision: String,
    pub context_limit: Option<u64>,
    pub license: String,
    pub weights_sha256: Option<String>,
    pub tokenizer_sha256: Option<String>,
    pub chat_template_sha256: Option<String>,
    pub runtime: String,
    pub runtime_version: String,
}

/// A pass rate with its 95 % Wilson interval and n: never a bare percentage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateWithInterval {
    pub label: String,
    pub passed: u64,
    pub n: u64,
    pub rate: f64,
    pub lo: f64,
    pub hi: f64,
}

/// Two candidates on the same cases: the exact McNemar test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedComparison {
    pub other: String,
    pub both_pass: u64,
    pub only_this: u64,
    pub only_other: u64,
    pub both_fail: u64,
    pub p_value: f64,
}

/// Section 2: quality on the product eval set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quality {
    pub evalset: String,
    pub evalset_sha256: String,
    pub overall: RateWithInterval,
    pub categories: Vec<RateWithInterval>,
    pub paired: Option<PairedComparison>,
    pub decoding: String,
    /// Cases whose outcome rests on a near-tie; absent when the candidate told no top-2 gaps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near_ties: Option<NearTies>,
}

pub use shortlist_evals::results::NEAR_TIE;

/// The answered cases whose greedy answer passed through a near-tie: a top-2 logit gap below
/// `threshold` at some token. Their outcome may flip on another engine, kernel or quantization.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NearTies {
    /// The gap (logits) below which the top two choices are a near-tie.
    pub threshold: f64,
    /// Answered cases whose top-2 gaps the candidate told.
    pub known: u64,
    /// Of those, the cases with a near-tie.
    pub cases: u64,
    /// The categories with near-ties, in the set's order.
    pub by_category: Vec<CategoryNearTies>,
}

/// One category's near-ties.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategoryNearTies {
    pub category: String,
    /// Cases with a near-tie.
    pub cases: u64,
    /// Cases whose gaps are known.
    pub known: u64,
}

/// A latency line: percentiles with their population and count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyLine {
    pub metric: String,
    pub population: String,
    pub count: u64,
    pub p50_s: Option<f64>,
    pub p90_s: Option<f64>,
    pub p99_s: Option<f64>,
}

/// One step of the capacity sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepRow {
    pub offered_rps: f64,
    pub goodput_rps: f64,
    pub throughput_rps: f64,
    pub attainment: Option<f64>,
    pub attainment_lower_bound: Option<f64>,
    /// Why this step judges nothing (e.g. client-bound), when it does not; its figures are
    /// still shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded: Option<String>,
}

/// Section 5: latency and goodput under the target workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Performance {
    pub loop_label: String,
    pub workload: String,
    pub slo: String,
    pub target_rps: f64,
    pub throughput_rps: f64,
    pub goodput_rps: f64,
    pub attainment: Option<f64>,
    pub latencies: Vec<LatencyLine>,
    /// Raw TTFT samples (seconds) for the distribution chart.
    pub ttft_samples_s: Vec<f64>,
    pub sweep: Vec<SweepRow>,
    pub knee_rps: Option<f64>,
    pub capacity_rps: Option<f64>,
    pub capacity_rule: String,
    pub client_bound: bool,
    pub hardware: String,
    /// The counts the target-rate figures come from, so that another night can put intervals on
    /// them (absent in records made before they were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_counts: Option<TargetCounts>,
    /// The workers that sent the load run at the target rate, when several sent it together:
    /// each one's share and its own client check (one client-bound sender makes the run
    /// client-bound). Empty when one worker sent it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub senders: Vec<Sender>,
}

/// One worker's share of a load run sent from several workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sender {
    /// The worker, as its records name it, and its part (from 0).
    pub host: String,
    pub part: u32,
    /// Its requests scheduled in the window.
    pub scheduled: u64,
    /// Its schedule-lag p99 (seconds) against its allowance, and the verdict.
    pub schedule_lag_p99_s: Option<f64>,
    pub lag_allowance_s: f64,
    pub client_bound: bool,
}

/// What the load run at the target rate counted: attainment is `qualified / scheduled`, goodput
/// is `qualified / window_s`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TargetCounts {
    /// User requests scheduled in the measurement window.
    pub scheduled: u64,
    /// Of those, how many met every SLO clause.
    pub qualified: u64,
    /// The window's length, seconds.
    pub window_s: f64,
}

/// Section 6: operational dependencies and measured failure behaviour.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Operations {
    pub backend: String,
    pub versions: Vec<String>,
    /// Measured: what happened when offered load exceeded capacity (queues, sheds, fails).
    pub overload_behaviour: String,
    /// Measured: how errors surfaced.
    pub error_behaviour: String,
    /// Declared in the study.
    pub fallback: String,
}

/// Section 7: cost, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Cost {
    Estimate(Box<CostEstimate>),
    Unavailable(NoCost),
}

/// The overall verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No disqualifier tripped and all were measured.
    Qualifies,
    /// At least one disqualifier tripped.
    Disqualified,
    /// Nothing tripped, but something was not measured (or the load run was client-bound).
    Incomplete,
}

/// The selection record of one candidate in one locked study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectionRecord {
    pub format: String,
    pub study: StudyStamp,
    pub identity: Identity,
    pub quality: Quality,
    pub disqualifiers: Vec<RuleVerdict>,
    pub memory: MemoryFit,
    pub performance: Performance,
    pub operations: Operations,
    pub cost: Cost,
    pub verdict: Verdict,
    /// When the record was assembled (RFC 3339), the code version and the machine the runs
    /// were executed on.
    pub generated_at: String,
    pub code_version: String,
    pub machine: String,
    /// The generation of the study version whose runs the record was assembled from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u32>,
    /// What is missing or unresolved, when the verdict is incomplete: cases that ended in an
    /// error outside the model, steps not run. Empty for a complete record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incomplete: Vec<String>,
    /// SHA-256 of the canonical JSON of everything above (with this field empty).
    pub record_sha256: String,
}

/// The verdict that the rule outcomes imply; `unresolved` (errors outside the model, a
/// client-bound load run) makes a record that trips nothing incomplete.
pub fn verdict_of(rules: &[RuleVerdict], unresolved: bool) -> Verdict {
    if rules.iter().any(|r| r.outcome == Outcome::Trip) {
        Verdict::Disqualified
    } else if unresolved || rules.iter().any(|r| r.outcome == Outcome::NotMeasured) {
        Verdict::Incomplete
    } else {
        Verdict::Qualifies
    }
}

impl SelectionRecord {
    /// Compute and set the record's own hash.
    pub fn seal(mut self) -> SelectionRecord {
        self.record_sha256 = self.compute_hash();
        self
    }

    /// The hash of the record's content (the `record_sha256` field left empty).
    pub fn compute_hash(&self) -> String {
        let mut copy = self.clone();
        copy.record_sha256 = String::new();
        sha256_hex(serde_json::to_string(&copy).unwrap_or_default().as_bytes())
    }

    /// Whether the stored hash matches the content.
    pub fn verify(&self) -> bool {
        self.record_sha256 == self.compute_hash()
    }
}
