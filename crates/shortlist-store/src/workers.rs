//! The workers a database has seen, and the queue's size. Each worker process says when it
//! starts ([`Store::worker_started`]), that it is alive every beat, idle or busy
//! ([`Store::worker_seen`]), and when it stops cleanly ([`Store::worker_stopped`]); one that dies
//! just stops being seen. With the beat each stored, a reader tells a live worker from a gone
//! one without knowing how each was configured.

use std::time::Duration;

use sqlx::Row as _;

use crate::error::sql;
use crate::jobs::JobState;
use crate::{Store, StoreError, check_name, col, col_json, now_ms};

/// Rows of workers not seen for this long are dropped when another worker starts.
pub const FORGET_AFTER: Duration = Duration::from_secs(7 * 24 * 3600);

/// A worker as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerRow {
    pub name: String,
    pub host: String,
    /// Its machine fingerprint, as the worker wrote it.
    pub machine: serde_json::Value,
    /// Unix milliseconds.
    pub started_at_ms: i64,
    pub seen_at_ms: i64,
    /// How often it promised to say it is alive.
    pub beat_ms: i64,
    /// When it stopped cleanly; `None` while it runs or after it died.
    pub stopped_at_ms: Option<i64>,
}

impl WorkerRow {
    /// Alive at `now_ms`: not stopped, and seen within three beats (one late beat is not a
    /// death; a database briefly out of reach is not either).
    pub fn alive_at(&self, now_ms: i64) -> bool {
        self.stopped_at_ms.is_none()
            && now_ms.saturating_sub(self.seen_at_ms) <= self.beat_ms.saturating_mul(3)
    }
}

/// How many jobs are in each state, and how long the oldest queued one has waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueCounts {
    pub queued: u64,
    pub running: u64,
    pub done: u64,
    /// Failed for good, the cancelled ones apart.
    pub failed: u64,
    /// Failed because they were cancelled (a cancel reason is set).
    pub cancelled: u64,
    /// When the oldest queued job was queued (Unix milliseconds): queued again (`study retry`)
    /// or held back (a retry's backoff), from when it may be claimed.
    pub oldest_queued_at_ms: Option<i64>,
}

impl QueueCounts {
    /// The count of one state (`failed`: the cancelled ones included).
    pub fn of(&self, state: JobState) -> u64 {
        match state {
            JobState::Queued => self.queued,
            JobState::Running => self.running,
            JobState::Done => self.done,
            JobState::Failed => self.failed + self.cancelled,
        }
    }
}

const WORKER_COLUMNS: &str =
    "name, host, machine_json, started_at_ms, seen_at_ms, beat_ms, stopped_at_ms";

fn worker_row(row: &sqlx::any::AnyRow) -> Result<WorkerRow, StoreError> {
    let name: String = col(row, "workers", &"?", "name")?;
    let key = name.clone();
    Ok(WorkerRow {
        host: col(row, "workers", &key, "host")?,
        machine: col_json(row, "workers", &key, "machine_json")?,
        started_at_ms: col(row, "workers", &key, "started_at_ms")?,
        seen_at_ms: col(row, "workers", &key, "seen_at_ms")?,
        beat_ms: col(row, "workers", &key, "beat_ms")?,
        stopped_at_ms: col(row, "workers", &key, "stopped_at_ms")?,
        name,
    })
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4).max(1)
}

impl Store {
    /// A worker starts: its row is written anew (a name used before starts over), and rows of
    /// workers unseen for [`FORGET_AFTER`] are dropped.
    pub async fn worker_started(
        &self,
        name: &str,
        host: &str,
        machine: &serde_json::Value,
        beat: Duration,
    ) -> Result<(), StoreError> {
        let op = format!("announcing worker `{name}`");
        check_name(&op, "name", name)?;
        let now = now_ms();
        sqlx::query(
            "INSERT INTO workers (name, host, machine_json, started_at_ms, seen_at_ms, beat_ms, \
             stopped_at_ms) VALUES ($1, $2, $3, $4, $4, $5, NULL) \
             ON CONFLICT (name) DO UPDATE SET host = excluded.host, \
             machine_json = excluded.machine_json, started_at_ms = excluded.started_at_ms, \
             seen_at_ms = excluded.seen_at_ms, beat_ms = excluded.beat_ms, stopped_at_ms = NULL",
        )
        .bind(name)
        .bind(host)
        .bind(machine.to_string())
        .bind(now)
        .bind(millis(beat))
        .execute(&self.pool)
        .await
        .map_err(sql(op.clone()))?;
        sqlx::query("DELETE FROM workers WHERE seen_at_ms < $1")
            .bind(now.saturating_sub(millis(FORGET_AFTER)))
            .execute(&self.pool)
            .await
            .map_err(sql(op))?;
        Ok(())
    }

    /// A worker says it is alive. A worker whose row is gone (it was forgotten, or it started
    /// before this table existed) is told by `false`, and should announce itself again.
    pub async fn worker_seen(&self, name: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE workers SET seen_at_ms = $1 WHERE name = $2 AND stopped_at_ms IS NULL",
        )
        .bind(now_ms())
        .bind(name)
        .execute(&self.pool)
        .await
        .map_err(sql(format!("heartbeat of worker `{name}`")))?;
        Ok(done.rows_affected() == 1)
    }

    /// A worker stopped cleanly.
    pub async fn worker_stopped(&self, name: &str) -> Result<(), StoreError> {
        let now = now_ms();
        sqlx::query("UPDATE workers SET stopped_at_ms = $1, seen_at_ms = $1 WHERE name = $2")
            .bind(now)
            .bind(name)
            .execute(&self.pool)
            .await
            .map_err(sql(format!("stopping worker `{name}`")))?;
        Ok(())
    }

    /// The workers seen since `since_ms` (Unix milliseconds), the most recently seen first.
    pub async fn workers_seen_since(&self, since_ms: i64) -> Result<Vec<WorkerRow>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {WORKER_COLUMNS} FROM workers WHERE seen_at_ms >= $1 \
             ORDER BY seen_at_ms DESC, name"
        )))
        .bind(since_ms)
        .fetch_all(&self.pool)
        .await
        .map_err(sql("listing workers"))?;
        rows.iter().map(worker_row).collect()
    }

    /// How many jobs are in each state, counted by the database (not loaded).
    pub async fn queue_counts(&self) -> Result<QueueCounts, StoreError> {
        let rows = sqlx::query(
            "SELECT state, COUNT(*) AS n, COUNT(cancel_reason) AS cancelled, \
             MIN(CASE WHEN not_before_ms > created_at_ms \
             THEN not_before_ms ELSE created_at_ms END) AS oldest FROM jobs GROUP BY state",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(sql("counting jobs"))?;
        let mut out = QueueCounts::default();
        for row in &rows {
            let state: String = row.try_get("state").map_err(sql("counting jobs"))?;
            let n: i64 = row.try_get("n").map_err(sql("counting jobs"))?;
            let n = u64::try_from(n).unwrap_or(0);
            let cancelled: i64 = row.try_get("cancelled").map_err(sql("counting jobs"))?;
            let cancelled = u64::try_from(cancelled).unwrap_or(0).min(n);
            // A job asked to cancel counts under its state until it has failed for it.
            match state.as_str() {
                "queued" => {
                    out.queued = n;
                    out.oldest_queued_at_ms =
                        row.try_get("oldest").map_err(sql("counting jobs"))?;
                }
                "running" => out.running = n,
                "done" => out.done = n,
                "failed" => {
                    out.failed = n - cancelled;
                    out.cancelled = cancelled;
                }
                _ => {}
            }
        }
        Ok(out)
    }
}
