//! Run generations: each request to run a locked study version (by hand, by a schedule, through
//! the API) is a numbered generation, and its runs and records carry that number, so a study can
//! be run again — nightly, or after a fix — without touching what earlier generations stored.

use std::fmt;

use crate::error::sql;
use crate::{Store, StoreError, col, col_json, col_u, now_ms};

/// Which generations of a study version a read covers: `first..=last`. A study run nightly
/// for a year has hundreds; a page shows the newest few in full and reads only those.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerationSpan {
    pub first: u32,
    pub last: u32,
}

impl GenerationSpan {
    /// Every generation (and rows from before generations were numbered).
    pub const ALL: GenerationSpan = GenerationSpan {
        first: 0,
        last: u32::MAX,
    };

    /// One generation.
    pub fn only(number: u32) -> GenerationSpan {
        GenerationSpan {
            first: number,
            last: number,
        }
    }

    /// The SQL condition on `column` that keeps this span's rows (nothing for every
    /// generation), its bounds as the parameters `$first` and `$first + 1`.
    pub(crate) fn condition(self, column: &str, first: usize) -> String {
        if self == GenerationSpan::ALL {
            String::new()
        } else {
            format!(" AND {column} BETWEEN ${first} AND ${}", first + 1)
        }
    }

    /// `query` with the bounds [`GenerationSpan::condition`]'s parameters stand for bound, when
    /// it has them.
    pub(crate) fn bind<'q>(
        self,
        query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments> {
        if self == GenerationSpan::ALL {
            query
        } else {
            query.bind(i64::from(self.first)).bind(i64::from(self.last))
        }
    }
}

/// What started a generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// A person: `shortlist study run`, the Run button.
    Manual,
    /// A schedule (nightly runs).
    Schedule,
    /// A program, through the JSON API.
    Api,
}

impl Trigger {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Manual => "manual",
            Trigger::Schedule => "schedule",
            Trigger::Api => "api",
        }
    }

    /// The trigger a stored name stands for.
    pub fn parse(s: &str) -> Option<Trigger> {
        Some(match s {
            "manual" => Trigger::Manual,
            "schedule" => Trigger::Schedule,
            "api" => Trigger::Api,
            _ => return None,
        })
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One generation of a study version.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub study: String,
    pub version: u32,
    /// 1, 2, … in the order they were asked for.
    pub number: u32,
    pub trigger: Trigger,
    /// The run's parameters as the runner stores them (e.g. most tokens per case).
    pub params: serde_json::Value,
    /// Unix milliseconds.
    pub created_at_ms: i64,
}

fn generation_row(
    row: &sqlx::any::AnyRow,
    study: &str,
    version: u32,
) -> Result<Generation, StoreError> {
    let number: u32 = col_u(row, "generations", &study, "number")?;
    let key = format!("{study} v{version} generation {number}");
    let trigger: String = col(row, "generations", &key, "run_trigger")?;
    Ok(Generation {
        study: study.to_owned(),
        version,
        number,
        trigger: Trigger::parse(&trigger).ok_or_else(|| StoreError::Corrupt {
            table: "generations",
            key: key.clone(),
            column: "run_trigger",
            why: format!("unknown trigger `{trigger}`"),
        })?,
        params: col_json(row, "generations", &key, "params_json")?,
        created_at_ms: col(row, "generations", &key, "created_at_ms")?,
    })
}

impl Store {
    /// Start the next generation of a locked study version (refused for a draft, or a locked
    /// study whose content no longer matches its hash).
    pub async fn new_generation(
        &self,
        study: &str,
        version: u32,
        trigger: Trigger,
        params: &serde_json::Value,
    ) -> Result<Generation, StoreError> {
        let op = format!("starting a generation of study `{study}` v{version}");
        self.verify_study(study, version).await?;
        let study_id = self.locked_study_id(study, version).await?;
        let mut tx = self.write_tx(&op).await?;
        let row = sqlx::query(
            "SELECT COALESCE(MAX(number), 0) AS last FROM generations WHERE study_id = $1",
        )
        .bind(study_id)
        .fetch_one(&mut *tx)
        .await
        .map_err(sql(&op))?;
        let last: i64 = col(&row, "generations", &study, "last")?;
        let now = now_ms();
        sqlx::query(
            "INSERT INTO generations (study_id, number, run_trigger, params_json, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(study_id)
        .bind(last + 1)
        .bind(trigger.as_str())
        .bind(params.to_string())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(sql(&op))?;
        tx.commit().await.map_err(sql(&op))?;
        Ok(Generation {
            study: study.to_owned(),
            version,
            number: u32::try_from(last + 1).unwrap_or(u32::MAX),
            trigger,
            params: params.clone(),
            created_at_ms: now,
        })
    }

    /// Every generation of a study version, oldest first.
    pub async fn generations(
        &self,
        study: &str,
        version: u32,
    ) -> Result<Vec<Generation>, StoreError> {
        let rows = sqlx::query(
            "SELECT g.number, g.run_trigger, g.params_json, g.created_at_ms \
             FROM generations g JOIN studies s ON s.id = g.study_id \
             WHERE s.name = $1 AND s.version = $2 ORDER BY g.number",
        )
        .bind(study)
        .bind(i64::from(version))
        .fetch_all(&self.pool)
        .await
        .map_err(sql(format!(
            "listing the generations of study `{study}` v{version}"
        )))?;
        rows.iter()
            .map(|r| generation_row(r, study, version))
            .collect()
    }

    /// One generation.
    pub async fn generation(
        &self,
        study: &str,
        version: u32,
        number: u32,
    ) -> Result<Generation, StoreError> {
        self.generations(study, version)
            .await?
            .into_iter()
            .find(|g| g.number == number)
            .ok_or_else(|| StoreError::NotFound {
                what: format!("generation {number} of study `{study}` v{version}"),
            })
    }

    /// Take the lease `name` for `holder` until `lease_ms` from now: `true` when taken (free,
    /// expired, or already this holder's), `false` while another holds it.
    pub async fn try_lease(
        &self,
        name: &str,
        holder: &str,
        lease_ms: i64,
    ) -> Result<bool, StoreError> {
        let now = now_ms();
        let done = sqlx::query(
            "INSERT INTO request_locks (name, holder, until_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until_ms = excluded.until_ms \
             WHERE request_locks.until_ms < $4 OR request_locks.holder = excluded.holder",
        )
        .bind(name)
        .bind(holder)
        .bind(now.saturating_add(lease_ms))
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(sql(format!("taking the lease `{name}`")))?;
        Ok(done.rows_affected() == 1)
    }

    /// Give back a lease this holder took.
    pub async fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM request_locks WHERE name = $1 AND holder = $2")
            .bind(name)
            .bind(holder)
            .execute(&self.pool)
            .await
            .map_err(sql(format!("releasing the lease `{name}`")))?;
        Ok(())
    }
}
