//! Gangs: one try of one load step sent by several workers. The leading part opens the gang and
//! queues the other parts as jobs; every part, once ready to send, joins it; the leader fixes the
//! start instant only when all parts have joined (or calls the gang off when they do not gather
//! in time) — both are conditional updates of the one gang row, so exactly one of them happens.
//! Each part stores its raw records on its own row; the leader merges them into the step.

use crate::error::{sql, sql_or_taken};
use crate::{Store, StoreError, col, col_u, now_ms};

/// One try of a split load step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gang {
    pub gang: String,
    pub run_id: i64,
    pub label: String,
    pub parts: u32,
    /// The load job leading the gang, and which claim of it (its attempt).
    pub leader_job: i64,
    pub leader_try: u32,
    /// The agreed start instant (Unix milliseconds), once every part joined.
    pub start_at_ms: Option<i64>,
    /// Why the gang was called off: before it started (it never does), or mid-step (its
    /// parts stop sending and the step is not stored).
    pub cancelled: Option<String>,
    /// The parts that joined, by part number.
    pub members: Vec<GangMember>,
}

/// A part that joined its gang.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangMember {
    pub part: u32,
    pub worker: String,
    pub ready_at_ms: i64,
    /// Its raw records (`shortlist.records.v1` text), once sent.
    pub records: Option<String>,
}

impl Gang {
    /// Whether every part has joined.
    pub fn gathered(&self) -> bool {
        self.members.len() == self.parts as usize
    }

    /// The records of every part in part order, once all are stored.
    pub fn all_records(&self) -> Option<Vec<&str>> {
        if !self.gathered() {
            return None;
        }
        self.members.iter().map(|m| m.records.as_deref()).collect()
    }
}

impl Store {
    /// Open a gang of `parts` parts for step `label` of run `run_id`, led by claim `leader_try`
    /// of job `leader_job`. A name given twice is refused.
    pub async fn open_gang(
        &self,
        gang: &str,
        run_id: i64,
        label: &str,
        parts: u32,
        (leader_job, leader_try): (i64, u32),
    ) -> Result<(), StoreError> {
        let op = format!("opening gang `{gang}`");
        if parts < 2 {
            return Err(StoreError::Invalid {
                op,
                field: "parts",
                why: format!("{parts} part(s): a gang sends a step from at least 2 workers"),
            });
        }
        sqlx::query(
            "INSERT INTO load_gangs (gang, run_id, label, parts, leader_job, leader_try, \
             created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(gang)
        .bind(run_id)
        .bind(label)
        .bind(i64::from(parts))
        .bind(leader_job)
        .bind(i64::from(leader_try))
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(sql_or_taken(&op, "gang", format!("gang `{gang}` exists")))?;
        Ok(())
    }

    /// Part `part` of `gang` is ready to send, on `worker`. Joining again (a part's job claimed
    /// anew) moves its ready instant and forgets records it stored.
    pub async fn join_gang(&self, gang: &str, part: u32, worker: &str) -> Result<(), StoreError> {
        let op = format!("part {part} joining gang `{gang}`");
        let g = self.gang(gang).await?;
        if part >= g.parts {
            return Err(StoreError::Invalid {
                op,
                field: "part",
                why: format!("the gang has parts 0 to {}", g.parts - 1),
            });
        }
        let now = now_ms();
        let mut tx = self.write_tx(&op).await?;
        sqlx::query("DELETE FROM load_gang_parts WHERE gang = $1 AND part = $2")
            .bind(gang)
            .bind(i64::from(part))
            .execute(&mut *tx)
            .await
            .map_err(sql(&op))?;
        sqlx::query(
            "INSERT INTO load_gang_parts (gang, part, worker, ready_at_ms) VALUES ($1, $2, $3, $4)",
        )
        .bind(gang)
        .bind(i64::from(part))
        .bind(worker)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(sql(&op))?;
        tx.commit().await.map_err(sql(&op))?;
        Ok(())
    }

    /// A gang with the parts that joined it.
    pub async fn gang(&self, gang: &str) -> Result<Gang, StoreError> {
        let op = format!("loading gang `{gang}`");
        let row = sqlx::query(
            "SELECT gang, run_id, label, parts, leader_job, leader_try, start_at_ms, cancelled \
             FROM load_gangs WHERE gang = $1",
        )
        .bind(gang)
        .fetch_optional(&self.pool)
        .await
        .map_err(sql(&op))?
        .ok_or_else(|| StoreError::NotFound {
            what: format!("gang `{gang}`"),
        })?;
        let members = sqlx::query(
            "SELECT part, worker, ready_at_ms, records FROM load_gang_parts WHERE gang = $1 \
             ORDER BY part",
        )
        .bind(gang)
        .fetch_all(&self.pool)
        .await
        .map_err(sql(&op))?
        .iter()
        .map(|r| {
            Ok(GangMember {
                part: col_u(r, "load_gang_parts", &gang, "part")?,
                worker: col(r, "load_gang_parts", &gang, "worker")?,
                ready_at_ms: col(r, "load_gang_parts", &gang, "ready_at_ms")?,
                records: col(r, "load_gang_parts", &gang, "records")?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Gang {
            gang: col(&row, "load_gangs", &gang, "gang")?,
            run_id: col(&row, "load_gangs", &gang, "run_id")?,
            label: col(&row, "load_gangs", &gang, "label")?,
            parts: col_u(&row, "load_gangs", &gang, "parts")?,
            leader_job: col(&row, "load_gangs", &gang, "leader_job")?,
            leader_try: col_u(&row, "load_gangs", &gang, "leader_try")?,
            start_at_ms: col(&row, "load_gangs", &gang, "start_at_ms")?,
            cancelled: col(&row, "load_gangs", &gang, "cancelled")?,
            members,
        })
    }

    /// Fix the gang's start instant: only once, only when every part has joined, and only if it
    /// was not called off. Returns whether this call fixed it.
    pub async fn start_gang(&self, gang: &str, start_at_ms: i64) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE load_gangs SET start_at_ms = $1 WHERE gang = $2 AND start_at_ms IS NULL \
             AND cancelled IS NULL \
             AND (SELECT COUNT(*) FROM load_gang_parts p WHERE p.gang = $2) = parts",
        )
        .bind(start_at_ms)
        .bind(gang)
        .execute(&self.pool)
        .await
        .map_err(sql(format!("starting gang `{gang}`")))?;
        Ok(done.rows_affected() == 1)
    }

    /// Call the gang off before it starts. Returns whether this call did (not when it had started
    /// or was called off already).
    pub async fn cancel_gang(&self, gang: &str, why: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE load_gangs SET cancelled = $1 WHERE gang = $2 AND start_at_ms IS NULL \
             AND cancelled IS NULL",
        )
        .bind(why)
        .bind(gang)
        .execute(&self.pool)
        .await
        .map_err(sql(format!("calling gang `{gang}` off")))?;
        Ok(done.rows_affected() == 1)
    }

    /// Call the gang off, started or not: a part cancelled or stopped mid-step halts the others,
    /// which stop sending and store nothing of the step. Returns whether this call did (not when
    /// it was called off already).
    pub async fn halt_gang(&self, gang: &str, why: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE load_gangs SET cancelled = $1 WHERE gang = $2 AND cancelled IS NULL",
        )
        .bind(why)
        .bind(gang)
        .execute(&self.pool)
        .await
        .map_err(sql(format!("halting gang `{gang}`")))?;
        Ok(done.rows_affected() == 1)
    }

    /// Whether a gang led by an older job than `leader_job` is still gathering, with a part no
    /// worker has claimed yet: two leaders each waiting for a worker the other holds would wait
    /// for ever, so the younger one gives way.
    pub async fn older_gang_gathering(&self, leader_job: i64) -> Result<bool, StoreError> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM load_gangs g WHERE g.leader_job < $1 \
             AND g.start_at_ms IS NULL AND g.cancelled IS NULL \
             AND EXISTS (SELECT 1 FROM jobs j WHERE j.grp = g.gang AND j.state = 'queued')",
        )
        .bind(leader_job)
        .fetch_one(&self.pool)
        .await
        .map_err(sql("looking for older gangs gathering"))?;
        let n: i64 = col(&row, "load_gangs", &leader_job, "n")?;
        Ok(n > 0)
    }

    /// Store the raw records part `part` sent, from `worker` (the one that joined as it).
    pub async fn store_gang_records(
        &self,
        gang: &str,
        part: u32,
        worker: &str,
        records: &str,
    ) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE load_gang_parts SET records = $1, stored_at_ms = $2 \
             WHERE gang = $3 AND part = $4 AND worker = $5",
        )
        .bind(records)
        .bind(now_ms())
        .bind(gang)
        .bind(i64::from(part))
        .bind(worker)
        .execute(&self.pool)
        .await
        .map_err(sql(format!("storing part {part} of gang `{gang}`")))?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(StoreError::Invalid {
                op: format!("storing part {part} of gang `{gang}`"),
                field: "worker",
                why: format!("worker `{worker}` did not join the gang as part {part}"),
            })
        }
    }
}
