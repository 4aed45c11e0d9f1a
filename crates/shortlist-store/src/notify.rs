//! What a finished scheduled night leaves behind: its check (verdict and document) on its tick
//! row, and one delivery of that document per webhook of the schedule. The check is stored
//! once — the `checked_at_ms IS NULL` guard makes one scheduler of several the one that files
//! the deliveries — and a delivery is claimed by moving its next attempt forward, so two
//! schedulers never send it at once.

use crate::error::{sql, sql_or_taken};
use crate::{Store, StoreError, col, col_u, now_ms};

/// A webhook disabled after this many consecutive failed deliveries.
pub const MAX_CONSECUTIVE_FAILURES: u32 = 5;

/// A webhook of a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRow {
    pub id: i64,
    pub schedule_id: i64,
    pub url: String,
    pub secret: String,
    pub enabled: bool,
    /// Consecutive failed deliveries (reset by a success or by enabling it by hand).
    pub failures: u32,
    pub last_error: Option<String>,
    pub last_attempt_ms: Option<i64>,
    /// Deliveries not yet made.
    pub pending: u32,
}

/// A night whose run was started and not yet checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UncheckedTick {
    pub schedule_id: i64,
    pub schedule: String,
    pub study: String,
    pub due_ms: i64,
    pub study_version: u32,
    pub generation: u32,
}

/// A delivery due now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueDelivery {
    pub id: i64,
    pub webhook_id: i64,
    pub url: String,
    pub secret: String,
    pub body: String,
    /// Attempts before this one.
    pub attempts: u32,
}

fn webhook_row(row: &sqlx::any::AnyRow) -> Result<WebhookRow, StoreError> {
    let id: i64 = col(row, "webhooks", &"?", "id")?;
    let enabled: i64 = col(row, "webhooks", &id, "enabled")?;
    Ok(WebhookRow {
        id,
        schedule_id: col(row, "webhooks", &id, "schedule_id")?,
        url: col(row, "webhooks", &id, "url")?,
        secret: col(row, "webhooks", &id, "secret")?,
        enabled: enabled != 0,
        failures: col_u(row, "webhooks", &id, "failures")?,
        last_error: col(row, "webhooks", &id, "last_error")?,
        last_attempt_ms: col(row, "webhooks", &id, "last_attempt_ms")?,
        pending: col_u(row, "webhooks", &id, "pending")?,
    })
}

impl Store {
    /// Add a webhook to a schedule; the same URL twice is refused.
    pub async fn add_webhook(
        &self,
        schedule: &str,
        url: &str,
        secret: &str,
    ) -> Result<WebhookRow, StoreError> {
        let s = self.schedule(schedule).await?;
        let op = format!("adding webhook {url} to schedule `{schedule}`");
        sqlx::query(
            "INSERT INTO webhooks (schedule_id, url, secret, enabled, failures, created_at_ms) \
             VALUES ($1, $2, $3, 1, 0, $4)",
        )
        .bind(s.id)
        .bind(url)
        .bind(secret)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(sql_or_taken(
            op,
            "url",
            format!("schedule `{schedule}` already notifies {url}"),
        ))?;
        self.webhooks(s.id)
            .await?
            .into_iter()
            .find(|w| w.url == url)
            .ok_or_else(|| StoreError::NotFound {
                what: format!("webhook {url} of schedule `{schedule}`"),
            })
    }

    /// A schedule's webhooks, with how many deliveries each has pending.
    pub async fn webhooks(&self, schedule_id: i64) -> Result<Vec<WebhookRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT w.id, w.schedule_id, w.url, w.secret, w.enabled, w.failures, w.last_error, \
             w.last_attempt_ms, (SELECT COUNT(*) FROM deliveries d WHERE d.webhook_id = w.id \
             AND d.state = 'pending') AS pending FROM webhooks w WHERE w.schedule_id = $1 \
             ORDER BY w.id",
        )
        .bind(schedule_id)
        .fetch_all(&self.pool)
        .await
        .map_err(sql(format!("listing webhooks of schedule {schedule_id}")))?;
        rows.iter().map(webhook_row).collect()
    }

    async fn webhook_id(&self, schedule: &str, url: &str) -> Result<i64, StoreError> {
        let s = self.schedule(schedule).await?;
        self.webhooks(s.id)
            .await?
            .into_iter()
            .find(|w| w.url == url)
            .map(|w| w.id)
            .ok_or_else(|| StoreError::NotFound {
                what: format!("webhook {url} of schedule `{schedule}`"),
            })
    }

    /// Remove a webhook and its deliveries.
    pub async fn remove_webhook(&self, schedule: &str, url: &str) -> Result<(), StoreError> {
        let id = self.webhook_id(schedule, url).await?;
        let op = format!("removing webhook {url}");
        let mut tx = self.write_tx(&op).await?;
        for q in [
            "DELETE FROM deliveries WHERE webhook_id = $1",
            "DELETE FROM webhooks WHERE id = $1",
        ] {
            sqlx::query(q)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(sql(op.clone()))?;
        }
        tx.commit().await.map_err(sql(op))
    }

    /// Enable a webhook by hand: its failure count starts again and its pending deliveries are
    /// due at once.
    pub async fn enable_webhook(&self, schedule: &str, url: &str) -> Result<(), StoreError> {
        let id = self.webhook_id(schedule, url).await?;
        let op = format!("enabling webhook {url}");
        let mut tx = self.write_tx(&op).await?;
        sqlx::query("UPDATE webhooks SET enabled = 1, failures = 0 WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(sql(op.clone()))?;
        sqlx::query(
            "UPDATE deliveries SET next_attempt_ms = $1 WHERE webhook_id = $2 AND state = 'pending'",
        )
        .bind(now_ms())
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(sql(op.clone()))?;
        tx.commit().await.map_err(sql(op))
    }

    /// Started nights not yet checked, oldest first.
    pub async fn unchecked_ticks(&self) -> Result<Vec<UncheckedTick>, StoreError> {
        let rows = sqlx::query(
            "SELECT t.schedule_id, s.name, s.study, t.due_ms, t.study_version, t.generation \
             FROM schedule_ticks t JOIN schedules s ON s.id = t.schedule_id \
             WHERE t.state = 'started' AND t.checked_at_ms IS NULL AND t.generation IS NOT NULL \
             ORDER BY t.due_ms",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(sql("listing unchecked nights"))?;
        rows.iter()
            .map(|row| {
                let due_ms: i64 = col(row, "schedule_ticks", &"?", "due_ms")?;
                Ok(UncheckedTick {
                    schedule_id: col(row, "schedule_ticks", &due_ms, "schedule_id")?,
                    schedule: col(row, "schedules", &due_ms, "name")?,
                    study: col(row, "schedules", &due_ms, "study")?,
                    due_ms,
                    study_version: col_u(row, "schedule_ticks", &due_ms, "study_version")?,
                    generation: col_u(row, "schedule_ticks", &due_ms, "generation")?,
                })
            })
            .collect()
    }

    /// File a night's check and one delivery of its document per webhook of the schedule.
    /// `false` when it was already filed (by another scheduler): nothing is written then.
    pub async fn file_check(
        &self,
        schedule_id: i64,
        due_ms: i64,
        verdict: &str,
        report: &str,
    ) -> Result<bool, StoreError> {
        let op = format!("filing the check of tick {due_ms} of schedule {schedule_id}");
        let now = now_ms();
        let mut tx = self.write_tx(&op).await?;
        let done = sqlx::query(
            "UPDATE schedule_ticks SET verdict = $1, report = $2, checked_at_ms = $3 \
             WHERE schedule_id = $4 AND due_ms = $5 AND checked_at_ms IS NULL",
        )
        .bind(verdict)
        .bind(report)
        .bind(now)
        .bind(schedule_id)
        .bind(due_ms)
        .execute(&mut *tx)
        .await
        .map_err(sql(op.clone()))?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO deliveries (webhook_id, schedule_id, due_ms, body, state, attempts, \
             next_attempt_ms, created_at_ms) SELECT id, $1, $2, $3, 'pending', 0, $4, $4 \
             FROM webhooks WHERE schedule_id = $1",
        )
        .bind(schedule_id)
        .bind(due_ms)
        .bind(report)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(sql(op.clone()))?;
        tx.commit().await.map_err(sql(op))?;
        Ok(true)
    }

    /// Claim up to `limit` deliveries due at `now` to enabled webhooks: each claimed one is not
    /// due again for `lease_ms`, so no other scheduler sends it meanwhile.
    pub async fn claim_deliveries(
        &self,
        now: i64,
        lease_ms: i64,
        limit: u32,
    ) -> Result<Vec<DueDelivery>, StoreError> {
        let rows = sqlx::query(
            "SELECT d.id, d.webhook_id, w.url, w.secret, d.body, d.attempts FROM deliveries d \
             JOIN webhooks w ON w.id = d.webhook_id WHERE d.state = 'pending' AND w.enabled = 1 \
             AND d.next_attempt_ms <= $1 ORDER BY d.next_attempt_ms, d.id LIMIT $2",
        )
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(sql("listing due deliveries"))?;
        let mut out = Vec::new();
        for row in &rows {
            let id: i64 = col(row, "deliveries", &"?", "id")?;
            let claimed = sqlx::query(
                "UPDATE deliveries SET next_attempt_ms = $1 WHERE id = $2 AND state = 'pending' \
                 AND next_attempt_ms <= $3",
            )
            .bind(now + lease_ms)
            .bind(id)
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(sql(format!("claiming delivery {id}")))?;
            if claimed.rows_affected() == 1 {
                out.push(DueDelivery {
                    id,
                    webhook_id: col(row, "deliveries", &id, "webhook_id")?,
                    url: col(row, "webhooks", &id, "url")?,
                    secret: col(row, "webhooks", &id, "secret")?,
                    body: col(row, "deliveries", &id, "body")?,
                    attempts: col_u(row, "deliveries", &id, "attempts")?,
                });
            }
        }
        Ok(out)
    }

    /// A delivery made: the webhook's failure count starts again.
    pub async fn delivered(&self, d: &DueDelivery) -> Result<(), StoreError> {
        let op = format!("recording delivery {}", d.id);
        let now = now_ms();
        let mut tx = self.write_tx(&op).await?;
        sqlx::query(
            "UPDATE deliveries SET state = 'delivered', attempts = attempts + 1, \
             delivered_at_ms = $1, last_error = NULL WHERE id = $2",
        )
        .bind(now)
        .bind(d.id)
        .execute(&mut *tx)
        .await
        .map_err(sql(op.clone()))?;
        sqlx::query(
            "UPDATE webhooks SET failures = 0, last_error = NULL, last_attempt_ms = $1 WHERE id = $2",
        )
        .bind(now)
        .bind(d.webhook_id)
        .execute(&mut *tx)
        .await
        .map_err(sql(op.clone()))?;
        tx.commit().await.map_err(sql(op))
    }

    /// A delivery failed: tried again at `next_attempt_ms`; the webhook is disabled at its
    /// [`MAX_CONSECUTIVE_FAILURES`]th consecutive failure. Returns whether it was disabled now.
    pub async fn delivery_failed(
        &self,
        d: &DueDelivery,
        error: &str,
        next_attempt_ms: i64,
    ) -> Result<bool, StoreError> {
        let op = format!("recording failed delivery {}", d.id);
        let now = now_ms();
        let mut tx = self.write_tx(&op).await?;
        sqlx::query(
            "UPDATE deliveries SET attempts = attempts + 1, last_error = $1, next_attempt_ms = $2 \
             WHERE id = $3",
        )
        .bind(error)
        .bind(next_attempt_ms)
        .bind(d.id)
        .execute(&mut *tx)
        .await
        .map_err(sql(op.clone()))?;
        let disabled = sqlx::query(
            "UPDATE webhooks SET failures = failures + 1, last_error = $1, last_attempt_ms = $2, \
             enabled = CASE WHEN failures + 1 >= $3 THEN 0 ELSE enabled END \
             WHERE id = $4 RETURNING enabled",
        )
        .bind(error)
        .bind(now)
        .bind(i64::from(MAX_CONSECUTIVE_FAILURES))
        .bind(d.webhook_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql(op.clone()))?;
        tx.commit().await.map_err(sql(op))?;
        Ok(match disabled {
            Some(row) => col::<i64>(&row, "webhooks", &d.webhook_id, "enabled")? == 0,
            None => false,
        })
    }
}
