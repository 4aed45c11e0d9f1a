//! Locking, verification, tampering and versioning of studies; the record's hash and snapshot.

use shortlist_study::cost::{CostInputs, estimate};
use shortlist_study::memory::{FitInputs, KvLayout, fit};
use shortlist_study::record::{
    Cost, Identity, LatencyLine, Operations, Performance, Quality, RECORD_FORMAT, RateWithInterval,
    SelectionRecord, StudyStamp, SweepRow, Verdict, verdict_of,
};
use shortlist_study::rule::{Metric, MetricValues, Value};
use shortlist_study::study::{LockedStudy, Study};

const STUDY: &str = r#"
format = "shortlist.study.v1"
name = "support"
question = "Which model answers Acme Desk support chats?"
evalset = { path = "evalsets/support-assistant.yaml", sha256 = "1111111111111111111111111111111111111111111111111111111111111111" }
workload = { kind = "uniform", requests = 100, input_tokens = 100000, output_tokens = 20000, rate_rps = 8.0, seed = 7 }
slo = { name = "chat", ttft_ms = 600, max_itl_ms = 150, require_valid = true }
traffic = { ordinary_rps = 2.0, peak_rps = 8.0, attainment_target = 0.9 }
memory = { context_tokens = 4096, concurrency = 8, device = "cpu-24GiB", device_memory_gib = 24.0 }

[[candidate]]
name = "smollm2-135m"
source = "gguf:SmolLM2-135M-Instruct.Q4_1.gguf"
price_per_device_hour = 0.1

[[disqualifier]]
name = "any high-value case failed"
metric = "high_value_failures"
op = ">"
value = 0

[[disqualifier]]
metric = "license"
op = "not_in"
values = ["apache-2.0", "mit"]
"#;

#[test]
fn lock_verify_and_tamper() {
    let locked = Study::from_toml("s.study.toml", STUDY)
        .unwrap()
        .lock("2026-11-29T10:00:00Z");
    locked.verify().unwrap();
    // The same content always hashes the same.
    let again = Study::from_toml("s.study.toml", STUDY)
        .unwrap()
        .lock("2026-11-30T00:00:00Z");
    assert_eq!(locked.sha256, again.sha256);

    // Stored and re-read: verifies.
    let stored =
        LockedStudy::from_stored("db", &locked.canonical, &locked.sha256, &locked.locked_at)
            .unwrap();
    assert_eq!(stored.sha256, locked.sha256);

    // Edited behind the store's back: verification fails and says so.
    let tampered = locked
        .canonical
        .replace("\"ttft_ms\":600", "\"ttft_ms\":900");
    assert_ne!(tampered, locked.canonical);
    let err = LockedStudy::from_stored("db", &tampered, &locked.sha256, &locked.locked_at)
        .unwrap_err()
        .to_string();
    assert!(err.contains("changed after it was locked"), "{err}");
}

#[test]
fn an_edit_makes_a_new_version() {
    let locked = Study::from_toml("s.study.toml", STUDY)
        .unwrap()
        .lock("2026-11-29T10:00:00Z");
    let mut next = Study::next_version(&locked);
    next.traffic.peak_rps = 12.0;
    let v2 = Study::from_file("s.study.toml", next)
        .unwrap()
        .lock("2026-11-29T11:00:00Z");
    assert_eq!(v2.study.version(), 2);
    assert_eq!(
        v2.study.file().previous.as_deref(),
        Some(locked.sha256.as_str())
    );
    assert_ne!(v2.sha256, locked.sha256);
}

#[test]
fn bad_studies_name_the_field() {
    let cases = [
        (
            STUDY.replace("metric = \"license\"", "metric = \"licence\""),
            "disqualifier[1].metric",
        ),
        (STUDY.replace("ttft_ms = 600", "ttft = 600"), "field `slo`"),
        (
            STUDY.replace("peak_rps = 8.0", "peak_rps = 1.0"),
            "traffic.peak_rps",
        ),
        (
            STUDY.replace("seed = 7", "seeds = 7"),
            "unknown field `seeds`",
        ),
        (
            STUDY.replace("sha256 = \"1111", "sha256 = \"zz11"),
            "evalset.sha256",
        ),
    ];
    for (text, expected) in cases {
        let err = Study::from_toml("s.study.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "expected `{expected}` in: {err}");
    }
}

fn example_record() -> SelectionRecord {
    let locked = Study::from_toml("s.study.toml", STUDY)
        .unwrap()
        .lock("2026-11-29T10:00:00Z");
    let mut values = MetricValues::default();
    values.set(
        Metric::HighValueFailures,
        Value::Number(2.0),
        vec!["hv-03".into(), "hv-11".into()],
    );
    values.set(
        Metric::License,
        Value::Text("apache-2.0".into()),
        vec!["GGUF general.license".into()],
    );
    let verdicts: Vec<_> = locked
        .study
        .rules()
        .iter()
        .map(|r| r.judge(&values))
        .collect();
    let memory = fit(&FitInputs {
        weights_bytes: 96_600_000,
        kv: KvLayout {
            full_layers: 30,
            sliding_layers: 0,
            sliding_window: 0,
            kv_heads: 3,
            head_dim: 64,
            bytes_per_element: 4,
        },
        context_tokens: 4096,
        concurrency: 8,
        device: "cpu-24GiB".into(),
        device_memory_bytes: 24 << 30,
        usable_fraction: 0.9,
        overhead_fraction: 0.1,
        max_devices: 1,
        model_context_limit: Some(8192),
    });
    let cost = estimate(&CostInputs {
        capacity_rps_per_replica: 1.5,
        devices_per_replica: 1,
        price_per_device_hour: 0.1,
        currency: "USD".into(),
        mean_output_tokens: 200.0,
        ordinary_rps: 2.0,
        peak_rps: 8.0,
        hardware: "AMD EPYC, 2 cores".into(),
        capacity_context: "uniform practice trace, chat SLO".into(),
    })
    .unwrap();
    let verdict = verdict_of(&verdicts, false);
    SelectionRecord {
        format: RECORD_FORMAT.into(),
        study: StudyStamp::of(&locked),
        identity: Identity {
            candidate: "smollm2-135m".into(),
            license: "apache-2.0".into(),
            ..Identity::default()
        },
        quality: Quality {
            evalset: "support-assistant".into(),
            evalset_sha256: "1".repeat(64),
            overall: RateWithInterval {
                label: "all".into(),
                passed: 8,
                n: 10,
                rate: 0.8,
                lo: 0.49,
                hi: 0.94,
            },
            categories: vec![],
            paired: None,
            decoding: "greedy".into(),
            near_ties: None,
        },
        disqualifiers: verdicts,
        memory,
        performance: Performance {
            loop_label: "open loop".into(),
            workload: "uniform".into(),
            slo: "chat".into(),
            target_rps: 8.0,
            throughput_rps: 7.68,
            goodput_rps: 6.48,
            attainment: Some(0.81),
            latencies: vec![LatencyLine {
                metric: "ttft".into(),
                population: "requests".into(),
                count: 96,
                p50_s: Some(0.3),
                p90_s: Some(0.7),
                p99_s: Some(0.7),
            }],
            ttft_samples_s: vec![0.3, 0.7],
            sweep: vec![SweepRow {
                offered_rps: 8.0,
                goodput_rps: 6.48,
                throughput_rps: 7.68,
                attainment: Some(0.81),
                attainment_lower_bound: Some(0.74),
                excluded: None,
            }],
            knee_rps: Some(8.0),
            capacity_rps: None,
            capacity_rule: "test".into(),
            client_bound: false,
            hardware: "AMD EPYC, 2 cores".into(),
            target_counts: None,
            senders: vec![],
        },
        operations: Operations::default(),
        cost: Cost::Estimate(Box::new(cost)),
        verdict,
        generated_at: "2026-11-29T12:00:00Z".into(),
        code_version: "test".into(),
        machine: "test".into(),
        generation: Some(1),
        incomplete: Vec::new(),
        record_sha256: String::new(),
    }
    .seal()
}

#[test]
fn records_carry_their_verdict_and_hash() {
    let record = example_record();
    assert_eq!(record.verdict, Verdict::Disqualified);
    assert!(record.verify());
    let mut edited = record.clone();
    edited.performance.goodput_rps = 7.0;
    assert!(!edited.verify());
    // JSON round trip keeps the hash valid.
    let back: SelectionRecord =
        serde_json::from_str(&serde_json::to_string(&record).unwrap()).unwrap();
    assert!(back.verify());
}

#[test]
fn record_snapshot() {
    let record = example_record();
    insta::assert_json_snapshot!(record, {
        ".study.lock_sha256" => "[lock hash]",
        ".record_sha256" => "[record hash]",
    });
}

#[test]
fn a_candidate_device_is_checked_and_locked_only_when_set() {
    let without = Study::from_toml("s.study.toml", STUDY)
        .unwrap()
        .lock("2026-11-29T10:00:00Z");
    // Unset, it is not in the wire form: studies written before it keep their lock hash.
    assert!(
        !without.canonical.contains("\"device\":null"),
        "{}",
        without.canonical
    );
    let on_gpu = STUDY.replace(
        "price_per_device_hour = 0.1",
        "price_per_device_hour = 0.1\ndevice = \"cuda:0\"",
    );
    let with = Study::from_toml("s.study.toml", &on_gpu)
        .unwrap()
        .lock("2026-11-29T10:00:00Z");
    assert_eq!(
        with.study.file().candidates[0].device.as_deref(),
        Some("cuda:0")
    );
    assert_ne!(with.sha256, without.sha256);

    let bad = [
        (
            on_gpu.replace("\"cuda:0\"", "\"cuda:first\""),
            "candidate[0].device",
        ),
        (
            on_gpu.replace("\"cuda:0\"", "\"tpu\""),
            "expected cpu, cuda or cuda:N",
        ),
        (
            on_gpu.replace(
                "gguf:SmolLM2-135M-Instruct.Q4_1.gguf",
                "http://127.0.0.1:8000#m",
            ),
            "an endpoint runs where it is served",
        ),
    ];
    for (text, expected) in bad {
        let err = Study::from_toml("s.study.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "expected `{expected}` in: {err}");
    }
}

#[test]
fn a_workload_is_described_in_words_with_only_what_the_study_sets() {
    let study = Study::from_toml("s.study.toml", STUDY).unwrap();
    assert_eq!(
        study.file().workload.describe(),
        "uniform: 100 requests, 100000 input / 20000 output tokens in all, 8 req/s, seed 7; open loop"
    );
    let trace = STUDY.replace(
        r#"{ kind = "uniform", requests = 100, input_tokens = 100000, output_tokens = 20000, rate_rps = 8.0, seed = 7 }"#,
        r#"{ kind = "trace", path = "traces/day.jsonl", sha256 = "1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a7988" }"#,
    );
    assert_ne!(trace, STUDY);
    let study = Study::from_toml("s.study.toml", &trace).unwrap();
    assert_eq!(
        study.file().workload.describe(),
        "trace: traces/day.jsonl (sha256 1f2e3d4c5b6a); open loop"
    );
}

mod as_text {
    //! A stored study written back as a study file's text (what the workbench's edit form
    //! starts from) reads back as the same study, whatever its fields hold.

    use proptest::prelude::*;
    use shortlist_study::study::{CandidateRef, QualitySettings, Study, StudyFile};

    /// Text a person may type: quotes, backslashes, newlines, `#`, `[`, non-ASCII.
    fn text() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9 \"'\\\\#=\\[\\]{}\n\té€β-]{1,40}"
            .prop_map(|s| format!("q {s}"))
            .prop_filter("no surrounding spaces", |s| s.trim() == s)
    }

    fn rate() -> impl Strategy<Value = f64> {
        (1u32..100_000).prop_map(|n| f64::from(n) / 997.0)
    }

    prop_compose! {
        fn candidate()(
            name in "[a-z][a-z0-9 _.&/-]{0,12}[a-z0-9]",
            price in rate(),
            fallback in proptest::option::of(text()),
            device in proptest::option::of(prop::sample::select(vec!["cpu", "cuda", "cuda:1"])),
            endpoint in any::<bool>(),
        ) -> CandidateRef {
            CandidateRef {
                source: if endpoint {
                    format!("http://127.0.0.1:9#{name}")
                } else {
                    format!("gguf:${{SHORTLIST_MODELS_DIR}}/{name}.gguf")
                },
                device: if endpoint { None } else { device.map(str::to_owned) },
                name,
                config_sha256: None,
                price_per_device_hour: price,
                fallback,
            }
        }
    }

    prop_compose! {
        fn study()(
            question in text(),
            ordinary in rate(),
            extra in rate(),
            target in proptest::option::of(rate()),
            sweep in proptest::option::of(proptest::collection::vec(rate(), 1..5)),
            ttft in 1u32..100_000,
            itl in proptest::option::of(1u32..10_000),
            concurrency in proptest::option::of(1u32..=64),
            candidates in proptest::collection::vec(candidate(), 1..4),
            currency in proptest::option::of(prop::sample::select(vec!["USD", "EUR"])),
        ) -> StudyFile {
            let mut file = Study::from_toml("s.study.toml", super::STUDY).unwrap().file().clone();
            file.question = question;
            file.traffic.ordinary_rps = ordinary;
            file.traffic.peak_rps = ordinary + extra;
            file.traffic.target_rps = target;
            file.traffic.sweep_rps = sweep;
            file.slo.insert("ttft_ms".into(), toml::Value::Integer(ttft.into()));
            match itl {
                Some(ms) => file.slo.insert("max_itl_ms".into(), toml::Value::Integer(ms.into())),
                None => file.slo.remove("max_itl_ms"),
            };
            file.quality = concurrency.map(|n| QualitySettings { concurrency: Some(n) });
            let mut seen = std::collections::BTreeSet::new();
            file.candidates = candidates
                .into_iter()
                .filter(|c| seen.insert(c.name.clone()))
                .collect();
            file.cost.currency = currency.map(str::to_owned);
            file
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        #[test]
        fn a_study_written_as_text_reads_back_the_same(file in study(), version in 1u32..5) {
            let checked = Study::from_file("generated", file.clone()).unwrap();
            let mut stored = checked.file().clone();
            stored.version = version;
            stored.previous = (version > 1).then(|| "ab".repeat(32));
            let text = stored.to_toml().unwrap();
            let back = Study::from_toml("edited.study.toml", &text)
                .unwrap_or_else(|e| panic!("{e}\n--- text ---\n{text}"));
            // The store assigns the version and what it replaces when the text is saved.
            prop_assert_eq!(back.version(), 1);
            prop_assert_eq!(&back.file().previous, &None);
            prop_assert_eq!(back.file(), &file);
            prop_assert_eq!(back.lock("t").sha256, checked.lock("t").sha256);
        }
    }

    #[test]
    fn the_text_names_no_version_and_keeps_the_study_readable() {
        let file = Study::from_toml("s.study.toml", super::STUDY)
            .unwrap()
            .file()
            .clone();
        let mut stored = file.clone();
        stored.version = 3;
        stored.previous = Some("cd".repeat(32));
        let text = stored.to_toml().unwrap();
        assert!(!text.contains("version"), "{text}");
        assert!(!text.contains("previous"), "{text}");
        assert!(
            text.starts_with("format = \"shortlist.study.v1\"\n"),
            "{text}"
        );
        assert!(text.contains("[[candidate]]"), "{text}");
        assert!(text.contains("[[disqualifier]]"), "{text}");
    }
}
