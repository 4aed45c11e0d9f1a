//! Stopping what runs: a cancel (from the workbench, the command line or the API) and a stop
//! (Ctrl-C or SIGTERM to the workbench, a worker or `study run`) end the job in hand at once —
//! the cases in flight and a load step under way dropped, never awaited from a slow endpoint —
//! a cancelled job fails with its reason and never runs again, and a stopped one goes back to
//! the queue as it was.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{shortlist, stderr, stdout};
use crate::workers::{
    cut_short, jobs, json, locked_study_edited, quality_job_of, quality_job_under_way,
    sqlite_study, state_of, wait_for, workbench_with_a_quick_worker, worker, workers_view,
};

/// Ctrl-C on a workbench whose worker is in the middle of a quality job: the job finishes its
/// current case and goes back to the queue with its attempt not counted, the process exits 0,
/// its worker is listed as stopped, and another worker finishes the run from the stored cases.
#[test]
fn ctrl_c_on_the_workbench_puts_the_job_in_hand_back() {
    // Three seconds a case, one at a time: a stop seen once a case is stored comes twelve
    // seconds before the run's last case is asked.
    let (dir, url, _mock) = sqlite_study("3000");
    let (d, url) = (dir.path(), url.as_str());
    let mut serve =
        crate::web::Server::start_on(url, d, &["--workers", "1", "--schedule-every", "0"]);
    json(url, d, &["study", "run", "mini", "--queue-only", "--json"]);
    let held = quality_job_under_way(url, d);
    let status = serve.interrupt(120);
    assert_eq!(status.code(), Some(0), "{status:?}");
    let after = jobs(url, d);
    let job = after.iter().find(|j| j["id"] == held["id"]).unwrap();
    assert_eq!(
        (&job["state"], &job["attempts"]),
        (&Value::from("queued"), &Value::from(0)),
        "the job went back as it was, its attempt not counted: {job}"
    );
    let view = workers_view(url, d);
    let listed = view["workers"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{view}");
    assert_eq!(listed[0]["state"], "stopped", "{view}");
    assert!(
        listed[0]["name"].as_str().unwrap().ends_with("-w0"),
        "{view}"
    );
    // Another worker takes the run up and finishes it.
    let mut w = worker(url, d, "next");
    wait_for(240, "every job done", || {
        jobs(url, d)
            .iter()
            .all(|j| j["state"] == "done")
            .then_some(())
    });
    let _ = w.kill();
    let _ = w.wait();
    let record = json(url, d, &["record", "smol", "--study", "mini", "--json"]);
    assert_eq!(record["quality"]["overall"]["n"], 6, "{record}");
}

/// SIGTERM — a service manager's stop — stops the workbench as Ctrl-C does: the job in hand goes
/// back to the queue as it was, and its worker reads stopped, not gone.
#[test]
fn sigterm_on_the_workbench_puts_the_job_in_hand_back() {
    let (dir, url, _mock) = sqlite_study("3000");
    let (d, url) = (dir.path(), url.as_str());
    let mut serve = workbench_with_a_quick_worker(url, d);
    json(url, d, &["study", "run", "mini", "--queue-only", "--json"]);
    let held = quality_job_under_way(url, d);
    let status = serve.signal(libc::SIGTERM, 60);
    assert_eq!(status.code(), Some(0), "{status:?}");
    let job = jobs(url, d)
        .into_iter()
        .find(|j| j["id"] == held["id"])
        .unwrap();
    assert_eq!(
        (&job["state"], &job["attempts"]),
        (&Value::from("queued"), &Value::from(0)),
        "{job}"
    );
    let view = workers_view(url, d);
    assert_eq!(view["workers"][0]["state"], "stopped", "{view}");
}

/// `study run` in a terminal stops on SIGTERM (or Ctrl-C) as a worker does: the job in hand goes
/// back to the queue as it was, at once, and the run says it stopped (exit 1, `stopped`, the
/// jobs left waiting), so running it again goes on without waiting for a stale heartbeat.
#[test]
fn sigterm_stops_study_run_and_puts_the_job_back() {
    let (dir, url, _mock) = sqlite_study("3000");
    let (d, url) = (dir.path(), url.as_str());
    let run = shortlist()
        .env("DATABASE_URL", url)
        .current_dir(d)
        .args(["study", "run", "mini", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let held = quality_job_under_way(url, d);
    let pid = i32::try_from(run.id()).unwrap();
    // SAFETY: signalling a child process this test spawned and still owns.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let said: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(said["stopped"], true, "{said}");
    assert!(said["waiting"].as_u64().unwrap_or(0) >= 1, "{said}");
    let job = jobs(url, d)
        .into_iter()
        .find(|j| j["id"] == held["id"])
        .unwrap();
    assert_eq!(
        (&job["state"], &job["attempts"]),
        (&Value::from("queued"), &Value::from(0)),
        "{job}"
    );
}

/// **Cancel run** on the study page while a worker is in the middle of a quality job: the
/// queued jobs fail at once, the running one stops at its worker's next heartbeat and fails
/// with the reason, nothing is claimed again, the study reads done with **Run again**, and a
/// second cancel — from the command line or the API — is refused: nothing is left to cancel.
/// Then **Retry failed jobs** finishes the same generation, records and all.
#[test]
fn a_run_cancelled_from_the_workbench_stops_and_stays_stopped() {
    use crate::web::http;
    const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");

    // Three seconds a case, one at a time: a cancel seen once a case is stored comes twelve
    // seconds before the run's last case is asked; the worker beats every half second.
    let (dir, url, _mock) = sqlite_study("3000");
    let (d, url) = (dir.path(), url.as_str());
    let serve = workbench_with_a_quick_worker(url, d);
    json(url, d, &["study", "run", "mini", "--queue-only", "--json"]);
    let held = quality_job_under_way(url, d);
    let page = http(&serve.addr, "GET", "/studies/mini", &[], b"").body;
    assert!(
        page.contains("id=\"cancel\"") && page.contains("data-confirm"),
        "{page}"
    );
    let cancel = http(
        &serve.addr,
        "POST",
        "/studies/mini/cancel",
        &[FORM],
        b"version=1",
    );
    assert_eq!(cancel.status, 303, "{}", cancel.body);
    assert_eq!(
        cancel.header("location"),
        Some("/studies/mini?version=1#progress")
    );
    let ended = wait_for(90, "every job ended", || {
        let js = jobs(url, d);
        js.iter()
            .all(|j| j["state"] == "done" || j["state"] == "failed")
            .then_some(js)
    });
    let cancelled: Vec<&Value> = ended.iter().filter(|j| j["state"] == "failed").collect();
    assert!(
        cancelled.len() >= 2,
        "the queued jobs and the running one: {ended:?}"
    );
    for j in &cancelled {
        let error = j["last_error"].as_str().unwrap_or("");
        assert!(error.starts_with("cancelled from the workbench at "), "{j}");
        assert_eq!(
            j["progress"]["phase"], "failed",
            "pages following the run saw it end: {j}"
        );
    }
    let stopped = ended.iter().find(|j| j["id"] == held["id"]).unwrap();
    assert_eq!(
        (&stopped["state"], &stopped["attempts"]),
        (&Value::from("failed"), &Value::from(1)),
        "the running job stopped and failed, not released: {stopped}"
    );
    assert_eq!(stopped["cancel_reason"], stopped["last_error"], "{stopped}");
    // Nothing runs again by itself: a moment later every job is as it was.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(jobs(url, d), ended);
    let page = http(&serve.addr, "GET", "/studies/mini", &[], b"").body;
    assert!(
        page.contains("id=\"study-state\" class=\"badge warn\">cancelled<")
            && page.contains("Run again")
            && !page.contains("id=\"cancel\""),
        "{page}"
    );
    // No record yet: neither a candidate's name nor a comparison leads to a page that has none.
    assert!(
        !page.contains("href=\"/studies/mini/candidates/smol?version=1\"")
            && !page.contains("/compare?")
            && page.contains("Side by side once two candidates have a record."),
        "{page}"
    );
    let status = json(url, d, &["study", "status", "mini", "--json"]);
    assert_eq!(
        (
            &status["state"],
            &status["ended"]["cancelled"],
            &status["ended"]["failed"]
        ),
        (
            &Value::from("done"),
            &Value::from(cancelled.len()),
            &Value::from(0)
        ),
        "{status}"
    );
    // Cancelled, not failed, in words: each job's badge, the retry button, the event that
    // pages following the run saw, and `study status`.
    assert_eq!(
        page.matches("data-field=\"state\" class=\"badge warn\">cancelled<")
            .count(),
        cancelled.len(),
        "{page}"
    );
    assert!(
        page.contains(&format!("Retry cancelled jobs ({})", cancelled.len())),
        "{page}"
    );
    for j in &cancelled {
        assert_eq!(j["progress"]["cancelled"], true, "{j}");
    }
    // The run the running job held ended with it: the home page's recent runs say cancelled,
    // and nothing there is still running.
    let home = http(&serve.addr, "GET", "/", &[], b"").body;
    let runs = &home[home.find("Recent runs").expect("the recent runs")..];
    assert!(runs.contains("class=\"badge warn\">cancelled<"), "{runs}");
    assert!(!runs.contains(">running<"), "{runs}");
    let status = json(url, d, &["study", "status", "mini", "--json"]);
    let runs = status["generations"][0]["runs"].as_array().unwrap().clone();
    let ended_runs: Vec<&Value> = runs.iter().filter(|r| r["cancelled"] == true).collect();
    assert_eq!(ended_runs.len(), 1, "the held job's quality run: {runs:?}");
    assert_eq!(
        (
            &ended_runs[0]["state"],
            &ended_runs[0]["kind"],
            &ended_runs[0]["error"]
        ),
        (
            &Value::from("failed"),
            &Value::from("quality"),
            &stopped["cancel_reason"]
        ),
        "{runs:?}"
    );
    assert!(runs.iter().all(|r| r["state"] != "running"), "{runs:?}");
    let status = crate::support::on_db(url, d, &["study", "status", "mini"]);
    let said = String::from_utf8_lossy(&status.stdout).into_owned();
    let lines = |what: &str| {
        said.lines()
            .filter(|l| l.trim_start().starts_with(what) && l.contains(" cancelled "))
            .count()
    };
    assert_eq!(
        (lines("job "), lines("run ")),
        (cancelled.len(), 1),
        "{said}"
    );
    // The queue counts them as cancelled, not failed: `shortlist workers`, its page and the
    // metrics.
    let queue = &workers_view(url, d)["queue"];
    assert_eq!(
        (&queue["failed"], &queue["cancelled"]),
        (&Value::from(0), &Value::from(cancelled.len())),
        "{queue}"
    );
    let metrics = http(&serve.addr, "GET", "/metrics", &[], b"").body;
    assert!(
        metrics.contains(&format!(
            "shortlist_jobs{{state=\"cancelled\"}} {}\n",
            cancelled.len()
        )) && metrics.contains("shortlist_jobs{state=\"failed\"} 0\n"),
        "{metrics}"
    );
    let workers = http(&serve.addr, "GET", "/workers", &[], b"").body;
    assert!(
        workers.contains(&format!("<dt>Cancelled</dt><dd>{}</dd>", cancelled.len()))
            && workers.contains("<dt>Failed</dt><dd>0</dd>"),
        "{workers}"
    );
    // Nothing left to cancel.
    let out = crate::support::on_db(url, d, &["study", "cancel", "mini"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no run to cancel"),
        "{}",
        stderr(&out)
    );
    let api = http(&serve.addr, "POST", "/api/studies/mini/cancel", &[], b"");
    assert_eq!(api.status, 400, "{}", api.body);
    assert_eq!(api.json()["error"]["class"], "bad_input", "{}", api.body);

    // Retry failed jobs: the cancelled ones run again in the same generation — the quality
    // run goes on from the cases it stored — and the records are made.
    assert!(page.contains("id=\"retry\""), "{page}");
    let retry = http(
        &serve.addr,
        "POST",
        "/studies/mini/retry",
        &[FORM],
        b"version=1",
    );
    assert_eq!(retry.status, 303, "{}", retry.body);
    let finished = wait_for(240, "every job done after the retry", || {
        let js = jobs(url, d);
        js.iter().all(|j| j["state"] == "done").then_some(js)
    });
    assert_eq!(
        finished.len(),
        ended.len(),
        "the same jobs, no new generation"
    );
    let again = finished.iter().find(|j| j["id"] == held["id"]).unwrap();
    assert_eq!(again["attempts"], 1, "{again}");
    // Its run started again and finished: no run reads cancelled any more.
    let home = http(&serve.addr, "GET", "/", &[], b"").body;
    let runs = &home[home.find("Recent runs").expect("the recent runs")..];
    assert!(
        !runs.contains(">cancelled<") && !runs.contains(">running<") && runs.contains(">done<"),
        "{runs}"
    );
    for candidate in ["smol", "twin"] {
        let record = json(url, d, &["record", candidate, "--study", "mini", "--json"]);
        assert_eq!(
            record["quality"]["overall"]["n"], 6,
            "{candidate}: {record}"
        );
    }
    // Finished clean: the study reads done, each name leads to its record, and both side by side.
    let page = http(&serve.addr, "GET", "/studies/mini", &[], b"").body;
    let compare = "/studies/mini/compare?version=1&amp;candidates=smol,twin";
    assert!(
        page.contains("id=\"study-state\" class=\"badge good\">done<")
            && page.contains("href=\"/studies/mini/candidates/smol?version=1\"")
            && page.contains("href=\"/studies/mini/candidates/twin?version=1\"")
            && page.contains(&format!("href=\"{compare}\"")),
        "{page}"
    );
    let side_by_side = http(&serve.addr, "GET", &compare.replace("&amp;", "&"), &[], b"");
    assert_eq!(side_by_side.status, 200, "{}", side_by_side.body);
    let nothing = http(&serve.addr, "POST", "/api/studies/mini/retry", &[], b"");
    assert_eq!(nothing.status, 400, "{}", nothing.body);
}

/// `study cancel` while a load step is under way: the step ends at once — its requests in flight
/// cancelled, its later arrivals never sent — instead of at its last arrival, and nothing of it
/// is stored: the job and its load run read cancelled with the step's last progress.
#[test]
fn a_cancel_ends_a_load_step_at_once() {
    // The target step: eight requests at 0.25 req/s, its last arrival 28 s after its first.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("sqlite://{}?mode=rwc", d.join("w.db").display());
    let url = url.as_str();
    let _mock = locked_study_edited(url, d, "100", |text| {
        text.replace("rate_rps = 8.0", "rate_rps = 0.25")
            .replace("peak_rps = 8.0", "peak_rps = 0.25")
    });
    let _serve = workbench_with_a_quick_worker(url, d);
    json(url, d, &["study", "run", "mini", "--queue-only", "--json"]);
    let load = wait_for(120, "a load step under way", || {
        jobs(url, d).into_iter().find(|j| {
            j["kind"] == "load"
                && j["state"] == "running"
                && j["progress"]["load"]["finished"].as_u64().unwrap_or(0) >= 1
        })
    });
    json(url, d, &["study", "cancel", "mini", "--json"]);
    let ended = wait_for(60, "the load job ended", || {
        jobs(url, d)
            .into_iter()
            .find(|j| j["id"] == load["id"] && j["state"] != "running")
    });
    assert_eq!(ended["state"], "failed", "{ended}");
    assert_eq!(ended["progress"]["cancelled"], true, "{ended}");
    assert!(
        cut_short(&ended),
        "the step ended before its last arrival: {ended}"
    );
    let status = json(url, d, &["study", "status", "mini", "--json"]);
    let runs = status["generations"][0]["runs"].as_array().unwrap();
    let run = runs
        .iter()
        .find(|r| r["kind"] == "load" && r["candidate"] == load["candidate"])
        .unwrap_or_else(|| panic!("the load run: {runs:?}"));
    assert_eq!(
        (&run["state"], &run["cancelled"]),
        (&Value::from("failed"), &Value::from(true)),
        "{run}"
    );
    // Nothing of the step was stored: no record can be made from it.
    assert!(
        !runs.iter().any(|r| r["kind"] == "sweep"),
        "no sweep began: {runs:?}"
    );
}

/// `study cancel` on a run that no worker has started: every queued job fails at once, and the
/// JSON says how many.
#[test]
fn study_cancel_fails_a_queued_run_at_once() {
    let (dir, url, _mock) = sqlite_study("300");
    let (d, url) = (dir.path(), url.as_str());
    let queued = json(url, d, &["study", "run", "mini", "--queue-only", "--json"]);
    let n = queued["queued"].as_u64().unwrap();
    let done = json(url, d, &["study", "cancel", "mini", "--json"]);
    assert_eq!(
        (&done["generation"], &done["failed"], &done["stopping"]),
        (&Value::from(1), &Value::from(n), &Value::from(0)),
        "{done}"
    );
    assert!(
        done["reason"]
            .as_str()
            .unwrap()
            .starts_with("cancelled with `shortlist study cancel` on "),
        "{done}"
    );
    let js = jobs(url, d);
    assert_eq!(js.len() as u64, n);
    assert!(
        js.iter()
            .all(|j| j["state"] == "failed" && j["last_error"] == done["reason"]),
        "{js:?}"
    );
    assert_eq!(workers_view(url, d)["queue"]["queued"], 0);
    // Retried, they wait again as they did before anyone started them: their cancellation is
    // their earlier attempt's, not their progress now.
    assert!(
        js.iter().all(|j| j["progress"]["cancelled"] == true),
        "{js:?}"
    );
    json(url, d, &["study", "retry", "mini", "--json"]);
    let again = jobs(url, d);
    assert!(
        again
            .iter()
            .all(|j| j["state"] == "queued" && j["progress"].is_null()),
        "{again:?}"
    );
}

/// A run whose worker was killed in the middle of a job: nobody is left to hear of a cancel, so
/// `study cancel` fails the job that worker held at once, with the queued ones, rather than
/// leave it "stopping" until another worker hands stale jobs back.
#[test]
fn cancelling_fails_at_once_the_job_of_a_worker_that_is_gone() {
    let (dir, url, _mock) = sqlite_study("3000");
    let (d, url) = (dir.path(), url.as_str());
    json(url, d, &["study", "run", "mini", "--queue-only", "--json"]);
    let mut w = worker(url, d, "doomed");
    let held = quality_job_of(url, d, "doomed");
    w.kill().unwrap();
    w.wait().unwrap();
    wait_for(30, "the killed worker listed as gone", || {
        (state_of(&workers_view(url, d), "doomed").as_deref() == Some("gone")).then_some(())
    });
    let done = json(url, d, &["study", "cancel", "mini", "--json"]);
    assert_eq!(done["stopping"], 0, "{done}");
    let js = jobs(url, d);
    let finished = js.iter().filter(|j| j["state"] == "done").count();
    assert_eq!(
        done["failed"].as_u64(),
        Some((js.len() - finished) as u64),
        "every job not done before: {done} {js:?}"
    );
    let job = js.iter().find(|j| j["id"] == held["id"]).unwrap();
    assert_eq!(
        (&job["state"], &job["last_error"]),
        (&Value::from("failed"), &done["reason"]),
        "{job}"
    );
    assert!(
        js.iter()
            .all(|j| j["state"] == "failed" || (j["kind"] == "fit" && j["state"] == "done")),
        "{js:?}"
    );
}

/// A worker never waits on a silent endpoint to stop or cancel: with a quality case asked of an
/// endpoint that answers two minutes later, SIGTERM ends the worker within seconds, its job put
/// back as it was; the next worker's job, cancelled, ends within seconds too, and that worker
/// is idle and takes no further attempt of the case.
#[test]
fn a_stop_or_cancel_does_not_wait_for_an_endpoint_answer() {
    let (dir, url, _mock) = sqlite_study("120000");
    let (d, url) = (dir.path(), url.as_str());
    json(url, d, &["study", "run", "mini", "--queue-only", "--json"]);
    let asking = |worker: &str| quality_job_of(url, d, worker);
    let mut first = worker(url, d, "first");
    let held = asking("first");
    // Its first case is in flight: the answer is two minutes away.
    std::thread::sleep(Duration::from_secs(1));
    let stopped = Instant::now();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &first.id().to_string()])
        .status();
    let exited = wait_for(20, "the stopped worker's exit", || {
        first.try_wait().unwrap()
    });
    assert!(exited.success(), "{exited:?}");
    let job = jobs(url, d)
        .into_iter()
        .find(|j| j["id"] == held["id"])
        .unwrap();
    assert_eq!(
        (&job["state"], &job["attempts"]),
        (&Value::from("queued"), &Value::from(0)),
        "put back as it was, {:?} after the stop: {job}",
        stopped.elapsed()
    );

    let mut next = worker(url, d, "next");
    let held = asking("next");
    std::thread::sleep(Duration::from_secs(1));
    json(url, d, &["study", "cancel", "mini", "--json"]);
    let ended = wait_for(20, "the cancelled job ended", || {
        jobs(url, d)
            .into_iter()
            .find(|j| j["id"] == held["id"] && j["state"] != "running")
    });
    assert_eq!(
        (&ended["state"], &ended["progress"]["cancelled"]),
        (&Value::from("failed"), &Value::from(true)),
        "{ended}"
    );
    assert_eq!(ended["progress"]["cases"]["done"], 0, "{ended}");
    wait_for(10, "the worker idle again", || {
        (state_of(&workers_view(url, d), "next").as_deref() == Some("idle")).then_some(())
    });
    let _ = next.kill();
    let _ = next.wait();
}
