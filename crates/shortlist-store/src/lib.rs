//! Storage for Shortlist over sqlx: SQLite by default, PostgreSQL by URL. The only crate that
//! knows SQL; everything else calls its typed methods.
//!
//! Principal types and how they relate:
//! - [`Store`] is a connection pool opened by [`Store::connect`] with a `sqlite://…` or
//!   `postgres://…` URL ([`Store::url_from_env`] reads `DATABASE_URL`). It runs the embedded
//!   migrations of its dialect (`migrations/sqlite`, `migrations/postgres`, same numbering)
//!   before it returns. PostgreSQL is reached without TLS: a server on this host or a private
//!   network.
//! - Content versioned by hash — eval sets, candidates, workloads, SLOs — is put with
//!   [`Store::put_eval_set`] and friends and comes back as a [`content::Versioned`] (name, version,
//!   SHA-256).
//! - Studies are drafts until [`Store::lock_study`] stores a [`shortlist_study::study::LockedStudy`];
//!   from then on the store and the database (a trigger) refuse to change the row, and
//!   [`Store::verify_study`] recomputes its hash.
//! - A locked study version is run as numbered [`generations::Generation`]s (manual, scheduled or
//!   through the API); a [`runs::Run`] belongs to one generation, names the worker, machine and
//!   code version that executed it, and holds per-case [`runs::CaseResult`]s (idempotent per
//!   case) and [`runs::LoadResult`]s; selection records are stored sealed with their generation
//!   ([`Store::put_record`]).
//! - [`jobs::Job`] rows are the work queue: [`Store::claim_next_job`] never hands one job to two
//!   workers (`FOR UPDATE SKIP LOCKED` on PostgreSQL, `BEGIN IMMEDIATE` on SQLite); a job may wait
//!   for another ([`jobs::NewJob::depends_on`]) and a retried one for its backoff. Each job's
//!   typed progress is appended as [`progress::ProgressRow`]s that any process can follow.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use shortlist_store::Store;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let url = format!("sqlite://{}?mode=rwc", dir.path().join("shortlist.db").display());
//! let store = Store::connect(&url).await.unwrap();
//! let job = store.enqueue_job("quality", &serde_json::json!({"candidate": "small"})).await.unwrap();
//! let claimed = store.claim_next_job("worker-1").await.unwrap().unwrap();
//! assert_eq!(claimed.id, job);
//! store.complete_job(job, "worker-1").await.unwrap();
//! # });
//! ```

pub mod content;
pub mod error;
pub mod gangs;
pub mod generations;
pub mod jobs;
pub mod notify;
pub mod progress;
pub mod records;
pub mod reproductions;
pub mod runs;
pub mod schedules;
pub mod studies;
pub mod workers;

use std::borrow::Cow;
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{Any, AnyPool, Connection, Executor, SqlStr, Transaction};

pub use error::StoreError;

/// The default database: a SQLite file in the working directory, created when missing.
pub const DEFAULT_URL: &str = "sqlite://shortlist.db?mode=rwc";

/// The database behind a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
        }
    }

    fn of_url(url: &str) -> Result<Backend, StoreError> {
        if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else {
            Err(StoreError::BadUrl {
                url: error::redact(url),
                why: "expected sqlite://PATH?mode=rwc or postgres://USER:PASSWORD@HOST/DATABASE"
                    .to_owned(),
            })
        }
    }
}

/// The schema, one list per dialect with the same versions. The SQL is compiled in, so a
/// released binary migrates any database it opens.
///
/// The fourth value says whether the migration manages its own transaction: SQLite's 0002 rebuilds
/// `runs` with foreign keys off, which SQLite only allows outside a transaction.
const SQLITE_MIGRATIONS: &[(i64, &str, &str, bool)] = &[
    (
        1,
        "init",
        include_str!("../../../migrations/sqlite/0001_init.sql"),
        false,
    ),
    (
        2,
        "generations",
        include_str!("../../../migrations/sqlite/0002_generations.sql"),
        true,
    ),
    (
        3,
        "schedules",
        include_str!("../../../migrations/sqlite/0003_schedules.sql"),
        false,
    ),
    (
        4,
        "notifications",
        include_str!("../../../migrations/sqlite/0004_notifications.sql"),
        false,
    ),
    (
        5,
        "request_locks",
        include_str!("../../../migrations/sqlite/0005_request_locks.sql"),
        false,
    ),
    (
        6,
        "job_groups",
        include_str!("../../../migrations/sqlite/0006_job_groups.sql"),
        false,
    ),
    (
        7,
        "progress_notify",
        include_str!("../../../migrations/sqlite/0007_progress_notify.sql"),
        false,
    ),
    (
        8,
        "load_gangs",
        include_str!("../../../migrations/sqlite/0008_load_gangs.sql"),
        false,
    ),
    (
        9,
        "workers",
        include_str!("../../../migrations/sqlite/0009_workers.sql"),
        false,
    ),
    (
        10,
        "cancel",
        include_str!("../../../migrations/sqlite/0010_cancel.sql"),
        false,
    ),
    (
        11,
        "run_ends",
        include_str!("../../../migrations/sqlite/0011_run_ends.sql"),
        false,
    ),
    (
        12,
        "removed_versions",
        include_str!("../../../migrations/sqlite/0012_removed_versions.sql"),
        false,
    ),
    (
        13,
        "reproductions",
        include_str!("../../../migrations/sqlite/0013_reproductions.sql"),
        false,
    ),
];
const POSTGRES_MIGRATIONS: &[(i64, &str, &str, bool)] = &[
    (
        1,
        "init",
        include_str!("../../../migrations/postgres/0001_init.sql"),
        false,
    ),
    (
        2,
        "generations",
        include_str!("../../../migrations/postgres/0002_generations.sql"),
        false,
    ),
    (
        3,
        "schedules",
        include_str!("../../../migrations/postgres/0003_schedules.sql"),
        false,
    ),
    (
        4,
        "notifications",
        include_str!("../../../migrations/postgres/0004_notifications.sql"),
        false,
    ),
    (
        5,
        "request_locks",
        include_str!("../../../migrations/postgres/0005_request_locks.sql"),
        false,
    ),
    (
        6,
        "job_groups",
        include_str!("../../../migrations/postgres/0006_job_groups.sql"),
        false,
    ),
    (
        7,
        "progress_notify",
        include_str!("../../../migrations/postgres/0007_progress_notify.sql"),
        false,
    ),
    (
        8,
        "load_gangs",
        include_str!("../../../migrations/postgres/0008_load_gangs.sql"),
        false,
    ),
    (
        9,
        "workers",
        include_str!("../../../migrations/postgres/0009_workers.sql"),
        false,
    ),
    (
        10,
        "cancel",
        include_str!("../../../migrations/postgres/0010_cancel.sql"),
        false,
    ),
    (
        11,
        "run_ends",
        include_str!("../../../migrations/postgres/0011_run_ends.sql"),
        false,
    ),
    (
        12,
        "removed_versions",
        include_str!("../../../migrations/postgres/0012_removed_versions.sql"),
        false,
    ),
    (
        13,
        "reproductions",
        include_str!("../../../migrations/postgres/0013_reproductions.sql"),
        false,
    ),
];

fn migrator(backend: Backend) -> Migrator {
    migrator_up_to(backend, i64::MAX)
}

/// The migrations up to `version`: a test builds a database of an older schema with it.
fn migrator_up_to(backend: Backend, version: i64) -> Migrator {
    let list = match backend {
        Backend::Sqlite => SQLITE_MIGRATIONS,
        Backend::Postgres => POSTGRES_MIGRATIONS,
    };
    Migrator::with_migrations(
        list.iter()
            .filter(|m| m.0 <= version)
            .map(|&(version, description, sql, no_tx)| {
                Migration::new(
                    version,
                    Cow::Borrowed(description),
                    MigrationType::Simple,
                    SqlStr::from_static(sql),
                    no_tx,
                )
            })
            .collect(),
    )
}

/// A pool of connections to the Shortlist database.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    /// The URL it was opened with (a PostgreSQL listener opens its own connection with it).
    url: SecretUrl,
}

/// A database URL whose password never reaches a log or a `{:?}`.
#[derive(Clone)]
pub(crate) struct SecretUrl(std::sync::Arc<str>);

impl std::fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&error::redact(&self.0))
    }
}

impl std::ops::Deref for SecretUrl {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// PRAGMAs every SQLite connection gets. WAL lets readers run beside the writer; the busy timeout
/// makes a writer wait for the lock instead of failing with "database is locked"; NORMAL
/// synchronous is durable in WAL mode except for the last commits before a power loss.
const SQLITE_PRAGMAS: &str = "PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL; \
     PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;";

impl Store {
    /// Open the database at `url` (`sqlite://PATH?mode=rwc` or `postgres://…`) and bring its
    /// schema up to date.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        Store::connect_with(url, 8).await
    }

    /// The database the environment names: `DATABASE_URL`, else [`DEFAULT_URL`].
    pub fn url_from_env() -> String {
        std::env::var("DATABASE_URL")
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_URL.to_owned())
    }

    /// [`Store::connect`] with a pool of at most `max_connections`.
    pub async fn connect_with(url: &str, max_connections: u32) -> Result<Store, StoreError> {
        let backend = Backend::of_url(url)?;
        let url = &normalize_url(backend, url);
        install_default_drivers();
        // Each connection to an in-memory SQLite database is a database of its own: one
        // connection, kept for the life of the pool, is the only way to see one database.
        let memory =
            backend == Backend::Sqlite && (url.contains(":memory:") || url.contains("mode=memory"));
        let connect_error = |source| StoreError::Connect {
            url: error::redact(url),
            source,
        };
        if !memory {
            // One connection first, outside the pool: a database that cannot be opened (a
            // damaged SQLite file, a refused password) says why at once, where the pool would
            // retry it until its timeout and then say only that it timed out.
            let mut probe = sqlx::AnyConnection::connect(url)
                .await
                .map_err(connect_error)?;
            if backend == Backend::Sqlite {
                probe.execute(SQLITE_PRAGMAS).await.map_err(connect_error)?;
            }
            probe.close().await.map_err(connect_error)?;
        }
        let options = if memory {
            AnyPoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
        } else {
            AnyPoolOptions::new().max_connections(max_connections.max(1))
        };
        let pool = options
            .after_connect(|conn, _meta| {
                Box::pin(async move {
                    if conn.backend_name() == Backend::Sqlite.name() {
                        conn.execute(SQLITE_PRAGMAS).await?;
                    }
                    Ok(())
                })
            })
            .connect(url)
            .await
            .map_err(connect_error)?;
        migrator(backend)
            .run(&pool)
            .await
            .map_err(|source| StoreError::Migrate {
                backend: backend.name(),
                url: error::redact(url),
                source,
            })?;
        tracing::debug!(backend = backend.name(), "store opened and migrated");
        Ok(Store {
            pool,
            backend,
            url: SecretUrl(url.as_str().into()),
        })
    }

    /// A store whose schema stops at `version` (a database written by an older release).
    #[cfg(test)]
    pub(crate) async fn connect_at_schema(url: &str, version: i64) -> Store {
        let backend = Backend::of_url(url).unwrap();
        install_default_drivers();
        let pool = AnyPoolOptions::new()
            .max_connections(2)
            .after_connect(|conn, _meta| {
                Box::pin(async move {
                    if conn.backend_name() == Backend::Sqlite.name() {
                        conn.execute(SQLITE_PRAGMAS).await?;
                    }
                    Ok(())
                })
            })
            .connect(&normalize_url(backend, url))
            .await
            .unwrap();
        migrator_up_to(backend, version).run(&pool).await.unwrap();
        Store {
            pool,
            backend,
            url: SecretUrl(url.into()),
        }
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Close the pool, waiting for connections to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A transaction that will write after reading. On SQLite it takes the write lock at once
    /// (`BEGIN IMMEDIATE`): a deferred transaction that upgrades to a writer fails with
    /// `SQLITE_BUSY` whatever the busy timeout. PostgreSQL locks rows as it goes.
    pub(crate) async fn write_tx(&self, op: &str) -> Result<Transaction<'static, Any>, StoreError> {
        match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
            Backend::Postgres => self.pool.begin().await,
        }
        .map_err(error::sql(format!("{op}: begin")))
    }

    /// ` FOR UPDATE` on PostgreSQL (row lock for read-then-write), nothing on SQLite (the
    /// transaction already holds the write lock).
    pub(crate) fn for_update(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite => "",
            Backend::Postgres => " FOR UPDATE",
        }
    }

    #[cfg(test)]
    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }
}

/// A SQLite file URL without a `mode` creates the file when it is missing, as the default does.
fn normalize_url(backend: Backend, url: &str) -> String {
    if backend != Backend::Sqlite || url.contains("mode=") || url.contains(":memory:") {
        return url.to_owned();
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}mode=rwc")
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A name the store files something under: non-empty, no surrounding space.
pub(crate) fn check_name(op: &str, field: &'static str, name: &str) -> Result<(), StoreError> {
    if name.trim().is_empty() || name.trim() != name {
        return Err(StoreError::Invalid {
            op: op.to_owned(),
            field,
            why: format!("{name:?} is empty or has surrounding spaces"),
        });
    }
    Ok(())
}

/// A `u64` the database holds as a signed 64-bit integer.
pub(crate) fn to_i64(op: &str, field: &'static str, v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Invalid {
        op: op.to_owned(),
        field,
        why: format!("{v} exceeds the largest storable integer"),
    })
}

/// Read one column of a row, naming the table, row and column if it does not decode.
pub(crate) fn col<'r, T>(
    row: &'r sqlx::any::AnyRow,
    table: &'static str,
    key: &dyn std::fmt::Display,
    column: &'static str,
) -> Result<T, StoreError>
where
    T: sqlx::Decode<'r, Any> + sqlx::Type<Any>,
{
    use sqlx::Row;
    row.try_get::<T, _>(column)
        .map_err(|e| StoreError::Corrupt {
            table,
            key: key.to_string(),
            column,
            why: e.to_string(),
        })
}

/// A non-negative integer column as `u64`/`u32`.
pub(crate) fn col_u<T: TryFrom<i64>>(
    row: &sqlx::any::AnyRow,
    table: &'static str,
    key: &dyn std::fmt::Display,
    column: &'static str,
) -> Result<T, StoreError> {
    let v: i64 = col(row, table, key, column)?;
    T::try_from(v).map_err(|_| StoreError::Corrupt {
        table,
        key: key.to_string(),
        column,
        why: format!("{v} is out of range"),
    })
}

/// A JSON text column parsed.
pub(crate) fn col_json<T: serde::de::DeserializeOwned>(
    row: &sqlx::any::AnyRow,
    table: &'static str,
    key: &dyn std::fmt::Display,
    column: &'static str,
) -> Result<T, StoreError> {
    let text: String = col(row, table, key, column)?;
    serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
        table,
        key: key.to_string(),
        column,
        why: format!("not the expected JSON: {e}"),
    })
}

#[cfg(test)]
mod tests;
