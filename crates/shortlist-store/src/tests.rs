//! The contract suite: every test here runs once on SQLite (a temporary file) and once on
//! PostgreSQL (a fresh database on the server that `SHORTLIST_TEST_POSTGRES_URL` names).

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use shortlist_study::StudyError;
use shortlist_study::record::SelectionRecord;
use shortlist_study::study::{LockedStudy, Study};
use sqlx::{AnyPool, AssertSqlSafe, Executor};

use crate::content::{ContentHash, WorkloadKind};
use crate::generations::{GenerationSpan, Trigger};
use crate::jobs::{JobState, NewJob, Retry};
use crate::runs::{
    CaseResult, Executor as RunExecutor, LoadResult, RecordsRef, RunKind, RunSpec, RunState,
};
use crate::studies::StoredStudy;
use crate::{Backend, Store, StoreError};

const POSTGRES_ENV: &str = "SHORTLIST_TEST_POSTGRES_URL";

async fn on_sqlite<F, Fut>(body: F)
where
    F: FnOnce(Store) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
    // As many connections as the concurrency test has writers: the set-up in which SQLite
    // without WAL, busy timeout and BEGIN IMMEDIATE failed with "database is locked".
    let store = Store::connect_with(&url, 16).await.unwrap();
    assert_eq!(store.backend(), Backend::Sqlite);
    tokio::spawn(body(store)).await.unwrap();
}

async fn on_postgres<F, Fut>(body: F)
where
    F: FnOnce(Store) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Ok(admin_url) = std::env::var(POSTGRES_ENV) else {
        // Written to the process's stderr directly, past the test harness's capture, so that
        // the skip is seen even when the test passes.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED: the PostgreSQL half of the shortlist-store contract suite: \
             {POSTGRES_ENV} is not set. scripts/test installs and starts PostgreSQL and sets it. ***\n"
        );
        return;
    };
    let (admin, db, url) = fresh_postgres(&admin_url).await;
    let store = Store::connect_with(&url, 8).await.unwrap();
    assert_eq!(store.backend(), Backend::Postgres);
    let outcome = tokio::spawn(body(store.clone())).await;
    store.close().await;
    admin
        .execute(AssertSqlSafe(format!("DROP DATABASE {db} WITH (FORCE)")))
        .await
        .unwrap();
    outcome.unwrap();
}

/// Who executes the runs of these tests.
fn executor() -> RunExecutor {
    RunExecutor {
        worker: "test-worker".to_owned(),
        machine: serde_json::json!({"cpu_model": "test CPU", "cores": 2}),
        code_version: "0.0.0-test".to_owned(),
    }
}

/// A new, empty database on the server `admin_url` names: its admin pool, name and URL.
async fn fresh_postgres(admin_url: &str) -> (AnyPool, String, String) {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let db = format!(
        "shortlist_t_{}_{}_{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    sqlx::any::install_default_drivers();
    let admin = AnyPool::connect(admin_url).await.unwrap();
    admin
        .execute(AssertSqlSafe(format!("CREATE DATABASE {db}")))
        .await
        .unwrap();
    let (base, rest) = admin_url.rsplit_once('/').unwrap();
    let query = rest
        .split_once('?')
        .map_or(String::new(), |(_, q)| format!("?{q}"));
    let url = format!("{base}/{db}{query}");
    (admin, db, url)
}

/// One contract test, run on both databases.
macro_rules! contract {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                super::on_sqlite(super::$name).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                super::on_postgres(super::$name).await
            }
        }
    };
}

const STUDY: &str = r#"
format = "shortlist.study.v1"
name = "support"
question = "Which model answers support chats?"
evalset = { path = "evalsets/support-assistant.yaml", sha256 = "0000000000000000000000000000000000000000000000000000000000000000" }
workload = { kind = "uniform", requests = 100, input_tokens = 100000, output_tokens = 20000, rate_rps = 8.0, seed = 7 }
slo = { name = "chat", ttft_ms = 600, max_itl_ms = 150 }
traffic = { ordinary_rps = 2.0, peak_rps = 8.0 }
memory = { context_tokens = 4096, concurrency = 8, device = "cpu", device_memory_gib = 24.0 }

[[candidate]]
name = "small"
source = "gguf:small.gguf"
price_per_device_hour = 0.1

[[disqualifier]]
metric = "high_value_failures"
op = ">"
value = 0
"#;

fn study() -> Study {
    Study::from_toml("support.study.toml", STUDY).unwrap()
}

async fn locked_study(store: &Store) -> LockedStudy {
    let locked = study().lock("2026-11-29T10:00:00Z");
    store.lock_study(&locked).await.unwrap();
    locked
}

fn record(locked: &LockedStudy) -> SelectionRecord {
    let v = serde_json::json!({
        "format": "shortlist.record.v1",
        "study": {
            "name": locked.study.name(), "version": locked.study.version(),
            "question": locked.study.file().question, "lock_sha256": locked.sha256,
            "locked_at": locked.locked_at
        },
        "identity": {
            "candidate": "small", "source": "gguf:small.gguf", "architecture": "llama",
            "parameters": 1000, "quantization": "Q8_0", "precision": "int8", "context_limit": 4096,
            "license": "apache-2.0", "weights_sha256": null, "tokenizer_sha256": null,
            "chat_template_sha256": null, "runtime": "shortlist-engine", "runtime_version": "0.1.0"
        },
        "quality": {
            "evalset": "support", "evalset_sha256": "00",
            "overall": {"label": "all", "passed": 9, "n": 10, "rate": 0.9, "lo": 0.6, "hi": 0.98},
            "categories": [], "paired": null, "decoding": "greedy"
        },
        "disqualifiers": [],
        "memory": {
            "weights_bytes": 1, "kv_bytes": 2, "kv_bytes_per_token": 3, "overhead_bytes": 4,
            "total_bytes": 10, "device": "cpu", "device_memory_bytes": 100,
            "usable_bytes_per_device": 90, "devices_needed": 1, "fits": true,
            "summary": "fits", "assumptions": []
        },
        "performance": {
            "loop_label": "open", "workload": "uniform", "slo": "chat", "target_rps": 8.0,
            "throughput_rps": 7.5, "goodput_rps": 7.0, "attainment": 0.93, "latencies": [],
            "ttft_samples_s": [0.1, 0.2], "sweep": [], "knee_rps": null, "capacity_rps": null,
            "capacity_rule": "attainment ≥ 0.9", "client_bound": false, "hardware": "cpu"
        },
        "operations": {
            "backend": "engine", "versions": [], "overload_behaviour": "queues",
            "error_behaviour": "none", "fallback": "none"
        },
        "cost": {"why": "no capacity"},
        "verdict": "incomplete",
        "generated_at": "2026-11-29T11:00:00Z",
        "code_version": "test",
        "machine": "test",
        "record_sha256": ""
    });
    serde_json::from_value::<SelectionRecord>(v).unwrap().seal()
}

async fn exec(pool: &AnyPool, sql: &str) -> Result<(), sqlx::Error> {
    pool.execute(AssertSqlSafe(sql.to_owned()))
        .await
        .map(|_| ())
}

// ---------------------------------------------------------------------------------------------

async fn versioned_content_round_trips(store: Store) {
    let yaml = "name: support\ncases: []\n";
    let h1 = ContentHash::of(yaml.as_bytes());
    let a = store.put_eval_set("support", &h1, yaml).await.unwrap();
    assert!(a.inserted);
    assert_eq!(a.version, 1);
    let again = store.put_eval_set("support", &h1, yaml).await.unwrap();
    assert!(!again.inserted);
    assert_eq!((again.id, again.version), (a.id, 1));
    let yaml2 = "name: support\ncases: [x]\n";
    let h2 = ContentHash::of(yaml2.as_bytes());
    let b = store.put_eval_set("support", &h2, yaml2).await.unwrap();
    assert_eq!(b.version, 2);
    assert_eq!(store.eval_set("support", None).await.unwrap().yaml, yaml2);
    assert_eq!(store.eval_set("support", Some(1)).await.unwrap().yaml, yaml);
    assert_eq!(store.eval_set_by_hash(&h1).await.unwrap().meta.version, 1);
    assert!(matches!(
        store.eval_set("support", Some(3)).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.put_eval_set(" ", &h1, yaml).await,
        Err(StoreError::Invalid { field: "name", .. })
    ));

    // Candidates hash their canonical JSON: key order does not make a new version.
    let c1 =
        serde_json::json!({"source": "gguf:a.gguf", "gen": {"temperature": 0.0, "max_tokens": 64}});
    let c1_reordered: serde_json::Value = serde_json::from_str(
        r#"{"gen": {"max_tokens": 64, "temperature": 0.0}, "source": "gguf:a.gguf"}"#,
    )
    .unwrap();
    let v1 = store.put_candidate("small", &c1).await.unwrap();
    let v1b = store.put_candidate("small", &c1_reordered).await.unwrap();
    assert_eq!((v1b.version, v1b.inserted), (1, false));
    assert_eq!(v1.sha256, v1b.sha256);
    let got = store.candidate("small", None).await.unwrap();
    assert_eq!(got.config, c1);

    let trace = "{\"t\":0.0}\n{\"t\":0.5}\n";
    let w = store
        .put_workload("practice", WorkloadKind::Trace, trace)
        .await
        .unwrap();
    let spec = "kind = \"uniform\"\nseed = 7\n";
    store
        .put_workload("practice", WorkloadKind::Spec, spec)
        .await
        .unwrap();
    let w1 = store.workload("practice", Some(1)).await.unwrap();
    assert_eq!((w1.kind, w1.body.as_str()), (WorkloadKind::Trace, trace));
    assert_eq!(w1.meta.sha256, w.sha256);
    assert_eq!(
        store.workload("practice", None).await.unwrap().kind,
        WorkloadKind::Spec
    );

    let slo = "name = \"chat\"\nttft_ms = 600\n";
    store.put_slo("chat", slo).await.unwrap();
    assert_eq!(store.slo("chat", None).await.unwrap().toml, slo);

    assert_eq!(store.list_eval_sets().await.unwrap().len(), 2);
    assert_eq!(store.list_candidates().await.unwrap().len(), 1);
    assert_eq!(store.list_workloads().await.unwrap().len(), 2);
    assert_eq!(store.list_slos().await.unwrap().len(), 1);
}
contract!(versioned_content_round_trips);

async fn content_is_removed_by_version_or_whole(store: Store) {
    let yamls = [
        "name: s\ncases: [a]\n",
        "name: s\ncases: [b]\n",
        "name: s\ncases: [c]\n",
    ];
    for y in yamls {
        store
            .put_eval_set("s", &ContentHash::of(y.as_bytes()), y)
            .await
            .unwrap();
    }
    // One eval set version goes; the others keep their numbers and contents.
    store.delete_eval_set("s", 2).await.unwrap();
    let left: Vec<u32> = store
        .list_eval_sets()
        .await
        .unwrap()
        .iter()
        .map(|v| v.version)
        .collect();
    assert_eq!(left, [1, 3]);
    assert_eq!(store.eval_set("s", Some(3)).await.unwrap().yaml, yamls[2]);
    assert!(matches!(
        store.delete_eval_set("s", 2).await,
        Err(StoreError::Removed { what, .. }) if what == "eval set `s` v2"
    ));
    // A number names one content for ever. The latest removed, other content gets a number no
    // version had (not 3 again); asked for, v3 is named as removed.
    store.delete_eval_set("s", 3).await.unwrap();
    let other = "name: s\ncases: [d]\n";
    let next = store
        .put_eval_set("s", &ContentHash::of(other.as_bytes()), other)
        .await
        .unwrap();
    assert_eq!((next.version, next.inserted), (4, true));
    let c3 = ContentHash::of(yamls[2].as_bytes());
    for asked in [
        store.eval_set("s", Some(3)).await.map(drop),
        store.delete_eval_set("s", 3).await,
    ] {
        match asked {
            Err(StoreError::Removed { what, sha256 }) => {
                assert_eq!(
                    (what.as_str(), sha256.as_str()),
                    ("eval set `s` v3", c3.as_str())
                );
            }
            other => panic!("v3 was removed: {other:?}"),
        }
    }
    assert!(matches!(
        store.eval_set("s", Some(9)).await,
        Err(StoreError::NotFound { what }) if what == "eval set `s` v9"
    ));
    // The removed content stored again gets its own number back; the latest stays the latest.
    let back = store
        .put_eval_set("s", &ContentHash::of(yamls[1].as_bytes()), yamls[1])
        .await
        .unwrap();
    assert_eq!((back.version, back.inserted), (2, true));
    assert_eq!(store.eval_set("s", Some(2)).await.unwrap().yaml, yamls[1]);
    assert_eq!(store.eval_set("s", None).await.unwrap().meta.version, 4);
    let again = store
        .put_eval_set("s", &ContentHash::of(yamls[2].as_bytes()), yamls[2])
        .await
        .unwrap();
    assert_eq!((again.version, again.inserted), (3, true));
    let last = "name: s\ncases: [e]\n";
    let last = store
        .put_eval_set("s", &ContentHash::of(last.as_bytes()), last)
        .await
        .unwrap();
    assert_eq!(last.version, 5);

    // A candidate goes whole: every version of its configuration, and nothing of another.
    for t in [0.0, 0.5] {
        let c = serde_json::json!({"source": "gguf:a.gguf", "temperature": t});
        store.put_candidate("small", &c).await.unwrap();
    }
    store
        .put_candidate("other", &serde_json::json!({"source": "gguf:b.gguf"}))
        .await
        .unwrap();
    assert_eq!(store.delete_candidate("small").await.unwrap(), [1, 2]);
    assert!(matches!(
        store.candidate("small", None).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.delete_candidate("small").await,
        Err(StoreError::NotFound { .. })
    ));
    let names: Vec<String> = store
        .list_candidates()
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(names, ["other"]);
    // Stored again with new settings, it goes on from the numbers it had.
    let c = serde_json::json!({"source": "gguf:a.gguf", "temperature": 1.0});
    assert_eq!(store.put_candidate("small", &c).await.unwrap().version, 3);

    // Traces are the workloads of kind trace: listed, found by the hash of their bytes (a
    // spec never is), and removed version by version.
    let (t1, t2) = ("{\"t\":0.0}\n", "{\"t\":0.0}\n{\"t\":1.0}\n");
    store
        .put_workload("prod", WorkloadKind::Trace, t1)
        .await
        .unwrap();
    store
        .put_workload("prod", WorkloadKind::Trace, t2)
        .await
        .unwrap();
    let spec = store
        .put_workload("synth", WorkloadKind::Spec, "kind = \"uniform\"\n")
        .await
        .unwrap();
    let traces: Vec<(String, u32)> = store
        .list_traces()
        .await
        .unwrap()
        .into_iter()
        .map(|v| (v.name, v.version))
        .collect();
    assert_eq!(traces, [("prod".to_owned(), 1), ("prod".to_owned(), 2)]);
    let found = store
        .trace_by_hash(&ContentHash::of(t2.as_bytes()))
        .await
        .unwrap();
    assert_eq!((found.meta.version, found.body.as_str()), (2, t2));
    assert!(matches!(
        store.trace_by_hash(&spec.sha256).await,
        Err(StoreError::NotFound { .. })
    ));
    store.delete_workload("prod", 1).await.unwrap();
    assert!(matches!(
        store.trace_by_hash(&ContentHash::of(t1.as_bytes())).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.delete_workload("prod", 1).await,
        Err(StoreError::Removed { what, sha256 })
            if what == "workload `prod` v1" && sha256 == ContentHash::of(t1.as_bytes()).as_str()
    ));
    assert!(matches!(
        store.delete_workload("prod", 3).await,
        Err(StoreError::NotFound { what }) if what == "workload `prod` v3"
    ));
    assert_eq!(store.list_traces().await.unwrap().len(), 1);
}
contract!(content_is_removed_by_version_or_whole);

async fn studies_lock_and_version(store: Store) {
    // A draft can be saved and edited in place.
    let draft = study();
    store.save_study(&draft).await.unwrap();
    store.save_study(&draft).await.unwrap();
    assert!(matches!(
        store.study("support", 1).await.unwrap(),
        StoredStudy::Draft(s) if s == draft
    ));
    assert!(matches!(
        store.verify_study("support", 1).await,
        Err(StoreError::Study(StudyError::NotLocked { .. }))
    ));

    // Locking stores canonical, hash and time; locking the same content again is a no-op.
    let locked = locked_study(&store).await;
    store.lock_study(&locked).await.unwrap();
    let back = store.verify_study("support", 1).await.unwrap();
    assert_eq!(back.canonical, locked.canonical);
    assert_eq!(back.sha256, locked.sha256);
    assert_eq!(back.locked_at, "2026-11-29T10:00:00Z");

    // The store refuses to change or remove it, naming the study and version.
    let err = store.save_study(&draft).await.unwrap_err();
    assert!(matches!(&err, StoreError::StudyLocked { name, version: 1, .. } if name == "support"));
    assert!(err.to_string().contains("`support` v1"), "{err}");
    assert!(matches!(
        store.delete_study_draft("support", 1).await,
        Err(StoreError::StudyLocked { .. })
    ));
    let other = Study::from_toml(
        "support.study.toml",
        &STUDY.replace("support chats", "sales chats"),
    )
    .unwrap()
    .lock("2026-11-30T10:00:00Z");
    assert!(matches!(
        store.lock_study(&other).await,
        Err(StoreError::StudyLocked { .. })
    ));

    // An edit is a new version that names the hash it replaces.
    let next = store.new_study_version("support", 1).await.unwrap();
    assert_eq!(next.version(), 2);
    assert_eq!(
        next.file().previous.as_deref(),
        Some(locked.sha256.as_str())
    );
    assert_eq!(store.latest_study_version("support").await.unwrap(), 2);
    let list = store.list_studies().await.unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].sha256.as_deref(), Some(locked.sha256.as_str()));
    assert_eq!(list[1].sha256, None);
    store.delete_study_draft("support", 2).await.unwrap();
    assert_eq!(store.latest_study_version("support").await.unwrap(), 1);
}
contract!(studies_lock_and_version);

/// Behind the store's back: the trigger refuses; with the trigger gone, verify catches it.
async fn tampering_is_refused_then_detected(store: Store) {
    locked_study(&store).await;
    let pool = store.pool();
    let tamper = "UPDATE studies SET canonical = REPLACE(canonical, 'support chats', 'sales chats') \
                  WHERE name = 'support' AND version = 1";
    let err = exec(pool, tamper).await.unwrap_err();
    assert!(err.to_string().contains("locked"), "{err}");
    let err = exec(pool, "DELETE FROM studies WHERE name = 'support'")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("locked"), "{err}");
    store.verify_study("support", 1).await.unwrap();

    let drop = match store.backend() {
        Backend::Sqlite => "DROP TRIGGER studies_locked_no_update",
        Backend::Postgres => "DROP TRIGGER studies_locked_frozen ON studies",
    };
    exec(pool, drop).await.unwrap();
    exec(pool, tamper).await.unwrap();
    let err = store.verify_study("support", 1).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Study(StudyError::Tampered { name, version: 1, .. }) if name == "support"),
        "{err}"
    );
    // And nothing runs on a tampered study.
    let spec = RunSpec {
        study: "support".to_owned(),
        study_version: 1,
        generation: 1,
        candidate: "small".to_owned(),
        kind: RunKind::Quality,
        label: String::new(),
    };
    assert!(matches!(
        store.open_run(&spec).await,
        Err(StoreError::Study(StudyError::Tampered { .. }))
    ));
}
contract!(tampering_is_refused_then_detected);

async fn runs_and_results(store: Store) {
    let spec = RunSpec {
        study: "support".to_owned(),
        study_version: 1,
        generation: 1,
        candidate: "small".to_owned(),
        kind: RunKind::Quality,
        label: String::new(),
    };
    // Runs start only on locked studies.
    store.save_study(&study()).await.unwrap();
    assert!(matches!(
        store.open_run(&spec).await,
        Err(StoreError::Study(StudyError::NotLocked { .. }))
    ));
    locked_study(&store).await;
    let run = store.open_run(&spec).await.unwrap();
    assert_eq!(run.state, RunState::Pending);
    let stranger = RunSpec {
        candidate: "large".to_owned(),
        ..spec.clone()
    };
    assert!(matches!(
        store.open_run(&stranger).await,
        Err(StoreError::Invalid {
            field: "candidate",
            ..
        })
    ));
    assert_eq!(store.open_run(&spec).await.unwrap().id, run.id);
    store.start_run(run.id, &executor()).await.unwrap();
    let started = store.run(run.id).await.unwrap();
    assert_eq!(started.state, RunState::Running);
    assert!(started.started_at_ms.is_some());

    // Case results: a resumed run that stores a case again changes nothing.
    let case = |i: u32, output: &str| CaseResult {
        case_id: format!("case-{i:03}"),
        passed: !i.is_multiple_of(3),
        output: output.to_owned(),
        scores: serde_json::json!({"exact": !i.is_multiple_of(3), "n": i}),
        input_tokens: 100 + u64::from(i),
        output_tokens: 20,
        latency_s: 0.25 * f64::from(i),
    };
    for i in 0..10 {
        assert!(
            store
                .put_case_result(run.id, &case(i, "first"))
                .await
                .unwrap()
        );
    }
    for i in 5..12 {
        let inserted = store
            .put_case_result(run.id, &case(i, "second"))
            .await
            .unwrap();
        assert_eq!(inserted, i >= 10);
    }
    let results = store.case_results(run.id).await.unwrap();
    assert_eq!(results.len(), 12);
    assert_eq!(results[7], case(7, "first"));
    assert_eq!(results[11], case(11, "second"));
    // One case read alone is the row of the whole read.
    for r in [&results[0], &results[7], &results[11]] {
        assert_eq!(
            store
                .case_result(run.id, &r.case_id)
                .await
                .unwrap()
                .as_ref(),
            Some(r)
        );
    }
    assert_eq!(store.case_result(run.id, "nowhere").await.unwrap(), None);
    assert_eq!(store.finished_cases(run.id).await.unwrap().len(), 12);
    store.finish_run(run.id, Ok(())).await.unwrap();
    let done = store.run(run.id).await.unwrap();
    assert_eq!(done.state, RunState::Done);
    assert!(done.finished_at_ms >= done.started_at_ms);

    // Load results: histograms and the raw records, inline or by path.
    let load = store
        .open_run(&RunSpec {
            kind: RunKind::Sweep,
            ..spec.clone()
        })
        .await
        .unwrap();
    let step = |label: &str, records: RecordsRef| LoadResult {
        label: label.to_owned(),
        offered_rps: Some(4.0),
        histograms: serde_json::json!({"ttft_s": "HISTFAAAA...", "scale": 1e6}),
        records,
    };
    let a = step("4rps", RecordsRef::Inline("{\"id\":1}\n".to_owned()));
    let b = step(
        "8rps",
        RecordsRef::Path("runs/7/8rps.records.jsonl".to_owned()),
    );
    assert!(store.put_load_result(load.id, &a).await.unwrap());
    assert!(store.put_load_result(load.id, &b).await.unwrap());
    assert!(!store.put_load_result(load.id, &a).await.unwrap());
    assert_eq!(store.load_results(load.id).await.unwrap(), vec![a, b]);
    store
        .finish_run(load.id, Err("client-bound"))
        .await
        .unwrap();
    let failed = store.run(load.id).await.unwrap();
    assert_eq!(
        (failed.state, failed.error.as_deref()),
        (RunState::Failed, Some("client-bound"))
    );
    let all = store.runs_of_study("support", 1).await.unwrap();
    assert_eq!(
        all.iter().map(|r| r.kind).collect::<Vec<_>>(),
        [RunKind::Quality, RunKind::Sweep]
    );
    // Newest first, with the study they belong to, and no more than asked for.
    let recent = store.recent_runs(10).await.unwrap();
    assert_eq!(
        recent
            .iter()
            .map(|(s, v, r)| (s.as_str(), *v, r.id))
            .collect::<Vec<_>>(),
        [("support", 1, load.id), ("support", 1, all[0].id)]
    );
    assert_eq!(store.recent_runs(1).await.unwrap().len(), 1);
}
contract!(runs_and_results);

async fn selection_records(store: Store) {
    let locked = study().lock("2026-11-29T10:00:00Z");
    let rec = record(&locked);
    // The study must be stored and locked first.
    assert!(store.put_record(&rec, 1).await.is_err());
    store.lock_study(&locked).await.unwrap();
    let id = store.put_record(&rec, 1).await.unwrap();
    assert_eq!(store.put_record(&rec, 1).await.unwrap(), id);
    let back = store.latest_record("support", 1, "small").await.unwrap();
    assert_eq!(back.record, rec);
    assert_eq!(store.records_of_study("support", 1).await.unwrap().len(), 1);
    // A record sealed under another lock hash is refused.
    let mut foreign = rec.clone();
    foreign.study.lock_sha256 = "f".repeat(64);
    assert!(matches!(
        store.put_record(&foreign.seal(), 1).await,
        Err(StoreError::Invalid {
            field: "study.lock_sha256",
            ..
        })
    ));
    let mut unsealed = rec.clone();
    unsealed.machine = "elsewhere".to_owned();
    assert!(matches!(
        store.put_record(&unsealed, 1).await,
        Err(StoreError::Invalid {
            field: "record_sha256",
            ..
        })
    ));
}
contract!(selection_records);

async fn reproductions_kept_newest_first(store: Store) {
    let locked = study().lock("2026-11-29T10:00:00Z");
    let doc = |n: u64| serde_json::json!({"asked": n, "cases": [{"id": "c1", "then": "ünïcode \u{1F600}"}]});
    // Only of a stored, locked study version.
    assert!(matches!(
        store
            .put_reproduction("support", 1, 1, "small", true, &doc(1))
            .await,
        Err(StoreError::NotFound { .. })
    ));
    store.lock_study(&locked).await.unwrap();
    let first = store
        .put_reproduction("support", 1, 1, "small", true, &doc(1))
        .await
        .unwrap();
    let second = store
        .put_reproduction("support", 1, 2, "small", false, &doc(2))
        .await
        .unwrap();
    let third = store
        .put_reproduction("support", 1, 1, "small", false, &doc(3))
        .await
        .unwrap();
    let all = store
        .reproductions("support", 1, "small", None)
        .await
        .unwrap();
    assert_eq!(
        all.iter().map(|r| r.id).collect::<Vec<_>>(),
        [third, second, first]
    );
    assert_eq!(
        all.iter().map(|r| (r.generation, r.ok)).collect::<Vec<_>>(),
        [(1, false), (2, false), (1, true)]
    );
    assert_eq!(all[2].document, doc(1), "the document comes back as stored");
    assert!(all[0].created_at_ms > 0);
    let of_one = store
        .reproductions("support", 1, "small", Some(1))
        .await
        .unwrap();
    assert_eq!(
        of_one.iter().map(|r| r.id).collect::<Vec<_>>(),
        [third, first]
    );
    assert!(
        store
            .reproductions("support", 1, "other", None)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .reproductions("support", 2, "small", None)
            .await
            .unwrap()
            .is_empty()
    );
}
contract!(reproductions_kept_newest_first);

/// Four workers drain 200 jobs at once: every job is claimed exactly once.
async fn concurrent_claims_never_double_claim(store: Store) {
    const JOBS: usize = 200;
    let mut ids = BTreeSet::new();
    for i in 0..JOBS {
        ids.insert(
            store
                .enqueue_job("quality", &serde_json::json!({ "i": i }))
                .await
                .unwrap(),
        );
    }
    let mut workers = Vec::new();
    for w in 0..4 {
        let store = store.clone();
        workers.push(tokio::spawn(async move {
            let worker = format!("worker-{w}");
            let mut got = Vec::new();
            while let Some(job) = store.claim_next_job(&worker).await.unwrap() {
                assert_eq!(job.claimed_by.as_deref(), Some(worker.as_str()));
                assert_eq!(job.attempts, 1);
                store.complete_job(job.id, &worker).await.unwrap();
                got.push(job.id);
            }
            got
        }));
    }
    let mut claimed = Vec::new();
    let mut per_worker = Vec::new();
    for w in workers {
        let got = w.await.unwrap();
        per_worker.push(got.len());
        claimed.extend(got);
    }
    let unique: BTreeSet<i64> = claimed.iter().copied().collect();
    assert_eq!(claimed.len(), JOBS, "a job was claimed twice or lost");
    assert_eq!(unique, ids);
    assert_eq!(
        store.jobs_in_state(JobState::Done).await.unwrap().len(),
        JOBS
    );
    eprintln!(
        "{}: {JOBS} jobs claimed by 4 workers: {per_worker:?}",
        store.backend().name()
    );
}
contract!(concurrent_claims_never_double_claim);

async fn job_failures_and_stale_claims(store: Store) {
    let payload = serde_json::json!({"candidate": "small"});
    let id = store.enqueue_job_with("load", &payload, 2).await.unwrap();
    let job = store.claim_next_job("a").await.unwrap().unwrap();
    assert_eq!(
        (job.id, job.payload.clone(), job.state),
        (id, payload, JobState::Running)
    );
    assert!(store.claim_next_job("b").await.unwrap().is_none());
    // Only the holder may finish it.
    assert!(matches!(
        store.complete_job(id, "b").await,
        Err(StoreError::JobNotHeld { .. })
    ));
    store.heartbeat_job(id, "a").await.unwrap();
    // A retryable failure with attempts left goes back to the queue.
    assert_eq!(
        store
            .fail_job(id, "a", "timeout", Retry::After(Duration::ZERO))
            .await
            .unwrap(),
        JobState::Queued
    );
    let again = store.claim_next_job("b").await.unwrap().unwrap();
    assert_eq!((again.id, again.attempts), (id, 2));
    assert_eq!(again.last_error.as_deref(), Some("timeout"));

    // Worker b dies: its claim goes stale; out of attempts, the job fails for good.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        store
            .requeue_stale_jobs(Duration::from_secs(3600))
            .await
            .unwrap(),
        (0, 0)
    );
    assert_eq!(
        store
            .requeue_stale_jobs(Duration::from_millis(5))
            .await
            .unwrap(),
        (0, 1)
    );
    assert_eq!(store.job(id).await.unwrap().state, JobState::Failed);

    // With attempts left, a stale claim is requeued and another worker takes it.
    let id2 = store
        .enqueue_job("load", &serde_json::json!({}))
        .await
        .unwrap();
    store.claim_next_job("c").await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        store
            .requeue_stale_jobs(Duration::from_millis(5))
            .await
            .unwrap(),
        (1, 0)
    );
    // Its wait counts from the hand-back, and it is claimable at once.
    let requeued = store.job(id2).await.unwrap();
    assert!(
        requeued
            .not_before_ms
            .is_some_and(|t| t > requeued.created_at_ms + 10),
        "{requeued:?}"
    );
    let taken = store.claim_next_job("d").await.unwrap().unwrap();
    assert_eq!((taken.id, taken.attempts), (id2, 2));
    // The dead worker's late completion is refused.
    assert!(matches!(
        store.complete_job(id2, "c").await,
        Err(StoreError::JobNotHeld { .. })
    ));
    store.complete_job(id2, "d").await.unwrap();
    // A permanent failure stays failed.
    let id3 = store
        .enqueue_job("fit", &serde_json::json!({}))
        .await
        .unwrap();
    store.claim_next_job("e").await.unwrap().unwrap();
    assert_eq!(
        store
            .fail_job(id3, "e", "no GGUF", Retry::Never)
            .await
            .unwrap(),
        JobState::Failed
    );
}
contract!(job_failures_and_stale_claims);

/// Many writers at once, autocommit inserts and read-then-write transactions mixed: on SQLite
/// this is where "database is locked" used to appear.
async fn many_concurrent_writers(store: Store) {
    locked_study(&store).await;
    let run = store
        .open_run(&RunSpec {
            study: "support".to_owned(),
            study_version: 1,
            generation: 1,
            candidate: "small".to_owned(),
            kind: RunKind::Quality,
            label: String::new(),
        })
        .await
        .unwrap();
    const TASKS: usize = 16;
    const EACH: usize = 40;
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..EACH {
                let case = CaseResult {
                    case_id: format!("t{t:02}-{i:03}"),
                    passed: true,
                    output: "ok".to_owned(),
                    scores: serde_json::json!({}),
                    input_tokens: 1,
                    output_tokens: 1,
                    latency_s: 0.01,
                };
                store.put_case_result(run.id, &case).await.unwrap();
                if i % 4 == 0 {
                    // Read-then-write: the next version of a shared name.
                    let text = format!("t{t}-{i}");
                    store
                        .put_eval_set("shared", &ContentHash::of(text.as_bytes()), &text)
                        .await
                        .unwrap();
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed();
    assert_eq!(
        store.case_results(run.id).await.unwrap().len(),
        TASKS * EACH
    );
    let versions = store.list_eval_sets().await.unwrap();
    assert_eq!(versions.len(), TASKS * EACH / 4);
    let numbers: BTreeSet<u32> = versions.iter().map(|v| v.version).collect();
    assert_eq!(numbers, (1..=(TASKS * EACH / 4) as u32).collect());
    eprintln!(
        "{}: {} writes by {TASKS} tasks in {:.2} s, no errors",
        store.backend().name(),
        TASKS * EACH + TASKS * EACH / 4,
        elapsed.as_secs_f64()
    );
}
contract!(many_concurrent_writers);

#[tokio::test]
async fn sqlite_connections_get_wal_and_busy_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("p.db").display());
    let store = Store::connect(&url).await.unwrap();
    let pool = store.pool();
    let one = |sql: &'static str| async move {
        let row = sqlx::query(sql).fetch_one(pool).await.unwrap();
        sqlx::Row::try_get::<String, _>(&row, 0)
            .or_else(|_| sqlx::Row::try_get::<i64, _>(&row, 0).map(|v| v.to_string()))
            .unwrap()
    };
    assert_eq!(one("PRAGMA journal_mode").await, "wal");
    assert_eq!(one("PRAGMA busy_timeout").await, "5000");
    assert_eq!(one("PRAGMA synchronous").await, "1");
    assert_eq!(one("PRAGMA foreign_keys").await, "1");
    // Opening again finds the schema migrated and does nothing.
    store.close().await;
    Store::connect(&url).await.unwrap();
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused_with_the_reason() {
    // The pool alone retried the connection until its timeout and then said only that it had
    // timed out; the first connection, made apart, says what is wrong with the file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.db");
    std::fs::write(&path, vec![0x5a_u8; 64 * 1024]).unwrap();
    let url = format!("sqlite://{}", path.display());
    let e = Store::connect(&url).await.expect_err("refused");
    assert!(matches!(e, StoreError::Connect { .. }), "{e:?}");
    let why = e.to_string();
    assert!(why.contains("not a database"), "{why}");
    assert!(!why.contains("timed out"), "{why}");
}

#[tokio::test]
async fn in_memory_sqlite_is_one_database() {
    let store = Store::connect("sqlite::memory:").await.unwrap();
    let id = store
        .enqueue_job("fit", &serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(store.job(id).await.unwrap().state, JobState::Queued);
}

#[tokio::test]
async fn sqlite_urls_without_a_mode_create_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    Store::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    assert!(path.exists());
}

#[tokio::test]
async fn unknown_urls_are_refused() {
    let err = Store::connect("mysql://u:pw@h/db").await.unwrap_err();
    assert!(matches!(err, StoreError::BadUrl { .. }));
}

#[test]
fn both_dialects_have_the_same_migrations() {
    let sqlite: Vec<_> = crate::SQLITE_MIGRATIONS
        .iter()
        .map(|m| (m.0, m.1))
        .collect();
    let postgres: Vec<_> = crate::POSTGRES_MIGRATIONS
        .iter()
        .map(|m| (m.0, m.1))
        .collect();
    assert_eq!(sqlite, postgres);
    // Every file in the folders is compiled in.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations");
    for dialect in ["sqlite", "postgres"] {
        let files = std::fs::read_dir(root.join(dialect)).unwrap().count();
        assert_eq!(files, sqlite.len(), "migrations/{dialect}");
    }
}

/// A locked study version runs as numbered generations; each has its own runs (the same kind and
/// label again), records name theirs, and a run names who executed it.
async fn generations_keep_runs_apart(store: Store) {
    locked_study(&store).await;
    let g1 = store
        .new_generation(
            "support",
            1,
            Trigger::Manual,
            &serde_json::json!({"max_tokens": 8}),
        )
        .await
        .unwrap();
    let g2 = store
        .new_generation("support", 1, Trigger::Schedule, &serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!((g1.number, g2.number), (1, 2));
    let spec = |generation| RunSpec {
        study: "support".to_owned(),
        study_version: 1,
        generation,
        candidate: "small".to_owned(),
        kind: RunKind::Quality,
        label: "quality".to_owned(),
    };
    let r1 = store.open_run(&spec(1)).await.unwrap();
    let r2 = store.open_run(&spec(2)).await.unwrap();
    assert_ne!(
        r1.id, r2.id,
        "the same run of another generation is another row"
    );
    assert_eq!(r2.trigger, Trigger::Schedule);
    assert!(r2.executor.is_none());
    store.start_run(r2.id, &executor()).await.unwrap();
    let started = store.run(r2.id).await.unwrap();
    assert_eq!(started.executor, Some(executor()));
    assert_eq!(started.generation, 2);
    assert_eq!(
        store
            .runs_of_generation("support", 1, 1)
            .await
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect::<Vec<_>>(),
        [r1.id]
    );
    let listed = store.generations("support", 1).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].params["max_tokens"], 8);
    assert!(matches!(
        store.open_run(&spec(0)).await,
        Err(StoreError::Invalid {
            field: "generation",
            ..
        })
    ));

    // Case errors are not results: listed apart, cleared once answered.
    store
        .put_case_error(r2.id, "c1", 3, "connection refused")
        .await
        .unwrap();
    store
        .put_case_error(r2.id, "c1", 2, "HTTP 503")
        .await
        .unwrap();
    assert_eq!(
        store.case_errors(r2.id).await.unwrap(),
        [("c1".to_owned(), 2, "HTTP 503".to_owned())]
    );
    assert_eq!(
        store.case_error(r2.id, "c1").await.unwrap(),
        Some((2, "HTTP 503".to_owned()))
    );
    assert_eq!(store.case_error(r2.id, "c2").await.unwrap(), None);
    assert!(store.finished_cases(r2.id).await.unwrap().is_empty());
    store.clear_case_error(r2.id, "c1").await.unwrap();
    assert!(store.case_errors(r2.id).await.unwrap().is_empty());
    assert_eq!(store.case_error(r2.id, "c1").await.unwrap(), None);
}
contract!(generations_keep_runs_apart);

/// A read of some generations (a page's newest few, a record of one) gets theirs alone, the same
/// rows a read of all of them has; the newest generation with jobs is found without them.
async fn generation_spans_read_only_their_generations(store: Store) {
    let locked = locked_study(&store).await;
    assert_eq!(
        store.latest_job_generation("support", 1).await.unwrap(),
        None
    );
    for g in 1..=4u32 {
        store
            .new_generation("support", 1, Trigger::Schedule, &serde_json::json!({}))
            .await
            .unwrap();
        let job = store
            .enqueue(&NewJob {
                generation: g,
                ..new_job("fit", None, None, 0)
            })
            .await
            .unwrap();
        for step in 0..3 {
            store
                .put_progress(
                    job,
                    i64::from(g * 10 + step),
                    &serde_json::json!({"g": g, "step": step}),
                )
                .await
                .unwrap();
        }
        store
            .open_run(&RunSpec {
                study: "support".to_owned(),
                study_version: 1,
                generation: g,
                candidate: "small".to_owned(),
                kind: RunKind::Fit,
                label: "memory".to_owned(),
            })
            .await
            .unwrap();
        let mut rec = record(&locked);
        rec.machine = format!("night {g}");
        store.put_record(&rec.seal(), g).await.unwrap();
    }
    assert_eq!(
        store.latest_job_generation("support", 1).await.unwrap(),
        Some(4)
    );
    assert_eq!(
        store.latest_job_generation("support", 2).await.unwrap(),
        None
    );
    let span = GenerationSpan { first: 2, last: 3 };
    let jobs = store.jobs_of_study_in("support", 1, span).await.unwrap();
    assert_eq!(
        jobs.iter().map(|j| j.generation).collect::<Vec<_>>(),
        [Some(2), Some(3)]
    );
    let all_jobs = store.jobs_of_study("support", 1).await.unwrap();
    assert_eq!(all_jobs.len(), 4);
    assert_eq!(jobs, all_jobs[1..3]);
    // Each job's newest event, whichever span asks.
    let latest = store.latest_progress_in("support", 1, span).await.unwrap();
    assert_eq!(
        latest
            .iter()
            .map(|p| (p.event["g"].clone(), p.event["step"].clone()))
            .collect::<Vec<_>>(),
        [
            (serde_json::json!(2), serde_json::json!(2)),
            (serde_json::json!(3), serde_json::json!(2))
        ]
    );
    assert_eq!(
        latest,
        store.latest_progress("support", 1).await.unwrap()[1..3]
    );
    let runs = store
        .runs_of_study_in("support", 1, GenerationSpan::only(4))
        .await
        .unwrap();
    assert_eq!(runs.iter().map(|r| r.generation).collect::<Vec<_>>(), [4]);
    assert_eq!(store.runs_of_study("support", 1).await.unwrap().len(), 4);
    assert_eq!(
        store.runs_of_generation("support", 1, 2).await.unwrap()[0].generation,
        2
    );
    let records = store.records_of_study_in("support", 1, span).await.unwrap();
    assert_eq!(
        records.iter().map(|r| r.generation).collect::<Vec<_>>(),
        [2, 3]
    );
    assert_eq!(store.records_of_study("support", 1).await.unwrap().len(), 4);
    let third = store
        .record_of_generation("support", 1, "small", 3)
        .await
        .unwrap();
    assert_eq!(
        (third.generation, third.record.machine.as_str()),
        (3, "night 3")
    );
    assert!(
        store
            .record_of_generation("support", 1, "small", 5)
            .await
            .is_err()
    );
    // Every generation: rows from before generations were numbered too.
    assert_eq!(
        store
            .jobs_of_study_in("support", 1, GenerationSpan::ALL)
            .await
            .unwrap(),
        all_jobs
    );
}
contract!(generation_spans_read_only_their_generations);

/// A job waits for the one it depends on (until that one is done or failed for good), a retried
/// job waits for its backoff, a released one keeps its attempt, and progress events follow.
async fn job_dependencies_backoff_and_progress(store: Store) {
    let new = |kind: &str, depends_on| NewJob {
        kind: kind.to_owned(),
        payload: serde_json::json!({"kind": kind}),
        study: "support".to_owned(),
        study_version: 1,
        generation: 1,
        candidate: "small".to_owned(),
        depends_on,
        max_attempts: 3,
        group: None,
        waits_for_group: None,
        priority: 0,
    };
    let fit = store.enqueue(&new("fit", None)).await.unwrap();
    let quality = store.enqueue(&new("quality", Some(fit))).await.unwrap();
    let claimed = store.claim_next_job("w").await.unwrap().unwrap();
    assert_eq!(claimed.id, fit);
    assert_eq!(claimed.study.as_deref(), Some("support"));
    assert_eq!(claimed.depends_on, None);
    assert!(
        store.claim_next_job("w2").await.unwrap().is_none(),
        "quality waits for fit"
    );
    // Progress of the running job, readable by any process.
    for (i, done) in [1, 2].into_iter().enumerate() {
        store
            .put_progress(fit, 1_000 + i as i64, &serde_json::json!({"done": done}))
            .await
            .unwrap();
    }
    let after = store.progress_after("support", 1, 0, 10).await.unwrap();
    assert_eq!(after.len(), 2);
    assert_eq!(after[1].event["done"], 2);
    let latest = store.latest_progress("support", 1).await.unwrap();
    assert_eq!(
        (latest.len(), latest[0].event["done"].clone()),
        (1, serde_json::json!(2))
    );
    assert!(
        store
            .progress_after("support", 1, after[1].id, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // A transient failure: back to the queue, but not before its backoff.
    assert_eq!(
        store
            .fail_job(fit, "w", "busy", Retry::After(Duration::from_secs(3600)))
            .await
            .unwrap(),
        JobState::Queued
    );
    assert!(store.claim_next_job("w").await.unwrap().is_none());
    let job = store.job(fit).await.unwrap();
    assert!(job.not_before_ms.is_some());
    assert_eq!(job.last_error.as_deref(), Some("busy"));
    // Bad input fails for good; the job waiting for it may then run.
    let fit2 = store.enqueue(&new("fit", None)).await.unwrap();
    let q2 = store.enqueue(&new("quality", Some(fit2))).await.unwrap();
    assert_eq!(store.claim_next_job("w").await.unwrap().unwrap().id, fit2);
    store
        .fail_job(fit2, "w", "no such file", Retry::Never)
        .await
        .unwrap();
    let next = store.claim_next_job("w").await.unwrap().unwrap();
    assert_eq!(next.id, q2);
    assert_ne!(
        next.id, quality,
        "the first quality still waits for its fit"
    );
    // Released (the worker stops between cases): queued again, the attempt not counted.
    store.release_job(q2, "w").await.unwrap();
    let again = store.job(q2).await.unwrap();
    assert_eq!((again.state, again.attempts), (JobState::Queued, 0));
    assert_eq!(store.jobs_of_study("support", 1).await.unwrap().len(), 4);
}
contract!(job_dependencies_backoff_and_progress);

/// A job of study `support` v1 generation 1, candidate `small`, tried once.
fn new_job(kind: &str, group: Option<&str>, waits: Option<&str>, priority: i64) -> NewJob {
    NewJob {
        kind: kind.to_owned(),
        payload: serde_json::json!({}),
        study: "support".to_owned(),
        study_version: 1,
        generation: 1,
        candidate: "small".to_owned(),
        depends_on: None,
        max_attempts: 1,
        group: group.map(str::to_owned),
        waits_for_group: waits.map(str::to_owned),
        priority,
    }
}

/// The shards of a quality run share a group; the job after them is claimable only once every
/// shard is done or failed, while the shards themselves run side by side.
async fn a_job_waits_for_its_whole_group(store: Store) {
    let job = |kind: &str, group: Option<&str>, waits: Option<&str>| new_job(kind, group, waits, 0);
    let a = store
        .enqueue(&job("quality", Some("q"), None))
        .await
        .unwrap();
    let b = store
        .enqueue(&job("quality", Some("q"), None))
        .await
        .unwrap();
    let load = store.enqueue(&job("load", None, Some("q"))).await.unwrap();
    let first = store.claim_next_job("w1").await.unwrap().unwrap();
    let second = store.claim_next_job("w2").await.unwrap().unwrap();
    assert_eq!((first.id, second.id), (a, b), "the shards run side by side");
    assert!(store.claim_next_job("w3").await.unwrap().is_none());
    store.complete_job(a, "w1").await.unwrap();
    assert!(
        store.claim_next_job("w3").await.unwrap().is_none(),
        "one shard is still running"
    );
    store
        .fail_job(b, "w2", "gave up", Retry::Never)
        .await
        .unwrap();
    assert_eq!(store.claim_next_job("w3").await.unwrap().unwrap().id, load);
}
contract!(a_job_waits_for_its_whole_group);

/// A job of a higher priority is claimed before older queued jobs (the parts of a split load
/// step); jobs of one priority go oldest first.
async fn a_higher_priority_job_is_claimed_first(store: Store) {
    let job = |priority: i64| new_job("load_part", None, None, priority);
    let old = store.enqueue(&job(0)).await.unwrap();
    let older_urgent = store.enqueue(&job(1)).await.unwrap();
    let newer_urgent = store.enqueue(&job(1)).await.unwrap();
    let mut order = Vec::new();
    while let Some(j) = store.claim_next_job("w").await.unwrap() {
        order.push(j.id);
    }
    assert_eq!(order, vec![older_urgent, newer_urgent, old]);
}
contract!(a_higher_priority_job_is_claimed_first);

/// Worker `name` as the store lists it.
async fn seen(store: &Store, name: &str) -> crate::workers::WorkerRow {
    let rows = store.workers_seen_since(0).await.unwrap();
    rows.into_iter().find(|w| w.name == name).unwrap()
}

/// Workers say when they start, that they are alive, and when they stop; a row's beat tells a
/// live worker from a gone one. The queue is counted by state with its oldest queued job.
async fn workers_are_seen_and_the_queue_counted(store: Store) {
    use crate::workers::QueueCounts;

    assert_eq!(store.queue_counts().await.unwrap(), QueueCounts::default());
    assert!(
        !store.worker_seen("w1").await.unwrap(),
        "an unknown worker is told so"
    );
    let machine = serde_json::json!({"host": "h1", "cores": 2});
    store
        .worker_started("w1", "h1", &machine, Duration::from_secs(10))
        .await
        .unwrap();
    store
        .worker_started(
            "w2",
            "h2",
            &serde_json::json!({}),
            Duration::from_millis(20),
        )
        .await
        .unwrap();
    assert!(store.worker_seen("w1").await.unwrap());
    let rows = store.workers_seen_since(0).await.unwrap();
    let names: BTreeSet<_> = rows.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["w1", "w2"]));
    let w1 = rows.iter().find(|w| w.name == "w1").unwrap();
    assert_eq!(
        (w1.host.as_str(), &w1.machine, w1.beat_ms),
        ("h1", &machine, 10_000)
    );
    assert!(w1.alive_at(w1.seen_at_ms + 30_000) && !w1.alive_at(w1.seen_at_ms + 30_001));
    // A worker that stops is no longer alive, and its beats are refused until it starts again.
    store.worker_stopped("w2").await.unwrap();
    assert!(!store.worker_seen("w2").await.unwrap());
    let w2 = seen(&store, "w2").await;
    assert!(w2.stopped_at_ms.is_some() && !w2.alive_at(w2.seen_at_ms));
    store
        .worker_started("w2", "h3", &serde_json::json!({}), Duration::from_secs(1))
        .await
        .unwrap();
    let w2 = seen(&store, "w2").await;
    assert_eq!((w2.host.as_str(), w2.stopped_at_ms), ("h3", None));
    assert!(w2.alive_at(w2.seen_at_ms));
    assert!(
        store
            .workers_seen_since(w2.seen_at_ms + 1)
            .await
            .unwrap()
            .is_empty()
    );
    store
        .worker_started(" ", "h", &machine, Duration::from_secs(1))
        .await
        .unwrap_err();

    let a = store.enqueue(&new_job("fit", None, None, 0)).await.unwrap();
    let _b = store
        .enqueue(&new_job("quality", None, None, 0))
        .await
        .unwrap();
    let _c = store
        .enqueue(&new_job("load", None, None, 0))
        .await
        .unwrap();
    let oldest = store.job(a).await.unwrap().created_at_ms;
    let claimed = store.claim_next_job("w1").await.unwrap().unwrap();
    assert_eq!(claimed.id, a);
    store.complete_job(a, "w1").await.unwrap();
    let claimed = store.claim_next_job("w1").await.unwrap().unwrap();
    store
        .fail_job(claimed.id, "w1", "bad", Retry::Never)
        .await
        .unwrap();
    let third = store.claim_next_job("w1").await.unwrap().unwrap();
    let counts = store.queue_counts().await.unwrap();
    assert_eq!(
        (
            counts.queued,
            counts.running,
            counts.done,
            counts.failed,
            counts.cancelled
        ),
        (0, 1, 1, 1, 0)
    );
    assert_eq!(counts.oldest_queued_at_ms, None);
    // A job handed back waits from the hand-back, not from its creation.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let released_at = crate::now_ms();
    store.release_job(third.id, "w1").await.unwrap();
    let counts = store.queue_counts().await.unwrap();
    assert_eq!((counts.queued, counts.running), (1, 0));
    assert!(
        counts
            .oldest_queued_at_ms
            .is_some_and(|t| t >= released_at && t > oldest),
        "{:?} against a hand-back at {released_at} of jobs made from {oldest}",
        counts.oldest_queued_at_ms
    );
    assert_eq!(counts.of(JobState::Done), 1);
}
contract!(workers_are_seen_and_the_queue_counted);

/// Cancelling a generation fails its queued jobs now and marks its running ones: their worker
/// hears it with the next heartbeat, and whatever it then does — release, fail for a retry, or
/// die — the job fails with the reason and is never claimed again. Other generations run on.
async fn a_cancelled_generation_never_runs_again(store: Store) {
    let reason = "cancelled from the test at 2026-12-06T10:00:00Z";
    let of = |generation: u32, max_attempts: u32| NewJob {
        generation,
        max_attempts,
        ..new_job("quality", None, None, 0)
    };
    let running = store.enqueue(&of(1, 3)).await.unwrap();
    let queued = store.enqueue(&of(1, 3)).await.unwrap();
    let later = store.enqueue(&of(2, 3)).await.unwrap();
    assert_eq!(
        store.claim_next_job("w").await.unwrap().unwrap().id,
        running
    );
    assert_eq!(store.heartbeat_job(running, "w").await.unwrap(), None);

    let done = store.cancel_jobs("support", 1, 1, reason).await.unwrap();
    assert_eq!((done.failed, done.stopping), (vec![queued], vec![running]));
    let q = store.job(queued).await.unwrap();
    assert_eq!(q.state, JobState::Failed);
    assert_eq!(q.last_error.as_deref(), Some(reason));
    assert!(q.finished_at_ms.is_some());
    assert_eq!(
        store.heartbeat_job(running, "w").await.unwrap().as_deref(),
        Some(reason),
        "the worker hears of it with its heartbeat"
    );
    // The queue counts a cancelled job apart from the failed ones, and one still stopping as
    // running.
    let counted = || async {
        let c = store.queue_counts().await.unwrap();
        (
            c.queued,
            c.running,
            c.failed,
            c.cancelled,
            c.of(JobState::Failed),
        )
    };
    assert_eq!(counted().await, (1, 1, 0, 1, 1));
    // Asking again changes nothing.
    let again = store.cancel_jobs("support", 1, 1, "twice").await.unwrap();
    assert_eq!((again.failed.len(), again.stopping.len()), (0, 0));
    // Released by a worker that was stopping anyway: failed with the reason, not queued.
    store.release_job(running, "w").await.unwrap();
    let r = store.job(running).await.unwrap();
    assert_eq!(
        (r.state, r.last_error.as_deref(), r.attempts),
        (JobState::Failed, Some(reason), 1)
    );
    assert_eq!(counted().await, (1, 0, 0, 2, 2));
    // Only the other generation is claimed.
    assert_eq!(store.claim_next_job("w").await.unwrap().unwrap().id, later);
    assert!(store.claim_next_job("w").await.unwrap().is_none());
    store.complete_job(later, "w").await.unwrap();

    // A failure meant for a retry does not bring a cancelled job back.
    let retried = store.enqueue(&of(3, 3)).await.unwrap();
    store.claim_next_job("w").await.unwrap().unwrap();
    store.cancel_jobs("support", 1, 3, reason).await.unwrap();
    let state = store
        .fail_job(
            retried,
            "w",
            "connection reset",
            Retry::After(Duration::ZERO),
        )
        .await
        .unwrap();
    assert_eq!(state, JobState::Failed);
    // Nor does its worker's death: the stale job fails with the reason.
    let orphan = store.enqueue(&of(4, 3)).await.unwrap();
    store.claim_next_job("dead").await.unwrap().unwrap();
    store.cancel_jobs("support", 1, 4, reason).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (requeued, failed) = store.requeue_stale_jobs(Duration::ZERO).await.unwrap();
    assert_eq!((requeued, failed), (0, 1));
    let o = store.job(orphan).await.unwrap();
    assert_eq!(
        (o.state, o.last_error.as_deref()),
        (JobState::Failed, Some(reason))
    );
    // The other generation's job was never touched.
    assert_eq!(store.job(later).await.unwrap().state, JobState::Done);
}
contract!(a_cancelled_generation_never_runs_again);

/// A job that fails for good ends its unfinished runs with it — failed with its error, stamped
/// when it was cancelled — however it failed: its worker gave up, it was cancelled and handed
/// back, its worker died. A failure meant for a retry, other generations' runs and finished
/// runs are left as they are; a run started again loses the stamp.
async fn a_job_that_fails_ends_its_runs(store: Store) {
    locked_study(&store).await;
    let reason = "cancelled from the test at 2026-12-06T10:00:00Z";
    let spec = |generation: u32, kind: RunKind, label: &str| RunSpec {
        study: "support".to_owned(),
        study_version: 1,
        generation,
        candidate: "small".to_owned(),
        kind,
        label: label.to_owned(),
    };
    let job = |kind: &str, generation: u32, max_attempts: u32| NewJob {
        generation,
        max_attempts,
        ..new_job(kind, None, None, 0)
    };
    let started = |spec: RunSpec| {
        let store = store.clone();
        async move {
            let run = store.open_run(&spec).await.unwrap();
            store.start_run(run.id, &executor()).await.unwrap();
            run.id
        }
    };
    let state = |id: i64| {
        let store = store.clone();
        async move {
            let r = store.run(id).await.unwrap();
            (
                r.state,
                r.error,
                r.cancelled_at_ms.is_some(),
                r.finished_at_ms.is_some(),
            )
        }
    };

    // Generation 1's quality job: a retryable failure keeps its run going; the last one ends it.
    let quality = store.enqueue(&job("quality", 1, 2)).await.unwrap();
    let other = started(spec(9, RunKind::Quality, "quality")).await;
    store.claim_next_job("w").await.unwrap().unwrap();
    let q1 = started(spec(1, RunKind::Quality, "quality")).await;
    store
        .fail_job(quality, "w", "reset", Retry::After(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(state(q1).await, (RunState::Running, None, false, false));
    store.claim_next_job("w").await.unwrap().unwrap();
    store
        .fail_job(quality, "w", "boom", Retry::Never)
        .await
        .unwrap();
    assert_eq!(
        state(q1).await,
        (RunState::Failed, Some("boom".to_owned()), false, true)
    );
    assert_eq!(state(other).await, (RunState::Running, None, false, false));

    // Generation 2's load job, cancelled while its sweep runs: its target run stays done.
    let load = store.enqueue(&job("load", 2, 3)).await.unwrap();
    store.claim_next_job("w").await.unwrap().unwrap();
    let target = started(spec(2, RunKind::Load, "target")).await;
    store.finish_run(target, Ok(())).await.unwrap();
    let sweep = started(spec(2, RunKind::Sweep, "sweep")).await;
    store.cancel_jobs("support", 1, 2, reason).await.unwrap();
    assert_eq!(
        state(sweep).await.0,
        RunState::Running,
        "until its worker stops"
    );
    store.release_job(load, "w").await.unwrap();
    assert_eq!(
        state(sweep).await,
        (RunState::Failed, Some(reason.to_owned()), true, true)
    );
    assert_eq!(state(target).await, (RunState::Done, None, false, true));
    // Retried, it starts again: running, no error, no stamp, not finished.
    store.start_run(sweep, &executor()).await.unwrap();
    assert_eq!(state(sweep).await, (RunState::Running, None, false, false));

    // Generation 3's fit job, its worker gone: out of attempts, it fails and so does its run.
    store.enqueue(&job("fit", 3, 1)).await.unwrap();
    store.claim_next_job("dead").await.unwrap().unwrap();
    let fit = started(spec(3, RunKind::Fit, "memory")).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(
        store.requeue_stale_jobs(Duration::ZERO).await.unwrap(),
        (0, 1)
    );
    let (s, error, cancelled, finished) = state(fit).await;
    assert_eq!((s, cancelled, finished), (RunState::Failed, false, true));
    assert!(error.is_some_and(|e| e.contains("stale heartbeat")));

    // Generation 4's job, cancelled while queued (handed back with its run started before).
    let queued = store.enqueue(&job("quality", 4, 3)).await.unwrap();
    store.claim_next_job("w").await.unwrap().unwrap();
    let q4 = started(spec(4, RunKind::Quality, "quality")).await;
    store.release_job(queued, "w").await.unwrap();
    assert_eq!(state(q4).await.0, RunState::Running);
    let done = store.cancel_jobs("support", 1, 4, reason).await.unwrap();
    assert_eq!(done.failed, vec![queued]);
    assert_eq!(
        state(q4).await,
        (RunState::Failed, Some(reason.to_owned()), true, true)
    );
    assert_eq!(state(other).await.0, RunState::Running);
}
contract!(a_job_that_fails_ends_its_runs);

/// Retrying a generation queues its failed jobs (cancelled ones too) as new, and its finished
/// records to be made again; what finished otherwise, and other generations, stay.
async fn retrying_a_generation_queues_its_failures_and_its_records(store: Store) {
    let job = |kind: &str, generation: u32| NewJob {
        generation,
        max_attempts: 1,
        ..new_job(kind, None, None, 0)
    };
    let fit = store.enqueue(&job("fit", 1)).await.unwrap();
    let quality = store.enqueue(&job("quality", 1)).await.unwrap();
    let load = store.enqueue(&job("load", 1)).await.unwrap();
    let record = store.enqueue(&job("record", 1)).await.unwrap();
    let elsewhere = store.enqueue(&job("quality", 2)).await.unwrap();
    // Whether retrying the generation now would queue nothing.
    let nothing_to_retry = async || {
        store
            .retry_failed_jobs("support", 1, 1, &["record"])
            .await
            .unwrap()
            .is_empty()
    };
    assert!(nothing_to_retry().await, "nothing failed yet");
    for (id, outcome) in [
        (fit, Ok(())),
        (quality, Err("boom")),
        (load, Err("boom")),
        (record, Ok(())),
        (elsewhere, Err("boom")),
    ] {
        assert_eq!(store.claim_next_job("w").await.unwrap().unwrap().id, id);
        match outcome {
            Ok(()) => store.complete_job(id, "w").await.unwrap(),
            Err(why) => {
                store.fail_job(id, "w", why, Retry::Never).await.unwrap();
            }
        }
    }
    store
        .cancel_jobs("support", 1, 1, "cancelled")
        .await
        .unwrap();
    let created = store.job(quality).await.unwrap().created_at_ms;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let retried_at = crate::now_ms();
    let again = store
        .retry_failed_jobs("support", 1, 1, &["record"])
        .await
        .unwrap();
    assert_eq!(again, vec![quality, load, record]);
    // The queue counts their wait from the retry, not from when the generation was made.
    let oldest = store.queue_counts().await.unwrap().oldest_queued_at_ms;
    assert!(
        oldest.is_some_and(|t| t >= retried_at && t > created),
        "{oldest:?} against a retry at {retried_at} of jobs made at {created}"
    );
    for id in [quality, load, record] {
        let j = store.job(id).await.unwrap();
        assert_eq!(
            (
                j.state,
                j.attempts,
                j.last_error,
                j.cancel_reason,
                j.finished_at_ms
            ),
            (JobState::Queued, 0, None, None, None),
            "job {id}"
        );
    }
    assert_eq!(store.job(fit).await.unwrap().state, JobState::Done);
    assert_eq!(store.job(elsewhere).await.unwrap().state, JobState::Failed);
    // They run again, in their order.
    assert_eq!(
        store.claim_next_job("w").await.unwrap().unwrap().id,
        quality
    );
    assert!(nothing_to_retry().await, "nothing of it failed now");
}
contract!(retrying_a_generation_queues_its_failures_and_its_records);

/// A gang starts once, only when every part joined, and never after it was called off; each
/// part stores its records under the worker that joined as it.
async fn a_gang_starts_once_all_parts_joined(store: Store) {
    locked_study(&store).await;
    let run = store
        .open_run(&RunSpec {
            study: "support".to_owned(),
            study_version: 1,
            generation: 1,
            candidate: "small".to_owned(),
            kind: RunKind::Load,
            label: "target".to_owned(),
        })
        .await
        .unwrap();
    let leader = store
        .enqueue_job("load", &serde_json::json!({}))
        .await
        .unwrap();
    let younger = store
        .enqueue_job("load", &serde_json::json!({}))
        .await
        .unwrap();
    assert!(matches!(
        store
            .open_gang("g1", run.id, "target", 1, (leader, 1))
            .await,
        Err(StoreError::Invalid { field: "parts", .. })
    ));
    store
        .open_gang("g1", run.id, "target", 3, (leader, 1))
        .await
        .unwrap();
    assert!(
        store
            .open_gang("g1", run.id, "target", 3, (leader, 1))
            .await
            .is_err()
    );
    // Gathering, with a part nobody claimed yet: a younger leader gives way, an older does not.
    store
        .enqueue(&new_job("load_part", Some("g1"), None, 1))
        .await
        .unwrap();
    assert!(store.older_gang_gathering(younger).await.unwrap());
    assert!(!store.older_gang_gathering(leader).await.unwrap());
    store.join_gang("g1", 0, "a").await.unwrap();
    store.join_gang("g1", 2, "c").await.unwrap();
    assert!(matches!(
        store.join_gang("g1", 3, "d").await,
        Err(StoreError::Invalid { field: "part", .. })
    ));
    assert!(
        !store.start_gang("g1", 1_000).await.unwrap(),
        "part 1 is missing"
    );
    store.join_gang("g1", 1, "b").await.unwrap();
    let g = store.gang("g1").await.unwrap();
    assert!(g.gathered());
    assert_eq!(g.all_records(), None, "nothing sent yet");
    assert!(store.start_gang("g1", 1_000).await.unwrap());
    assert!(
        !store.start_gang("g1", 2_000).await.unwrap(),
        "started once"
    );
    assert!(
        !store.cancel_gang("g1", "late").await.unwrap(),
        "too late to call it off"
    );
    assert!(
        store.store_gang_records("g1", 1, "c", "x").await.is_err(),
        "c is part 2"
    );
    for (part, worker) in [(0, "a"), (1, "b"), (2, "c")] {
        store
            .store_gang_records("g1", part, worker, &format!("records {part}"))
            .await
            .unwrap();
    }
    let g = store.gang("g1").await.unwrap();
    assert_eq!(g.start_at_ms, Some(1_000));
    assert_eq!(
        g.all_records(),
        Some(vec!["records 0", "records 1", "records 2"])
    );
    assert!(
        !store.older_gang_gathering(younger).await.unwrap(),
        "g1 has started"
    );
    let g = store.gang("g1").await.unwrap();
    assert_eq!((g.leader_job, g.leader_try, g.parts), (leader, 1, 3));
    // Called off before it gathered: it never starts.
    store
        .open_gang("g2", run.id, "target", 2, (leader, 2))
        .await
        .unwrap();
    store.join_gang("g2", 0, "a").await.unwrap();
    assert!(
        store
            .cancel_gang("g2", "part 1 was not claimed")
            .await
            .unwrap()
    );
    store.join_gang("g2", 1, "b").await.unwrap();
    assert!(!store.start_gang("g2", 1_000).await.unwrap());
    let g = store.gang("g2").await.unwrap();
    assert_eq!(g.cancelled.as_deref(), Some("part 1 was not claimed"));
    assert_eq!(g.start_at_ms, None);
    assert!(
        !store.halt_gang("g2", "again").await.unwrap(),
        "called off once"
    );
    // Halted mid-step: its start stays, the first reason is kept.
    assert!(store.halt_gang("g1", "part 2 was cancelled").await.unwrap());
    assert!(!store.halt_gang("g1", "part 1 stopped").await.unwrap());
    let g = store.gang("g1").await.unwrap();
    assert_eq!(
        (g.start_at_ms, g.cancelled.as_deref()),
        (Some(1_000), Some("part 2 was cancelled"))
    );
}
contract!(a_gang_starts_once_all_parts_joined);

/// On PostgreSQL every stored progress event is announced (LISTEN/NOTIFY) with its job's id, to
/// a listener on a connection of its own; SQLite offers none, and its readers poll.
async fn stored_progress_is_announced(store: Store) {
    let listener = store.listen_progress().await.unwrap();
    let Some(mut listener) = listener else {
        assert_eq!(store.backend(), crate::Backend::Sqlite);
        return;
    };
    assert_eq!(store.backend(), crate::Backend::Postgres);
    let job = store
        .enqueue_job("quality", &serde_json::json!({}))
        .await
        .unwrap();
    // Nothing stored yet: nothing announced.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), listener.next())
            .await
            .is_err()
    );
    store
        .put_progress(job, 1, &serde_json::json!({"done": 1}))
        .await
        .unwrap();
    let announced = tokio::time::timeout(Duration::from_secs(10), listener.next())
        .await
        .expect("announced within 10 s")
        .unwrap();
    assert_eq!(announced, job);
}
contract!(stored_progress_is_announced);

/// A database written by the schema before generations (version 1) upgrades in place when it is
/// opened: its runs become generation 1, its records and jobs keep everything, nothing is lost.
async fn schedules_and_ticks_claimed_once(store: Store) {
    use crate::schedules::{NewSchedule, ScheduleWhat, TickState};
    let new = NewSchedule {
        name: "nightly",
        study: "support",
        study_version: None,
        cron: "0 3 * * *",
        tz: "Europe/Berlin",
        what: ScheduleWhat::All,
        candidates: &["a".to_owned(), "b".to_owned()],
        from_ms: 1_000,
    };
    let s = store.add_schedule(&new).await.unwrap();
    assert_eq!(
        (s.candidates.len(), s.enabled, s.what),
        (2, true, ScheduleWhat::All)
    );
    let taken = store.add_schedule(&new).await.unwrap_err().to_string();
    assert!(
        taken.contains("a schedule named `nightly` exists"),
        "{taken}"
    );
    store.set_schedule_enabled("nightly", false).await.unwrap();
    assert!(!store.schedule("nightly").await.unwrap().enabled);
    store.set_schedule_enabled("nightly", true).await.unwrap();
    assert!(store.set_schedule_enabled("nope", true).await.is_err());
    assert_eq!(store.schedules().await.unwrap().len(), 1);

    // Eight claimants of one due instant at once: exactly one wins.
    let claims: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .claim_tick(s.id, 86_400_000, TickState::Started, &format!("w{i}"))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut won = 0;
    for c in claims {
        won += usize::from(c.await.unwrap());
    }
    assert_eq!(won, 1);
    assert!(
        store
            .claim_tick(s.id, 1_000, TickState::Skipped, "w")
            .await
            .unwrap()
    );
    store
        .finish_tick(s.id, 86_400_000, TickState::Started, Some((2, 5)), None)
        .await
        .unwrap();
    assert_eq!(store.last_tick_ms(s.id).await.unwrap(), Some(86_400_000));
    let ticks = store.ticks(s.id, 10).await.unwrap();
    assert_eq!(ticks.len(), 2);
    assert_eq!(
        (ticks[0].study_version, ticks[0].generation),
        (Some(2), Some(5))
    );
    assert_eq!(ticks[1].state, TickState::Skipped);
    store.remove_schedule("nightly").await.unwrap();
    assert!(store.schedule("nightly").await.is_err());
    assert_eq!(store.last_tick_ms(s.id).await.unwrap(), None);
}
contract!(schedules_and_ticks_claimed_once);

async fn nights_checked_once_and_webhooks_disabled_after_five_failures(store: Store) {
    use crate::notify::MAX_CONSECUTIVE_FAILURES;
    use crate::schedules::{NewSchedule, ScheduleWhat, TickState};
    let s = store
        .add_schedule(&NewSchedule {
            name: "nightly",
            study: "support",
            study_version: Some(1),
            cron: "0 3 * * *",
            tz: "UTC",
            what: ScheduleWhat::Quality,
            candidates: &[],
            from_ms: 0,
        })
        .await
        .unwrap();
    let hook = store
        .add_webhook("nightly", "http://127.0.0.1:9/hook", "0123456789abcdef")
        .await
        .unwrap();
    assert_eq!((hook.enabled, hook.failures, hook.pending), (true, 0, 0));
    let again = store
        .add_webhook("nightly", "http://127.0.0.1:9/hook", "0123456789abcdef")
        .await
        .unwrap_err()
        .to_string();
    assert!(again.contains("already notifies"), "{again}");
    assert!(
        store
            .claim_tick(s.id, 5, TickState::Started, "a")
            .await
            .unwrap()
    );
    store
        .finish_tick(s.id, 5, TickState::Started, Some((1, 1)), None)
        .await
        .unwrap();
    assert_eq!(store.unchecked_ticks().await.unwrap().len(), 1);
    // Four schedulers file the same night at once: one files it and its delivery.
    let filings: Vec<_> = (0..4)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .file_check(s.id, 5, "ok", &format!("{{\"n\": {i}}}"))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut filed = 0;
    for f in filings {
        filed += usize::from(f.await.unwrap());
    }
    assert_eq!(filed, 1);
    assert!(store.unchecked_ticks().await.unwrap().is_empty());
    let night = &store.ticks(s.id, 1).await.unwrap()[0];
    assert_eq!(night.verdict.as_deref(), Some("ok"));
    assert!(
        night
            .report
            .as_deref()
            .is_some_and(|r| r.starts_with("{\"n\": "))
    );
    // Two passes at once claim the delivery once; while claimed it is not due.
    let now = crate::now_ms() + 1_000;
    let (a, b) = tokio::join!(
        store.claim_deliveries(now, 30_000, 10),
        store.claim_deliveries(now, 30_000, 10)
    );
    assert_eq!(a.unwrap().len() + b.unwrap().len(), 1);
    assert!(
        store
            .claim_deliveries(now + 1_000, 30_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Five consecutive failures disable the webhook; nothing is due to a disabled one.
    for i in 0..MAX_CONSECUTIVE_FAILURES {
        let d = store.claim_deliveries(i64::MAX / 2, 0, 10).await.unwrap();
        assert_eq!(d.len(), 1, "attempt {i}");
        let disabled = store.delivery_failed(&d[0], "HTTP 500", 0).await.unwrap();
        assert_eq!(disabled, i + 1 == MAX_CONSECUTIVE_FAILURES, "attempt {i}");
    }
    let w = &store.webhooks(s.id).await.unwrap()[0];
    assert_eq!((w.enabled, w.failures, w.pending), (false, 5, 1));
    assert!(
        store
            .claim_deliveries(i64::MAX / 2, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Enabled by hand: due again, and a success resets the count.
    store
        .enable_webhook("nightly", "http://127.0.0.1:9/hook")
        .await
        .unwrap();
    let d = store.claim_deliveries(i64::MAX / 2, 0, 10).await.unwrap();
    assert_eq!((d.len(), d[0].attempts), (1, 5));
    store.delivered(&d[0]).await.unwrap();
    let w = &store.webhooks(s.id).await.unwrap()[0];
    assert_eq!(
        (w.enabled, w.failures, w.pending, w.last_error.clone()),
        (true, 0, 0, None)
    );
    store.remove_schedule("nightly").await.unwrap();
}
contract!(nights_checked_once_and_webhooks_disabled_after_five_failures);

async fn upgrade_in_place(url: String) {
    let old = Store::connect_at_schema(&url, 1).await;
    let locked = locked_study(&old).await;
    let exec = |sql: String| {
        let pool = old.pool().clone();
        async move { pool.execute(AssertSqlSafe(sql)).await.unwrap() }
    };
    let study_id: i64 = {
        use sqlx::Row as _;
        sqlx::query("SELECT id FROM studies WHERE name = 'support'")
            .fetch_one(old.pool())
            .await
            .unwrap()
            .get(0)
    };
    exec(format!(
        "INSERT INTO runs (study_id, candidate, kind, label, state, created_at_ms, started_at_ms, \
         finished_at_ms) VALUES ({study_id}, 'small', 'quality', 'quality', 'done', 1, 2, 3)"
    ))
    .await;
    exec(
        "INSERT INTO case_results (run_id, case_id, passed, output, scores_json, input_tokens, \
         output_tokens, latency_s, created_at_ms) VALUES (1, 'c1', 1, 'Paris', '{}', 10, 2, 0.5, 4)"
            .to_owned(),
    )
    .await;
    let rec = record(&locked);
    let json = serde_json::to_string(&rec).unwrap().replace('\'', "''");
    exec(format!(
        "INSERT INTO selection_records (study_id, candidate, record_json, record_sha256, \
         created_at_ms) VALUES ({study_id}, 'small', '{json}', '{}', 5)",
        rec.record_sha256
    ))
    .await;
    exec(
        "INSERT INTO jobs (kind, payload_json, state, attempts, max_attempts, created_at_ms) \
         VALUES ('record', '{\"study\":\"support\",\"version\":1,\"candidate\":\"small\",\"max_tokens\":8}', \
         'done', 1, 3, 6)"
            .to_owned(),
    )
    .await;
    old.close().await;

    let store = Store::connect(&url).await.unwrap();
    store.verify_study("support", 1).await.unwrap();
    let runs = store.runs_of_study("support", 1).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        (
            runs[0].generation,
            runs[0].trigger,
            runs[0].state,
            runs[0].started_at_ms
        ),
        (1, Trigger::Manual, RunState::Done, Some(2))
    );
    let cases = store.case_results(runs[0].id).await.unwrap();
    assert_eq!((cases.len(), cases[0].output.as_str()), (1, "Paris"));
    let generations = store.generations("support", 1).await.unwrap();
    assert_eq!(generations.len(), 1);
    assert_eq!(generations[0].number, 1);
    let kept = store.latest_record("support", 1, "small").await.unwrap();
    assert_eq!((kept.record, kept.generation), (rec, 1));
    let jobs = store.jobs_of_study("support", 1).await.unwrap();
    assert_eq!(
        jobs.len(),
        1,
        "the old job is found by its study, read from its payload"
    );
    assert_eq!(
        (jobs[0].candidate.as_deref(), jobs[0].generation),
        (Some("small"), Some(1))
    );
    // And the upgraded database takes the next generation's run beside the old one.
    let g2 = store
        .new_generation("support", 1, Trigger::Manual, &serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(g2.number, 2);
    let again = store
        .open_run(&RunSpec {
            study: "support".to_owned(),
            study_version: 1,
            generation: 2,
            candidate: "small".to_owned(),
            kind: RunKind::Quality,
            label: "quality".to_owned(),
        })
        .await
        .unwrap();
    assert_ne!(again.id, runs[0].id);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_upgrades_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("old.db").display());
    upgrade_in_place(url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_upgrades_in_place() {
    let Ok(admin_url) = std::env::var(POSTGRES_ENV) else {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED: postgres_upgrades_in_place: {POSTGRES_ENV} is not set. ***\n"
        );
        return;
    };
    let (admin, db, url) = fresh_postgres(&admin_url).await;
    let outcome = tokio::spawn(upgrade_in_place(url)).await;
    admin
        .execute(AssertSqlSafe(format!("DROP DATABASE {db} WITH (FORCE)")))
        .await
        .unwrap();
    outcome.unwrap();
}
