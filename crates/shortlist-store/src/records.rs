//! Selection records, stored sealed: the JSON as rendered and its own hash.

use shortlist_study::record::SelectionRecord;

use crate::error::sql;
use crate::generations::GenerationSpan;
use crate::{Store, StoreError, col, now_ms};

/// A stored record and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRecord {
    pub id: i64,
    pub candidate: String,
    /// The generation of the study version whose runs it was assembled from.
    pub generation: u32,
    pub record: SelectionRecord,
    /// Unix milliseconds.
    pub created_at_ms: i64,
}

fn record_row(row: &sqlx::any::AnyRow) -> Result<StoredRecord, StoreError> {
    let id: i64 = col(row, "selection_records", &"?", "id")?;
    let json: String = col(row, "selection_records", &id, "record_json")?;
    let stored_hash: String = col(row, "selection_records", &id, "record_sha256")?;
    let record: SelectionRecord = serde_json::from_str(&json).map_err(|e| StoreError::Corrupt {
        table: "selection_records",
        key: id.to_string(),
        column: "record_json",
        why: e.to_string(),
    })?;
    // A record that no longer hashes to its seal was changed after it was written.
    if !record.verify() || record.record_sha256 != stored_hash {
        return Err(StoreError::Corrupt {
            table: "selection_records",
            key: id.to_string(),
            column: "record_sha256",
            why: format!(
                "stored hash {stored_hash} but the content hashes to {}",
                record.compute_hash()
            ),
        });
    }
    Ok(StoredRecord {
        id,
        candidate: col(row, "selection_records", &id, "candidate")?,
        generation: crate::col_u(row, "selection_records", &id, "generation")?,
        created_at_ms: col(row, "selection_records", &id, "created_at_ms")?,
        record,
    })
}

impl Store {
    /// Store a sealed record of the study it names (which must be stored and locked), assembled
    /// from the runs of `generation`. The same record stored twice is kept once; returns its id.
    pub async fn put_record(
        &self,
        record: &SelectionRecord,
        generation: u32,
    ) -> Result<i64, StoreError> {
        let candidate = &record.identity.candidate;
        let (study, version) = (&record.study.name, record.study.version);
        let op = format!("storing the record of `{candidate}` in study `{study}` v{version}");
        if !record.verify() {
            return Err(StoreError::Invalid {
                op,
                field: "record_sha256",
                why: "the record is not sealed (its hash does not match its content)".to_owned(),
            });
        }
        let locked = self.verify_study(study, version).await?;
        // A record judged by other criteria than the stored lock is not a record of this study.
        if record.study.lock_sha256 != locked.sha256 {
            return Err(StoreError::Invalid {
                op,
                field: "study.lock_sha256",
                why: format!(
                    "the record names lock {} but study `{study}` v{version} is locked as {}",
                    record.study.lock_sha256, locked.sha256
                ),
            });
        }
        let study_id = self.locked_study_id(study, version).await?;
        let json = serde_json::to_string(record).map_err(|e| StoreError::Invalid {
            op: op.clone(),
            field: "record",
            why: e.to_string(),
        })?;
        sqlx::query(
            "INSERT INTO selection_records (study_id, candidate, record_json, record_sha256, \
             created_at_ms, generation) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (record_sha256) DO NOTHING",
        )
        .bind(study_id)
        .bind(candidate)
        .bind(&json)
        .bind(&record.record_sha256)
        .bind(now_ms())
        .bind(i64::from(generation))
        .execute(&self.pool)
        .await
        .map_err(sql(&op))?;
        let row = sqlx::query("SELECT id FROM selection_records WHERE record_sha256 = $1")
            .bind(&record.record_sha256)
            .fetch_one(&self.pool)
            .await
            .map_err(sql(&op))?;
        col(&row, "selection_records", &record.record_sha256, "id")
    }

    /// The latest record of a candidate in a study version.
    pub async fn latest_record(
        &self,
        study: &str,
        version: u32,
        candidate: &str,
    ) -> Result<StoredRecord, StoreError> {
        let row = sqlx::query(
            "SELECT r.id, r.candidate, r.record_json, r.record_sha256, r.created_at_ms, r.generation \
             FROM selection_records r JOIN studies s ON s.id = r.study_id \
             WHERE s.name = $1 AND s.version = $2 AND r.candidate = $3 \
             ORDER BY r.id DESC LIMIT 1",
        )
        .bind(study)
        .bind(i64::from(version))
        .bind(candidate)
        .fetch_optional(&self.pool)
        .await
        .map_err(sql(format!(
            "loading the record of `{candidate}` in study `{study}` v{version}"
        )))?
        .ok_or_else(|| StoreError::NotFound {
            what: format!("a record of `{candidate}` in study `{study}` v{version}"),
        })?;
        record_row(&row)
    }

    /// The latest record of a candidate assembled from one generation of a study version.
    pub async fn record_of_generation(
        &self,
        study: &str,
        version: u32,
        candidate: &str,
        generation: u32,
    ) -> Result<StoredRecord, StoreError> {
        self.records_of_study_in(study, version, GenerationSpan::only(generation))
            .await?
            .into_iter()
            .rev()
            .find(|r| r.candidate == candidate)
            .ok_or_else(|| StoreError::NotFound {
                what: format!(
                    "a record of `{candidate}` in study `{study}` v{version} generation {generation}"
                ),
            })
    }

    /// How many records a study version has and the newest one's id: records are sealed and
    /// only ever added, so an unchanged stamp means unchanged records.
    pub async fn records_stamp(&self, study: &str, version: u32) -> Result<(i64, i64), StoreError> {
        let row = sqlx::query(
            "SELECT COUNT(r.id) AS n, COALESCE(MAX(r.id), 0) AS newest \
             FROM selection_records r JOIN studies s ON s.id = r.study_id \
             WHERE s.name = $1 AND s.version = $2",
        )
        .bind(study)
        .bind(i64::from(version))
        .fetch_one(&self.pool)
        .await
        .map_err(sql(format!(
            "counting the records of study `{study}` v{version}"
        )))?;
        let key = format!("{study} v{version}");
        Ok((
            col(&row, "selection_records", &key, "n")?,
            col(&row, "selection_records", &key, "newest")?,
        ))
    }

    /// Every record of a study version, oldest first.
    pub async fn records_of_study(
        &self,
        study: &str,
        version: u32,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        self.records_of_study_in(study, version, GenerationSpan::ALL)
            .await
    }

    /// The records of a study version's generations in `span`, oldest first (each one read is
    /// checked against its seal: reading fewer is what makes it cheap).
    pub async fn records_of_study_in(
        &self,
        study: &str,
        version: u32,
        span: GenerationSpan,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        let query = span.bind(sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT r.id, r.candidate, r.record_json, r.record_sha256, r.created_at_ms, r.generation \
             FROM selection_records r JOIN studies s ON s.id = r.study_id \
             WHERE s.name = $1 AND s.version = $2{} ORDER BY r.id",
            span.condition("r.generation", 3)
        )))
        .bind(study)
        .bind(i64::from(version)));
        let rows = query.fetch_all(&self.pool).await.map_err(sql(format!(
            "listing the records of study `{study}` v{version}"
        )))?;
        rows.iter().map(record_row).collect()
    }
}
