//! The form made into a study: each field parsed, every refusal named at its field, then the
//! whole checked by [`Study::from_file`].

use super::{FieldError, OPS, StudyForm, TraceRef, op_of};
use crate::rule::{Op, Rule, RuleFile};
use crate::study::{
    CandidateRef, CostAssumptions, EvalSetRef, LoadLoop, MemoryBudget, STUDY_FORMAT, Study,
    StudyFile, Traffic, WorkloadKind, WorkloadRef,
};

impl StudyForm {
    /// The study file this form makes, with the eval set and the candidates the service looked
    /// up (the ticked ones, in the form's order), checked whole by [`Study::from_file`]. Every
    /// error found is returned, each naming its form field.
    pub fn to_study(
        &self,
        evalset: Option<EvalSetRef>,
        candidates: Vec<CandidateRef>,
    ) -> Result<Study, Vec<FieldError>> {
        self.to_study_with(evalset, candidates, None)
    }

    /// [`Self::to_study`] where the form's workload may be a stored trace (`trace:SHA256`):
    /// `trace` is the one the service found by that hash (`None`: not stored).
    pub fn to_study_with(
        &self,
        evalset: Option<EvalSetRef>,
        candidates: Vec<CandidateRef>,
        trace: Option<TraceRef>,
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
        let workload = if self.workload.starts_with("trace:") {
            // A recorded trace replays its own requests; a rate, when given, replays it faster
            // or slower with its shape kept.
            let rate = number(&mut err, "replay_rps", &self.replay_rps, false);
            match trace {
                Some(t) => Some(WorkloadRef {
                    kind: WorkloadKind::Trace,
                    path: Some(t.path),
                    sha256: Some(t.sha256),
                    requests: None,
                    input_tokens: None,
                    output_tokens: None,
                    rate_rps: rate,
                    seed: None,
                    load_loop: LoadLoop::Open,
                }),
                None => {
                    err(
                        "workload",
                        "that trace is not stored in the workbench: choose another workload"
                            .to_owned(),
                    );
                    None
                }
            }
        } else {
            let kind = match self.workload.as_str() {
                "uniform" => Some(WorkloadKind::Uniform),
                "bursts" => Some(WorkloadKind::Bursts),
                "prefix-groups" => Some(WorkloadKind::PrefixGroups),
                other => {
                    err(
                        "workload",
                        format!(
                            "`{other}`: choose uniform, bursts, prefix-groups or a stored trace"
                        ),
                    );
                    None
                }
            };
            let requests = whole(&mut err, "requests", &self.requests, true);
            let prompt = whole(&mut err, "prompt_tokens", &self.prompt_tokens, true);
            let output = whole(&mut err, "output_tokens", &self.output_tokens, true);
            let rate = number(&mut err, "rate_rps", &self.rate_rps, true);
            let seed = whole(&mut err, "seed", &self.seed, true);
            match (kind, requests, prompt, output, rate, seed) {
                (
                    Some(kind),
                    Some(requests),
                    Some(prompt),
                    Some(output),
                    Some(rate),
                    Some(seed),
                ) => Some(WorkloadRef {
                    kind,
                    path: None,
                    sha256: None,
                    requests: Some(requests),
                    input_tokens: Some(prompt.saturating_mul(requests)),
                    output_tokens: Some(output.saturating_mul(requests)),
                    rate_rps: Some(rate),
                    seed: Some(seed),
                    load_loop: LoadLoop::Open,
                }),
                _ => None,
            }
        };
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
            Some(workload),
            Some(ordinary),
            Some(peak),
            Some(context),
            Some(concurrency),
            Some(memory_gib),
        ) = (
            !errors.is_empty(),
            evalset,
            workload,
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
            workload,
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

/// A field's value parsed as `T` and checked by `invalid` (which says what is wrong, if
/// anything); `None` when blank and optional, or bad — the error is recorded.
fn parsed<T: std::str::FromStr>(
    err: &mut impl FnMut(&str, String),
    field: &str,
    text: &str,
    required: bool,
    kind: &str,
    invalid: impl FnOnce(&T) -> Option<String>,
) -> Option<T> {
    let text = text.trim();
    if text.is_empty() {
        if required {
            err(field, "required".to_owned());
        }
        return None;
    }
    let Ok(v) = text.parse::<T>() else {
        err(field, format!("`{text}` is not {kind}"));
        return None;
    };
    match invalid(&v) {
        Some(why) => {
            err(field, why);
            None
        }
        None => Some(v),
    }
}

/// A positive finite number from a field.
fn number(
    err: &mut impl FnMut(&str, String),
    field: &str,
    text: &str,
    required: bool,
) -> Option<f64> {
    parsed(err, field, text, required, "a number", |v: &f64| {
        (!(v.is_finite() && *v > 0.0)).then(|| format!("{v}: must be above 0"))
    })
}

/// A whole number ≥ 1 from a field (`seed` may be 0).
fn whole(
    err: &mut impl FnMut(&str, String),
    field: &str,
    text: &str,
    required: bool,
) -> Option<u64> {
    parsed(err, field, text, required, "a whole number", |v: &u64| {
        (*v == 0 && field != "seed").then(|| "0: must be at least 1".to_owned())
    })
}
