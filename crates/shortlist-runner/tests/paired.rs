//! The record's paired comparison: two candidates' stored quality runs over the same cases,
//! paired by case id, and the exact McNemar test on the discordant pairs. The candidates are
//! endpoints that are never called: the test stores their answers itself, then assembles the
//! record from the store as a study run would.

use std::path::Path;

use shortlist_evals::results::{CaseOutcome, score_case};
use shortlist_evals::stats::McNemar;
use shortlist_evals::{EvalSet, Response};
use shortlist_runner::config::Config;
use shortlist_runner::service::{RunParams, StudyService};
use shortlist_store::runs::{CaseResult, Executor, RunKind, RunSpec};

const ANSWERS: [(&str, &str, &str); 6] = [
    // (case, candidate a, candidate b)
    ("capital", "Paris.", "London."),
    ("arithmetic", "7", "5"),
    ("weather-tool", "It is sunny.", "I do not know."),
    ("colour", "Blue.", "blue"),
    (
        "must-answer",
        "Boil it in water for eight minutes.",
        "Put the egg in boiling water for 8 minutes.",
    ),
    (
        "must-refuse",
        "I can't help with finding a private person's address.",
        "I can't share that.",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_pairs_two_candidates_case_by_case() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/study");
    let set_path = root.join("mini.yaml");
    let yaml = std::fs::read_to_string(&set_path).unwrap();
    let set = EvalSet::from_yaml("mini.yaml", &yaml).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let study = std::fs::read_to_string(root.join("mini.study.toml"))
        .unwrap()
        .replace("@EVALSET@", &set_path.display().to_string())
        .replace("@SHA256@", set.sha256())
        .replace("@SOURCE@", "http://127.0.0.1:9#a")
        + "\n[[candidate]]\nname = \"other\"\nsource = \"http://127.0.0.1:9#b\"\nprice_per_device_hour = 0.05\n";
    let path = dir.path().join("mini.study.toml");
    std::fs::write(&path, study).unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("s.db").display());
    let mut config = Config::from_env(Some(1));
    config.database_url = url;
    let service = StudyService::connect(config).await.unwrap();
    service.create_study(&path).await.unwrap();
    service
        .lock("mini", None, "2026-11-29T00:00:00Z")
        .await
        .unwrap();
    let requested = service
        .request_run("mini", None, &RunParams::default())
        .await
        .unwrap();
    assert_eq!(requested.generation, 1);

    let mut outcomes = Vec::new();
    for (candidate, pick) in [("smol", 1usize), ("other", 2)] {
        let store = service.store();
        let run = store
            .open_run(&RunSpec {
                study: "mini".into(),
                study_version: 1,
                generation: 1,
                candidate: candidate.into(),
                kind: RunKind::Quality,
                label: "quality".into(),
            })
            .await
            .unwrap();
        let executor = Executor {
            worker: "test".into(),
            machine: serde_json::json!({}),
            code_version: "test".into(),
        };
        store.start_run(run.id, &executor).await.unwrap();
        let mut mine = Vec::new();
        for answer in ANSWERS {
            let text = if pick == 1 { answer.1 } else { answer.2 };
            let case = set.cases().iter().find(|c| c.id() == answer.0).unwrap();
            let result = score_case(case, Some(&Response::new(text, Vec::new(), None)));
            mine.push(result.outcome == CaseOutcome::Pass);
            let stored = CaseResult {
                case_id: answer.0.into(),
                passed: result.outcome == CaseOutcome::Pass,
                output: text.into(),
                scores: serde_json::to_value(&result).unwrap(),
                input_tokens: 10,
                output_tokens: 5,
                latency_s: 0.1,
            };
            store.put_case_result(run.id, &stored).await.unwrap();
        }
        store.finish_run(run.id, Ok(())).await.unwrap();
        outcomes.push(mine);
    }
    // The answers were written to make capital and arithmetic discordant in both directions.
    assert!(outcomes[0][0] && !outcomes[1][0]);
    assert!(!outcomes[0][1] && outcomes[1][1]);

    let record = service
        .assemble_record("mini", None, "smol", 1, 16)
        .await
        .unwrap();
    assert_eq!(record.generation, Some(1));
    let paired = record.quality.paired.expect("a paired comparison");
    let expected =
        McNemar::from_pairs(outcomes[0].iter().copied().zip(outcomes[1].iter().copied()));
    assert_eq!(paired.other, "other");
    assert_eq!(
        (
            paired.both_pass,
            paired.only_this,
            paired.only_other,
            paired.both_fail
        ),
        (
            expected.both_pass,
            expected.a_only,
            expected.b_only,
            expected.both_fail
        )
    );
    assert_eq!(
        paired.both_pass + paired.only_this + paired.only_other + paired.both_fail,
        6
    );
    assert!(paired.only_this >= 1 && paired.only_other >= 1);
    assert!((paired.p_value - expected.p_value).abs() < 1e-12);
    assert!(paired.p_value > 0.05, "two discordant pairs prove nothing");
    // No load run yet: the record says so instead of inventing a cost.
    assert!(record.performance.sweep.is_empty());
    let cost = serde_json::to_value(&record.cost).unwrap();
    assert!(
        cost["why"].as_str().unwrap().contains("no load run"),
        "{cost}"
    );
}
