//! The parts of a regression check that read two records beside each other: the load figures
//! with their intervals (attainment and goodput at the target rate, TTFT p99) judged against
//! the spread of the earlier nights, and what changed between the two runs' fingerprints —
//! the model, the runtime, or only the machine.

use serde::Serialize;
use shortlist_measure::interval::{self, Interval};
use shortlist_measure::percentile::Quantile;
use shortlist_study::drift::{Better, FigureCheck, judge_figure};
use shortlist_study::record::SelectionRecord;

/// The confidence of every interval a check compares.
pub const CONFIDENCE: f64 = 0.95;

/// Earlier nights the spread of a load figure is measured over (at most).
pub const SPREAD_NIGHTS: usize = 7;

/// The most significant thing that changed between two runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WhatChanged {
    Nothing,
    /// Only the machine (CPU, cores, threads, GPU, driver) changed: a difference is the
    /// machine's, not the model's.
    Machine,
    /// The engine or runtime build changed (and perhaps the machine).
    Runtime,
    /// The model changed: weights, tokenizer, chat template, or the endpoint's model.
    Model,
}

/// The three load figures of a record, with their 95 % intervals: attainment and goodput at the
/// target rate, TTFT p99.
pub fn figures(r: &SelectionRecord) -> [(&'static str, &'static str, Better, Option<Interval>); 3] {
    let p = &r.performance;
    let counts = p.target_counts;
    let attainment =
        counts.and_then(|c| interval::proportion(c.qualified, c.scheduled, CONFIDENCE));
    let goodput = counts.and_then(|c| interval::poisson_rate(c.qualified, c.window_s, CONFIDENCE));
    let mut ttft = p.ttft_samples_s.clone();
    ttft.retain(|x| x.is_finite());
    ttft.sort_by(f64::total_cmp);
    let p99 = interval::quantile(&ttft, Quantile::P99, CONFIDENCE);
    [
        (
            "attainment at the target rate",
            "",
            Better::Higher,
            attainment,
        ),
        ("TTFT p99", "s", Better::Lower, p99),
        (
            "goodput at the target rate",
            "req/s",
            Better::Higher,
            goodput,
        ),
    ]
}

/// Whether a record measured load at all.
pub fn measured_load(r: &SelectionRecord) -> bool {
    r.performance.target_counts.is_some() || !r.performance.ttft_samples_s.is_empty()
}

/// The load figures of `current` against `reference`, the spread taken from `earlier` (the
/// nights before `current`, oldest first; the reference among them).
pub fn load_checks(
    reference: &SelectionRecord,
    current: &SelectionRecord,
    earlier: &[&SelectionRecord],
) -> Vec<FigureCheck> {
    let (r, c) = (figures(reference), figures(current));
    let earlier: Vec<_> = earlier
        .iter()
        .rev()
        .take(SPREAD_NIGHTS)
        .map(|e| figures(e))
        .collect();
    r.iter()
        .zip(c.iter())
        .enumerate()
        .map(|(i, ((name, unit, better, ri), (_, _, _, ci)))| {
            let history: Vec<f64> = earlier
                .iter()
                .filter_map(|f| f[i].3.map(|x| x.value))
                .collect();
            judge_figure(name, unit, *better, *ri, *ci, &history)
        })
        .collect()
}

/// What a run ran: the model's hashes, the runtime and the machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fingerprint {
    pub source: String,
    pub weights_sha256: Option<String>,
    pub tokenizer_sha256: Option<String>,
    pub chat_template_sha256: Option<String>,
    pub runtime: String,
    pub backend: String,
    pub code_version: String,
    pub machine: String,
}

impl Fingerprint {
    /// A record's fingerprint.
    pub fn of(r: &SelectionRecord) -> Fingerprint {
        Fingerprint {
            source: r.identity.source.clone(),
            weights_sha256: r.identity.weights_sha256.clone(),
            tokenizer_sha256: r.identity.tokenizer_sha256.clone(),
            chat_template_sha256: r.identity.chat_template_sha256.clone(),
            runtime: format!("{} {}", r.identity.runtime, r.identity.runtime_version),
            backend: r.operations.backend.clone(),
            code_version: r.code_version.clone(),
            machine: r.machine.clone(),
        }
    }

    /// What changed since `earlier`, field by field in words, and the most significant kind.
    pub fn changes_since(&self, earlier: &Fingerprint) -> (WhatChanged, Vec<String>) {
        let mut out = Vec::new();
        let mut kind = WhatChanged::Nothing;
        let mut field = |k: WhatChanged, what: &str, x: &str, y: &str| {
            if x != y {
                out.push(format!("{what}: {x} → {y}"));
                kind = kind.max(k);
            }
        };
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "–".to_owned());
        let (a, b) = (earlier, self);
        field(WhatChanged::Model, "source", &a.source, &b.source);
        for (what, x, y) in [
            ("weights sha256", &a.weights_sha256, &b.weights_sha256),
            ("tokenizer sha256", &a.tokenizer_sha256, &b.tokenizer_sha256),
            (
                "chat template sha256",
                &a.chat_template_sha256,
                &b.chat_template_sha256,
            ),
        ] {
            field(WhatChanged::Model, what, &opt(x), &opt(y));
        }
        field(WhatChanged::Runtime, "runtime", &a.runtime, &b.runtime);
        field(WhatChanged::Runtime, "backend", &a.backend, &b.backend);
        field(
            WhatChanged::Runtime,
            "code version",
            &a.code_version,
            &b.code_version,
        );
        field(WhatChanged::Machine, "machine", &a.machine, &b.machine);
        (kind, out)
    }
}

/// What changed between two records' fingerprints, in words, and the most significant kind.
pub fn what_changed(a: &SelectionRecord, b: &SelectionRecord) -> (WhatChanged, Vec<String>) {
    Fingerprint::of(b).changes_since(&Fingerprint::of(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> SelectionRecord {
        shortlist_report::sample::sample_record()
    }

    #[test]
    fn a_changed_machine_is_told_from_a_changed_model() {
        let a = record();
        let mut b = a.clone();
        assert_eq!(what_changed(&a, &b).0, WhatChanged::Nothing);
        b.machine = "another CPU, 16 cores".to_owned();
        let (kind, words) = what_changed(&a, &b);
        assert_eq!(kind, WhatChanged::Machine);
        assert!(words[0].starts_with("machine: "), "{words:?}");
        b.identity.weights_sha256 = Some("ff".repeat(32));
        assert_eq!(what_changed(&a, &b).0, WhatChanged::Model);
    }

    #[test]
    fn the_same_record_twice_is_ok_on_every_measured_figure() {
        let a = record();
        let checks = load_checks(&a, &a, &[&a]);
        assert_eq!(checks.len(), 3);
        for c in &checks {
            assert_eq!(
                c.verdict,
                shortlist_study::drift::FigureVerdict::Ok,
                "{}",
                c.why
            );
        }
    }
}
