//! Schedules (a study run again at the instants of a cron expression) and their ticks, and the
//! baselines regression checks compare against. A tick is
//! claimed by inserting its `(schedule, due instant)` row: the unique key makes the claim, so
//! several schedulers on one database never run a tick twice.

use sqlx::Row as _;

use crate::error::{sql, sql_or_taken};
use crate::{Store, StoreError, check_name, col, now_ms};

/// What a scheduled run runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleWhat {
    Quality,
    Load,
    All,
}

impl ScheduleWhat {
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleWhat::Quality => "quality",
            ScheduleWhat::Load => "load",
            ScheduleWhat::All => "all",
        }
    }

    pub fn parse(text: &str) -> Option<ScheduleWhat> {
        match text {
            "quality" => Some(ScheduleWhat::Quality),
            "load" => Some(ScheduleWhat::Load),
            "all" => Some(ScheduleWhat::All),
            _ => None,
        }
    }
}

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRow {
    pub id: i64,
    pub name: String,
    pub study: String,
    /// A pinned version, or `None`: the latest locked version at each tick.
    pub study_version: Option<u32>,
    pub cron: String,
    pub tz: String,
    pub what: ScheduleWhat,
    /// Empty: all of the study's candidates.
    pub candidates: Vec<String>,
    pub enabled: bool,
    /// Unix milliseconds: due only at instants after this.
    pub from_ms: i64,
    pub created_at_ms: i64,
}

/// How a tick ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickState {
    /// A run was queued for it.
    Started,
    /// Caught up by a later tick, not run.
    Skipped,
    /// Due, but no run could be queued (the reason is in `detail`).
    Failed,
}

impl TickState {
    pub fn as_str(self) -> &'static str {
        match self {
            TickState::Started => "started",
            TickState::Skipped => "skipped",
            TickState::Failed => "failed",
        }
    }
    fn parse(text: &str) -> Option<TickState> {
        match text {
            "started" => Some(TickState::Started),
            "skipped" => Some(TickState::Skipped),
            "failed" => Some(TickState::Failed),
            _ => None,
        }
    }
}

/// A handled due instant of a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickRow {
    pub schedule_id: i64,
    /// Unix milliseconds of the due instant.
    pub due_ms: i64,
    pub state: TickState,
    pub study_version: Option<u32>,
    pub generation: Option<u32>,
    pub detail: Option<String>,
    pub claimed_by: String,
    pub created_at_ms: i64,
    /// The night's verdict and check document (`shortlist.night.v1`), once its run finished
    /// and was checked.
    pub verdict: Option<String>,
    pub report: Option<String>,
}

const SCHEDULE_COLUMNS: &str = "id, name, study, study_version, cron, tz, what, candidates, \
                                enabled, from_ms, created_at_ms";

fn schedule_row(row: &sqlx::any::AnyRow) -> Result<ScheduleRow, StoreError> {
    let id: i64 = col(row, "schedules", &"?", "id")?;
    let version: Option<i64> = col(row, "schedules", &id, "study_version")?;
    let what: String = col(row, "schedules", &id, "what")?;
    let candidates: String = col(row, "schedules", &id, "candidates")?;
    let enabled: i64 = col(row, "schedules", &id, "enabled")?;
    Ok(ScheduleRow {
        id,
        name: col(row, "schedules", &id, "name")?,
        study: col(row, "schedules", &id, "study")?,
        study_version: version.and_then(|v| u32::try_from(v).ok()),
        cron: col(row, "schedules", &id, "cron")?,
        tz: col(row, "schedules", &id, "tz")?,
        what: ScheduleWhat::parse(&what).ok_or_else(|| StoreError::Corrupt {
            table: "schedules",
            key: id.to_string(),
            column: "what",
            why: format!("{what:?} is not quality, load or all"),
        })?,
        candidates: candidates
            .split(',')
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect(),
        enabled: enabled != 0,
        from_ms: col(row, "schedules", &id, "from_ms")?,
        created_at_ms: col(row, "schedules", &id, "created_at_ms")?,
    })
}

fn tick_row(row: &sqlx::any::AnyRow) -> Result<TickRow, StoreError> {
    let schedule_id: i64 = col(row, "schedule_ticks", &"?", "schedule_id")?;
    let due_ms: i64 = col(row, "schedule_ticks", &schedule_id, "due_ms")?;
    let key = format!("schedule {schedule_id} at {due_ms}");
    let state: String = col(row, "schedule_ticks", &key, "state")?;
    let version: Option<i64> = col(row, "schedule_ticks", &key, "study_version")?;
    let generation: Option<i64> = col(row, "schedule_ticks", &key, "generation")?;
    Ok(TickRow {
        schedule_id,
        due_ms,
        state: TickState::parse(&state).ok_or_else(|| StoreError::Corrupt {
            table: "schedule_ticks",
            key: key.clone(),
            column: "state",
            why: format!("{state:?} is not started, skipped or failed"),
        })?,
        study_version: version.and_then(|v| u32::try_from(v).ok()),
        generation: generation.and_then(|v| u32::try_from(v).ok()),
        detail: col(row, "schedule_ticks", &key, "detail")?,
        claimed_by: col(row, "schedule_ticks", &key, "claimed_by")?,
        created_at_ms: col(row, "schedule_ticks", &key, "created_at_ms")?,
        verdict: col(row, "schedule_ticks", &key, "verdict")?,
        report: col(row, "schedule_ticks", &key, "report")?,
    })
}

/// A new schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSchedule<'a> {
    pub name: &'a str,
    pub study: &'a str,
    pub study_version: Option<u32>,
    pub cron: &'a str,
    pub tz: &'a str,
    pub what: ScheduleWhat,
    pub candidates: &'a [String],
    pub from_ms: i64,
}

impl Store {
    /// Store a new schedule; a name already taken is refused.
    pub async fn add_schedule(&self, s: &NewSchedule<'_>) -> Result<ScheduleRow, StoreError> {
        let op = format!("adding schedule `{}`", s.name);
        check_name(&op, "name", s.name)?;
        sqlx::query(
            "INSERT INTO schedules (name, study, study_version, cron, tz, what, candidates, \
             enabled, from_ms, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $9)",
        )
        .bind(s.name)
        .bind(s.study)
        .bind(s.study_version.map(i64::from))
        .bind(s.cron)
        .bind(s.tz)
        .bind(s.what.as_str())
        .bind(s.candidates.join(","))
        .bind(s.from_ms)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(sql_or_taken(
            op,
            "name",
            format!("a schedule named `{}` exists", s.name),
        ))?;
        self.schedule(s.name).await
    }

    /// A schedule by name.
    pub async fn schedule(&self, name: &str) -> Result<ScheduleRow, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE name = $1"
        )))
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(sql(format!("loading schedule `{name}`")))?
        .ok_or_else(|| StoreError::NotFound {
            what: format!("schedule `{name}`"),
        })?;
        schedule_row(&row)
    }

    /// Every schedule, by name.
    pub async fn schedules(&self) -> Result<Vec<ScheduleRow>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY name"
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(sql("listing schedules"))?;
        rows.iter().map(schedule_row).collect()
    }

    /// Pause (`false`) or resume (`true`) a schedule.
    pub async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<(), StoreError> {
        let done = sqlx::query("UPDATE schedules SET enabled = $1 WHERE name = $2")
            .bind(i64::from(enabled))
            .bind(name)
            .execute(&self.pool)
            .await
            .map_err(sql(format!("updating schedule `{name}`")))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound {
                what: format!("schedule `{name}`"),
            });
        }
        Ok(())
    }

    /// Remove a schedule with its ticks, webhooks and deliveries (the runs it started stay).
    pub async fn remove_schedule(&self, name: &str) -> Result<(), StoreError> {
        let op = format!("removing schedule `{name}`");
        let s = self.schedule(name).await?;
        let mut tx = self.write_tx(&op).await?;
        for q in [
            "DELETE FROM deliveries WHERE schedule_id = $1",
            "DELETE FROM webhooks WHERE schedule_id = $1",
            "DELETE FROM schedule_ticks WHERE schedule_id = $1",
            "DELETE FROM schedules WHERE id = $1",
        ] {
            sqlx::query(q)
                .bind(s.id)
                .execute(&mut *tx)
                .await
                .map_err(sql(op.clone()))?;
        }
        tx.commit().await.map_err(sql(op))?;
        Ok(())
    }

    /// Claim a due instant of a schedule: `true` when this caller inserted its row (and so
    /// handles it), `false` when another already had.
    pub async fn claim_tick(
        &self,
        schedule_id: i64,
        due_ms: i64,
        state: TickState,
        claimed_by: &str,
    ) -> Result<bool, StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO schedule_ticks (schedule_id, due_ms, state, claimed_by, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (schedule_id, due_ms) DO NOTHING",
        )
        .bind(schedule_id)
        .bind(due_ms)
        .bind(state.as_str())
        .bind(claimed_by)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(sql(format!(
            "claiming tick {due_ms} of schedule {schedule_id}"
        )))?;
        Ok(inserted.rows_affected() == 1)
    }

    /// Record what a claimed tick did.
    pub async fn finish_tick(
        &self,
        schedule_id: i64,
        due_ms: i64,
        state: TickState,
        run: Option<(u32, u32)>,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE schedule_ticks SET state = $1, study_version = $2, generation = $3, detail = $4 \
             WHERE schedule_id = $5 AND due_ms = $6",
        )
        .bind(state.as_str())
        .bind(run.map(|(v, _)| i64::from(v)))
        .bind(run.map(|(_, g)| i64::from(g)))
        .bind(detail)
        .bind(schedule_id)
        .bind(due_ms)
        .execute(&self.pool)
        .await
        .map_err(sql(format!("recording tick {due_ms} of schedule {schedule_id}")))?;
        Ok(())
    }

    /// The latest due instant handled for a schedule (run, skipped or failed), if any.
    pub async fn last_tick_ms(&self, schedule_id: i64) -> Result<Option<i64>, StoreError> {
        let row =
            sqlx::query("SELECT MAX(due_ms) AS last FROM schedule_ticks WHERE schedule_id = $1")
                .bind(schedule_id)
                .fetch_one(&self.pool)
                .await
                .map_err(sql(format!("reading ticks of schedule {schedule_id}")))?;
        row.try_get::<Option<i64>, _>("last")
            .map_err(|e| StoreError::Corrupt {
                table: "schedule_ticks",
                key: schedule_id.to_string(),
                column: "due_ms",
                why: e.to_string(),
            })
    }

    /// A schedule's ticks, newest first.
    pub async fn ticks(&self, schedule_id: i64, limit: u32) -> Result<Vec<TickRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT schedule_id, due_ms, state, study_version, generation, detail, claimed_by, \
             created_at_ms, verdict, report FROM schedule_ticks WHERE schedule_id = $1 \
             ORDER BY due_ms DESC LIMIT $2",
        )
        .bind(schedule_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(sql(format!("listing ticks of schedule {schedule_id}")))?;
        rows.iter().map(tick_row).collect()
    }

    /// Accept generation `generation` of a study version as its baseline.
    pub async fn accept_baseline(
        &self,
        study: &str,
        version: u32,
        generation: u32,
        by: &str,
    ) -> Result<(), StoreError> {
        let op = format!("accepting generation {generation} of study `{study}` v{version}");
        let done = sqlx::query(
            "INSERT INTO baselines (study_id, generation, accepted_by, accepted_at_ms) \
             SELECT id, $1, $2, $3 FROM studies WHERE name = $4 AND version = $5",
        )
        .bind(i64::from(generation))
        .bind(by)
        .bind(now_ms())
        .bind(study)
        .bind(i64::from(version))
        .execute(&self.pool)
        .await
        .map_err(sql(op))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound {
                what: format!("study `{study}` v{version}"),
            });
        }
        Ok(())
    }

    /// The latest accepted baseline of a study version: `(generation, accepted_by, at_ms)`.
    pub async fn baseline(
        &self,
        study: &str,
        version: u32,
    ) -> Result<Option<(u32, String, i64)>, StoreError> {
        let row = sqlx::query(
            "SELECT b.generation, b.accepted_by, b.accepted_at_ms FROM baselines b \
             JOIN studies s ON s.id = b.study_id WHERE s.name = $1 AND s.version = $2 \
             ORDER BY b.id DESC LIMIT 1",
        )
        .bind(study)
        .bind(i64::from(version))
        .fetch_optional(&self.pool)
        .await
        .map_err(sql(format!(
            "reading the baseline of study `{study}` v{version}"
        )))?;
        let Some(row) = row else { return Ok(None) };
        let key = format!("{study} v{version}");
        let generation: i64 = col(&row, "baselines", &key, "generation")?;
        Ok(Some((
            u32::try_from(generation).unwrap_or(0),
            col(&row, "baselines", &key, "accepted_by")?,
            col(&row, "baselines", &key, "accepted_at_ms")?,
        )))
    }
}
