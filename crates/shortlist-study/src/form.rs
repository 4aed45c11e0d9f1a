//! The workbench's guided study form: the fields a person fills in, as typed, turned into a
//! study file — or into errors that name the form's own fields.
//!
//! The form covers what most studies need (a stored eval set version, registered candidates, a
//! practice workload, the SLO, traffic, the memory budget and disqualifier rows); what it does
//! not cover (a recorded trace, a capacity sweep's own rates) is written in the study file
//! itself. The file it makes is an ordinary `shortlist.study.v1` file, checked by
//! [`Study::from_file`] like any other; [`StudyForm::field_of`] says which form field an error of
//! that check is about, so the page can show it beside the field.

use serde::Serialize;

use crate::rule::{Metric, Op, Rule, RuleFile};
use crate::study::{
    CandidateRef, CostAssumptions, EvalSetRef, LoadLoop, MemoryBudget, STUDY_FORMAT, Study,
    StudyFile, Traffic, WorkloadKind, WorkloadRef,
};

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
    /// `uniform`, `bursts` or `prefix-groups`.
    pub workload: String,
    pub requests: String,
    /// Prompt tokens per request, on average (the file stores the total).
    pub prompt_tokens: String,
    /// Output tokens per request, on average (the file stores the total).
    pub output_tokens: String,
    pub rate_rps: String,
    pub seed: String,
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

    /// The study file this form makes, with the eval set and the candidates the service looked
    /// up (the ticked ones, in the form's order), checked whole by [`Study::from_file`]. Every
    /// error found is returned, each naming its form field.
    pub fn to_study(
        &self,
        evalset: Option<EvalSetRef>,
        candidates: Vec<CandidateRef>,
    ) -> Result<Study, Vec<FieldError>> {
        let mut errors = Vec::new();
        let mut err = |field: &str, why: String| {
            errors.push(FieldError {
                field: field.to_owned(),
                why,
            })
        };
        if self.name.trim().is_empty() {
            err("name", "a study needs a name".to_owned());
        } else if !self
            .name
            .trim()
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            err(
                "name",
                format!(
                    "`{}`: use letters, digits, `-`, `_` and `.` (it is part of the study's address)",
                    self.name.trim()
                ),
            );
        }
        if self.question.trim().is_empty() {
            err(
                "question",
                "write down the question the study answers".to_owned(),
            );
        }
        if evalset.is_none() {
            err(
                "evalset",
                "choose the eval set version the study pins".to_owned(),
            );
        }
        if self.candidates.is_empty() {
            err("candidate", "tick at least one candidate".to_owned());
        }
        let kind = match self.workload.as_str() {
            "uniform" => Some(WorkloadKind::Uniform),
            "bursts" => Some(WorkloadKind::Bursts),
            "prefix-groups" => Some(WorkloadKind::PrefixGroups),
            other => {
                err(
                    "workload",
                    format!("`{other}`: choose uniform, bursts or prefix-groups"),
                );
                None
            }
        };
        let requests = whole(&mut err, "requests", &self.requests, true);
        let prompt = whole(&mut err, "prompt_tokens", &self.prompt_tokens, true);
        let output = whole(&mut err, "output_tokens", &self.output_tokens, true);
        let rate = number(&mut err, "rate_rps", &self.rate_rps, true);
        let seed = whole(&mut err, "seed", &self.seed, true);
        let mut slo = toml::Table::new();
        if self.slo_name.trim().is_empty() {
            err("slo_name", "name the SLO (e.g. interactive)".to_owned());
        }
        slo.insert(
            "name".to_owned(),
            toml::Value::String(self.slo_name.trim().to_owned()),
        );
        for (key, text) in [
            ("ttft_ms", &self.ttft_ms),
            ("max_itl_ms", &self.max_itl_ms),
            ("tpot_ms", &self.tpot_ms),
            ("e2e_ms", &self.e2e_ms),
        ] {
            if let Some(v) = number(&mut err, key, text, false) {
                slo.insert(key.to_owned(), toml_number(v));
            }
        }
        if slo.len() == 1 {
            err(
                "ttft_ms",
                "an SLO needs at least one bound: TTFT, worst gap, TPOT or end to end".to_owned(),
            );
        }
        let ordinary = number(&mut err, "ordinary_rps", &self.ordinary_rps, true);
        let peak = number(&mut err, "peak_rps", &self.peak_rps, true);
        let attainment = number(
            &mut err,
            "attainment_target",
            &self.attainment_target,
            false,
        );
        let context = whole(&mut err, "context_tokens", &self.context_tokens, true);
        let concurrency = whole(&mut err, "concurrency", &self.concurrency, true);
        let memory_gib = number(&mut err, "device_memory_gib", &self.device_memory_gib, true);
        let max_devices = whole(&mut err, "max_devices", &self.max_devices, false);
        if self.device.trim().is_empty() {
            err("device", "name the device kind (e.g. cpu, H200)".to_owned());
        }
        let max_devices = max_devices.and_then(|n| match u32::try_from(n) {
            Ok(n) => Some(n),
            Err(_) => {
                err("max_devices", format!("{n}: too many devices"));
                None
            }
        });
        // Each filled row, with the row it came from.
        let mut rows = Vec::new();
        for (i, row) in self.rules.iter().enumerate() {
            if row.metric.trim().is_empty() {
                continue;
            }
            let field = |part: &str| format!("rule.{i}.{part}");
            let Some(op) = op_of(row.op.trim()) else {
                err(
                    &field("op"),
                    format!("`{}`: choose one of {}", row.op, OPS.join(" ")),
                );
                continue;
            };
            let value = row.value.trim();
            let (value, values) = match op {
                Op::In | Op::NotIn => (
                    None,
                    Some(
                        value
                            .split(',')
                            .map(|v| v.trim().to_owned())
                            .filter(|v| !v.is_empty())
                            .collect(),
                    ),
                ),
                _ => (Some(threshold(value)), None),
            };
            let name = row.name.trim();
            let rule = RuleFile {
                name: (!name.is_empty()).then(|| name.to_owned()),
                metric: row.metric.trim().to_owned(),
                op,
                value,
                values,
            };
            // Each row is checked on its own, so every bad row is named at once.
            if let Err(crate::StudyError::Invalid { field: f, why, .. }) =
                Rule::from_file("the form", 0, &rule)
            {
                let part = f.rsplit('.').next().unwrap_or("value");
                let part = if part == "values" { "value" } else { part };
                err(&field(part), why);
                continue;
            }
            rows.push((i, rule));
        }
        let (
            false,
            Some(evalset),
            Some(kind),
            Some(requests),
            Some(prompt),
            Some(output),
            Some(rate),
            Some(seed),
            Some(ordinary),
            Some(peak),
            Some(context),
            Some(concurrency),
            Some(memory_gib),
        ) = (
            !errors.is_empty(),
            evalset,
            kind,
            requests,
            prompt,
            output,
            rate,
            seed,
            ordinary,
            peak,
            context,
            concurrency,
            memory_gib,
        )
        else {
            return Err(errors);
        };
        let fallback = self.fallback.trim();
        let candidates = candidates
            .into_iter()
            .map(|c| CandidateRef {
                fallback: (!fallback.is_empty()).then(|| fallback.to_owned()),
                ..c
            })
            .collect();
        let currency = self.currency.trim();
        let file = StudyFile {
            format: STUDY_FORMAT.to_owned(),
            name: self.name.trim().to_owned(),
            version: 1,
            question: self.question.trim().to_owned(),
            evalset,
            workload: WorkloadRef {
                kind,
                path: None,
                sha256: None,
                requests: Some(requests),
                input_tokens: Some(prompt.saturating_mul(requests)),
                output_tokens: Some(output.saturating_mul(requests)),
                rate_rps: Some(rate),
                seed: Some(seed),
                load_loop: LoadLoop::Open,
            },
            slo,
            traffic: Traffic {
                ordinary_rps: ordinary,
                peak_rps: peak,
                target_rps: None,
                attainment_target: attainment,
                sweep_rps: None,
            },
            memory: MemoryBudget {
                context_tokens: context,
                concurrency,
                device: self.device.trim().to_owned(),
                device_memory_gib: memory_gib,
                usable_fraction: None,
                overhead_fraction: None,
                max_devices,
            },
            quality: None,
            cost: CostAssumptions {
                currency: (!currency.is_empty()).then(|| currency.to_owned()),
            },
            candidates,
            disqualifiers: rows.iter().map(|(_, r)| r.clone()).collect(),
            previous: None,
        };
        Study::from_file("the form", file).map_err(|e| {
            let (field, why) = match &e {
                crate::StudyError::Invalid { field, why, .. } => (field.as_str(), why.clone()),
                other => ("", other.to_string()),
            };
            let rule_row = |i: usize| rows.get(i).map_or(i, |(row, _)| *row);
            vec![FieldError {
                field: StudyForm::field_of(field, rule_row).unwrap_or_default(),
                why,
            }]
        })
    }

    /// A stored study's criteria as the form's fields, to start a new study from: everything
    /// but the name (a new study needs its own). Also returns what the form cannot hold and so
    /// does not carry over, in words (a recorded trace, the sweep's rates, SLO clauses beyond
    /// the four bounds, …); the workload's per-request means are its totals divided by its
    /// requests, rounded.
    pub fn from_file(file: &StudyFile) -> (StudyForm, Vec<String>) {
        let mut left = Vec::new();
        let text = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
        let whole = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let defaults = StudyForm::default();
        let w = &file.workload;
        let workload = match w.kind {
            WorkloadKind::Trace => {
                left.push(format!(
                    "the recorded trace {} (the form offers the synthesized shapes)",
                    w.path.as_deref().unwrap_or("")
                ));
                None
            }
            kind => Some(kind.as_str().to_owned()),
        };
        let requests = w.requests.unwrap_or(0);
        let mean = |total: Option<u64>| match total {
            Some(t) if requests > 0 => ((t as f64 / requests as f64).round() as u64).to_string(),
            _ => String::new(),
        };
        if let (Some(t), true) = (w.input_tokens, requests > 0)
            && t % requests != 0
        {
            left.push(format!(
                "the exact prompt-token total {t} (the form keeps the mean per request)"
            ));
        }
        if let (Some(t), true) = (w.output_tokens, requests > 0)
            && t % requests != 0
        {
            left.push(format!(
                "the exact output-token total {t} (the form keeps the mean per request)"
            ));
        }
        let slo_number = |key: &str| {
            file.slo
                .get(key)
                .and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)))
        };
        for key in file.slo.keys() {
            if !["name", "ttft_ms", "max_itl_ms", "tpot_ms", "e2e_ms"].contains(&key.as_str()) {
                left.push(format!("the SLO's `{key}`"));
            }
        }
        if file.traffic.target_rps.is_some() {
            left.push("the traffic's own target rate (the form's is the peak)".to_owned());
        }
        if file.traffic.sweep_rps.is_some() {
            left.push("the capacity sweep's rates".to_owned());
        }
        let m = &file.memory;
        if m.usable_fraction.is_some() || m.overhead_fraction.is_some() {
            left.push("the memory budget's usable and overhead fractions".to_owned());
        }
        if file.quality.is_some() {
            left.push("the quality runs' concurrency".to_owned());
        }
        let fallbacks: Vec<&str> = file
            .candidates
            .iter()
            .filter_map(|c| c.fallback.as_deref())
            .collect();
        if fallbacks.windows(2).any(|w| w[0] != w[1])
            || (!fallbacks.is_empty() && fallbacks.len() < file.candidates.len())
        {
            left.push("each candidate's own fallback (the form declares one for all)".to_owned());
        }
        let mut rules: Vec<RuleRow> = file
            .disqualifiers
            .iter()
            .map(|r| RuleRow {
                name: r.name.clone().unwrap_or_default(),
                metric: r.metric.clone(),
                op: OPS
                    .into_iter()
                    .find(|op| op_of(op) == Some(r.op))
                    .unwrap_or(">")
                    .to_owned(),
                value: match (&r.values, &r.value) {
                    (Some(list), _) => list.join(", "),
                    (None, Some(toml::Value::String(s))) => s.clone(),
                    (None, Some(v)) => v.to_string(),
                    (None, None) => String::new(),
                },
            })
            .collect();
        if rules.len() > RULE_ROWS {
            left.push(format!(
                "disqualifiers past the first {RULE_ROWS} ({} more)",
                rules.len() - RULE_ROWS
            ));
        }
        rules.resize(RULE_ROWS, RuleRow::default());
        let form = StudyForm {
            name: String::new(),
            question: file.question.clone(),
            evalset: file.evalset.sha256.clone(),
            candidates: file.candidates.iter().map(|c| c.name.clone()).collect(),
            fallback: fallbacks
                .first()
                .map(|f| (*f).to_owned())
                .unwrap_or_default(),
            workload: workload.unwrap_or(defaults.workload),
            requests: whole(w.requests),
            prompt_tokens: mean(w.input_tokens),
            output_tokens: mean(w.output_tokens),
            rate_rps: text(w.rate_rps),
            seed: whole(w.seed),
            slo_name: file
                .slo
                .get("name")
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_owned(),
            ttft_ms: text(slo_number("ttft_ms")),
            max_itl_ms: text(slo_number("max_itl_ms")),
            tpot_ms: text(slo_number("tpot_ms")),
            e2e_ms: text(slo_number("e2e_ms")),
            ordinary_rps: file.traffic.ordinary_rps.to_string(),
            peak_rps: file.traffic.peak_rps.to_string(),
            attainment_target: text(file.traffic.attainment_target),
            context_tokens: m.context_tokens.to_string(),
            concurrency: m.concurrency.to_string(),
            device: m.device.clone(),
            device_memory_gib: m.device_memory_gib.to_string(),
            max_devices: m.max_devices.map(|n| n.to_string()).unwrap_or_default(),
            currency: file.cost.currency.clone().unwrap_or_default(),
            rules,
        };
        (form, left)
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

/// A rule's threshold as typed: a number, `true` / `false`, or text.
fn threshold(text: &str) -> toml::Value {
    if let Ok(i) = text.parse::<i64>() {
        return toml::Value::Integer(i);
    }
    if let Ok(f) = text.parse::<f64>()
        && f.is_finite()
    {
        return toml::Value::Float(f);
    }
    match text {
        "true" => toml::Value::Boolean(true),
        "false" => toml::Value::Boolean(false),
        _ => toml::Value::String(text.to_owned()),
    }
}

/// A number as a study file writes it: whole numbers without a fraction.
fn toml_number(v: f64) -> toml::Value {
    if v.fract() == 0.0 && v.abs() < 9e15 {
        toml::Value::Integer(v as i64)
    } else {
        toml::Value::Float(v)
    }
}

/// A positive finite number from a field (`None` when blank and optional, or bad: the error is
/// recorded).
fn number(
    err: &mut impl FnMut(&str, String),
    field: &str,
    text: &str,
    required: bool,
) -> Option<f64> {
    let text = text.trim();
    if text.is_empty() {
        if required {
            err(field, "required".to_owned());
        }
        return None;
    }
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Some(v),
        Ok(v) => {
            err(field, format!("{v}: must be above 0"));
            None
        }
        Err(_) => {
            err(field, format!("`{text}` is not a number"));
            None
        }
    }
}

/// A whole number ≥ 1 from a field (`seed` may be 0).
fn whole(
    err: &mut impl FnMut(&str, String),
    field: &str,
    text: &str,
    required: bool,
) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() {
        if required {
            err(field, "required".to_owned());
        }
        return None;
    }
    match text.parse::<u64>() {
        Ok(0) if field != "seed" => {
            err(field, "0: must be at least 1".to_owned());
            None
        }
        Ok(v) => Some(v),
        Err(_) => {
            err(field, format!("`{text}` is not a whole number"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set() -> EvalSetRef {
        EvalSetRef {
            path: "support.yaml".to_owned(),
            sha256: "ab".repeat(32),
        }
    }

    fn candidate(name: &str) -> CandidateRef {
        CandidateRef {
            name: name.to_owned(),
            source: format!("gguf:{name}.gguf"),
            config_sha256: None,
            price_per_device_hour: 0.05,
            fallback: None,
            device: None,
        }
    }

    fn filled() -> StudyForm {
        StudyForm {
            name: "support".to_owned(),
            question: "Which model answers support chats?".to_owned(),
            evalset: "ab".repeat(32),
            candidates: vec!["small".to_owned()],
            ..StudyForm::default()
        }
    }

    fn pairs(form: &StudyForm) -> Vec<(String, String)> {
        let v = serde_json::to_value(form).unwrap();
        let mut out = Vec::new();
        for (k, v) in v.as_object().unwrap() {
            match (k.as_str(), v) {
                ("candidates", serde_json::Value::Array(names)) => {
                    for n in names {
                        out.push(("candidate".to_owned(), n.as_str().unwrap().to_owned()));
                    }
                }
                ("rules", serde_json::Value::Array(rows)) => {
                    for (i, row) in rows.iter().enumerate() {
                        for (part, text) in row.as_object().unwrap() {
                            out.push((
                                format!("rule.{i}.{part}"),
                                text.as_str().unwrap().to_owned(),
                            ));
                        }
                    }
                }
                (k, v) => out.push((k.to_owned(), v.as_str().unwrap().to_owned())),
            }
        }
        out
    }

    #[test]
    fn the_default_form_makes_the_demo_shaped_study() {
        let study = filled()
            .to_study(Some(set()), vec![candidate("small")])
            .unwrap();
        let f = study.file();
        assert_eq!(f.workload.requests, Some(40));
        assert_eq!(f.workload.input_tokens, Some(16_000));
        assert_eq!(f.workload.output_tokens, Some(2_560));
        assert_eq!(f.slo["ttft_ms"], toml::Value::Integer(2000));
        assert_eq!(f.slo["max_itl_ms"], toml::Value::Integer(250));
        assert!(!f.slo.contains_key("tpot_ms"));
        assert_eq!(study.rules().len(), 5);
        assert_eq!(study.rules()[4].metric(), Metric::MemoryFits);
        assert_eq!(f.memory.max_devices, Some(1));
        assert_eq!(f.cost.currency.as_deref(), Some("USD"));
        // The file it makes reads back as the same study.
        let text = f.to_toml().unwrap();
        let again = Study::from_toml("again", &text).unwrap();
        assert_eq!(again.file(), f);
    }

    #[test]
    fn every_bad_field_is_named_at_once() {
        let form = StudyForm {
            name: "two words".to_owned(),
            question: " ".to_owned(),
            candidates: Vec::new(),
            requests: "forty".to_owned(),
            rate_rps: "-1".to_owned(),
            seed: "0".to_owned(),
            ttft_ms: String::new(),
            max_itl_ms: String::new(),
            rules: {
                let mut rows = StudyForm::default().rules;
                rows[1].op = "≥".to_owned();
                rows[6] = RuleRow {
                    name: String::new(),
                    metric: "memory_fits".to_owned(),
                    op: ">".to_owned(),
                    value: "false".to_owned(),
                };
                rows
            },
            ..filled()
        };
        let errors = form.to_study(None, Vec::new()).unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "name",
                "question",
                "evalset",
                "candidate",
                "requests",
                "rate_rps",
                "ttft_ms",
                "rule.1.op",
                "rule.6.op"
            ],
            "{errors:?}"
        );
        assert!(errors[4].why.contains("`forty` is not a whole number"));
        assert!(errors[8].why.contains("use == or !="), "{errors:?}");
    }

    #[test]
    fn the_study_checks_are_mapped_to_the_form_fields() {
        // Peak below ordinary traffic: found by the study's own check, shown at `peak_rps`.
        let form = StudyForm {
            peak_rps: "0.05".to_owned(),
            ..filled()
        };
        let errors = form
            .to_study(Some(set()), vec![candidate("small")])
            .unwrap_err();
        assert_eq!(errors[0].field, "peak_rps", "{errors:?}");
        // A bad threshold on the third filled row, which is form row 5 (rows 2 to 4 blank).
        let mut rows = vec![RuleRow::default(); RULE_ROWS];
        rows[0] = StudyForm::default().rules[0].clone();
        rows[1] = StudyForm::default().rules[1].clone();
        rows[5] = RuleRow {
            name: String::new(),
            metric: "memory_fits".to_owned(),
            op: "==".to_owned(),
            value: "maybe".to_owned(),
        };
        let form = StudyForm {
            rules: rows,
            ..filled()
        };
        let errors = form
            .to_study(Some(set()), vec![candidate("small")])
            .unwrap_err();
        assert_eq!(errors[0].field, "rule.5.value", "{errors:?}");
        // A list rule takes its values from a comma list.
        let mut rows = vec![RuleRow::default(); RULE_ROWS];
        rows[3] = RuleRow {
            name: "license not approved".to_owned(),
            metric: "license".to_owned(),
            op: "not_in".to_owned(),
            value: "apache-2.0, mit,,bsd-3-clause".to_owned(),
        };
        let study = StudyForm {
            rules: rows,
            fallback: "a human agent".to_owned(),
            ..filled()
        }
        .to_study(Some(set()), vec![candidate("small"), candidate("big")])
        .unwrap();
        assert_eq!(
            study.file().disqualifiers[0].values.as_deref(),
            Some(
                &[
                    "apache-2.0".to_owned(),
                    "mit".to_owned(),
                    "bsd-3-clause".to_owned()
                ][..]
            )
        );
        assert!(
            study
                .file()
                .candidates
                .iter()
                .all(|c| c.fallback.as_deref() == Some("a human agent"))
        );
    }

    #[test]
    fn a_posted_form_reads_back_field_for_field() {
        let mut form = filled();
        form.candidates.push("big".to_owned());
        form.rules[6] = RuleRow {
            name: "n".to_owned(),
            metric: "pass_rate".to_owned(),
            op: "<".to_owned(),
            value: "0.8".to_owned(),
        };
        let mut sent = pairs(&form);
        // Unknown names and rows past the last are ignored; a candidate ticked twice counts once.
        sent.push(("rule.99.metric".to_owned(), "pass_rate".to_owned()));
        sent.push(("other".to_owned(), "x".to_owned()));
        sent.push(("candidate".to_owned(), "big".to_owned()));
        assert_eq!(StudyForm::from_pairs(&sent), form);
    }

    #[test]
    fn a_stored_study_starts_a_form_that_makes_it_again() {
        let study = filled()
            .to_study(Some(set()), vec![candidate("small")])
            .unwrap();
        let (form, left) = StudyForm::from_file(study.file());
        assert!(left.is_empty(), "{left:?}");
        assert_eq!(form.name, "");
        let again = StudyForm {
            name: "support".to_owned(),
            ..form
        }
        .to_study(Some(set()), vec![candidate("small")])
        .unwrap();
        assert_eq!(again.file(), study.file());
        // What the form cannot hold is named, not silently dropped.
        let mut file = study.file().clone();
        file.workload.input_tokens = Some(16_001);
        file.traffic.sweep_rps = Some(vec![1.0, 2.0]);
        file.slo
            .insert("require_valid".to_owned(), toml::Value::Boolean(true));
        let (form, left) = StudyForm::from_file(&file);
        assert_eq!(form.prompt_tokens, "400");
        assert_eq!(left.len(), 3, "{left:?}");
        assert!(left.iter().any(|l| l.contains("16001")), "{left:?}");
        assert!(left.iter().any(|l| l.contains("require_valid")), "{left:?}");
    }

    proptest! {
        /// Any form the checks accept makes a study whose file reads back as itself, with the
        /// workload's totals exactly the per-request means times the requests.
        #[test]
        fn accepted_forms_make_files_that_read_back(
            requests in 1u64..500,
            prompt in 1u64..4000,
            output in 1u64..1000,
            rate in 0.01f64..50.0,
            ttft in proptest::option::of(1u32..10_000),
            itl in proptest::option::of(1u32..1_000),
            e2e in proptest::option::of(1.5f64..60_000.0),
            ordinary in 0.01f64..10.0,
            extra in 0.0f64..10.0,
            rows in proptest::collection::vec(0usize..RULE_ROWS, 0..RULE_ROWS),
        ) {
            let default_rules = StudyForm::default().rules;
            let mut rules = vec![RuleRow::default(); RULE_ROWS];
            for (i, r) in rows.iter().enumerate() {
                rules[*r] = default_rules[i % 5].clone();
            }
            let show = |v: Option<String>| v.unwrap_or_default();
            let form = StudyForm {
                requests: requests.to_string(),
                prompt_tokens: prompt.to_string(),
                output_tokens: output.to_string(),
                rate_rps: rate.to_string(),
                ttft_ms: show(ttft.map(|v| v.to_string())),
                max_itl_ms: show(itl.map(|v| v.to_string())),
                e2e_ms: show(e2e.map(|v| v.to_string())),
                ordinary_rps: ordinary.to_string(),
                peak_rps: (ordinary + extra).to_string(),
                rules,
                ..filled()
            };
            match form.to_study(Some(set()), vec![candidate("small")]) {
                Ok(study) => {
                    let f = study.file();
                    prop_assert_eq!(f.workload.input_tokens, Some(prompt * requests));
                    prop_assert_eq!(f.workload.output_tokens, Some(output * requests));
                    let filled_rows = form.rules.iter().filter(|r| !r.metric.is_empty()).count();
                    prop_assert_eq!(study.rules().len(), filled_rows);
                    let again = Study::from_toml("again", &f.to_toml().unwrap()).unwrap();
                    prop_assert_eq!(again.file(), f);
                    // Started from the study it made, the form makes it again.
                    let (started, left) = StudyForm::from_file(f);
                    prop_assert!(left.is_empty(), "{:?}", left);
                    let remade = StudyForm { name: form.name.clone(), ..started }
                        .to_study(Some(set()), vec![candidate("small")])
                        .unwrap();
                    prop_assert_eq!(remade.file(), f);
                }
                Err(errors) => {
                    // Only a missing SLO bound may refuse these forms.
                    prop_assert!(ttft.is_none() && itl.is_none() && e2e.is_none(), "{:?}", errors);
                    prop_assert_eq!(errors[0].field.as_str(), "ttft_ms");
                }
            }
        }
    }
}
