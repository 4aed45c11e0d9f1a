//! Workers on several processes over PostgreSQL: `shortlist worker` processes beside a
//! workbench share one study's jobs — one is killed (SIGKILL) in the middle of a quality job and
//! one stopped (SIGTERM) — and the run still finishes with every case stored once and the same
//! quality results as one worker's run; run requests from several processes at once queue one
//! generation. And what the database knows of its workers (`shortlist workers`, `/workers`):
//! alive, gone or stopped, and queued jobs that no worker is alive to take.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Mock, Postgres, data, ok_on_db, shortlist, stderr, stdout};

pub(crate) fn json(url: &str, dir: &Path, args: &[&str]) -> Value {
    let out = ok_on_db(url, dir, args);
    serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
}

/// The mini study with two endpoint candidates answering from the canned answers after
/// `ttft_ms`, written to `dir`.
fn two_candidate_study(dir: &Path, mock: &Mock) -> String {
    crate::web::study_text(dir, &format!("{}#mock", mock.url))
        + &format!(
            "\n[[candidate]]\nname = \"twin\"\nsource = \"{}#mock\"\nprice_per_device_hour = 0.05\n",
            mock.url
        )
}

pub(crate) fn worker(url: &str, dir: &Path, name: &str) -> Child {
    worker_stale_after(url, dir, name, "2")
}

/// [`worker`] judging other workers' jobs stale after `stale_after` seconds (it beats every
/// quarter of that, at most every 10 s).
pub(crate) fn worker_stale_after(url: &str, dir: &Path, name: &str, stale_after: &str) -> Child {
    shortlist()
        .env("DATABASE_URL", url)
        .current_dir(dir)
        .args([
            "worker",
            "--name",
            name,
            "--stale-after",
            stale_after,
            "--poll",
            "0.2",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Read the workbench's live progress stream of study `mini` on a thread of its own; what
/// arrived is in the returned buffer.
fn watch_events(addr: &str) -> std::sync::Arc<std::sync::Mutex<String>> {
    use std::io::{Read as _, Write as _};
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let keep = seen.clone();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET /studies/mini/events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            keep.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    seen
}

pub(crate) fn wait_for<T>(secs: u64, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every job of generation 1.
pub(crate) fn jobs(url: &str, dir: &Path) -> Vec<Value> {
    jobs_of(url, dir, 1)
}

/// Every job of a generation.
fn jobs_of(url: &str, dir: &Path, generation: u32) -> Vec<Value> {
    let s = json(url, dir, &["study", "status", "mini", "--json"]);
    s["generations"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["number"] == generation))
        .and_then(|g| g["jobs"].as_array().cloned())
        .unwrap_or_default()
}

/// What a record says about quality and identity, without its stamps (times, workers, hashes
/// of the whole record) and without the load figures, which are measurements of the moment.
/// The paired comparison with the other candidate stays in: a record waits for every quality
/// run of its generation, so which worker finished first never changes it.
fn quality_of(record: &Value) -> Value {
    assert!(
        record["quality"]["paired"].is_object(),
        "the record pairs its cases with the other candidate's: {}",
        record["quality"]
    );
    serde_json::json!({
        "identity": record["identity"],
        "quality": record["quality"],
        "disqualifiers": record["disqualifiers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| serde_json::json!([d["rule"], d["outcome"], d["observed"]]))
            .collect::<Vec<_>>(),
    })
}

/// A mock answering from the canned answers after `ttft_ms` (up for ten minutes), and the
/// two-candidate study created and locked on `url` from `dir`.
fn locked_study(url: &str, dir: &Path, ttft_ms: &str) -> Mock {
    locked_study_edited(url, dir, ttft_ms, |text| text)
}

/// [`locked_study`] with the study file's text changed by `edit` first.
pub(crate) fn locked_study_edited(
    url: &str,
    dir: &Path,
    ttft_ms: &str,
    edit: impl FnOnce(String) -> String,
) -> Mock {
    let mock = Mock::start_for(
        "127.0.0.1:0",
        600,
        &[
            "--answers",
            data("study/mini.answers.jsonl").to_str().unwrap(),
            "--ttft-ms",
            ttft_ms,
        ],
    );
    std::fs::write(
        dir.join("mini.study.toml"),
        edit(two_candidate_study(dir, &mock)),
    )
    .unwrap();
    json(url, dir, &["study", "create", "mini.study.toml", "--json"]);
    let locked = json(url, dir, &["study", "lock", "mini", "--json"]);
    // Locking checks both endpoint candidates: they answer and list `mock`.
    let checks = locked["endpoints"].as_array().unwrap();
    assert_eq!(checks.len(), 2, "{locked}");
    assert!(
        checks
            .iter()
            .all(|e| e["check"]["reached"] == true && e["check"]["problem"].is_null()),
        "{locked}"
    );
    mock
}

/// The workbench with one worker that beats every half second (a quarter of its
/// `--stale-after`): it hears of a cancel within that.
pub(crate) fn workbench_with_a_quick_worker(url: &str, dir: &Path) -> crate::web::Server {
    crate::web::Server::start_on(
        url,
        dir,
        &[
            "--workers",
            "1",
            "--schedule-every",
            "0",
            "--stale-after",
            "2",
        ],
    )
}

/// The records on `url` say what a one-worker run of the same study on its own SQLite database
/// says: every case once, the same identity, quality and disqualifier outcomes.
fn same_as_one_worker(url: &str, dir: &Path, mock: &Mock) {
    let single = tempfile::tempdir().unwrap();
    let s = single.path();
    std::fs::write(s.join("mini.study.toml"), two_candidate_study(s, mock)).unwrap();
    let one = format!("sqlite://{}?mode=rwc", s.join("one.db").display());
    json(&one, s, &["study", "create", "mini.study.toml", "--json"]);
    json(&one, s, &["study", "lock", "mini", "--json"]);
    let out = crate::support::on_db(&one, s, &["study", "run", "mini", "--stale-after", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for candidate in ["smol", "twin"] {
        let shared = json(
            url,
            dir,
            &["record", candidate, "--study", "mini", "--json"],
        );
        let alone = json(&one, s, &["record", candidate, "--study", "mini", "--json"]);
        assert_eq!(shared["quality"]["overall"]["n"], 6, "{shared}");
        assert_eq!(quality_of(&shared), quality_of(&alone), "{candidate}");
    }
}

#[test]
fn three_workers_on_postgres_finish_a_run_through_a_kill_and_a_stop() {
    let Some(pg) = Postgres::fresh("three_workers") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = pg.url.as_str();
    // One case at a time, so that a stop seen with one to three cases stored comes before the
    // run's last case is asked.
    let mock = locked_study_edited(url, d, "700", |text| with_quality_concurrency(&text, 1));
    // The workbench serves pages only; the three workers do the work.
    let serve = crate::web::Server::start_on(url, d, &["--workers", "0", "--schedule-every", "0"]);
    json(url, d, &["study", "run", "mini", "--queue-only", "--json"]);
    // The workbench runs no worker: the progress its page streams comes from the other
    // processes' workers, through the database.
    let seen = watch_events(&serve.addr);
    let names = ["w1", "w2", "w3"];
    let mut w: Vec<Child> = names.iter().map(|n| worker(url, d, n)).collect();
    // A running quality job of one of `among`, early enough that cases are left after the
    // current one.
    let mid_quality = |among: &[&str]| {
        jobs(url, d).into_iter().find(|j| {
            let done = j["progress"]["cases"]["done"].as_u64().unwrap_or(0);
            j["kind"] == "quality"
                && j["state"] == "running"
                && among.contains(&j["worker"].as_str().unwrap_or(""))
                && (1..=3).contains(&done)
        })
    };
    // Kill (SIGKILL) the first worker seen in the middle of a quality job.
    let victim = wait_for(90, "a worker mid-quality", || mid_quality(&names));
    let killed = names.iter().position(|n| victim["worker"] == *n).unwrap();
    w[killed].kill().unwrap();
    w[killed].wait().unwrap();
    // Stop (SIGTERM) the next one seen in the middle of a quality job: it finishes its current
    // case, puts the job back and exits cleanly.
    let living: Vec<&str> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != killed)
        .map(|(_, n)| *n)
        .collect();
    let held = wait_for(120, "another worker mid-quality", || mid_quality(&living));
    let stopped = names.iter().position(|n| held["worker"] == *n).unwrap();
    let last = 3 - killed - stopped;
    let pid = i32::try_from(w[stopped].id()).unwrap();
    // SAFETY: sending a signal to a child process this test spawned and still owns.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = wait_for(60, "the stopped worker to exit", || {
        w[stopped].try_wait().unwrap()
    });
    let mut log = String::new();
    std::io::Read::read_to_string(&mut w[stopped].stderr.take().unwrap(), &mut log).unwrap();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        log.contains(&format!("job {}: released to the queue", held["id"])),
        "{log}"
    );
    // What the database knows of the three: the stopped one said so; the killed one stopped
    // saying it is alive (three missed beats of half a second) and is listed as gone.
    let view = wait_for(30, "the killed worker listed as gone", || {
        let v = workers_view(url, d);
        (state_of(&v, names[killed]).as_deref() == Some("gone")).then_some(v)
    });
    assert_eq!(
        state_of(&view, names[stopped]).as_deref(),
        Some("stopped"),
        "{view}"
    );
    assert_eq!(view["queue"]["live_workers"], 1, "{view}");
    // The last worker finishes everything, taking over the killed worker's job and the
    // stopped one's.
    let finished = wait_for(240, "every job done", || {
        let js = jobs(url, d);
        js.iter().all(|j| j["state"] == "done").then_some(js)
    });
    let _ = w[last].kill();
    let _ = w[last].wait();
    drop(serve);
    let streamed = seen.lock().unwrap().clone();
    assert!(
        streamed.contains("event: progress") && streamed.contains("\"kind\":\"quality\""),
        "the workbench streamed the other processes' progress: {}",
        streamed.chars().take(2000).collect::<String>()
    );
    let taken = finished.iter().find(|j| j["id"] == victim["id"]).unwrap();
    assert!(taken["attempts"].as_u64().unwrap() >= 2, "{taken}");
    // Every case stored once, and the same results as one worker's run of the same study.
    same_as_one_worker(url, d, &mock);
    // Each run names the worker that executed it; none of the killed worker's runs is left
    // unfinished.
    let status = json(url, d, &["study", "status", "mini", "--json"]);
    let runs = status["generations"][0]["runs"].as_array().unwrap();
    assert!(!runs.is_empty(), "{status}");
    for r in runs {
        assert!(names.contains(&r["worker"].as_str().unwrap_or("")), "{r}");
        assert_eq!(r["state"], "done", "{r}");
        assert!(r["machine"].is_string(), "{r}");
    }
}

#[test]
fn run_requests_from_several_processes_queue_one_generation() {
    let Some(pg) = Postgres::fresh("run_requests") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("mini.study.toml"),
        crate::web::study_text(d, "http://127.0.0.1:9#nothing"),
    )
    .unwrap();
    let url = pg.url.as_str();
    json(url, d, &["study", "create", "mini.study.toml", "--json"]);
    json(url, d, &["study", "lock", "mini", "--json"]);
    let requests: Vec<Child> = (0..4)
        .map(|_| {
            shortlist()
                .env("DATABASE_URL", url)
                .current_dir(d)
                .args(["study", "run", "mini", "--queue-only", "--again", "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut new = 0;
    for r in requests {
        let out = r.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(v["generation"], 1, "{v}");
        new += usize::from(v["resumed"] == false);
    }
    assert_eq!(
        new, 1,
        "one process queued the generation, the others resumed it"
    );
    let status = json(url, d, &["study", "status", "mini", "--json"]);
    assert_eq!(
        status["generations"].as_array().unwrap().len(),
        1,
        "{status}"
    );
    let mut kinds: Vec<String> = jobs(url, d)
        .iter()
        .map(|j| format!("{} {}", j["kind"], j["candidate"]))
        .collect();
    let all = kinds.len();
    kinds.sort();
    kinds.dedup();
    assert_eq!(kinds.len(), all, "each job queued once: {kinds:?}");
}

/// One quality run split into shards that two workers claim side by side: the same cases as one
/// worker's run, each stored once, and the job after them waits for every shard.
#[test]
fn a_sharded_quality_run_shared_by_two_workers_equals_one_workers() {
    let Some(pg) = Postgres::fresh("shards") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = pg.url.as_str();
    let mock = locked_study(url, d, "300");
    let out = crate::support::on_db(
        url,
        d,
        &["study", "run", "mini", "--queue-only", "--shards", "65"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("1 to 64"), "{}", stderr(&out));
    json(
        url,
        d,
        &[
            "study",
            "run",
            "mini",
            "--queue-only",
            "--shards",
            "3",
            "--json",
        ],
    );
    let mut w: Vec<Child> = ["s1", "s2"].iter().map(|n| worker(url, d, n)).collect();
    let finished = wait_for(240, "every job done", || {
        let js = jobs(url, d);
        js.iter().all(|j| j["state"] == "done").then_some(js)
    });
    for c in &mut w {
        let _ = c.kill();
        let _ = c.wait();
    }
    let shards: Vec<&Value> = finished.iter().filter(|j| j["kind"] == "quality").collect();
    assert_eq!(shards.len(), 6, "three shards per candidate");
    let mut by: Vec<&str> = shards
        .iter()
        .map(|j| j["worker"].as_str().unwrap())
        .collect();
    by.sort_unstable();
    by.dedup();
    assert_eq!(by.len(), 2, "both workers answered shards: {shards:?}");
    same_as_one_worker(url, d, &mock);
    let status = json(url, d, &["study", "status", "mini", "--json"]);
    let runs = status["generations"][0]["runs"].as_array().unwrap();
    // The load run of each candidate started only once its last shard had finished.
    for candidate in ["smol", "twin"] {
        let run = |kind: &str| {
            runs.iter()
                .find(|r| r["kind"] == kind && r["candidate"] == candidate)
                .unwrap_or_else(|| panic!("no {kind} run of {candidate}: {status}"))
        };
        let (quality, load) = (run("quality"), run("load"));
        assert!(
            load["started_at"].as_str().unwrap() >= quality["finished_at"].as_str().unwrap(),
            "{quality} {load}"
        );
    }
    let quality_runs = runs.iter().filter(|r| r["kind"] == "quality").count();
    assert_eq!(
        quality_runs, 2,
        "one run row per candidate, shared by its shards: {status}"
    );
    assert!(runs.iter().all(|r| r["state"] == "done"), "{status}");
}

/// A study's load steps sent from two workers at once (`study run --load-workers 2`): each step
/// of each endpoint candidate is split in two, both parts sent from one agreed instant by the two
/// workers, and analysed from both parts' raw records — the record names each sender with its
/// own client check, and their shares add up to the whole step. Asked for three workers while
/// two run, each step gathers two of three within the wait and is then sent whole.
#[test]
fn load_steps_sent_from_two_workers_are_merged_from_both_parts() {
    let Some(pg) = Postgres::fresh("load_workers") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = pg.url.as_str();
    let mock = Mock::start_for(
        "127.0.0.1:0",
        600,
        &[
            "--answers",
            data("study/mini.answers.jsonl").to_str().unwrap(),
            "--ttft-ms",
            "20",
        ],
    );
    let text = two_candidate_study(d, &mock)
        .replace("requests = 8,", "requests = 120,")
        .replace("rate_rps = 8.0", "rate_rps = 20.0")
        .replace("sweep_rps = [16.0]", "sweep_rps = [30.0]");
    assert!(
        text.contains("requests = 120,") && text.contains("sweep_rps = [30.0]"),
        "{text}"
    );
    std::fs::write(d.join("mini.study.toml"), text).unwrap();
    json(url, d, &["study", "create", "mini.study.toml", "--json"]);
    json(url, d, &["study", "lock", "mini", "--json"]);
    let out = crate::support::on_db(
        url,
        d,
        &[
            "study",
            "run",
            "mini",
            "--queue-only",
            "--load-workers",
            "17",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("1 to 16"), "{}", stderr(&out));
    json(
        url,
        d,
        &[
            "study",
            "run",
            "mini",
            "--queue-only",
            "--load-workers",
            "2",
            "--json",
        ],
    );
    let names = ["w1", "w2"];
    let mut w: Vec<Child> = names.iter().map(|n| worker(url, d, n)).collect();
    let done = |generation: u32| {
        move || {
            let js = jobs_of(url, d, generation);
            (js.iter().any(|j| j["kind"] == "record") && js.iter().all(|j| j["state"] == "done"))
                .then_some(js)
        }
    };
    let finished = wait_for(300, "every job of generation 1 done", done(1));
    let parts = finished.iter().filter(|j| j["kind"] == "load_part").count();
    assert!(
        parts >= 4,
        "two steps of two candidates, each with a second part: {finished:?}"
    );
    for candidate in ["smol", "twin"] {
        let record = json(url, d, &["record", candidate, "--study", "mini", "--json"]);
        let p = &record["performance"];
        let senders = p["senders"].as_array().unwrap_or_else(|| panic!("{p}"));
        let mut hosts: Vec<&str> = senders
            .iter()
            .map(|s| s["host"].as_str().unwrap())
            .collect();
        hosts.sort_unstable();
        assert_eq!(hosts, names, "each worker sent a part: {p}");
        let shares: Vec<u64> = senders
            .iter()
            .map(|s| s["scheduled"].as_u64().unwrap())
            .collect();
        assert_eq!(shares, vec![60, 60], "arrival i from worker i mod 2: {p}");
        assert_eq!(p["target_counts"]["scheduled"], 120, "{p}");
        // Each sender's own client check is kept; one client-bound sender would make the run
        // client-bound.
        for s in senders {
            assert!(s["schedule_lag_p99_s"].as_f64().is_some(), "{s}");
            assert!(s["lag_allowance_s"].as_f64().unwrap() >= 0.001, "{s}");
        }
        let any_bound = senders.iter().any(|s| s["client_bound"] == true);
        assert!(!any_bound || p["client_bound"] == true, "{p}");
        let rates: Vec<f64> = p["sweep"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["offered_rps"].as_f64().unwrap())
            .collect();
        assert_eq!(
            rates,
            vec![8.0, 30.0],
            "the target rate and the sweep's: {p}"
        );
    }
    // Three workers asked for, two running: each step waits 2 s, then is sent whole.
    json(
        url,
        d,
        &[
            "study",
            "run",
            "mini",
            "--again",
            "--queue-only",
            "--load-workers",
            "3",
            "--gather-wait",
            "2",
            "--json",
        ],
    );
    wait_for(300, "every job of generation 2 done", done(2));
    for c in &mut w {
        let _ = c.kill();
        let _ = c.wait();
    }
    for candidate in ["smol", "twin"] {
        let record = json(url, d, &["record", candidate, "--study", "mini", "--json"]);
        let p = &record["performance"];
        assert_eq!(record["generation"], 2, "{record}");
        assert!(p.get("senders").is_none(), "sent whole: {p}");
        assert_eq!(p["target_counts"]["scheduled"], 120, "{p}");
    }
}

/// A fresh SQLite database in a temporary folder with the two-candidate study locked on it,
/// answered after `ttft_ms`, a quality run's cases asked one at a time: the folder (removed when
/// dropped), the database URL and the mock.
pub(crate) fn sqlite_study(ttft_ms: &str) -> (tempfile::TempDir, String, Mock) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("w.db").display());
    let mock = locked_study_edited(&url, dir.path(), ttft_ms, |text| {
        with_quality_concurrency(&text, 1)
    });
    (dir, url, mock)
}

/// A study file's text with `n` cases of its quality runs in flight at once.
fn with_quality_concurrency(text: &str, n: u32) -> String {
    text.replacen(
        "memory = {",
        &format!("quality = {{ concurrency = {n} }}\nmemory = {{"),
        1,
    )
}

/// The quality job that worker `worker` runs (waited for up to 60 s).
pub(crate) fn quality_job_of(url: &str, dir: &Path, worker: &str) -> Value {
    wait_for(60, "a worker's quality job", || {
        jobs(url, dir)
            .into_iter()
            .find(|j| j["kind"] == "quality" && j["state"] == "running" && j["worker"] == worker)
    })
}

/// A running quality job that has stored a case (waited for up to 90 s).
pub(crate) fn quality_job_under_way(url: &str, dir: &Path) -> Value {
    wait_for(90, "a quality job with a case stored", || {
        jobs(url, dir).into_iter().find(|j| {
            j["kind"] == "quality"
                && j["state"] == "running"
                && j["progress"]["cases"]["done"].as_u64().unwrap_or(0) >= 1
        })
    })
}

/// The workers a database has seen, through `shortlist workers --json`.
pub(crate) fn workers_view(url: &str, dir: &Path) -> Value {
    json(url, dir, &["workers", "--json"])
}

/// The state of worker `name` in `view` (`None` while it is not listed).
pub(crate) fn state_of(view: &Value, name: &str) -> Option<String> {
    view["workers"]
        .as_array()?
        .iter()
        .find(|w| w["name"] == name)
        .and_then(|w| w["state"].as_str().map(str::to_owned))
}

/// Queued jobs with no worker alive are named as such — by `shortlist workers`, the API, the
/// workbench's home, study and workers pages and its metrics — and stop being so once a
/// `shortlist worker` starts; the worker is listed alive with its machine and the job it
/// holds, and as stopped after SIGTERM.
#[test]
fn queued_jobs_without_a_live_worker_are_named_and_a_worker_is_seen() {
    use crate::web::http;

    let (dir, url, _mock) = sqlite_study("300");
    let (d, url) = (dir.path(), url.as_str());
    let serve = crate::web::Server::start_on(url, d, &["--workers", "0", "--schedule-every", "0"]);
    let queued = json(url, d, &["study", "run", "mini", "--queue-only", "--json"]);
    let n = queued["queued"].as_u64().unwrap();
    assert!(n > 0, "{queued}");

    // Nothing takes the jobs: every surface says so.
    let view = workers_view(url, d);
    assert_eq!(view["queue"]["queued"], n, "{view}");
    assert_eq!(view["queue"]["live_workers"], 0, "{view}");
    assert!(view["queue"]["oldest_waiting_s"].is_u64(), "{view}");
    assert_eq!(view["workers"], serde_json::json!([]), "{view}");
    let api = http(&serve.addr, "GET", "/api/workers", &[], b"").json();
    assert_eq!(
        (
            &api["queue"]["queued"],
            &api["queue"]["live_workers"],
            &api["workers"]
        ),
        (
            &view["queue"]["queued"],
            &view["queue"]["live_workers"],
            &view["workers"]
        ),
        "{api}"
    );
    for page in ["/", "/workers", "/studies/mini"] {
        let body = http(&serve.addr, "GET", page, &[], b"").body;
        assert!(body.contains("id=\"stranded\""), "{page}: {body}");
    }
    let metrics = http(&serve.addr, "GET", "/metrics", &[], b"").body;
    assert!(
        metrics.contains(&format!("shortlist_jobs{{state=\"queued\"}} {n}"))
            && metrics.contains("shortlist_workers{state=\"idle\"} 0")
            && metrics.contains("shortlist_oldest_queued_job_seconds "),
        "{metrics}"
    );

    // A worker starts: it is seen alive, holding a job, with its machine.
    let mut w = worker(url, d, "solo");
    let busy = wait_for(60, "the worker seen working", || {
        let v = workers_view(url, d);
        (state_of(&v, "solo").as_deref() == Some("working")).then_some(v)
    });
    let solo = &busy["workers"][0];
    assert_eq!(busy["queue"]["live_workers"], 1, "{busy}");
    assert!(
        solo["job"]["id"].is_i64() && solo["job"]["study"] == "mini",
        "{solo}"
    );
    assert!(
        solo["machine"].as_str().unwrap().contains("backend"),
        "{solo}"
    );
    assert_eq!(solo["beat_ms"], 500, "a quarter of --stale-after 2: {solo}");
    // The page is read in its own moment: the worker may be between two jobs (idle for an
    // instant) there, so it is read until it shows the worker at one.
    let page = wait_for(60, "the page to show the worker working", || {
        let page = http(&serve.addr, "GET", "/workers", &[], b"").body;
        page.contains(">working<").then_some(page)
    });
    assert!(
        page.contains(">solo<") && page.contains(">working<") && !page.contains("id=\"stranded\""),
        "{page}"
    );

    // SIGTERM: it puts its job back or finishes, exits, and is listed as stopped.
    let pid = i32::try_from(w.id()).unwrap();
    // SAFETY: sending a signal to a child process this test spawned and still owns.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = wait_for(60, "the worker to exit", || w.try_wait().unwrap());
    assert_eq!(status.code(), Some(0));
    let view = workers_view(url, d);
    assert_eq!(
        state_of(&view, "solo").as_deref(),
        Some("stopped"),
        "{view}"
    );
    assert_eq!(view["queue"]["live_workers"], 0, "{view}");
    let metrics = http(&serve.addr, "GET", "/metrics", &[], b"").body;
    assert!(
        metrics.contains("shortlist_workers{state=\"stopped\"} 1"),
        "{metrics}"
    );
}

/// Whether a load or part job's last progress says its step ended before its last request.
pub(crate) fn cut_short(job: &Value) -> bool {
    let step = &job["progress"]["load"];
    let count = |what: &str| {
        step[what]
            .as_u64()
            .unwrap_or_else(|| panic!("{what}: {job}"))
    };
    count("finished") + count("failed") < count("total")
}

/// A fresh SQLite database with the two-candidate study locked on it, its load steps of
/// `requests` requests at 0.25 req/s, queued with each step split across two workers
/// (`--gather-wait` seconds to gather them), and two workers `w1` and `w2` started: the folder
/// (removed when dropped), the database URL, the mock and the workers.
fn slow_split_run(
    requests: u32,
    gather_wait: &str,
    stale_after: &str,
) -> (tempfile::TempDir, String, Mock, Vec<Child>) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("sqlite://{}?mode=rwc", d.join("w.db").display());
    let mock = locked_study_edited(&url, d, "100", |text| {
        text.replace("rate_rps = 8.0", "rate_rps = 0.25")
            .replace("peak_rps = 8.0", "peak_rps = 0.25")
            .replace("requests = 8,", &format!("requests = {requests},"))
    });
    json(
        &url,
        d,
        &[
            "study",
            "run",
            "mini",
            "--queue-only",
            "--load-workers",
            "2",
            "--gather-wait",
            gather_wait,
            "--json",
        ],
    );
    let workers = vec![
        worker_stale_after(&url, d, "w1", stale_after),
        worker_stale_after(&url, d, "w2", stale_after),
    ];
    (dir, url, mock, workers)
}

/// A part of a split step under way (it has heard back from its first request), other than
/// `not` (a job id, or null) and of candidate `of` when given (else null); waited for up to
/// 120 s. With the load job leading it.
fn split_part_under_way(url: &str, dir: &Path, not: &Value, of: &Value) -> (Value, Value) {
    let part = wait_for(120, "a part of a split step under way", || {
        jobs(url, dir).into_iter().find(|j| {
            j["kind"] == "load_part"
                && j["state"] == "running"
                && j["id"] != *not
                && (of.is_null() || j["candidate"] == *of)
                && j["progress"]["load"]["finished"].as_u64().unwrap_or(0) >= 1
        })
    });
    let leader = jobs(url, dir)
        .into_iter()
        .find(|j| {
            j["kind"] == "load" && j["candidate"] == part["candidate"] && j["state"] == "running"
        })
        .unwrap_or_else(|| panic!("the load job leading {part}"));
    (part, leader)
}

/// A load step split across two workers stops on both when either is stopped or cancelled: a
/// part whose worker stops calls the step off (its records are not stored) and the load job
/// sends the step again with another worker; a cancel then ends the load job and its part at
/// once, the step cut short on both.
#[test]
fn a_split_load_step_stops_on_every_worker() {
    // Eight requests at 0.25 req/s: each part's last arrival 24 s or more after the start.
    let (dir, url, _mock, mut w) = slow_split_run(8, "60", "2");
    let (d, url) = (dir.path(), url.as_str());
    let (first, leader) = split_part_under_way(url, d, &Value::Null, &Value::Null);
    assert_ne!(leader["worker"], first["worker"], "{leader} {first}");
    // Stop the part's worker alone: its part ends at once, not at its last arrival, and the
    // step is called off, not stored.
    let stopped = ["w1", "w2"]
        .iter()
        .position(|n| first["worker"] == *n)
        .unwrap();
    let pid = i32::try_from(w[stopped].id()).unwrap();
    // SAFETY: sending a signal to a child process this test spawned and still owns.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let ended = wait_for(10, "the stopped part ended", || {
        jobs(url, d)
            .into_iter()
            .find(|j| j["id"] == first["id"] && j["state"] != "running")
    });
    assert_eq!(ended["state"], "failed", "{ended}");
    assert!(
        ended["last_error"]
            .as_str()
            .unwrap()
            .contains("stopped mid-step"),
        "{ended}"
    );
    assert!(
        cut_short(&ended),
        "the part ended before its last arrival: {ended}"
    );
    let status = wait_for(30, "the stopped worker to exit", || {
        w[stopped].try_wait().unwrap()
    });
    assert_eq!(status.code(), Some(0));
    // The load job goes on: it calls off its own part, stores nothing of the step, and sends it
    // again from two workers once a third one starts.
    w.push(worker(url, d, "w3"));
    let (second, same) = split_part_under_way(url, d, &first["id"], &first["candidate"]);
    assert_eq!(
        same["id"], leader["id"],
        "the same load job sends it again: {same}"
    );
    let status = json(url, d, &["study", "status", "mini", "--json"]);
    let runs = status["generations"][0]["runs"].as_array().unwrap();
    assert!(
        !runs
            .iter()
            .any(|r| r["kind"] == "sweep" && r["candidate"] == first["candidate"]),
        "the target step was not stored: {runs:?}"
    );
    // A cancel ends both at once, each cut short.
    json(url, d, &["study", "cancel", "mini", "--json"]);
    for held in [&leader, &second] {
        let ended = wait_for(10, "a job of the split step ended", || {
            jobs(url, d)
                .into_iter()
                .find(|j| j["id"] == held["id"] && j["state"] != "running")
        });
        // Failed with the cancel's reason: stopped by its worker, or failed at once had its
        // claim gone stale meanwhile (a worker beating every half second on a busy machine)
        // and the job been handed back to the queue.
        assert_eq!(ended["state"], "failed", "{ended}");
        assert!(
            ended["cancel_reason"].is_string() && ended["last_error"] == ended["cancel_reason"],
            "{ended}"
        );
        assert!(cut_short(&ended), "{ended}");
    }
    for c in &mut w {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// A part of a split load step whose leading load job's worker dies (SIGKILL) stops once that
/// job has not beaten for 30 s — three of the longest heartbeat intervals — instead of sending
/// to its last arrival for a step no one will merge, and stores nothing; its worker is then free
/// for the load job's next try. (Workers that judge a job stale sooner hand the load job back
/// first, and the part stops for that: its claim ended.)
#[test]
fn a_part_stops_when_its_load_job_is_gone() {
    // Sixteen requests at 0.25 req/s: each part's last arrival about 60 s after the start. The
    // workers judge a job stale after 40 s and beat every 10 s: the load job's silence passes
    // 30 s first.
    let (dir, url, _mock, mut w) = slow_split_run(16, "5", "40");
    let (d, url) = (dir.path(), url.as_str());
    let (part, leader) = split_part_under_way(url, d, &Value::Null, &Value::Null);
    assert_eq!(part["progress"]["load"]["total"], 8, "{part}");
    let names = ["w1", "w2"];
    let dead = names.iter().position(|n| leader["worker"] == *n).unwrap();
    w[dead].kill().unwrap();
    w[dead].wait().unwrap();
    let killed = Instant::now();
    let ended = wait_for(50, "the part ended", || {
        jobs(url, d)
            .into_iter()
            .find(|j| j["id"] == part["id"] && j["state"] != "running")
    });
    let after = killed.elapsed();
    assert_eq!(ended["state"], "done", "{ended}");
    let said = ended["progress"]["message"].as_str().unwrap_or_default();
    assert!(
        said.contains("called off mid-step")
            && said.contains(&format!(
                "its leading load job {} has not beaten for",
                leader["id"]
            ))
            && said.ends_with("nothing stored"),
        "{ended}"
    );
    // Its last arrival was due about 55 s after the kill; the load job's last beat came up to
    // 10 s before it.
    assert!(
        (Duration::from_secs(19)..Duration::from_secs(45)).contains(&after),
        "it stopped once its load job had not beaten for 30 s: {after:?} after the kill"
    );
    // The freed worker hands the dead one's load job back to the queue once it is 40 s stale
    // (and may take it).
    wait_for(40, "the load job handed back", || {
        jobs(url, d).into_iter().find(|j| {
            j["id"] == leader["id"]
                && (j["state"] == "queued" || j["attempts"].as_u64() > leader["attempts"].as_u64())
        })
    });
    for c in &mut w {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// A dead worker's job goes back to the queue while every live worker is busy: the worker
/// running the other candidate's quality job hands it back once its heartbeat is stale, instead
/// of when its own job ends, so the job reads queued — not running on a worker that is gone.
#[test]
fn a_busy_worker_hands_back_a_dead_workers_job() {
    // Five seconds a case, one at a time: a quality job lasts half a minute.
    let (dir, url, _mock) = sqlite_study("5000");
    let (d, url) = (dir.path(), url.as_str());
    json(url, d, &["study", "run", "mini", "--queue-only", "--json"]);
    let quality_of = |worker: &str| quality_job_of(url, d, worker);
    let mut doomed = worker(url, d, "doomed");
    let orphan = quality_of("doomed");
    let mut busy = worker(url, d, "busy");
    let held = quality_of("busy");
    doomed.kill().unwrap();
    doomed.wait().unwrap();
    let killed = Instant::now();
    // Its heartbeat is stale two seconds on; the busy worker looks every second.
    let back = wait_for(15, "the dead worker's job queued again", || {
        jobs(url, d)
            .into_iter()
            .find(|j| j["id"] == orphan["id"] && j["state"] == "queued")
    });
    let now = jobs(url, d);
    let busy_job = now.iter().find(|j| j["id"] == held["id"]).unwrap();
    assert_eq!(
        (&busy_job["state"], &busy_job["worker"]),
        (&Value::from("running"), &Value::from("busy")),
        "handed back {:?} after the kill, while the busy worker still ran its job: {back}",
        killed.elapsed()
    );
    let _ = busy.kill();
    let _ = busy.wait();
}
