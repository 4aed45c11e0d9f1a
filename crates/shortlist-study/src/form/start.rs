//! A stored study's criteria as the form's fields, to start a new study from.

use super::{OPS, RULE_ROWS, RuleRow, StudyForm, op_of};
use crate::study::{StudyFile, WorkloadKind};

impl StudyForm {
    /// A stored study's criteria as the form's fields, to start a new study from: everything
    /// but the name (a new study needs its own). Also returns what the form cannot hold and so
    /// does not carry over, in words (the sweep's rates, SLO clauses beyond the four bounds, …);
    /// the workload's per-request means are its totals divided by its requests, rounded. A
    /// recorded trace becomes `trace:SHA256`, with the practice fields at their defaults.
    pub fn from_file(file: &StudyFile) -> (StudyForm, Vec<String>) {
        let mut left = Vec::new();
        let text = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
        let whole = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let defaults = StudyForm::default();
        let w = &file.workload;
        // A recorded trace is named by its hash; whether the workbench holds it is the
        // caller's question (the form offers the stored ones).
        let trace = (w.kind == WorkloadKind::Trace).then_some(w.sha256.as_deref());
        let or_default = |v: String, default: &String| {
            if trace.is_some() { default.clone() } else { v }
        };
        let workload = match trace {
            Some(Some(sha)) => Some(format!("trace:{}", sha.to_ascii_lowercase())),
            Some(None) => {
                left.push(format!(
                    "the recorded trace {} (it pins no sha256)",
                    w.path.as_deref().unwrap_or("")
                ));
                None
            }
            None => Some(w.kind.as_str().to_owned()),
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
            workload: workload.unwrap_or_else(|| defaults.workload.clone()),
            // A trace has none of these: the defaults stand, should the shape be changed.
            requests: or_default(whole(w.requests), &defaults.requests),
            prompt_tokens: or_default(mean(w.input_tokens), &defaults.prompt_tokens),
            output_tokens: or_default(mean(w.output_tokens), &defaults.output_tokens),
            rate_rps: or_default(text(w.rate_rps), &defaults.rate_rps),
            replay_rps: if trace.is_some() {
                text(w.rate_rps)
            } else {
                String::new()
            },
            seed: or_default(whole(w.seed), &defaults.seed),
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
}
