//! The application seam without a model: a study whose candidate is the mock endpoint with canned
//! answers (real passes, a real failure), driven through the service from inside a
//! multi-threaded tokio runtime, as the web app will: create → lock → request a run → worker
//! until idle → record; a second generation that leaves the first's record untouched; the mock
//! killed mid-run and restarted (a transient failure, retried and finished); a study that cannot
//! run refused before it runs; a history of generations read a few at a time.

use std::path::{Path, PathBuf};
use std::time::Duration;

use shortlist_evals::EvalSet;
use shortlist_loadgen::mock::{Answers, MockConfig, spawn_at};
use shortlist_runner::ErrorClass;
use shortlist_runner::config::Config;
use shortlist_runner::service::views::{RunProgress, Shown, StudyState};
use shortlist_runner::service::{Pick, RunParams, StudyService};
use shortlist_runner::worker::{Outcome, Worker};
use shortlist_study::record::Verdict;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/study")
        .join(name)
}

/// The mini study against `endpoint`, with a quick workload, in `dir`.
fn study_file(dir: &Path, endpoint: &str) -> PathBuf {
    let set_path = data("mini.yaml");
    let yaml = std::fs::read_to_string(&set_path).unwrap();
    let set = EvalSet::from_yaml("mini.yaml", &yaml).unwrap();
    // Paths in a study are relative to the study file: the eval set is referred to from `dir`.
    std::fs::copy(&set_path, dir.join("mini.yaml")).unwrap();
    let text = std::fs::read_to_string(data("mini.study.toml"))
        .unwrap()
        .replace("@EVALSET@", "mini.yaml")
        .replace("@SHA256@", set.sha256())
        .replace("@SOURCE@", endpoint)
        .replace("rate_rps = 0.5", "rate_rps = 8.0")
        .replace("peak_rps = 0.5", "peak_rps = 8.0")
        .replace("sweep_rps = [1.0, 2.0]", "sweep_rps = [16.0]");
    let path = dir.join("mini.study.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn answers() -> Answers {
    let path = data("mini.answers.jsonl");
    Answers::from_jsonl(
        "mini.answers.jsonl",
        &std::fs::read_to_string(path).unwrap(),
    )
    .unwrap()
}

async fn service(dir: &Path) -> StudyService {
    let mut config = Config::from_env(Some(1)).with_worker("test-worker");
    config.database_url = format!("sqlite://{}?mode=rwc", dir.join("s.db").display());
    StudyService::connect(config).await.unwrap()
}

fn mock(ttft_ms: u64) -> MockConfig {
    MockConfig {
        tokens: 8,
        ttft: Duration::from_millis(ttft_ms),
        itl: Duration::ZERO,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_study_runs_end_to_end_against_the_mock_in_two_generations() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, _mock) = spawn_at("127.0.0.1:0", mock(0), answers()).await.unwrap();
    let path = study_file(dir.path(), &format!("http://{addr}#mock"));
    let service = service(dir.path()).await;
    service.create_study(&path).await.unwrap();
    let lock = service
        .lock("mini", None, "2026-12-01T00:00:00Z")
        .await
        .unwrap();
    assert!(lock.locked_now);

    let params = RunParams {
        max_tokens: 16,
        ..RunParams::default()
    };
    let first = service.request_run("mini", None, &params).await.unwrap();
    assert_eq!(
        (first.generation, first.queued, first.resumed),
        (1, 4, false)
    );
    // Asking again while it is unfinished queues nothing (two clicks, one run).
    let again = service.request_run("mini", None, &params).await.unwrap();
    assert_eq!(
        (again.generation, again.queued, again.resumed),
        (1, 0, true)
    );

    let worker = Worker::new(service.clone());
    let outcomes = worker.run_until_idle(None, |_| {}).await.unwrap();
    let kinds: Vec<String> = outcomes
        .iter()
        .map(|o| match o {
            Outcome::Done { kind, .. } => kind.as_str().to_owned(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["fit", "quality", "load", "record"]);

    let record = service.record("mini", None, "smol", Some(1)).await.unwrap();
    let r = &record.record;
    assert_eq!(r.generation, Some(1));
    assert_eq!((r.quality.overall.passed, r.quality.overall.n), (5, 6));
    assert_eq!(
        r.verdict,
        Verdict::Disqualified,
        "the high-value case failed"
    );
    let high = r
        .disqualifiers
        .iter()
        .find(|d| d.condition.contains("high_value_failures"))
        .unwrap();
    assert_eq!(high.evidence, ["arithmetic"]);
    assert!(r.incomplete.is_empty(), "{:?}", r.incomplete);
    assert_eq!(r.performance.target_rps, 8.0);
    assert_eq!(r.performance.sweep.len(), 2, "target and one sweep step");
    assert!(r.machine.contains("CPU backend"), "{}", r.machine);

    // The runs name their worker and machine; progress is in the store for any process.
    let progress = service.run_progress("mini", None).await.unwrap();
    let g1 = &progress.generations[0];
    assert_eq!(g1.number, 1);
    assert!(
        g1.runs
            .iter()
            .all(|r| r.worker.as_deref() == Some("test-worker"))
    );
    assert!(g1.jobs.iter().all(|j| j.state == "done"));
    let quality = g1
        .jobs
        .iter()
        .find(|j| j.kind.as_str() == "quality")
        .unwrap();
    let cases = quality.progress.as_ref().unwrap().cases.unwrap();
    assert_eq!((cases.done, cases.passed, cases.failed), (6, 5, 1));

    // Generation 2: a rerun of the same locked version, its own runs and record.
    let before = serde_json::to_string(&r).unwrap();
    let rerun = service
        .request_run(
            "mini",
            None,
            &RunParams {
                again: true,
                ..params.clone()
            },
        )
        .await
        .unwrap();
    assert_eq!((rerun.generation, rerun.queued), (2, 4));
    worker.run_until_idle(None, |_| {}).await.unwrap();
    let second = service.record("mini", None, "smol", Some(2)).await.unwrap();
    assert_eq!(second.record.generation, Some(2));
    assert_ne!(second.record.record_sha256, r.record_sha256);
    let first_again = service.record("mini", None, "smol", Some(1)).await.unwrap();
    assert_eq!(
        serde_json::to_string(&first_again.record).unwrap(),
        before,
        "the first generation's record is unchanged byte for byte"
    );
    let progress = service.run_progress("mini", None).await.unwrap();
    assert_eq!(
        progress
            .generations
            .iter()
            .map(|g| g.number)
            .collect::<Vec<_>>(),
        [2, 1]
    );
    // Side by side: the comparison of one generation.
    let cmp = service
        .compare("mini", None, &[Pick::of("smol")], None)
        .await
        .unwrap();
    assert_eq!(cmp.generation, 2);
    assert_eq!(cmp.cases.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_endpoint_is_a_transient_failure_retried_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    // Each canned answer takes 300 ms, so the endpoint can be killed mid-run.
    let (addr, stop) = spawn_at("127.0.0.1:0", mock(300), answers()).await.unwrap();
    let path = study_file(dir.path(), &format!("http://{addr}#mock"));
    // One case at a time, so that the kill lands mid-run: with several in flight, the mock's
    // graceful shutdown lets them finish and all six can be stored before it is down.
    let text = std::fs::read_to_string(&path).unwrap();
    let memory = text
        .lines()
        .find(|l| l.starts_with("memory = "))
        .unwrap()
        .to_owned();
    let text = text.replace(
        &memory,
        &format!("{memory}\nquality = {{ concurrency = 1 }}"),
    );
    std::fs::write(&path, text).unwrap();
    let service = service(dir.path()).await;
    service.create_study(&path).await.unwrap();
    service
        .lock("mini", None, "2026-12-01T00:00:00Z")
        .await
        .unwrap();
    service
        .request_run("mini", None, &RunParams::default())
        .await
        .unwrap();
    let worker = Worker::new(service.clone()).with_backoff(Duration::from_millis(50));
    // The fit job, then the quality job with the endpoint killed once two cases are stored.
    assert!(matches!(
        worker.try_execute_next_job().await.unwrap(),
        Outcome::Done { .. }
    ));
    let running = {
        let worker = worker.clone();
        tokio::spawn(async move { worker.try_execute_next_job().await })
    };
    let store = service.store().clone();
    loop {
        let runs = store.runs_of_study("mini", 1).await.unwrap();
        if let Some(run) = runs.iter().find(|r| r.kind.as_str() == "quality")
            && store.finished_cases(run.id).await.unwrap().len() >= 2
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(());
    match running.await.unwrap().unwrap() {
        Outcome::Failed {
            class, requeued, ..
        } => {
            assert_eq!(class, ErrorClass::Transient);
            assert!(requeued, "a transient failure goes back to the queue");
        }
        other => panic!("{other:?}"),
    }
    // The endpoint comes back on the same port; the retried job finishes what was left.
    let (_addr, _mock) = spawn_at(&addr.to_string(), mock(0), answers())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let outcomes = worker.run_until_idle(None, |_| {}).await.unwrap();
    assert!(
        outcomes.iter().all(|o| matches!(o, Outcome::Done { .. })),
        "{outcomes:?}"
    );
    let record = service
        .record("mini", None, "smol", None)
        .await
        .unwrap()
        .record;
    assert_eq!(record.quality.overall.n, 6, "no case lost, none twice");
    assert!(record.incomplete.is_empty(), "{:?}", record.incomplete);
    let progress = service.run_progress("mini", None).await.unwrap();
    let quality = progress.generations[0]
        .jobs
        .iter()
        .find(|j| j.kind.as_str() == "quality")
        .unwrap();
    assert_eq!((quality.state.as_str(), quality.attempts), ("done", 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_study_that_cannot_run_is_refused_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path()).await;
    let good = std::fs::read_to_string(study_file(dir.path(), "http://127.0.0.1:9#m")).unwrap();
    // A negative rate is refused when the study is created, with its line and field.
    let bad = dir.path().join("bad.study.toml");
    std::fs::write(&bad, good.replace("rate_rps = 8.0", "rate_rps = -0.5")).unwrap();
    let e = service.create_study(&bad).await.unwrap_err();
    assert_eq!(e.class(), ErrorClass::BadInput);
    let message = e.to_string();
    assert!(
        message.contains(":6:") && message.contains("workload.rate_rps"),
        "{message}"
    );
    assert!(
        service.list_studies().await.unwrap().is_empty(),
        "nothing stored"
    );
    // A closed loop cannot measure goodput at a target rate: refused at create, not at the
    // load job hours later.
    std::fs::write(
        &bad,
        good.replace("seed = 7 }", "seed = 7, load_loop = \"closed\" }"),
    )
    .unwrap();
    let e = service.create_study(&bad).await.unwrap_err().to_string();
    assert!(e.contains("workload.load_loop"), "{e}");
    // A file that is not a GGUF is refused at create, naming the candidate's field.
    let fake = dir.path().join("fake.gguf");
    std::fs::write(&fake, "# not a model\n").unwrap();
    let gguf = dir.path().join("gguf.study.toml");
    std::fs::write(
        &gguf,
        good.replace("http://127.0.0.1:9#m", &format!("gguf:{}", fake.display())),
    )
    .unwrap();
    let e = service.create_study(&gguf).await.unwrap_err().to_string();
    assert!(e.contains("candidate[0].source"), "{e}");
    // A real GGUF candidate whose file is gone by lock time does not lock.
    let models = service
        .config()
        .models_dir
        .join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !models.exists() {
        eprintln!("SKIPPED (lock-time part): {} is absent", models.display());
        return;
    }
    let link = dir.path().join("model.gguf");
    std::os::unix::fs::symlink(&models, &link).unwrap();
    std::fs::write(
        &gguf,
        good.replace("http://127.0.0.1:9#m", &format!("gguf:{}", link.display())),
    )
    .unwrap();
    service.create_study(&gguf).await.unwrap();
    std::fs::remove_file(&link).unwrap();
    let e = service
        .lock("mini", None, "2026-12-01T00:00:00Z")
        .await
        .unwrap_err();
    assert_eq!(e.class(), ErrorClass::BadInput);
    assert!(e.to_string().contains("no such file"), "{e}");
}

/// The mini study's runs with the newest `count` generations in full, and `also`.
async fn newest(service: &StudyService, count: usize, also: Option<u32>) -> RunProgress {
    service
        .run_progress_shown("mini", None, Shown::Newest { count, also })
        .await
        .unwrap()
}

/// A study run again and again (nightly, for a year) keeps its views cheap: a view asks for its
/// newest generations in full and gets the others a line each, with the same figures as the
/// whole view; the state a page follows comes from the newest generation alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_history_is_read_a_few_generations_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, _mock) = spawn_at("127.0.0.1:0", mock(0), answers()).await.unwrap();
    let path = study_file(dir.path(), &format!("http://{addr}#mock"));
    let service = service(dir.path()).await;
    service.create_study(&path).await.unwrap();
    service
        .lock("mini", None, "2026-12-01T00:00:00Z")
        .await
        .unwrap();
    let worker = Worker::new(service.clone());
    let again = RunParams {
        max_tokens: 16,
        again: true,
        ..RunParams::default()
    };
    // Three finished generations, then a fourth left in the queue.
    for g in 1..=3 {
        let run = service.request_run("mini", None, &again).await.unwrap();
        assert_eq!(run.generation, g);
        worker.run_until_idle(None, |_| {}).await.unwrap();
    }
    assert_eq!(
        service.study_state("mini", 1).await.unwrap().0,
        StudyState::Done
    );
    let fourth = service.request_run("mini", None, &again).await.unwrap();
    assert_eq!((fourth.generation, fourth.queued), (4, 4));

    let all = service.run_progress("mini", None).await.unwrap();
    assert_eq!(
        all.generations.iter().map(|g| g.number).collect::<Vec<_>>(),
        [4, 3, 2, 1]
    );
    assert!(all.earlier.is_empty());
    let (state, ended) = service.study_state("mini", 1).await.unwrap();
    assert_eq!((state, ended), (all.state, all.ended));
    assert_eq!(state, StudyState::Running);
    assert_eq!(
        service.queued_jobs("mini", 1).await.unwrap(),
        [(4, 4)].into_iter().collect()
    );

    // The newest two in full, exactly as the whole view has them; the others a line each.
    let two = newest(&service, 2, None).await;
    assert_eq!(two.generations, all.generations[..2]);
    assert_eq!((two.state, two.ended), (all.state, all.ended));
    assert_eq!(
        two.earlier.iter().map(|g| g.number).collect::<Vec<_>>(),
        [2, 1]
    );
    for line in &two.earlier {
        let whole = all
            .generations
            .iter()
            .find(|g| g.number == line.number)
            .unwrap();
        assert_eq!(line.jobs, [("done".to_owned(), 4)].into_iter().collect());
        assert_eq!(line.cancellable, 0);
        assert_eq!(line.verdicts, whole.verdicts);
        assert_eq!(line.verdicts.get("smol"), Some(&Verdict::Disqualified));
        assert_eq!(
            (line.trigger.as_str(), line.created_at.as_str()),
            (whole.trigger.as_str(), whole.created_at.as_str())
        );
    }

    // One more asked for by number: in full beside the newest, and no longer a line.
    let also = newest(&service, 1, Some(1)).await;
    assert_eq!(
        also.generations
            .iter()
            .map(|g| g.number)
            .collect::<Vec<_>>(),
        [4, 1]
    );
    assert_eq!(also.generations[1], all.generations[3]);
    assert_eq!(
        also.earlier.iter().map(|g| g.number).collect::<Vec<_>>(),
        [3, 2]
    );

    // None in full: the queued generation says what a cancel would still stop.
    let none = newest(&service, 0, None).await;
    assert!(none.generations.is_empty());
    assert_eq!(none.earlier.len(), 4);
    assert_eq!(
        (&none.earlier[0].jobs, none.earlier[0].cancellable),
        (&[("queued".to_owned(), 4)].into_iter().collect(), 4)
    );
    assert!(none.earlier[0].verdicts.is_empty());

    // Cancelled: the state follows at once, and the line counts the jobs as cancelled.
    service.cancel_run("mini", None, "test").await.unwrap();
    let (state, ended) = service.study_state("mini", 1).await.unwrap();
    assert_eq!(
        (state, ended.cancelled, ended.failed),
        (StudyState::Done, 4, 0)
    );
    assert!(service.queued_jobs("mini", 1).await.unwrap().is_empty());
    let none = newest(&service, 0, None).await;
    assert_eq!(
        (&none.earlier[0].jobs, none.earlier[0].cancellable),
        (&[("cancelled".to_owned(), 4)].into_iter().collect(), 0)
    );
    assert_eq!(none.earlier[0].job_counts(), [("cancelled", 4)]);
}
