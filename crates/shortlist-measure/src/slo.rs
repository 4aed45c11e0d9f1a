//! Service-level objectives (`*.slo.toml`): the clauses a request must meet to count as goodput.

use serde::{Deserialize, Serialize};

use crate::error::MeasureError;
use crate::record::{Attempt, Status};

/// How cancelled requests enter attainment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CancelledPolicy {
    /// A cancellation is a miss (the default).
    #[default]
    Miss,
    /// Cancelled requests leave the attainment denominator; the report says so.
    Exclude,
}

/// The wire form of an SLO file. Unknown keys are errors: a misspelt clause must never be
/// silently dropped.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SloFile {
    name: String,
    ttft_ms: Option<f64>,
    max_itl_ms: Option<f64>,
    tpot_ms: Option<f64>,
    e2e_ms: Option<f64>,
    #[serde(default)]
    require_valid: bool,
    #[serde(default)]
    cancelled: CancelledPolicy,
    /// Target attainment for pass/fail checks (`shortlist analyze` exits 1 below it).
    attainment: Option<f64>,
    /// Gap above which a chunk gap counts as a stall, in ms (default 250).
    stall_ms: Option<f64>,
}

/// A parsed SLO. Thresholds are stored in seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slo {
    name: String,
    ttft_s: Option<f64>,
    max_itl_s: Option<f64>,
    tpot_s: Option<f64>,
    e2e_s: Option<f64>,
    require_valid: bool,
    cancelled: CancelledPolicy,
    attainment_target: Option<f64>,
    stall_s: Option<f64>,
}

/// Which clause a request missed (the first of several, in clause order, is not privileged:
/// each clause is evaluated and counted separately).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Clause {
    Success,
    Ttft,
    MaxItl,
    Tpot,
    E2e,
    Valid,
}

impl Clause {
    /// Every clause, in report order.
    pub const ALL: [Clause; 6] = [
        Clause::Success,
        Clause::Ttft,
        Clause::MaxItl,
        Clause::Tpot,
        Clause::E2e,
        Clause::Valid,
    ];

    /// Short name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Clause::Success => "success",
            Clause::Ttft => "ttft",
            Clause::MaxItl => "max_itl",
            Clause::Tpot => "tpot",
            Clause::E2e => "e2e",
            Clause::Valid => "valid",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The outcome of judging one attempt: which clauses it missed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verdict {
    missed: u8,
}

impl Verdict {
    /// Whether every clause held.
    pub fn qualifies(self) -> bool {
        self.missed == 0
    }
    /// Whether the attempt missed `clause`.
    pub fn missed(self, clause: Clause) -> bool {
        self.missed & (1 << clause.index()) != 0
    }
    fn miss(&mut self, clause: Clause) {
        self.missed |= 1 << clause.index();
    }
}

impl Slo {
    /// The SLO of no latency clauses: a request qualifies when it succeeds.
    pub fn success_only() -> Self {
        Slo {
            name: "success only (no SLO given)".to_owned(),
            ttft_s: None,
            max_itl_s: None,
            tpot_s: None,
            e2e_s: None,
            require_valid: false,
            cancelled: CancelledPolicy::Miss,
            attainment_target: None,
            stall_s: None,
        }
    }

    /// Parse an SLO from TOML text. `source` names the file in errors.
    pub fn from_toml(source: &str, text: &str) -> Result<Self, MeasureError> {
        let file: SloFile = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|span| text[..span.start].matches('\n').count() as u64 + 1)
                .unwrap_or(0);
            MeasureError::at(
                source,
                line,
                slo_field(e.message()),
                e.message().trim().to_owned(),
            )
        })?;
        let ms = |field: &str, value: Option<f64>| -> Result<Option<f64>, MeasureError> {
            match value {
                Some(v) if !(v.is_finite() && v > 0.0) => Err(MeasureError::at(
                    source,
                    line_of(text, field),
                    field,
                    format!("{v} is not a positive number of milliseconds"),
                )),
                Some(v) => Ok(Some(v / 1000.0)),
                None => Ok(None),
            }
        };
        if file.name.trim().is_empty() {
            return Err(MeasureError::at(
                source,
                line_of(text, "name"),
                "name",
                "an SLO needs a name",
            ));
        }
        if let Some(a) = file.attainment
            && !(0.0..=1.0).contains(&a)
        {
            return Err(MeasureError::at(
                source,
                line_of(text, "attainment"),
                "attainment",
                format!("{a} is not a fraction in [0, 1]"),
            ));
        }
        Ok(Slo {
            name: file.name,
            ttft_s: ms("ttft_ms", file.ttft_ms)?,
            max_itl_s: ms("max_itl_ms", file.max_itl_ms)?,
            tpot_s: ms("tpot_ms", file.tpot_ms)?,
            e2e_s: ms("e2e_ms", file.e2e_ms)?,
            require_valid: file.require_valid,
            cancelled: file.cancelled,
            attainment_target: file.attainment,
            stall_s: ms("stall_ms", file.stall_ms)?,
        })
    }

    /// The SLO's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// TTFT bound in seconds.
    pub fn ttft_s(&self) -> Option<f64> {
        self.ttft_s
    }
    /// Worst-gap bound in seconds.
    pub fn max_itl_s(&self) -> Option<f64> {
        self.max_itl_s
    }
    /// How cancellations count.
    pub fn cancelled(&self) -> CancelledPolicy {
        self.cancelled
    }
    /// The attainment target, if the SLO sets one.
    pub fn attainment_target(&self) -> Option<f64> {
        self.attainment_target
    }
    /// Stall threshold in seconds, if the SLO sets one.
    pub fn stall_s(&self) -> Option<f64> {
        self.stall_s
    }

    /// The clauses in words, for the report headline.
    pub fn describe(&self) -> String {
        use crate::error::Millis;
        let mut parts = vec!["success".to_owned()];
        if let Some(t) = self.ttft_s {
            parts.push(format!("TTFT ≤ {}", Millis(t)));
        }
        if let Some(t) = self.max_itl_s {
            parts.push(format!("worst ITL ≤ {}", Millis(t)));
        }
        if let Some(t) = self.tpot_s {
            parts.push(format!("TPOT ≤ {} (n ≥ 2 only)", Millis(t)));
        }
        if let Some(t) = self.e2e_s {
            parts.push(format!("e2e ≤ {}", Millis(t)));
        }
        if self.require_valid {
            parts.push("valid output".to_owned());
        }
        let cancelled = match self.cancelled {
            CancelledPolicy::Miss => "cancellations count as misses",
            CancelledPolicy::Exclude => "cancellations excluded from attainment",
        };
        format!("{}: {}; {}", self.name, parts.join(", "), cancelled)
    }

    /// Judge one attempt against every clause. TTFT and e2e are measured from the scheduled
    /// instant; a request with fewer than two chunks has no worst gap, and one with n < 2 has no
    /// TPOT, so those clauses neither pass nor fail it.
    pub fn judge(&self, attempt: &Attempt<'_>, worst_gap_s: Option<f64>) -> Verdict {
        let mut verdict = Verdict::default();
        let ok = attempt.status == Status::Ok;
        if !ok {
            verdict.miss(Clause::Success);
        }
        let first = attempt.first_token_s();
        if let Some(bound) = self.ttft_s {
            match first {
                Some(c1) if c1 - attempt.scheduled_s <= bound => {}
                Some(_) => verdict.miss(Clause::Ttft),
                // No token at all: a successful empty answer has no first token to be late.
                None if ok => {}
                None => verdict.miss(Clause::Ttft),
            }
        }
        if let (Some(bound), Some(gap)) = (self.max_itl_s, worst_gap_s)
            && gap > bound
        {
            verdict.miss(Clause::MaxItl);
        }
        if let (Some(bound), Some(tpot)) = (self.tpot_s, crate::analyze::tpot(attempt))
            && tpot > bound
        {
            verdict.miss(Clause::Tpot);
        }
        if let Some(bound) = self.e2e_s {
            match attempt.last_token_s.or(attempt.end_s) {
                Some(end) if end - attempt.scheduled_s <= bound => {}
                _ => verdict.miss(Clause::E2e),
            }
        }
        if self.require_valid && attempt.valid == Some(false) {
            verdict.miss(Clause::Valid);
        }
        verdict
    }
}

fn slo_field(message: &str) -> String {
    // toml's messages name unknown fields as "unknown field `x`, expected one of ...".
    if let Some(rest) = message.split('`').nth(1) {
        return rest.to_owned();
    }
    "slo".to_owned()
}

fn line_of(text: &str, key: &str) -> u64 {
    text.lines()
        .position(|line| line.trim_start().starts_with(key))
        .map(|i| i as u64 + 1)
        .unwrap_or(0)
}
