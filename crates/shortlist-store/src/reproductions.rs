//! Reproductions: a finished quality run's cases asked again and compared with the stored
//! answers. Each check is stored whole as the document its command prints and never changed.

use crate::error::sql;
use crate::{Store, StoreError, col, col_u, now_ms};

/// A stored reproduction check.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredReproduction {
    pub id: i64,
    pub candidate: String,
    /// The generation whose quality run was asked again.
    pub generation: u32,
    /// Every answer the same and no verdict changed.
    pub ok: bool,
    /// The check as `study reproduce --json` prints it.
    pub document: serde_json::Value,
    /// Unix milliseconds.
    pub created_at_ms: i64,
}

impl Store {
    /// Store a reproduction check of `candidate`'s quality run in `generation` of a locked
    /// study version; returns its id.
    pub async fn put_reproduction(
        &self,
        study: &str,
        version: u32,
        generation: u32,
        candidate: &str,
        ok: bool,
        document: &serde_json::Value,
    ) -> Result<i64, StoreError> {
        let op = format!(
            "storing the reproduction of `{candidate}` in study `{study}` v{version} generation {generation}"
        );
        let study_id = self.locked_study_id(study, version).await?;
        let row = sqlx::query(
            "INSERT INTO reproductions (study_id, generation, candidate, ok, document, \
             created_at_ms) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .bind(study_id)
        .bind(i64::from(generation))
        .bind(candidate)
        .bind(i64::from(ok))
        .bind(document.to_string())
        .bind(now_ms())
        .fetch_one(&self.pool)
        .await
        .map_err(sql(&op))?;
        col(&row, "reproductions", &candidate, "id")
    }

    /// The reproduction checks of a candidate in a study version (of one generation, or of
    /// all), newest first.
    pub async fn reproductions(
        &self,
        study: &str,
        version: u32,
        candidate: &str,
        generation: Option<u32>,
    ) -> Result<Vec<StoredReproduction>, StoreError> {
        let rows = sqlx::query(
            "SELECT p.id, p.candidate, p.generation, p.ok, p.document, p.created_at_ms \
             FROM reproductions p JOIN studies s ON s.id = p.study_id \
             WHERE s.name = $1 AND s.version = $2 AND p.candidate = $3 \
             AND ($4 < 0 OR p.generation = $4) ORDER BY p.id DESC",
        )
        .bind(study)
        .bind(i64::from(version))
        .bind(candidate)
        .bind(generation.map_or(-1, i64::from))
        .fetch_all(&self.pool)
        .await
        .map_err(sql(format!(
            "loading the reproductions of `{candidate}` in study `{study}` v{version}"
        )))?;
        rows.iter()
            .map(|row| {
                let id: i64 = col(row, "reproductions", &"?", "id")?;
                let ok: i64 = col(row, "reproductions", &id, "ok")?;
                let text: String = col(row, "reproductions", &id, "document")?;
                Ok(StoredReproduction {
                    id,
                    candidate: col(row, "reproductions", &id, "candidate")?,
                    generation: col_u(row, "reproductions", &id, "generation")?,
                    ok: ok != 0,
                    document: serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                        table: "reproductions",
                        key: id.to_string(),
                        column: "document",
                        why: e.to_string(),
                    })?,
                    created_at_ms: col(row, "reproductions", &id, "created_at_ms")?,
                })
            })
            .collect()
    }
}
