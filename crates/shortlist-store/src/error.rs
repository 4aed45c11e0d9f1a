//! Errors of the store: each names the operation and the row it was about.

use shortlist_study::StudyError;

/// What went wrong while storing or loading.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL names no database this build can open.
    #[error("database URL `{url}`: {why}")]
    BadUrl { url: String, why: String },
    /// The database could not be opened.
    #[error("cannot open the database at `{url}`: {source}")]
    Connect {
        url: String,
        #[source]
        source: sqlx::Error,
    },
    /// The schema migrations failed at start-up.
    #[error("migrating the {backend} database at `{url}`: {source}")]
    Migrate {
        backend: &'static str,
        url: String,
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// A statement failed.
    #[error("{op}: {source}")]
    Sql {
        op: String,
        #[source]
        source: sqlx::Error,
    },
    /// An argument was refused before it reached the database.
    #[error("{op}: field `{field}`: {why}")]
    Invalid {
        op: String,
        field: &'static str,
        why: String,
    },
    /// A stored row could not be read back into its type.
    #[error("table `{table}`, row {key}: column `{column}`: {why}")]
    Corrupt {
        table: &'static str,
        key: String,
        column: &'static str,
        why: String,
    },
    /// The row asked for does not exist.
    #[error("{what} not found")]
    NotFound { what: String },
    /// The version asked for was removed. Its number stays with the content it held (`sha256`):
    /// it is never given to other content.
    #[error(
        "{what} was removed (it held sha256 {sha256}; its number is never given to other content)"
    )]
    Removed { what: String, sha256: String },
    /// A locked study cannot change; an edit makes a new version.
    #[error(
        "study `{name}` v{version} is locked (sha256 {sha256}, locked at {locked_at}): it cannot be changed or removed; edit a new version instead"
    )]
    StudyLocked {
        name: String,
        version: u32,
        sha256: String,
        locked_at: String,
    },
    /// A study failed its own checks (including the lock-hash check on load).
    #[error(transparent)]
    Study(#[from] StudyError),
    /// A job was finished by a worker that no longer holds it (its lease went stale).
    #[error("job {id}: not held by worker `{worker}` (state {state}, held by {holder})")]
    JobNotHeld {
        id: i64,
        worker: String,
        state: String,
        holder: String,
    },
}

impl StoreError {
    /// Whether trying again later could succeed: the database could not be reached, was busy
    /// or shutting down, or a connection broke mid-statement. Bad input, missing rows, locked
    /// studies and corrupt rows never get better on retry.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Connect { source, .. } | StoreError::Sql { source, .. } => {
                transient_sql(source)
            }
            _ => false,
        }
    }

    /// Whether a stored row could not be read back (its table, row and column are named).
    pub fn is_corrupt(&self) -> bool {
        matches!(self, StoreError::Corrupt { .. })
    }
}

fn transient_sql(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // SQLite: SQLITE_BUSY (5) and SQLITE_LOCKED (6) with their extended codes.
            // PostgreSQL: serialization failure, deadlock, connection exceptions (08…), and
            // operator intervention (57P…: shutdown, cannot connect now).
            matches!(
                &*code,
                "5" | "6" | "261" | "262" | "517" | "40001" | "40P01"
            ) || code.starts_with("08")
                || code.starts_with("57P")
        }),
        _ => false,
    }
}

/// A `map_err` adaptor that names the operation.
pub(crate) fn sql(op: impl Into<String>) -> impl FnOnce(sqlx::Error) -> StoreError {
    let op = op.into();
    move |source| StoreError::Sql { op, source }
}

/// Like [`sql`], but a unique-key violation is the refusal of `field` saying `why` (a name or
/// URL already taken).
pub(crate) fn sql_or_taken(
    op: impl Into<String>,
    field: &'static str,
    why: String,
) -> impl FnOnce(sqlx::Error) -> StoreError {
    let op = op.into();
    move |source| {
        if source
            .as_database_error()
            .is_some_and(|d| d.is_unique_violation())
        {
            StoreError::Invalid { op, field, why }
        } else {
            StoreError::Sql { op, source }
        }
    }
}

/// The URL with any password replaced, for messages.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_once('/').unwrap_or((rest, ""));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let slash = if rest.contains('/') { "/" } else { "" };
            format!("{scheme}://{user}:***@{host}{slash}{tail}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_do_not_reach_messages() {
        assert_eq!(
            redact("postgres://u:secret@127.0.0.1/db"),
            "postgres://u:***@127.0.0.1/db"
        );
        assert_eq!(redact("sqlite://x.db?mode=rwc"), "sqlite://x.db?mode=rwc");
    }
}
