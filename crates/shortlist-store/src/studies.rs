//! Studies: drafts that can be edited, and locked versions that cannot. The store refuses to
//! change a locked row, and so does the database (a trigger per dialect), so that a row changed
//! behind the store's back is refused, and one changed with the trigger removed fails
//! [`Store::verify_study`].

use shortlist_study::StudyError;
use shortlist_study::study::{LockedStudy, Study, StudyFile};
use sqlx::{AssertSqlSafe, Row};

use crate::error::sql;
use crate::{Store, StoreError, col, col_u, now_ms};

/// A study as stored: a draft, or locked under its hash.
#[derive(Debug, Clone, PartialEq)]
pub enum StoredStudy {
    Draft(Study),
    Locked(LockedStudy),
}

impl StoredStudy {
    /// The study's content, locked or not.
    pub fn study(&self) -> &Study {
        match self {
            StoredStudy::Draft(s) => s,
            StoredStudy::Locked(l) => &l.study,
        }
    }
}

/// One line of the study list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StudySummary {
    pub id: i64,
    pub name: String,
    pub version: u32,
    /// The lock hash and time; `None` for a draft.
    pub sha256: Option<String>,
    pub locked_at: Option<String>,
}

/// The lock columns of one row, read inside a write transaction.
struct RowLock {
    id: i64,
    sha256: Option<String>,
    locked_at: Option<String>,
}

impl Store {
    async fn study_lock_row(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        op: &str,
        name: &str,
        version: u32,
    ) -> Result<Option<RowLock>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT id, sha256, locked_at FROM studies WHERE name = $1 AND version = $2{}",
            self.for_update()
        )))
        .bind(name)
        .bind(i64::from(version))
        .fetch_optional(&mut **tx)
        .await
        .map_err(sql(op))?;
        let key = format!("{name} v{version}");
        row.map(|r| {
            Ok(RowLock {
                id: col(&r, "studies", &key, "id")?,
                sha256: col(&r, "studies", &key, "sha256")?,
                locked_at: col(&r, "studies", &key, "locked_at")?,
            })
        })
        .transpose()
    }

    fn locked_error(name: &str, version: u32, lock: &RowLock) -> StoreError {
        StoreError::StudyLocked {
            name: name.to_owned(),
            version,
            sha256: lock.sha256.clone().unwrap_or_default(),
            locked_at: lock.locked_at.clone().unwrap_or_default(),
        }
    }

    /// Save a draft study (insert, or replace the draft of the same name and version). Refused
    /// when that version is locked: edit [`Store::new_study_version`] instead.
    pub async fn save_study(&self, study: &Study) -> Result<i64, StoreError> {
        let (name, version) = (study.name(), study.version());
        let op = format!("saving study `{name}` v{version}");
        let file_json = serde_json::to_string(study.file()).map_err(|e| StoreError::Invalid {
            op: op.clone(),
            field: "study",
            why: e.to_string(),
        })?;
        let mut tx = self.write_tx(&op).await?;
        let now = now_ms();
        let id = match self.study_lock_row(&mut tx, &op, name, version).await? {
            Some(lock) if lock.locked_at.is_some() => {
                return Err(Self::locked_error(name, version, &lock));
            }
            Some(lock) => {
                sqlx::query("UPDATE studies SET file_json = $1, updated_at_ms = $2 WHERE id = $3")
                    .bind(&file_json)
                    .bind(now)
                    .bind(lock.id)
                    .execute(&mut *tx)
                    .await
                    .map_err(sql(&op))?;
                lock.id
            }
            None => {
                let row = sqlx::query(
                    "INSERT INTO studies (name, version, file_json, created_at_ms, updated_at_ms) \
                     VALUES ($1, $2, $3, $4, $4) RETURNING id",
                )
                .bind(name)
                .bind(i64::from(version))
                .bind(&file_json)
                .bind(now)
                .fetch_one(&mut *tx)
                .await
                .map_err(sql(&op))?;
                col(&row, "studies", &op, "id")?
            }
        };
        tx.commit().await.map_err(sql(&op))?;
        Ok(id)
    }

    /// Store a study locked: its canonical serialization, hash and lock time. Locking the same
    /// content again is a no-op; locking different content over a locked version is refused.
    pub async fn lock_study(&self, locked: &LockedStudy) -> Result<i64, StoreError> {
        // Never store a lock that does not hold.
        locked.verify()?;
        let (name, version) = (locked.study.name(), locked.study.version());
        let op = format!("locking study `{name}` v{version}");
        let file_json =
            serde_json::to_string(locked.study.file()).map_err(|e| StoreError::Invalid {
                op: op.clone(),
                field: "study",
                why: e.to_string(),
            })?;
        let mut tx = self.write_tx(&op).await?;
        let now = now_ms();
        let id = match self.study_lock_row(&mut tx, &op, name, version).await? {
            Some(lock) if lock.locked_at.is_some() => {
                if lock.sha256.as_deref() == Some(locked.sha256.as_str()) {
                    return Ok(lock.id);
                }
                return Err(Self::locked_error(name, version, &lock));
            }
            Some(lock) => {
                sqlx::query(
                    "UPDATE studies SET file_json = $1, canonical = $2, sha256 = $3, \
                     locked_at = $4, updated_at_ms = $5 WHERE id = $6",
                )
                .bind(&file_json)
                .bind(&locked.canonical)
                .bind(&locked.sha256)
                .bind(&locked.locked_at)
                .bind(now)
                .bind(lock.id)
                .execute(&mut *tx)
                .await
                .map_err(sql(&op))?;
                lock.id
            }
            None => {
                let row = sqlx::query(
                    "INSERT INTO studies (name, version, file_json, canonical, sha256, locked_at, \
                     created_at_ms, updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $7) \
                     RETURNING id",
                )
                .bind(name)
                .bind(i64::from(version))
                .bind(&file_json)
                .bind(&locked.canonical)
                .bind(&locked.sha256)
                .bind(&locked.locked_at)
                .bind(now)
                .fetch_one(&mut *tx)
                .await
                .map_err(sql(&op))?;
                col(&row, "studies", &op, "id")?
            }
        };
        tx.commit().await.map_err(sql(&op))?;
        tracing::info!(study = name, version, sha256 = %locked.sha256, "study locked");
        Ok(id)
    }

    /// Remove a draft. A locked study is refused (by the store, and by the database).
    pub async fn delete_study_draft(&self, name: &str, version: u32) -> Result<(), StoreError> {
        let op = format!("deleting study `{name}` v{version}");
        let mut tx = self.write_tx(&op).await?;
        match self.study_lock_row(&mut tx, &op, name, version).await? {
            None => Err(StoreError::NotFound {
                what: format!("study `{name}` v{version}"),
            }),
            Some(lock) if lock.locked_at.is_some() => Err(Self::locked_error(name, version, &lock)),
            Some(lock) => {
                sqlx::query("DELETE FROM studies WHERE id = $1")
                    .bind(lock.id)
                    .execute(&mut *tx)
                    .await
                    .map_err(sql(&op))?;
                tx.commit().await.map_err(sql(&op))?;
                Ok(())
            }
        }
    }

    /// Start the next version of a locked study: a draft with `version + 1` that names the lock
    /// hash it replaces. The caller edits it and saves it with [`Store::save_study`].
    pub async fn new_study_version(&self, name: &str, version: u32) -> Result<Study, StoreError> {
        let locked = self.verify_study(name, version).await?;
        let file: StudyFile = Study::next_version(&locked);
        let next = Study::from_file(&format!("study `{name}` v{}", file.version), file)?;
        self.save_study(&next).await?;
        Ok(next)
    }

    /// A study, draft or locked. A locked one is checked against its hash on the way out.
    pub async fn study(&self, name: &str, version: u32) -> Result<StoredStudy, StoreError> {
        let op = format!("loading study `{name}` v{version}");
        let row = sqlx::query(
            "SELECT file_json, canonical, sha256, locked_at FROM studies \
             WHERE name = $1 AND version = $2",
        )
        .bind(name)
        .bind(i64::from(version))
        .fetch_optional(&self.pool)
        .await
        .map_err(sql(&op))?
        .ok_or_else(|| StoreError::NotFound {
            what: format!("study `{name}` v{version}"),
        })?;
        let source = format!("study `{name}` v{version} (stored)");
        let key = format!("{name} v{version}");
        let canonical: Option<String> = col(&row, "studies", &key, "canonical")?;
        let sha256: Option<String> = col(&row, "studies", &key, "sha256")?;
        let locked_at: Option<String> = col(&row, "studies", &key, "locked_at")?;
        match (canonical, sha256, locked_at) {
            (Some(canonical), Some(sha256), Some(locked_at)) => {
                let locked = LockedStudy::from_stored(&source, &canonical, &sha256, &locked_at)?;
                // The row's key must be the content's: a renamed row is a changed study.
                if locked.study.name() != name || locked.study.version() != version {
                    return Err(StoreError::Study(StudyError::Tampered {
                        name: name.to_owned(),
                        version,
                        stored: sha256,
                        computed: format!(
                            "(content is study `{}` v{})",
                            locked.study.name(),
                            locked.study.version()
                        ),
                    }));
                }
                Ok(StoredStudy::Locked(locked))
            }
            _ => {
                let file: StudyFile = crate::col_json(&row, "studies", &key, "file_json")?;
                Ok(StoredStudy::Draft(Study::from_file(&source, file)?))
            }
        }
    }

    /// Rebuild a locked study from its row and recompute its hash: an error if the study is a
    /// draft, or if its content no longer hashes to the stored lock hash.
    pub async fn verify_study(&self, name: &str, version: u32) -> Result<LockedStudy, StoreError> {
        match self.study(name, version).await? {
            StoredStudy::Locked(locked) => Ok(locked),
            StoredStudy::Draft(_) => Err(StoreError::Study(StudyError::NotLocked {
                name: name.to_owned(),
                version,
            })),
        }
    }

    /// The highest version of a study.
    pub async fn latest_study_version(&self, name: &str) -> Result<u32, StoreError> {
        let row = sqlx::query("SELECT MAX(version) AS v FROM studies WHERE name = $1")
            .bind(name)
            .fetch_one(&self.pool)
            .await
            .map_err(sql(format!("finding the latest version of study `{name}`")))?;
        let v: Option<i64> = col(&row, "studies", &name, "v")?;
        match v {
            Some(v) => u32::try_from(v).map_err(|_| StoreError::Corrupt {
                table: "studies",
                key: name.to_owned(),
                column: "version",
                why: format!("{v} is out of range"),
            }),
            None => Err(StoreError::NotFound {
                what: format!("study `{name}`"),
            }),
        }
    }

    /// Every study version, by name then version.
    pub async fn list_studies(&self) -> Result<Vec<StudySummary>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, name, version, sha256, locked_at FROM studies ORDER BY name, version",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(sql("listing studies"))?;
        rows.iter()
            .map(|r| {
                let id: i64 = col(r, "studies", &"?", "id")?;
                Ok(StudySummary {
                    id,
                    name: col(r, "studies", &id, "name")?,
                    version: col_u(r, "studies", &id, "version")?,
                    sha256: col(r, "studies", &id, "sha256")?,
                    locked_at: col(r, "studies", &id, "locked_at")?,
                })
            })
            .collect()
    }

    /// The id of a locked study's row, or why there is none.
    pub(crate) async fn locked_study_id(
        &self,
        name: &str,
        version: u32,
    ) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT id, locked_at FROM studies WHERE name = $1 AND version = $2")
            .bind(name)
            .bind(i64::from(version))
            .fetch_optional(&self.pool)
            .await
            .map_err(sql(format!("finding study `{name}` v{version}")))?
            .ok_or_else(|| StoreError::NotFound {
                what: format!("study `{name}` v{version}"),
            })?;
        let locked_at: Option<String> = row.try_get("locked_at").ok().flatten();
        if locked_at.is_none() {
            return Err(StoreError::Study(StudyError::NotLocked {
                name: name.to_owned(),
                version,
            }));
        }
        col(&row, "studies", &name, "id")
    }
}
