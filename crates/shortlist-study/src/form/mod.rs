//! The workbench's guided study form: the fields a person fills in, as typed, turned into a
//! study file — or into errors that name the form's own fields.
//!
//! The form covers what most studies need (a stored eval set version, registered candidates, a
//! practice workload or a stored trace, the SLO, traffic, the memory budget and disqualifier
//! rows); what it does not cover (a capacity sweep's own rates, …) is written in the study file
//! itself. The file it makes is an ordinary `shortlist.study.v1` file, checked by
//! [`Study::from_file`](crate::study::Study::from_file) like any other; [`StudyForm::field_of`] says which form field an error of
//! that check is about, so the page can show it beside the field.

use serde::Serialize;

use crate::rule::{Metric, Op};

mod make;
mod start;

/// Disqualifier rows the form offers (filled ones are kept, blank ones skipped).
pub const RULE_ROWS: usize = 8;

/// One disqualifier row as typed: a metric name from [`Metric::ALL`] (blank: no rule), an
/// operator as a study file writes it, and the threshold (for `in` / `not_in`, a comma list).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RuleRow {
    pub name: String,
    pub metric: String,
    pub op: String,
    pub value: String,
}

/// The guided form's fields, as typed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyForm {
    pub name: String,
    pub question: String,
    /// The SHA-256 of a stored eval set version.
    pub evalset: String,
    /// Names of registered candidates.
    pub candidates: Vec<String>,
    /// The declared fallback of every candidate (blank: none declared).
    pub fallback: String,
    /// `uniform`, `bursts`, `prefix-groups`, or `trace:SHA256` for a stored trace (whose own
    /// requests are replayed at [`Self::replay_rps`]: the practice fields are then unused).
    pub workload: String,
    pub requests: String,
    /// Prompt tokens per request, on average (the file stores the total).
    pub prompt_tokens: String,
    /// Output tokens per request, on average (the file stores the total).
    pub output_tokens: String,
    pub rate_rps: String,
    pub seed: String,
    /// A stored trace's replay rate (blank: its own rate; a rate rescales it, its shape kept).
    pub replay_rps: String,
    pub slo_name: String,
    pub ttft_ms: String,
    pub max_itl_ms: String,
    pub tpot_ms: String,
    pub e2e_ms: String,
    pub ordinary_rps: String,
    pub peak_rps: String,
    pub attainment_target: String,
    pub context_tokens: String,
    pub concurrency: String,
    pub device: String,
    pub device_memory_gib: String,
    pub max_devices: String,
    pub currency: String,
    /// Always [`RULE_ROWS`] rows.
    pub rules: Vec<RuleRow>,
}

/// A stored trace the form's workload names (`trace:SHA256`), as the study file will pin it:
/// a path (a name for people; the workbench finds the trace by its hash) and the SHA-256 of
/// its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRef {
    pub path: String,
    pub sha256: String,
}

/// A form field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    /// The form field's name (`requests`, `rule.2.value`), or `""` for the form as a whole.
    pub field: String,
    pub why: String,
}

impl Default for StudyForm {
    /// An interactive chat product on the hardware at hand: the demo study's workload shape,
    /// SLO, traffic and disqualifiers, to change.
    fn default() -> Self {
        let rule = |name: &str, metric: Metric, op: &str, value: &str| RuleRow {
            name: name.to_owned(),
            metric: metric.name().to_owned(),
            op: op.to_owned(),
            value: value.to_owned(),
        };
        let mut rules = vec![
            rule(
                "any high-value case failed",
                Metric::HighValueFailures,
                ">",
                "0",
            ),
            rule(
                "a tool call was wrong, malformed or missing",
                Metric::ToolCallErrors,
                ">",
                "0",
            ),
            rule(
                "refuses more than 5 % of what it must answer",
                Metric::OverRefusalRate,
                ">",
                "0.05",
            ),
            rule(
                "holds the SLO for under 90 % of requests at the target rate",
                Metric::AttainmentAtTarget,
                "<",
                "0.9",
            ),
            rule(
                "does not fit the memory budget",
                Metric::MemoryFits,
                "==",
                "false",
            ),
        ];
        rules.resize(RULE_ROWS, RuleRow::default());
        let s = |v: &str| v.to_owned();
        StudyForm {
            name: String::new(),
            question: String::new(),
            evalset: String::new(),
            candidates: Vec::new(),
            fallback: String::new(),
            workload: s("uniform"),
            requests: s("40"),
            prompt_tokens: s("400"),
            output_tokens: s("64"),
            rate_rps: s("0.25"),
            seed: s("1"),
            replay_rps: String::new(),
            slo_name: s("interactive"),
            ttft_ms: s("2000"),
            max_itl_ms: s("250"),
            tpot_ms: String::new(),
            e2e_ms: String::new(),
            ordinary_rps: s("0.1"),
            peak_rps: s("0.25"),
            attainment_target: s("0.9"),
            context_tokens: s("4096"),
            concurrency: s("4"),
            device: s("cpu"),
            device_memory_gib: s("16"),
            max_devices: s("1"),
            currency: s("USD"),
            rules,
        }
    }
}

/// The practice workload shapes the form offers: `(name, what it is)`.
pub const WORKLOAD_SHAPES: [(&str, &str); 3] = [
    (
        "uniform",
        "uniform: Poisson arrivals at the rate, lengths spread around the means",
    ),
    (
        "bursts",
        "bursts: the same requests arriving in bursts (a traffic spike)",
    ),
    (
        "prefix-groups",
        "prefix-groups: groups of requests sharing a long prompt prefix (one system prompt, RAG)",
    ),
];

/// The operators a rule row may use, as a study file writes them.
pub const OPS: [&str; 8] = [">", ">=", "<", "<=", "==", "!=", "in", "not_in"];

fn op_of(s: &str) -> Option<Op> {
    Some(match s {
        ">" => Op::Gt,
        ">=" => Op::Ge,
        "<" => Op::Lt,
        "<=" => Op::Le,
        "==" => Op::Eq,
        "!=" => Op::Ne,
        "in" => Op::In,
        "not_in" => Op::NotIn,
        _ => return None,
    })
}

impl StudyForm {
    /// The form as posted: `(name, value)` pairs, a `candidate` pair per ticked candidate and
    /// `rule.N.name|metric|op|value` per disqualifier row. Unknown names are ignored; fields
    /// not sent are blank (not the defaults: a person may have cleared them).
    pub fn from_pairs(pairs: &[(String, String)]) -> StudyForm {
        let mut f = StudyForm {
            workload: String::new(),
            requests: String::new(),
            prompt_tokens: String::new(),
            output_tokens: String::new(),
            rate_rps: String::new(),
            seed: String::new(),
            slo_name: String::new(),
            ttft_ms: String::new(),
            max_itl_ms: String::new(),
            ordinary_rps: String::new(),
            peak_rps: String::new(),
            attainment_target: String::new(),
            context_tokens: String::new(),
            concurrency: String::new(),
            device: String::new(),
            device_memory_gib: String::new(),
            max_devices: String::new(),
            currency: String::new(),
            rules: vec![RuleRow::default(); RULE_ROWS],
            ..StudyForm::default()
        };
        for (k, v) in pairs {
            let slot = match k.as_str() {
                "name" => &mut f.name,
                "question" => &mut f.question,
                "evalset" => &mut f.evalset,
                "candidate" => {
                    if !v.is_empty() && !f.candidates.contains(v) {
                        f.candidates.push(v.clone());
                    }
                    continue;
                }
                "fallback" => &mut f.fallback,
                "workload" => &mut f.workload,
                "requests" => &mut f.requests,
                "prompt_tokens" => &mut f.prompt_tokens,
                "output_tokens" => &mut f.output_tokens,
                "rate_rps" => &mut f.rate_rps,
                "seed" => &mut f.seed,
                "replay_rps" => &mut f.replay_rps,
                "slo_name" => &mut f.slo_name,
                "ttft_ms" => &mut f.ttft_ms,
                "max_itl_ms" => &mut f.max_itl_ms,
                "tpot_ms" => &mut f.tpot_ms,
                "e2e_ms" => &mut f.e2e_ms,
                "ordinary_rps" => &mut f.ordinary_rps,
                "peak_rps" => &mut f.peak_rps,
                "attainment_target" => &mut f.attainment_target,
                "context_tokens" => &mut f.context_tokens,
                "concurrency" => &mut f.concurrency,
                "device" => &mut f.device,
                "device_memory_gib" => &mut f.device_memory_gib,
                "max_devices" => &mut f.max_devices,
                "currency" => &mut f.currency,
                other => {
                    let Some((i, part)) = other
                        .strip_prefix("rule.")
                        .and_then(|r| r.split_once('.'))
                        .and_then(|(i, part)| Some((i.parse::<usize>().ok()?, part)))
                    else {
                        continue;
                    };
                    let Some(row) = f.rules.get_mut(i) else {
                        continue;
                    };
                    match part {
                        "name" => &mut row.name,
                        "metric" => &mut row.metric,
                        "op" => &mut row.op,
                        "value" => &mut row.value,
                        _ => continue,
                    }
                }
            };
            *slot = v.clone();
        }
        f
    }

    /// The form field a study file's field stands for (`workload.requests` → `requests`,
    /// `disqualifier[2].value` → `rule.R.value` with `rule_row` mapping the file's rule index to
    /// its form row); `None` for one the form does not show.
    pub fn field_of(file_field: &str, rule_row: impl Fn(usize) -> usize) -> Option<String> {
        if let Some(rest) = file_field.strip_prefix("disqualifier[") {
            let (i, part) = rest.split_once("].")?;
            let part = if part == "values" { "value" } else { part };
            return Some(format!("rule.{}.{part}", rule_row(i.parse().ok()?)));
        }
        Some(
            match file_field {
                "name" | "question" => file_field,
                "evalset" | "evalset.sha256" => "evalset",
                "workload" | "workload.load_loop" => "workload",
                "workload.requests" => "requests",
                "workload.input_tokens" => "prompt_tokens",
                "workload.output_tokens" => "output_tokens",
                "workload.rate_rps" => "rate_rps",
                "workload.seed" => "seed",
                "slo" => "ttft_ms",
                "traffic.ordinary_rps" => "ordinary_rps",
                "traffic.peak_rps" | "traffic.target_rps" => "peak_rps",
                "traffic.attainment_target" => "attainment_target",
                "memory" => "context_tokens",
                f if f.starts_with("candidate") => "candidate",
                _ => return None,
            }
            .to_owned(),
        )
    }
}

#[cfg(test)]
mod tests;
