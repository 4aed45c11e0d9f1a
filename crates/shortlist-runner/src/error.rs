//! Errors of runs: what failed, for which candidate and case, and where its progress is kept.

use std::path::PathBuf;

/// Why a run could not go on.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The candidate specification cannot be understood.
    #[error("candidate `{spec}`: {why}")]
    Candidate { spec: String, why: String },
    /// The local engine failed (loading or generating).
    #[error("engine: {0}")]
    Engine(#[from] shortlist_engine::EngineError),
    /// An endpoint failed in a way that stops the run (not a per-case error).
    #[error("endpoint {url}: {why}")]
    Endpoint { url: String, why: String },
    /// The progress file could not be read or written.
    #[error("{path}: {why}")]
    Progress { path: PathBuf, why: String },
}
