//! The job queue: rows that workers claim one at a time. A claim is one atomic statement under a
//! lock — `FOR UPDATE SKIP LOCKED` on PostgreSQL, so workers on many hosts skip each other's
//! rows instead of waiting; `BEGIN IMMEDIATE` on SQLite, whose single writer serializes claims —
//! so no job is ever held by two workers. A worker that dies leaves its job `running` with an
//! old heartbeat; [`Store::requeue_stale_jobs`] hands it back to the queue.

use std::time::Duration;

use crate::error::sql;
use crate::generations::GenerationSpan;
use crate::{Backend, Store, StoreError, check_name, col, col_json, now_ms};

/// Attempts a job gets before a stale claim fails it for good.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Queued,
    Running,
    Done,
    Failed,
}

impl JobState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }
    fn parse(s: &str) -> Option<JobState> {
        Some(match s {
            "queued" => JobState::Queued,
            "running" => JobState::Running,
            "done" => JobState::Done,
            "failed" => JobState::Failed,
            _ => return None,
        })
    }
}

/// A job row.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: i64,
    pub kind: String,
    pub payload: serde_json::Value,
    pub state: JobState,
    /// Claims so far, this one included.
    pub attempts: u32,
    pub max_attempts: u32,
    pub claimed_by: Option<String>,
    pub last_error: Option<String>,
    /// The study version, generation and candidate the job belongs to (`None` for jobs queued
    /// without them).
    pub study: Option<String>,
    pub study_version: Option<u32>,
    pub generation: Option<u32>,
    pub candidate: Option<String>,
    /// The job this one waits for: it is claimed only once that one is done or failed.
    pub depends_on: Option<i64>,
    /// A retried job is not claimed before this instant (Unix milliseconds).
    pub not_before_ms: Option<i64>,
    /// Unix milliseconds.
    pub created_at_ms: i64,
    pub heartbeat_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    /// Why the job was cancelled, once it was: a running job's worker stops it at the end of
    /// the unit in hand and fails it with this reason; it never goes back to the queue.
    pub cancel_reason: Option<String>,
}

/// What cancelling a generation did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cancelled {
    /// Queued jobs, failed at once.
    pub failed: Vec<i64>,
    /// Running jobs, marked: their workers stop them at the end of the unit in hand.
    pub stopping: Vec<i64>,
}

/// A job to queue.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub kind: String,
    pub payload: serde_json::Value,
    pub study: String,
    pub study_version: u32,
    pub generation: u32,
    pub candidate: String,
    pub depends_on: Option<i64>,
    pub max_attempts: u32,
    /// The group this job belongs to (the shards of one quality run).
    pub group: Option<String>,
    /// A group this job waits for: claimable only once every job of it is done or failed.
    pub waits_for_group: Option<String>,
    /// Claimed before every queued job of a lower priority, whatever their age (0: in order of
    /// age; the parts of a split load step go first, so that their workers gather quickly).
    pub priority: i64,
}

/// What becomes of a failed job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// It failed for good (bad input does not get better on retry).
    Never,
    /// Back to the queue, claimable again after this long, while attempts are left.
    After(Duration),
}

const JOB_COLUMNS: &str = "id, kind, payload_json, state, attempts, max_attempts, claimed_by, \
     last_error, study, study_version, generation, candidate, depends_on, not_before_ms, \
     created_at_ms, heartbeat_ms, finished_at_ms, cancel_reason";

fn job_row(row: &sqlx::any::AnyRow) -> Result<Job, StoreError> {
    let id: i64 = col(row, "jobs", &"?", "id")?;
    let state: String = col(row, "jobs", &id, "state")?;
    let opt_u32 = |column: &'static str| -> Result<Option<u32>, StoreError> {
        let v: Option<i64> = col(row, "jobs", &id, column)?;
        v.map(|v| {
            u32::try_from(v).map_err(|_| StoreError::Corrupt {
                table: "jobs",
                key: id.to_string(),
                column,
                why: format!("{v} is out of range"),
            })
        })
        .transpose()
    };
    Ok(Job {
        id,
        kind: col(row, "jobs", &id, "kind")?,
        payload: col_json(row, "jobs", &id, "payload_json")?,
        state: JobState::parse(&state).ok_or_else(|| StoreError::Corrupt {
            table: "jobs",
            key: id.to_string(),
            column: "state",
            why: format!("unknown state `{state}`"),
        })?,
        attempts: crate::col_u(row, "jobs", &id, "attempts")?,
        max_attempts: crate::col_u(row, "jobs", &id, "max_attempts")?,
        claimed_by: col(row, "jobs", &id, "claimed_by")?,
        last_error: col(row, "jobs", &id, "last_error")?,
        study: col(row, "jobs", &id, "study")?,
        study_version: opt_u32("study_version")?,
        generation: opt_u32("generation")?,
        candidate: col(row, "jobs", &id, "candidate")?,
        depends_on: col(row, "jobs", &id, "depends_on")?,
        not_before_ms: col(row, "jobs", &id, "not_before_ms")?,
        created_at_ms: col(row, "jobs", &id, "created_at_ms")?,
        heartbeat_ms: col(row, "jobs", &id, "heartbeat_ms")?,
        finished_at_ms: col(row, "jobs", &id, "finished_at_ms")?,
        cancel_reason: col(row, "jobs", &id, "cancel_reason")?,
    })
}

/// The claimable jobs, highest priority first, then oldest first: queued, past their backoff, and
/// not waiting for an unfinished job. `$2` is now. The order is the one of the partial index
/// `jobs_queued`, so a claim reads queued rows only.
const CLAIMABLE: &str = "SELECT j.id FROM jobs j WHERE j.state = 'queued' \
     AND j.cancel_requested_at_ms IS NULL \
     AND (j.not_before_ms IS NULL OR j.not_before_ms <= $2) \
     AND (j.depends_on IS NULL OR EXISTS (SELECT 1 FROM jobs d WHERE d.id = j.depends_on \
          AND d.state IN ('done', 'failed'))) \
     AND (j.waits_for_grp IS NULL OR NOT EXISTS (SELECT 1 FROM jobs g \
          WHERE g.grp = j.waits_for_grp AND g.state NOT IN ('done', 'failed'))) \
     ORDER BY j.priority DESC, j.id LIMIT 1";

/// Fail the unfinished runs of job `$2`, when the job failed (for good, or cancelled): with the
/// job's error, stamped cancelled when it was. A job's runs are its study version's, generation's
/// and candidate's of its kind (a load job's: `load` and `sweep`); `$1` is now.
const END_RUNS: &str = "UPDATE runs SET state = 'failed', finished_at_ms = $1, \
     error = (SELECT j.last_error FROM jobs j WHERE j.id = $2), \
     cancelled_at_ms = (SELECT j.cancel_requested_at_ms FROM jobs j WHERE j.id = $2) \
     WHERE state IN ('pending', 'running') AND EXISTS (SELECT 1 FROM jobs j \
         JOIN studies s ON s.name = j.study AND s.version = j.study_version \
         WHERE j.id = $2 AND j.state = 'failed' AND s.id = runs.study_id \
         AND j.generation = runs.generation AND j.candidate = runs.candidate \
         AND (j.kind = runs.kind OR (j.kind = 'load' AND runs.kind = 'sweep')))";

/// [`END_RUNS`] for each of `ids`, in the transaction that failed them.
async fn end_runs_of(
    tx: &mut sqlx::AnyConnection,
    ids: &[i64],
    now: i64,
    op: &str,
) -> Result<(), StoreError> {
    for id in ids {
        sqlx::query(END_RUNS)
            .bind(now)
            .bind(*id)
            .execute(&mut *tx)
            .await
            .map_err(sql(op))?;
    }
    Ok(())
}

/// The `id` column of rows an update returned.
fn ids_of(rows: &[sqlx::any::AnyRow]) -> Result<Vec<i64>, StoreError> {
    rows.iter().map(|r| col(r, "jobs", &"?", "id")).collect()
}

impl Store {
    /// Queue a job; returns its id.
    pub async fn enqueue_job(
        &self,
        kind: &str,
        payload: &serde_json::Value,
    ) -> Result<i64, StoreError> {
        self.enqueue_job_with(kind, payload, DEFAULT_MAX_ATTEMPTS)
            .await
    }

    /// [`Store::enqueue_job`] with its own attempt limit (at least 1).
    pub async fn enqueue_job_with(
        &self,
        kind: &str,
        payload: &serde_json::Value,
        max_attempts: u32,
    ) -> Result<i64, StoreError> {
        let op = format!("queueing a `{kind}` job");
        check_name(&op, "kind", kind)?;
        let row = sqlx::query(
            "INSERT INTO jobs (kind, payload_json, state, attempts, max_attempts, created_at_ms) \
             VALUES ($1, $2, 'queued', 0, $3, $4) RETURNING id",
        )
        .bind(kind)
        .bind(payload.to_string())
        .bind(i64::from(max_attempts.max(1)))
        .bind(now_ms())
        .fetch_one(&self.pool)
        .await
        .map_err(sql(&op))?;
        col(&row, "jobs", &op, "id")
    }

    /// Queue a job of a study generation; returns its id.
    pub async fn enqueue(&self, job: &NewJob) -> Result<i64, StoreError> {
        let op = format!("queueing a `{}` job of `{}`", job.kind, job.candidate);
        check_name(&op, "kind", &job.kind)?;
        let row = sqlx::query(
            "INSERT INTO jobs (kind, payload_json, state, attempts, max_attempts, created_at_ms, \
             study, study_version, generation, candidate, depends_on, grp, waits_for_grp, \
             priority) \
             VALUES ($1, $2, 'queued', 0, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id",
        )
        .bind(&job.kind)
        .bind(job.payload.to_string())
        .bind(i64::from(job.max_attempts.max(1)))
        .bind(now_ms())
        .bind(&job.study)
        .bind(i64::from(job.study_version))
        .bind(i64::from(job.generation))
        .bind(&job.candidate)
        .bind(job.depends_on)
        .bind(job.group.as_deref())
        .bind(job.waits_for_group.as_deref())
        .bind(job.priority)
        .fetch_one(&self.pool)
        .await
        .map_err(sql(&op))?;
        col(&row, "jobs", &op, "id")
    }

    /// The jobs of a study version (every generation), oldest first.
    pub async fn jobs_of_study(&self, study: &str, version: u32) -> Result<Vec<Job>, StoreError> {
        self.jobs_of_study_in(study, version, GenerationSpan::ALL)
            .await
    }

    /// The jobs of a study version's generations in `span`, oldest first.
    pub async fn jobs_of_study_in(
        &self,
        study: &str,
        version: u32,
        span: GenerationSpan,
    ) -> Result<Vec<Job>, StoreError> {
        let query = span.bind(sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE study = $1 AND study_version = $2{} ORDER BY id",
            span.condition("generation", 3)
        )))
        .bind(study)
        .bind(i64::from(version)));
        let rows = query.fetch_all(&self.pool).await.map_err(sql(format!(
            "listing the jobs of study `{study}` v{version}"
        )))?;
        rows.iter().map(job_row).collect()
    }

    /// The newest generation that has jobs of a study version (`None`: none has).
    pub async fn latest_job_generation(
        &self,
        study: &str,
        version: u32,
    ) -> Result<Option<u32>, StoreError> {
        let op = format!("reading the newest generation of study `{study}` v{version}");
        let row = sqlx::query(
            "SELECT MAX(generation) AS latest FROM jobs WHERE study = $1 AND study_version = $2",
        )
        .bind(study)
        .bind(i64::from(version))
        .fetch_one(&self.pool)
        .await
        .map_err(sql(&op))?;
        let latest: Option<i64> = col(&row, "jobs", &op, "latest")?;
        latest
            .map(|g| {
                u32::try_from(g).map_err(|_| StoreError::Corrupt {
                    table: "jobs",
                    key: op.clone(),
                    column: "generation",
                    why: format!("{g} is not a generation number"),
                })
            })
            .transpose()
    }

    /// Claim the oldest claimable job for `worker` (queued, past its retry backoff, and not
    /// waiting for an unfinished job), or `None` when there is none. Never returns a job another
    /// worker holds.
    pub async fn claim_next_job(&self, worker: &str) -> Result<Option<Job>, StoreError> {
        let op = format!("claiming a job for worker `{worker}`");
        check_name(&op, "worker", worker)?;
        let sql_text = match self.backend {
            Backend::Postgres => format!(
                "UPDATE jobs SET state = 'running', attempts = attempts + 1, claimed_by = $1, \
                 claimed_at_ms = $2, heartbeat_ms = $2 \
                 WHERE id = ({CLAIMABLE} FOR UPDATE SKIP LOCKED) RETURNING {JOB_COLUMNS}"
            ),
            Backend::Sqlite => format!(
                "UPDATE jobs SET state = 'running', attempts = attempts + 1, claimed_by = $1, \
                 claimed_at_ms = $2, heartbeat_ms = $2 \
                 WHERE id = ({CLAIMABLE}) RETURNING {JOB_COLUMNS}"
            ),
        };
        let query = sqlx::query(sqlx::AssertSqlSafe(sql_text))
            .bind(worker)
            .bind(now_ms());
        let row = match self.backend {
            // One statement is one transaction: the row lock and the update commit together,
            // in one round trip instead of three (BEGIN, UPDATE, COMMIT).
            Backend::Postgres => query.fetch_optional(&self.pool).await.map_err(sql(&op))?,
            // The write lock first, so that two claims never read the same queued row.
            Backend::Sqlite => {
                let mut tx = self.write_tx(&op).await?;
                let row = query.fetch_optional(&mut *tx).await.map_err(sql(&op))?;
                tx.commit().await.map_err(sql(&op))?;
                row
            }
        };
        let job = row.as_ref().map(job_row).transpose()?;
        if let Some(job) = &job {
            tracing::debug!(job = job.id, kind = %job.kind, worker, attempt = job.attempts, "job claimed");
        }
        Ok(job)
    }

    /// A job by id.
    pub async fn job(&self, id: i64) -> Result<Job, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(sql(format!("loading job {id}")))?
        .ok_or_else(|| StoreError::NotFound {
            what: format!("job {id}"),
        })?;
        job_row(&row)
    }

    /// Jobs in a state, oldest first.
    pub async fn jobs_in_state(&self, state: JobState) -> Result<Vec<Job>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE state = $1 ORDER BY id"
        )))
        .bind(state.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(sql(format!("listing {} jobs", state.as_str())))?;
        rows.iter().map(job_row).collect()
    }

    /// Say that `worker` is still working on job `id`. Answers the reason when the job was
    /// cancelled meanwhile: the worker stops it at the end of the unit in hand.
    pub async fn heartbeat_job(&self, id: i64, worker: &str) -> Result<Option<String>, StoreError> {
        let row = sqlx::query(
            "UPDATE jobs SET heartbeat_ms = $1 \
             WHERE id = $2 AND state = 'running' AND claimed_by = $3 RETURNING cancel_reason",
        )
        .bind(now_ms())
        .bind(id)
        .bind(worker)
        .fetch_optional(&self.pool)
        .await
        .map_err(sql(format!("heartbeat of job {id}")))?;
        match row {
            Some(row) => col(&row, "jobs", &id, "cancel_reason"),
            None => self.held_or_error(id, worker, 0).await.map(|()| None),
        }
    }

    /// Cancel the unfinished jobs of generation `generation` of study `study` v`version`:
    /// queued ones fail now with `reason`; running ones are marked, and their workers fail them
    /// with it once they hear of it with their next heartbeat (a cancelled job is never queued
    /// again, whatever its worker does). Jobs already cancelled are left as they are. A job that fails ends its
    /// unfinished runs with it (failed, stamped cancelled), here and wherever a job fails.
    pub async fn cancel_jobs(
        &self,
        study: &str,
        version: u32,
        generation: u32,
        reason: &str,
    ) -> Result<Cancelled, StoreError> {
        let op = format!("cancelling generation {generation} of study `{study}` v{version}");
        let now = now_ms();
        // Queued jobs fail now; running ones are told (once) through their next heartbeat.
        let statements = [
            "UPDATE jobs SET state = 'failed', last_error = $1, finished_at_ms = $2, \
             cancel_requested_at_ms = $2, cancel_reason = $1, not_before_ms = NULL \
             WHERE study = $3 AND study_version = $4 AND generation = $5 AND state = 'queued' \
             RETURNING id",
            "UPDATE jobs SET cancel_requested_at_ms = $2, cancel_reason = $1 \
             WHERE study = $3 AND study_version = $4 AND generation = $5 AND state = 'running' \
             AND cancel_requested_at_ms IS NULL RETURNING id",
        ];
        let mut tx = self.write_tx(&op).await?;
        let mut found: [Vec<i64>; 2] = Default::default();
        for (statement, ids) in statements.into_iter().zip(&mut found) {
            let rows = sqlx::query(statement)
                .bind(reason)
                .bind(now)
                .bind(study)
                .bind(i64::from(version))
                .bind(i64::from(generation))
                .fetch_all(&mut *tx)
                .await
                .map_err(sql(&op))?;
            *ids = ids_of(&rows)?;
        }
        // A queued job may hold a run it started before it was handed back.
        end_runs_of(&mut tx, &found[0], now, &op).await?;
        tx.commit().await.map_err(sql(&op))?;
        let [mut failed, mut stopping] = found;
        failed.sort_unstable();
        stopping.sort_unstable();
        Ok(Cancelled { failed, stopping })
    }

    /// Mark a job done. Refused if `worker` no longer holds it (its claim went stale and the job
    /// was handed to someone else).
    pub async fn complete_job(&self, id: i64, worker: &str) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE jobs SET state = 'done', finished_at_ms = $1 \
             WHERE id = $2 AND state = 'running' AND claimed_by = $3",
        )
        .bind(now_ms())
        .bind(id)
        .bind(worker)
        .execute(&self.pool)
        .await
        .map_err(sql(format!("completing job {id}")))?;
        self.held_or_error(id, worker, done.rows_affected()).await
    }

    /// Record a failure. With [`Retry::After`] and attempts left, the job goes back to the
    /// queue, claimable after the backoff; otherwise — or when it was cancelled — it fails for
    /// good, and so do its unfinished runs.
    pub async fn fail_job(
        &self,
        id: i64,
        worker: &str,
        error: &str,
        retry: Retry,
    ) -> Result<JobState, StoreError> {
        let (retry, backoff_ms) = match retry {
            Retry::Never => (0i64, 0i64),
            Retry::After(d) => (1, i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2)),
        };
        let now = now_ms();
        let op = format!("failing job {id}");
        let mut tx = self.write_tx(&op).await?;
        let done = sqlx::query(
            "UPDATE jobs SET last_error = $1, claimed_by = NULL, claimed_at_ms = NULL, \
             heartbeat_ms = NULL, \
             state = CASE WHEN $2 = 1 AND attempts < max_attempts \
                 AND cancel_requested_at_ms IS NULL THEN 'queued' ELSE 'failed' END, \
             finished_at_ms = CASE WHEN $2 = 1 AND attempts < max_attempts \
                 AND cancel_requested_at_ms IS NULL THEN NULL ELSE $3 END, \
             not_before_ms = CASE WHEN $2 = 1 AND attempts < max_attempts \
                 AND cancel_requested_at_ms IS NULL THEN $6 ELSE NULL END \
             WHERE id = $4 AND state = 'running' AND claimed_by = $5",
        )
        .bind(error)
        .bind(retry)
        .bind(now)
        .bind(id)
        .bind(worker)
        .bind(now.saturating_add(backoff_ms))
        .execute(&mut *tx)
        .await
        .map_err(sql(&op))?;
        if done.rows_affected() == 1 {
            end_runs_of(&mut tx, &[id], now, &op).await?;
        }
        tx.commit().await.map_err(sql(&op))?;
        self.held_or_error(id, worker, done.rows_affected()).await?;
        Ok(self.job(id).await?.state)
    }

    /// Queue again the failed jobs of generation `generation` of study `study` v`version` — and,
    /// when there are any, its finished jobs of the kinds `redo` (the records, which must be
    /// made again from what the retried jobs add) — each as new: no attempts, no error, not
    /// cancelled. Their dependencies stay: a requeued job waits for the one before it as before.
    /// Returns the requeued ids; none when nothing of the generation failed.
    pub async fn retry_failed_jobs(
        &self,
        study: &str,
        version: u32,
        generation: u32,
        redo: &[&str],
    ) -> Result<Vec<i64>, StoreError> {
        let op = format!("retrying generation {generation} of study `{study}` v{version}");
        let mut tx = self.write_tx(&op).await?;
        let failed: i64 = sqlx::query(
            "SELECT COUNT(*) AS n FROM jobs WHERE study = $1 AND study_version = $2 \
             AND generation = $3 AND state = 'failed'",
        )
        .bind(study)
        .bind(i64::from(version))
        .bind(i64::from(generation))
        .fetch_one(&mut *tx)
        .await
        .map_err(sql(&op))
        .and_then(|row| col(&row, "jobs", &op, "n"))?;
        if failed == 0 {
            return Ok(Vec::new());
        }
        // The kinds to redo are few and the store's own names: bound, one placeholder each.
        let kinds = (0..redo.len())
            .map(|i| format!("${}", i + 5))
            .collect::<Vec<_>>()
            .join(", ");
        let redo_clause = if redo.is_empty() {
            String::new()
        } else {
            format!(" OR (state = 'done' AND kind IN ({kinds}))")
        };
        let mut query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE jobs SET state = 'queued', attempts = 0, claimed_by = NULL, \
             claimed_at_ms = NULL, heartbeat_ms = NULL, last_error = NULL, finished_at_ms = NULL, \
             not_before_ms = $4, cancel_requested_at_ms = NULL, cancel_reason = NULL \
             WHERE study = $1 AND study_version = $2 AND generation = $3 \
             AND (state = 'failed'{redo_clause}) RETURNING id"
        )))
        .bind(study)
        .bind(i64::from(version))
        .bind(i64::from(generation))
        // Claimable from now: the queue counts its wait from here, not from the generation's
        // start.
        .bind(now_ms());
        for kind in redo {
            query = query.bind(*kind);
        }
        let rows = query.fetch_all(&mut *tx).await.map_err(sql(&op))?;
        tx.commit().await.map_err(sql(&op))?;
        let mut ids = ids_of(&rows)?;
        ids.sort_unstable();
        Ok(ids)
    }

    /// Hand back to the queue every running job whose heartbeat is older than `stale_after`
    /// (its worker died), claimable from now; a job out of attempts fails instead. Returns how
    /// many were requeued and how many failed.
    pub async fn requeue_stale_jobs(
        &self,
        stale_after: Duration,
    ) -> Result<(u64, u64), StoreError> {
        let now = now_ms();
        let cutoff = now - i64::try_from(stale_after.as_millis()).unwrap_or(i64::MAX);
        let op = "requeueing stale jobs";
        let mut tx = self.write_tx(op).await?;
        let failed = sqlx::query(
            "UPDATE jobs SET state = 'failed', finished_at_ms = $1, claimed_by = NULL, \
             last_error = COALESCE(cancel_reason, last_error, \
                 'worker stopped answering (stale heartbeat)') \
             WHERE state = 'running' AND heartbeat_ms < $2 \
             AND (attempts >= max_attempts OR cancel_requested_at_ms IS NOT NULL) RETURNING id",
        )
        .bind(now)
        .bind(cutoff)
        .fetch_all(&mut *tx)
        .await
        .map_err(sql(op))?;
        let failed = ids_of(&failed)?;
        end_runs_of(&mut tx, &failed, now, op).await?;
        let failed = failed.len() as u64;
        let requeued = sqlx::query(
            // Claimable from now: the queue counts its wait from the hand-back.
            "UPDATE jobs SET state = 'queued', claimed_by = NULL, claimed_at_ms = NULL, \
             heartbeat_ms = NULL, not_before_ms = $2 WHERE state = 'running' AND heartbeat_ms < $1",
        )
        .bind(cutoff)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(sql(op))?
        .rows_affected();
        tx.commit().await.map_err(sql(op))?;
        if requeued + failed > 0 {
            tracing::info!(requeued, failed, "stale jobs handed back");
        }
        Ok((requeued, failed))
    }

    /// Hand a running job back to the queue without counting the attempt (a worker asked to
    /// stop between cases), claimable from now — or, when it was cancelled meanwhile, fail it
    /// with the reason.
    pub async fn release_job(&self, id: i64, worker: &str) -> Result<(), StoreError> {
        let op = format!("releasing job {id}");
        let now = now_ms();
        let mut tx = self.write_tx(&op).await?;
        let done = sqlx::query(
            "UPDATE jobs SET claimed_by = NULL, claimed_at_ms = NULL, heartbeat_ms = NULL, \
             state = CASE WHEN cancel_requested_at_ms IS NULL THEN 'queued' ELSE 'failed' END, \
             last_error = CASE WHEN cancel_requested_at_ms IS NULL THEN last_error \
                 ELSE cancel_reason END, \
             finished_at_ms = CASE WHEN cancel_requested_at_ms IS NULL THEN NULL ELSE $3 END, \
             attempts = CASE WHEN attempts > 0 AND cancel_requested_at_ms IS NULL \
                 THEN attempts - 1 ELSE attempts END, \
             not_before_ms = CASE WHEN cancel_requested_at_ms IS NULL THEN $3 ELSE NULL END \
             WHERE id = $1 AND state = 'running' AND claimed_by = $2",
        )
        .bind(id)
        .bind(worker)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(sql(&op))?;
        if done.rows_affected() == 1 {
            end_runs_of(&mut tx, &[id], now, &op).await?;
        }
        tx.commit().await.map_err(sql(&op))?;
        self.held_or_error(id, worker, done.rows_affected()).await
    }

    async fn held_or_error(&self, id: i64, worker: &str, affected: u64) -> Result<(), StoreError> {
        if affected == 1 {
            return Ok(());
        }
        let job = self.job(id).await?;
        Err(StoreError::JobNotHeld {
            id,
            worker: worker.to_owned(),
            state: job.state.as_str().to_owned(),
            holder: job.claimed_by.unwrap_or_else(|| "nobody".to_owned()),
        })
    }
}
