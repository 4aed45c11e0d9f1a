//! Progress events: each job appends its typed progress (JSON written by the runner) at a bounded
//! rate, so that any process — a web page served by another process, a worker on another host,
//! the command line — can follow a run from the database alone. Rows are append-only; a reader
//! remembers the last id it saw and asks for what came after.

use crate::error::sql;
use crate::generations::GenerationSpan;
use crate::{Store, StoreError, col, col_json};

/// One stored progress event.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressRow {
    /// Increasing: a reader asks for the rows after the last id it saw.
    pub id: i64,
    pub job_id: i64,
    /// Unix milliseconds, as the writer stamped it.
    pub at_ms: i64,
    pub event: serde_json::Value,
}

fn progress_row(row: &sqlx::any::AnyRow) -> Result<ProgressRow, StoreError> {
    let id: i64 = col(row, "progress_events", &"?", "id")?;
    Ok(ProgressRow {
        id,
        job_id: col(row, "progress_events", &id, "job_id")?,
        at_ms: col(row, "progress_events", &id, "at_ms")?,
        event: col_json(row, "progress_events", &id, "event_json")?,
    })
}

/// The PostgreSQL channel every stored progress event is announced on (payload: the job id).
pub const PROGRESS_CHANNEL: &str = "shortlist_progress";

/// Wakes its holder whenever any process stores a progress event (PostgreSQL's LISTEN/NOTIFY on
/// a connection of its own). A notification says "read now"; the rows are still read from the
/// table, so one lost while the connection is re-established costs only a poll interval.
#[derive(Debug)]
pub struct ProgressListener {
    listener: sqlx::postgres::PgListener,
}

impl ProgressListener {
    /// The next announcement: the id of the job whose progress was stored. Reconnects by itself
    /// when the connection drops.
    pub async fn next(&mut self) -> Result<i64, StoreError> {
        let note = self
            .listener
            .recv()
            .await
            .map_err(sql("waiting for progress notifications"))?;
        Ok(note.payload().parse().unwrap_or(0))
    }
}

impl Store {
    /// A listener for stored progress on PostgreSQL; `None` on SQLite, whose readers poll (it
    /// serves one host, where polling a local file costs little).
    pub async fn listen_progress(&self) -> Result<Option<ProgressListener>, StoreError> {
        if self.backend != crate::Backend::Postgres {
            return Ok(None);
        }
        let op = "listening for progress notifications";
        let mut listener = sqlx::postgres::PgListener::connect(&self.url)
            .await
            .map_err(sql(op))?;
        listener.listen(PROGRESS_CHANNEL).await.map_err(sql(op))?;
        Ok(Some(ProgressListener { listener }))
    }

    /// Append a job's progress event; returns its id.
    pub async fn put_progress(
        &self,
        job_id: i64,
        at_ms: i64,
        event: &serde_json::Value,
    ) -> Result<i64, StoreError> {
        let op = format!("storing progress of job {job_id}");
        let row = sqlx::query(
            "INSERT INTO progress_events (job_id, at_ms, event_json) VALUES ($1, $2, $3) \
             RETURNING id",
        )
        .bind(job_id)
        .bind(at_ms)
        .bind(event.to_string())
        .fetch_one(&self.pool)
        .await
        .map_err(sql(&op))?;
        col(&row, "progress_events", &op, "id")
    }

    /// The progress events of a study version's jobs after event `after` (0: from the start),
    /// oldest first, at most `limit`.
    pub async fn progress_after(
        &self,
        study: &str,
        version: u32,
        after: i64,
        limit: u32,
    ) -> Result<Vec<ProgressRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT p.id, p.job_id, p.at_ms, p.event_json FROM progress_events p \
             JOIN jobs j ON j.id = p.job_id \
             WHERE j.study = $1 AND j.study_version = $2 AND p.id > $3 ORDER BY p.id LIMIT $4",
        )
        .bind(study)
        .bind(i64::from(version))
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(sql(format!(
            "reading progress of study `{study}` v{version}"
        )))?;
        rows.iter().map(progress_row).collect()
    }

    /// The latest progress event of each of a study version's jobs that has one.
    pub async fn latest_progress(
        &self,
        study: &str,
        version: u32,
    ) -> Result<Vec<ProgressRow>, StoreError> {
        self.latest_progress_in(study, version, GenerationSpan::ALL)
            .await
    }

    /// The latest progress event of each job of a study version's generations in `span` that
    /// has one. (From the jobs to their newest event through the index on `job_id`: a study with
    /// a year of nightly runs has a hundred thousand events.)
    pub async fn latest_progress_in(
        &self,
        study: &str,
        version: u32,
        span: GenerationSpan,
    ) -> Result<Vec<ProgressRow>, StoreError> {
        let query = span.bind(
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT p.id, p.job_id, p.at_ms, p.event_json FROM jobs j \
             JOIN progress_events p \
             ON p.id = (SELECT MAX(q.id) FROM progress_events q WHERE q.job_id = j.id) \
             WHERE j.study = $1 AND j.study_version = $2{} \
             ORDER BY p.job_id",
                span.condition("j.generation", 3)
            )))
            .bind(study)
            .bind(i64::from(version)),
        );
        let rows = query.fetch_all(&self.pool).await.map_err(sql(format!(
            "reading the latest progress of study `{study}` v{version}"
        )))?;
        rows.iter().map(progress_row).collect()
    }

    /// The newest progress event id of all (0 when there is none): where a follower starts.
    pub async fn last_progress_id(&self) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT COALESCE(MAX(id), 0) AS last FROM progress_events")
            .fetch_one(&self.pool)
            .await
            .map_err(sql("reading the last progress id"))?;
        col(&row, "progress_events", &"max", "last")
    }
}
