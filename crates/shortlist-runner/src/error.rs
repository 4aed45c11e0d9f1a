//! Errors of runs and of the application service, each with the class that decides what a front
//! end does with it: bad input (exit 2, never retried), a failed check (exit 1), a transient
//! failure (exit 3; a job is retried with backoff), corrupt stored data (exit 4, naming the row).

use std::path::PathBuf;

use shortlist_store::StoreError;
use shortlist_study::StudyError;

/// What kind of failure an error is, for exit codes and retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// The input cannot work as it stands (a file, a field, an argument): exit 2, never retried.
    BadInput,
    /// The command ran and its check failed: exit 1.
    CheckFailed,
    /// The network, a busy database, a crashed engine or load generator: trying again may
    /// succeed. Exit 3; a job is retried with backoff up to its attempts.
    Transient,
    /// Stored data that cannot be read back: exit 4; the message names the table and row.
    Corrupt,
}

impl ErrorClass {
    /// The process exit status for this class.
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorClass::CheckFailed => 1,
            ErrorClass::BadInput => 2,
            ErrorClass::Transient => 3,
            ErrorClass::Corrupt => 4,
        }
    }

    /// Whether a job that failed this way is tried again.
    pub fn retried(self) -> bool {
        self == ErrorClass::Transient
    }
}

/// Why a run could not go on.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The candidate specification cannot be understood.
    #[error("candidate `{spec}`: {why}")]
    Candidate { spec: String, why: String },
    /// The local engine failed (loading or generating); its message names the file.
    #[error(transparent)]
    Engine(#[from] shortlist_engine::EngineError),
    /// One request failed for a reason outside the model (transport, HTTP status, timeout).
    /// A quality run retries it per its policy and then reports the case as an error: never
    /// scored, never stored as done.
    #[error("{url}: {why}")]
    Request {
        url: String,
        /// The HTTP status, when the server answered.
        status: Option<u16>,
        why: String,
        /// Whether asking again may succeed (transport errors, timeouts, 429 and 5xx).
        retryable: bool,
    },
    /// An endpoint failed in a way that stops the run (it cannot be reached at all).
    #[error("endpoint {url}: {why}")]
    Endpoint { url: String, why: String },
    /// The progress file could not be read or written.
    #[error("{path}: {why}")]
    Progress { path: PathBuf, why: String },
}

impl RunError {
    /// The class of this failure.
    pub fn class(&self) -> ErrorClass {
        use shortlist_engine::EngineError as E;
        match self {
            RunError::Candidate { .. } | RunError::Progress { .. } => ErrorClass::BadInput,
            RunError::Engine(E::Unavailable(_) | E::Compute(_)) => ErrorClass::Transient,
            RunError::Engine(E::Io { error, .. })
                if error.kind() != std::io::ErrorKind::NotFound =>
            {
                ErrorClass::Transient
            }
            RunError::Engine(_) => ErrorClass::BadInput,
            RunError::Request { retryable, .. } => {
                if *retryable {
                    ErrorClass::Transient
                } else {
                    ErrorClass::BadInput
                }
            }
            RunError::Endpoint { .. } => ErrorClass::Transient,
        }
    }
}

/// Why a service call failed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Study(#[from] StudyError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Eval(#[from] shortlist_evals::EvalError),
    /// A trace that does not read (its source, line and field named).
    #[error(transparent)]
    Workload(#[from] shortlist_workload::WorkloadError),
    /// A file the study names could not be read.
    #[error("{path}: {why}")]
    File { path: PathBuf, why: String },
    /// The input is not usable as it stands: what, and why.
    #[error("{what}: {why}")]
    Invalid { what: String, why: String },
    /// Records judged by different criteria cannot be compared: what differs, and two of the
    /// study's versions whose criteria differ (older first).
    #[error("study `{study}`: these records cannot be compared: {}", differs.join("; "))]
    Incomparable {
        study: String,
        versions: (u32, u32),
        differs: Vec<String>,
    },
    /// The load generator failed (not the target, not the input).
    #[error("{what}: the load generator failed: {why}")]
    LoadGenerator { what: String, why: String },
    /// The target answered no request.
    #[error("{what}: the target is unreachable: {why}")]
    Unreachable { what: String, why: String },
    /// Some cases failed outside the model after their retries; they are asked again when the
    /// job is retried.
    #[error("{what}: {count} cases failed outside the model; the first: {first}")]
    CaseErrors {
        what: String,
        count: usize,
        first: String,
    },
    /// A job's body panicked (a bug): reported with what it was doing, and retried.
    #[error("{what}: internal error (a panic): {why}")]
    Panicked { what: String, why: String },
    /// Another process holds what this needs; trying again later may succeed.
    #[error("{what}: busy: {why}")]
    Busy { what: String, why: String },
    /// Stored data cannot be read back.
    #[error("{what}: stored data is corrupt: {why}")]
    Corrupt { what: String, why: String },
    /// A thread or runtime could not be started.
    #[error("{what}: {source}")]
    Os {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl ServiceError {
    /// The class of this failure.
    pub fn class(&self) -> ErrorClass {
        match self {
            ServiceError::Store(e) => store_class(e),
            ServiceError::Study(StudyError::Tampered { .. }) => ErrorClass::CheckFailed,
            ServiceError::Study(_)
            | ServiceError::Eval(_)
            | ServiceError::Workload(_)
            | ServiceError::File { .. }
            | ServiceError::Invalid { .. }
            | ServiceError::Incomparable { .. } => ErrorClass::BadInput,
            ServiceError::Run(e) => e.class(),
            ServiceError::LoadGenerator { .. }
            | ServiceError::Unreachable { .. }
            | ServiceError::CaseErrors { .. }
            | ServiceError::Panicked { .. }
            | ServiceError::Busy { .. }
            | ServiceError::Os { .. } => ErrorClass::Transient,
            ServiceError::Corrupt { .. } => ErrorClass::Corrupt,
        }
    }

    /// The class of a store error met outside the service.
    pub fn class_of_store(e: &StoreError) -> ErrorClass {
        store_class(e)
    }

    /// Whether this is a lock that no longer holds: stored content that does not hash to the
    /// stored lock hash (a verify failure, not bad input).
    pub fn is_tampered(&self) -> bool {
        matches!(
            self,
            ServiceError::Study(StudyError::Tampered { .. })
                | ServiceError::Store(StoreError::Study(StudyError::Tampered { .. }))
        )
    }

    /// Whether the thing asked for does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            ServiceError::Store(StoreError::NotFound { .. } | StoreError::Removed { .. })
        )
    }

    /// What was asked for and does not exist ("a record of `x` in study `s` v2"), if that is
    /// this error.
    pub fn missing(&self) -> Option<&str> {
        match self {
            ServiceError::Store(
                StoreError::NotFound { what } | StoreError::Removed { what, .. },
            ) => Some(what),
            _ => None,
        }
    }

    pub fn invalid(what: impl Into<String>, why: impl Into<String>) -> ServiceError {
        ServiceError::Invalid {
            what: what.into(),
            why: why.into(),
        }
    }
}

fn store_class(e: &StoreError) -> ErrorClass {
    if e.is_transient() {
        ErrorClass::Transient
    } else if e.is_corrupt() {
        ErrorClass::Corrupt
    } else if matches!(e, StoreError::Study(StudyError::Tampered { .. })) {
        ErrorClass::CheckFailed
    } else {
        // Bad input, a missing row, a locked study, or a statement that failed for another
        // reason than a busy or lost connection (a constraint, a trigger): not fixed by retrying.
        ErrorClass::BadInput
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_decide_exit_codes_and_retries() {
        assert_eq!(ErrorClass::CheckFailed.exit_code(), 1);
        assert_eq!(ErrorClass::BadInput.exit_code(), 2);
        assert_eq!(ErrorClass::Transient.exit_code(), 3);
        assert_eq!(ErrorClass::Corrupt.exit_code(), 4);
        let panic = ServiceError::Panicked {
            what: "job 3".into(),
            why: "index out of bounds".into(),
        };
        assert!(panic.class().retried(), "a panicked step is retried");
        let load = ServiceError::LoadGenerator {
            what: "step".into(),
            why: "runtime".into(),
        };
        assert!(
            load.class().retried(),
            "a load generator failure is retried"
        );
        assert!(!ServiceError::invalid("f", "bad").class().retried());
        let corrupt = ServiceError::Store(StoreError::Corrupt {
            table: "runs",
            key: "7".into(),
            column: "kind",
            why: "unknown".into(),
        });
        assert_eq!(corrupt.class(), ErrorClass::Corrupt);
        let http_400 = RunError::Request {
            url: "u".into(),
            status: Some(400),
            why: "bad".into(),
            retryable: false,
        };
        assert_eq!(http_400.class(), ErrorClass::BadInput);
    }
}
