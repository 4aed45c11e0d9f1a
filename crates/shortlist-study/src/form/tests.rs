//! The guided form: field by field, into a study file and back.

use super::*;
use crate::study::{CandidateRef, EvalSetRef, Study};
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

#[test]
fn a_stored_trace_is_a_workload_and_a_study_on_one_starts_the_form_again() {
    let sha = "cd".repeat(32);
    let trace = TraceRef {
        path: "prod.trace.jsonl".to_owned(),
        sha256: sha.clone(),
    };
    // The practice fields are not needed (here: cleared, but for the practice rate left at its
    // default, which a trace does not take) and a blank replay rate is the trace's own.
    let form = StudyForm {
        workload: format!("trace:{sha}"),
        requests: String::new(),
        prompt_tokens: String::new(),
        ..filled()
    };
    assert_eq!(
        (form.rate_rps.as_str(), form.replay_rps.as_str()),
        ("0.25", "")
    );
    let study = form
        .to_study_with(Some(set()), vec![candidate("small")], Some(trace.clone()))
        .unwrap();
    let w = &study.file().workload;
    assert_eq!(w.kind, crate::study::WorkloadKind::Trace);
    assert_eq!(
        (w.path.as_deref(), w.sha256.as_deref()),
        (Some("prod.trace.jsonl"), Some(sha.as_str()))
    );
    assert_eq!(
        (w.requests, w.input_tokens, w.rate_rps, w.seed),
        (None, None, None, None)
    );
    // A rate replays it faster; a bad one is named at its field.
    let faster = StudyForm {
        replay_rps: "4".to_owned(),
        ..form.clone()
    };
    let s = faster
        .to_study_with(Some(set()), vec![candidate("small")], Some(trace.clone()))
        .unwrap();
    assert_eq!(s.file().workload.rate_rps, Some(4.0));
    let bad = StudyForm {
        replay_rps: "fast".to_owned(),
        ..form.clone()
    };
    let errors = bad
        .to_study_with(Some(set()), vec![candidate("small")], Some(trace.clone()))
        .unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].field, "replay_rps");
    // A trace the workbench does not hold is refused at the workload field.
    let errors = form
        .to_study_with(Some(set()), vec![candidate("small")], None)
        .unwrap_err();
    assert_eq!(errors[0].field, "workload", "{errors:?}");
    // Started from that study, the form chooses the trace again and keeps the practice
    // fields at their defaults, with nothing left behind.
    let (again, left) = StudyForm::from_file(study.file());
    assert_eq!(again.workload, format!("trace:{sha}"));
    assert!(left.is_empty(), "{left:?}");
    let defaults = StudyForm::default();
    assert_eq!(
        (
            &again.requests,
            &again.prompt_tokens,
            &again.rate_rps,
            &again.replay_rps
        ),
        (
            &defaults.requests,
            &defaults.prompt_tokens,
            &defaults.rate_rps,
            &String::new()
        )
    );
    let (started_faster, _) = StudyForm::from_file(s.file());
    assert_eq!(started_faster.replay_rps, "4");
    let made = StudyForm {
        name: "support".to_owned(),
        ..again
    }
    .to_study_with(Some(set()), vec![candidate("small")], Some(trace))
    .unwrap();
    assert_eq!(made.file().workload, study.file().workload);
}
