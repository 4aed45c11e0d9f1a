//! The crate's error types: what went wrong reading a workload, starting a run, or talking to a
//! target. Target errors become error records; the others stop a run before it starts.

use std::path::PathBuf;

/// Failures that stop a run (bad input, unusable configuration, I/O on the records file).
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    /// A line of a trace file is malformed.
    #[error("{path}:{line}: field `{field}`: {why}")]
    Trace {
        path: PathBuf,
        line: u64,
        field: String,
        why: String,
    },
    /// A trace is malformed (file, line and field named by the reader).
    #[error(transparent)]
    Workload(#[from] shortlist_workload::WorkloadError),
    /// A file could not be read or written.
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A target specification (`http://...`, `sim:...`) is unusable.
    #[error("target `{spec}`: {why}")]
    TargetSpec { spec: String, why: String },
    /// A run option is unusable.
    #[error("{option}: {why}")]
    Option { option: &'static str, why: String },
}

impl LoadgenError {
    pub(crate) fn trace(
        path: &std::path::Path,
        line: u64,
        field: impl Into<String>,
        why: impl Into<String>,
    ) -> Self {
        LoadgenError::Trace {
            path: path.to_path_buf(),
            line,
            field: field.into(),
            why: why.into(),
        }
    }
    pub(crate) fn io(path: &std::path::Path, error: std::io::Error) -> Self {
        LoadgenError::Io {
            path: path.to_path_buf(),
            error,
        }
    }
    pub(crate) fn option(option: &'static str, why: impl Into<String>) -> Self {
        LoadgenError::Option {
            option,
            why: why.into(),
        }
    }
}

/// Why one attempt against a target failed. Each ends as an error record (`status: "error"`) whose
/// `error` field is this message; nothing measured before the failure is dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// The connection could not be made or the request could not be written.
    #[error("connect: {0}")]
    Connect(String),
    /// The server answered with an HTTP error status.
    #[error("HTTP {status}: {body}")]
    Status { status: u16, body: String },
    /// The stream is not the protocol it should be (garbage SSE, JSON that is not a chunk).
    #[error("protocol: {0}")]
    Protocol(String),
    /// The stream ended or broke before the answer was complete.
    #[error("closed: {0}")]
    Closed(String),
    /// The server reported an error inside the stream.
    #[error("server error: {0}")]
    Server(String),
}
