//! Content versioned by hash: eval sets, candidates, workloads and SLOs. The same content under
//! the same name is stored once; new content under a known name becomes its next version.

use std::fmt;

use sha2::{Digest, Sha256};
use sqlx::{AssertSqlSafe, Row};

use crate::error::sql;
use crate::{Store, StoreError, check_name, col, col_u, now_ms};

/// A SHA-256 in lower-case hex.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContentHash(String);

impl ContentHash {
    /// The hash of some bytes.
    pub fn of(bytes: &[u8]) -> ContentHash {
        ContentHash(hex::encode(Sha256::digest(bytes)))
    }

    /// Parse a hash given in hex (either case).
    pub fn parse(text: &str) -> Option<ContentHash> {
        (text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| ContentHash(text.to_ascii_lowercase()))
    }

    /// The hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a put or a get names: one version of some content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    pub id: i64,
    pub name: String,
    pub version: u32,
    pub sha256: ContentHash,
    /// Whether this put stored it (false: the same content was already there).
    pub inserted: bool,
}

/// A stored eval set.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalSetVersion {
    pub meta: Versioned,
    pub yaml: String,
}

/// A stored candidate: its full serving configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateVersion {
    pub meta: Versioned,
    pub config: serde_json::Value,
}

/// How a workload is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    /// A recorded or synthesized trace, in full.
    Trace,
    /// A synthesis spec (with its seed) that regenerates the trace.
    Spec,
}

impl WorkloadKind {
    fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Trace => "trace",
            WorkloadKind::Spec => "spec",
        }
    }
}

/// A stored workload.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadVersion {
    pub meta: Versioned,
    pub kind: WorkloadKind,
    pub body: String,
}

/// A stored SLO (the text of a `*.slo.toml`).
#[derive(Debug, Clone, PartialEq)]
pub struct SloVersion {
    pub meta: Versioned,
    pub toml: String,
}

/// The four versioned tables and the column holding their content.
#[derive(Debug, Clone, Copy)]
enum Table {
    EvalSets,
    Candidates,
    Workloads,
    Slos,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::EvalSets => "eval_sets",
            Table::Candidates => "candidates",
            Table::Workloads => "workloads",
            Table::Slos => "slos",
        }
    }
    /// What a row of the table is, in messages.
    fn thing(self) -> &'static str {
        match self {
            Table::EvalSets => "eval set",
            Table::Candidates => "candidate",
            Table::Workloads => "workload",
            Table::Slos => "SLO",
        }
    }
    fn body(self) -> &'static str {
        match self {
            Table::EvalSets => "yaml",
            Table::Candidates => "config_json",
            Table::Workloads => "body",
            Table::Slos => "toml",
        }
    }
}

/// JSON with object keys sorted at every level, so equal configurations hash alike whatever
/// order their keys were written in.
pub fn canonical_json(value: &serde_json::Value) -> String {
    fn sorted(value: &serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                let mut out = serde_json::Map::new();
                for k in keys {
                    out.insert(k.clone(), sorted(&map[k]));
                }
                serde_json::Value::Object(out)
            }
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.iter().map(sorted).collect())
            }
            other => other.clone(),
        }
    }
    // Inserting in sorted order keeps the order whether or not serde_json preserves it.
    serde_json::to_string(&sorted(value)).unwrap_or_default()
}

impl Store {
    /// Store an eval set's YAML under `name`, pinned by `sha256`: the hash of its canonical form
    /// as `shortlist-evals` computes it (the one a study names).
    pub async fn put_eval_set(
        &self,
        name: &str,
        sha256: &ContentHash,
        yaml: &str,
    ) -> Result<Versioned, StoreError> {
        self.put_versioned(Table::EvalSets, name, sha256, yaml, None)
            .await
    }

    /// Store a candidate's full serving configuration; its hash is that of the canonical JSON.
    pub async fn put_candidate(
        &self,
        name: &str,
        config: &serde_json::Value,
    ) -> Result<Versioned, StoreError> {
        let text = canonical_json(config);
        let hash = ContentHash::of(text.as_bytes());
        self.put_versioned(Table::Candidates, name, &hash, &text, None)
            .await
    }

    /// Store a workload (a trace's text or a synthesis spec); its hash is that of the text.
    pub async fn put_workload(
        &self,
        name: &str,
        kind: WorkloadKind,
        body: &str,
    ) -> Result<Versioned, StoreError> {
        let hash = ContentHash::of(body.as_bytes());
        self.put_versioned(Table::Workloads, name, &hash, body, Some(kind))
            .await
    }

    /// Store an SLO's TOML text; its hash is that of the text.
    pub async fn put_slo(&self, name: &str, toml: &str) -> Result<Versioned, StoreError> {
        let hash = ContentHash::of(toml.as_bytes());
        self.put_versioned(Table::Slos, name, &hash, toml, None)
            .await
    }

    /// An eval set by name and version (`None`: the latest).
    pub async fn eval_set(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<EvalSetVersion, StoreError> {
        let (meta, yaml, _) = self.get_versioned(Table::EvalSets, name, version).await?;
        Ok(EvalSetVersion { meta, yaml })
    }

    /// An eval set by its hash.
    pub async fn eval_set_by_hash(
        &self,
        sha256: &ContentHash,
    ) -> Result<EvalSetVersion, StoreError> {
        let (meta, yaml, _) = self.get_by_hash(Table::EvalSets, sha256).await?;
        Ok(EvalSetVersion { meta, yaml })
    }

    /// A candidate by name and version (`None`: the latest).
    pub async fn candidate(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<CandidateVersion, StoreError> {
        let (meta, text, _) = self.get_versioned(Table::Candidates, name, version).await?;
        let config = serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
            table: "candidates",
            key: format!("{name} v{}", meta.version),
            column: "config_json",
            why: e.to_string(),
        })?;
        Ok(CandidateVersion { meta, config })
    }

    /// A workload by name and version (`None`: the latest).
    pub async fn workload(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<WorkloadVersion, StoreError> {
        let (meta, body, kind) = self.get_versioned(Table::Workloads, name, version).await?;
        let kind = match kind.as_deref() {
            Some("trace") => WorkloadKind::Trace,
            Some("spec") => WorkloadKind::Spec,
            other => {
                return Err(StoreError::Corrupt {
                    table: "workloads",
                    key: format!("{name} v{}", meta.version),
                    column: "kind",
                    why: format!("{other:?} is neither trace nor spec"),
                });
            }
        };
        Ok(WorkloadVersion { meta, kind, body })
    }

    /// A stored trace by the SHA-256 of its bytes (the hash a study's `workload.sha256` pins);
    /// a synthesis spec with that hash is not one.
    pub async fn trace_by_hash(&self, sha256: &ContentHash) -> Result<WorkloadVersion, StoreError> {
        let (meta, body, kind) = self.get_by_hash(Table::Workloads, sha256).await?;
        if kind.as_deref() != Some("trace") {
            return Err(StoreError::NotFound {
                what: format!("trace with sha256 {sha256}"),
            });
        }
        Ok(WorkloadVersion {
            meta,
            kind: WorkloadKind::Trace,
            body,
        })
    }

    /// Every version of every stored trace (workloads of kind trace), by name then version.
    pub async fn list_traces(&self) -> Result<Vec<Versioned>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, name, version, sha256 FROM workloads WHERE kind = 'trace' \
             ORDER BY name, version",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(sql("listing traces".to_owned()))?;
        rows.iter()
            .map(|r| Self::meta_row(Table::Workloads, r))
            .collect()
    }

    /// Remove one version of a workload (`NotFound` when it is not stored). Studies pin a
    /// trace by its hash, not by a row; whether one still does is the caller's question.
    pub async fn delete_workload(&self, name: &str, version: u32) -> Result<(), StoreError> {
        self.delete_versioned(Table::Workloads, name, Some(version))
            .await
            .map(drop)
    }

    /// An SLO by name and version (`None`: the latest).
    pub async fn slo(&self, name: &str, version: Option<u32>) -> Result<SloVersion, StoreError> {
        let (meta, toml, _) = self.get_versioned(Table::Slos, name, version).await?;
        Ok(SloVersion { meta, toml })
    }

    /// Remove every version of a candidate's configuration; the versions removed, oldest
    /// first (`NotFound` when there is none). Whether a study still names the candidate is the
    /// caller's question: no row links a study to a candidate row (a study's file names it, and
    /// storing a study stores its candidates again).
    pub async fn delete_candidate(&self, name: &str) -> Result<Vec<u32>, StoreError> {
        self.delete_versioned(Table::Candidates, name, None).await
    }

    /// Remove one version of an eval set (`NotFound` when it is not stored). Studies pin a set
    /// by its hash, not by a row; whether one still does is the caller's question.
    pub async fn delete_eval_set(&self, name: &str, version: u32) -> Result<(), StoreError> {
        self.delete_versioned(Table::EvalSets, name, Some(version))
            .await
            .map(drop)
    }

    /// Every version of every eval set, by name then version.
    pub async fn list_eval_sets(&self) -> Result<Vec<Versioned>, StoreError> {
        self.list_versioned(Table::EvalSets).await
    }
    /// See [`Store::list_eval_sets`].
    pub async fn list_candidates(&self) -> Result<Vec<Versioned>, StoreError> {
        self.list_versioned(Table::Candidates).await
    }
    /// See [`Store::list_eval_sets`].
    pub async fn list_workloads(&self) -> Result<Vec<Versioned>, StoreError> {
        self.list_versioned(Table::Workloads).await
    }
    /// See [`Store::list_eval_sets`].
    pub async fn list_slos(&self) -> Result<Vec<Versioned>, StoreError> {
        self.list_versioned(Table::Slos).await
    }

    async fn put_versioned(
        &self,
        table: Table,
        name: &str,
        sha256: &ContentHash,
        body: &str,
        kind: Option<WorkloadKind>,
    ) -> Result<Versioned, StoreError> {
        let op = format!("storing {} `{name}`", table.name());
        check_name(&op, "name", name)?;
        // Writers of one name are serialized (below), but the UNIQUE constraints stay the last
        // word: a writer they refuse tries again and then sees the row that won.
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self
                .put_versioned_once(table, &op, name, sha256, body, kind)
                .await
            {
                Err(StoreError::Sql { source, .. })
                    if attempt < 8
                        && source
                            .as_database_error()
                            .is_some_and(|d| d.is_unique_violation()) => {}
                other => return other,
            }
        }
    }

    async fn put_versioned_once(
        &self,
        table: Table,
        op: &str,
        name: &str,
        sha256: &ContentHash,
        body: &str,
        kind: Option<WorkloadKind>,
    ) -> Result<Versioned, StoreError> {
        let t = table.name();
        let b = table.body();
        let mut tx = self.write_tx(op).await?;
        self.take_name(&mut tx, op, table, name).await?;
        // The table and column names come from `Table`, never from input.
        let existing = sqlx::query(AssertSqlSafe(format!(
            "SELECT id, version FROM {t} WHERE name = $1 AND sha256 = $2"
        )))
        .bind(name)
        .bind(sha256.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql(op))?;
        if let Some(row) = existing {
            let id: i64 = col(&row, t, &name, "id")?;
            let version: u32 = col_u(&row, t, &name, "version")?;
            tx.rollback().await.map_err(sql(op))?;
            return Ok(Versioned {
                id,
                name: name.to_owned(),
                version,
                sha256: sha256.clone(),
                inserted: false,
            });
        }
        // A number names one content for ever: the same content stored again after it was
        // removed gets its old number back; other content gets a number no version ever had.
        let removed = sqlx::query(
            "SELECT version FROM removed_versions WHERE kind = $1 AND name = $2 AND sha256 = $3 \
             ORDER BY version DESC LIMIT 1",
        )
        .bind(t)
        .bind(name)
        .bind(sha256.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql(op))?;
        let version = match removed {
            Some(row) => {
                let version: i64 = col(&row, "removed_versions", &name, "version")?;
                sqlx::query(
                    "DELETE FROM removed_versions WHERE kind = $1 AND name = $2 AND version = $3",
                )
                .bind(t)
                .bind(name)
                .bind(version)
                .execute(&mut *tx)
                .await
                .map_err(sql(op))?;
                version
            }
            None => {
                let latest = sqlx::query(AssertSqlSafe(format!(
                    "SELECT MAX(v) AS v FROM (SELECT MAX(version) AS v FROM {t} WHERE name = $1 \
                     UNION ALL SELECT MAX(version) AS v FROM removed_versions \
                     WHERE kind = $2 AND name = $1) AS highest"
                )))
                .bind(name)
                .bind(t)
                .fetch_one(&mut *tx)
                .await
                .map_err(sql(op))?;
                let latest: Option<i64> = col(&latest, t, &name, "v")?;
                latest.unwrap_or(0) + 1
            }
        };
        let row = match kind {
            Some(kind) => sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO {t} (name, version, sha256, {b}, created_at_ms, kind) \
                 VALUES ($1, $2, $3, $4, $5, $6) RETURNING id"
            )))
            .bind(name)
            .bind(version)
            .bind(sha256.as_str())
            .bind(body)
            .bind(now_ms())
            .bind(kind.as_str()),
            None => sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO {t} (name, version, sha256, {b}, created_at_ms) \
                 VALUES ($1, $2, $3, $4, $5) RETURNING id"
            )))
            .bind(name)
            .bind(version)
            .bind(sha256.as_str())
            .bind(body)
            .bind(now_ms()),
        }
        .fetch_one(&mut *tx)
        .await
        .map_err(sql(op))?;
        let id: i64 = col(&row, t, &name, "id")?;
        tx.commit().await.map_err(sql(op))?;
        Ok(Versioned {
            id,
            name: name.to_owned(),
            version: u32::try_from(version).unwrap_or(u32::MAX),
            sha256: sha256.clone(),
            inserted: true,
        })
    }

    /// Writers of one name take turns, as SQLite's single writer does, so the next version is
    /// computed from the last committed state (a transaction-scoped lock on PostgreSQL).
    async fn take_name(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        op: &str,
        table: Table,
        name: &str,
    ) -> Result<(), StoreError> {
        if self.backend == crate::Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(format!("{}/{name}", table.name()))
                .execute(&mut **tx)
                .await
                .map_err(sql(op))?;
        }
        Ok(())
    }

    async fn delete_versioned(
        &self,
        table: Table,
        name: &str,
        version: Option<u32>,
    ) -> Result<Vec<u32>, StoreError> {
        let t = table.name();
        let thing = table.thing();
        let what = match version {
            Some(v) => format!("{thing} `{name}` v{v}"),
            None => format!("{thing} `{name}`"),
        };
        let op = format!("removing {what}");
        let mut tx = self.write_tx(&op).await?;
        self.take_name(&mut tx, &op, table, name).await?;
        // The table name comes from `Table`, never from input.
        let rows = match version {
            Some(v) => sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM {t} WHERE name = $1 AND version = $2 RETURNING version, sha256"
            )))
            .bind(name)
            .bind(i64::from(v)),
            None => sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM {t} WHERE name = $1 RETURNING version, sha256"
            )))
            .bind(name),
        }
        .fetch_all(&mut *tx)
        .await
        .map_err(sql(&op))?;
        // Each number removed stays taken, by the content it named.
        let now = now_ms();
        for row in &rows {
            let version: i64 = col(row, t, &name, "version")?;
            let hash: String = col(row, t, &name, "sha256")?;
            sqlx::query(
                "INSERT INTO removed_versions (kind, name, version, sha256, removed_at_ms) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(t)
            .bind(name)
            .bind(version)
            .bind(hash)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(sql(&op))?;
        }
        tx.commit().await.map_err(sql(&op))?;
        let mut removed = rows
            .iter()
            .map(|r| col_u(r, t, &name, "version"))
            .collect::<Result<Vec<u32>, _>>()?;
        if removed.is_empty() {
            return Err(match version {
                Some(v) => self.missing_version(table, name, v).await?,
                None => StoreError::NotFound { what },
            });
        }
        removed.sort_unstable();
        Ok(removed)
    }

    async fn get_versioned(
        &self,
        table: Table,
        name: &str,
        version: Option<u32>,
    ) -> Result<(Versioned, String, Option<String>), StoreError> {
        let t = table.name();
        let b = table.body();
        let kind = if matches!(table, Table::Workloads) {
            "kind"
        } else {
            "NULL AS kind"
        };
        let op = format!("loading {t} `{name}`");
        let row = match version {
            Some(v) => sqlx::query(AssertSqlSafe(format!(
                "SELECT id, name, version, sha256, {b} AS body, {kind} FROM {t} \
                 WHERE name = $1 AND version = $2"
            )))
            .bind(name)
            .bind(i64::from(v)),
            None => sqlx::query(AssertSqlSafe(format!(
                "SELECT id, name, version, sha256, {b} AS body, {kind} FROM {t} \
                 WHERE name = $1 ORDER BY version DESC LIMIT 1"
            )))
            .bind(name),
        }
        .fetch_optional(&self.pool)
        .await
        .map_err(sql(&op))?;
        let Some(row) = row else {
            return Err(match version {
                Some(v) => self.missing_version(table, name, v).await?,
                None => StoreError::NotFound {
                    what: format!("{} `{name}`", table.thing()),
                },
            });
        };
        Self::versioned_row(table, &row)
    }

    /// Why `version` of `name` is not stored: it was removed (and held this hash), or it never
    /// was.
    async fn missing_version(
        &self,
        table: Table,
        name: &str,
        version: u32,
    ) -> Result<StoreError, StoreError> {
        let what = format!("{} `{name}` v{version}", table.thing());
        let row = sqlx::query(
            "SELECT sha256 FROM removed_versions WHERE kind = $1 AND name = $2 AND version = $3",
        )
        .bind(table.name())
        .bind(name)
        .bind(i64::from(version))
        .fetch_optional(&self.pool)
        .await
        .map_err(sql(format!("looking for removed {what}")))?;
        Ok(match row {
            Some(r) => StoreError::Removed {
                sha256: col(&r, "removed_versions", &name, "sha256")?,
                what,
            },
            None => StoreError::NotFound { what },
        })
    }

    async fn get_by_hash(
        &self,
        table: Table,
        sha256: &ContentHash,
    ) -> Result<(Versioned, String, Option<String>), StoreError> {
        let t = table.name();
        let b = table.body();
        let kind = if matches!(table, Table::Workloads) {
            "kind"
        } else {
            "NULL AS kind"
        };
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT id, name, version, sha256, {b} AS body, {kind} FROM {t} \
             WHERE sha256 = $1 ORDER BY id LIMIT 1"
        )))
        .bind(sha256.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(sql(format!("loading {t} by hash {sha256}")))?
        .ok_or_else(|| StoreError::NotFound {
            what: format!("{t} with sha256 {sha256}"),
        })?;
        Self::versioned_row(table, &row)
    }

    async fn list_versioned(&self, table: Table) -> Result<Vec<Versioned>, StoreError> {
        let t = table.name();
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT id, name, version, sha256 FROM {t} ORDER BY name, version"
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(sql(format!("listing {t}")))?;
        rows.iter().map(|r| Self::meta_row(table, r)).collect()
    }

    fn meta_row(table: Table, row: &sqlx::any::AnyRow) -> Result<Versioned, StoreError> {
        let t = table.name();
        let id: i64 = col(row, t, &"?", "id")?;
        let name: String = col(row, t, &id, "name")?;
        let version: u32 = col_u(row, t, &id, "version")?;
        let hash: String = col(row, t, &id, "sha256")?;
        let sha256 = ContentHash::parse(&hash).ok_or_else(|| StoreError::Corrupt {
            table: t,
            key: id.to_string(),
            column: "sha256",
            why: format!("`{hash}` is not a SHA-256"),
        })?;
        Ok(Versioned {
            id,
            name,
            version,
            sha256,
            inserted: false,
        })
    }

    fn versioned_row(
        table: Table,
        row: &sqlx::any::AnyRow,
    ) -> Result<(Versioned, String, Option<String>), StoreError> {
        let meta = Self::meta_row(table, row)?;
        let body: String = col(row, table.name(), &meta.id, "body")?;
        let kind: Option<String> = row.try_get("kind").ok().flatten();
        Ok((meta, body, kind))
    }
}
