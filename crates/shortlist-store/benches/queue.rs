//! The job queue under contention: `JOBS` jobs claimed by `WORKERS` concurrent workers, each
//! with its own connection — claims per second, and whether any job was claimed twice — first
//! claims alone (every job claimed, then all completed), then whole cycles (claim, complete, claim
//! the next), the way workers use the queue. On PostgreSQL (`SHORTLIST_TEST_POSTGRES_URL`, a fresh database is made and dropped) and
//! on SQLite (a file in a temporary folder, one writer at a time by design).
//!
//! `cargo bench -p shortlist-store --bench queue [-- JOBS WORKERS]`; one JSON line per backend.

use std::collections::HashSet;
use std::time::Instant;

use shortlist_store::Store;
use shortlist_store::jobs::JobState;
use sqlx::{AnyPool, AssertSqlSafe, Executor as _};

async fn run(label: &str, url: &str, jobs: usize, workers: usize) {
    let store = Store::connect_with(url, u32::try_from(workers).unwrap_or(16) + 2)
        .await
        .expect("the database opens");
    // Open every connection first (nothing to claim yet), so that no phase pays for it.
    assert!(claim_all(&store, workers, true).await.is_empty());
    queue(&store, jobs).await;
    // Claims alone.
    let start = Instant::now();
    let claims = claim_all(&store, workers, false).await;
    let claim_s = start.elapsed().as_secs_f64();
    for (worker, id) in &claims {
        store.complete_job(*id, worker).await.expect("completes");
    }
    let claimed_once = distinct(&claims);
    // Whole cycles, on as many new jobs.
    queue(&store, jobs).await;
    let start = Instant::now();
    let cycles = claim_all(&store, workers, true).await;
    let cycle_s = start.elapsed().as_secs_f64();
    let cycled_once = distinct(&cycles);
    let done = store
        .jobs_in_state(JobState::Done)
        .await
        .expect("lists jobs")
        .len();
    println!(
        "{}",
        serde_json::json!({
            "backend": label,
            "workers": workers,
            "jobs": jobs,
            "claims_per_s": claims.len() as f64 / claim_s,
            "claim_complete_cycles_per_s": cycles.len() as f64 / cycle_s,
            "double_claims": (claims.len() - claimed_once) + (cycles.len() - cycled_once),
            "done": done,
        })
    );
    assert_eq!(claims.len(), claimed_once, "a job was claimed twice");
    assert_eq!(cycles.len(), cycled_once, "a job was claimed twice");
    assert_eq!(done, 2 * jobs, "every job done once");
    store.close().await;
}

/// Queue `jobs` jobs.
async fn queue(store: &Store, jobs: usize) {
    let payload = serde_json::json!({});
    for _ in 0..jobs {
        store
            .enqueue_job_with("bench", &payload, 1)
            .await
            .expect("queued");
    }
}

/// How many distinct jobs were claimed.
fn distinct(claims: &[(String, i64)]) -> usize {
    claims
        .iter()
        .map(|(_, id)| *id)
        .collect::<HashSet<i64>>()
        .len()
}

/// Every queued job claimed by `workers` concurrent workers (completing each at once when
/// `complete`): `(worker, job id)` per claim.
async fn claim_all(store: &Store, workers: usize, complete: bool) -> Vec<(String, i64)> {
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                let name = format!("bench-{w}");
                let mut claimed = Vec::new();
                while let Some(job) = store.claim_next_job(&name).await.expect("claims") {
                    if complete {
                        store.complete_job(job.id, &name).await.expect("completes");
                    }
                    claimed.push((name.clone(), job.id));
                }
                claimed
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("worker task"));
    }
    all
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let jobs = args.first().copied().unwrap_or(4000);
    let workers = args.get(1).copied().unwrap_or(16);
    if let Ok(admin_url) = std::env::var("SHORTLIST_TEST_POSTGRES_URL") {
        sqlx::any::install_default_drivers();
        let admin = AnyPool::connect(&admin_url).await.expect("PostgreSQL");
        let db = format!("shortlist_bench_{}", std::process::id());
        admin
            .execute(AssertSqlSafe(format!("CREATE DATABASE {db}")))
            .await
            .expect("creates the bench database");
        let (base, _) = admin_url.rsplit_once('/').expect("a database URL");
        run("postgres", &format!("{base}/{db}"), jobs, workers).await;
        admin
            .execute(AssertSqlSafe(format!("DROP DATABASE {db} WITH (FORCE)")))
            .await
            .expect("drops the bench database");
    } else {
        eprintln!("SHORTLIST_TEST_POSTGRES_URL is not set: PostgreSQL skipped");
    }
    let dir = tempfile::tempdir().expect("a temporary folder");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("q.db").display());
    run("sqlite", &url, jobs, workers).await;
}
