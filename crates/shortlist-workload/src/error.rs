//! The crate's error type: every failure names its input and, where a line is involved, the line
//! and the field.

/// What went wrong while reading, writing, synthesizing or fitting a workload.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// A line of an input is malformed or inconsistent.
    #[error("{source_name}:{line}: field `{field}`: {why}")]
    Invalid {
        source_name: String,
        line: u64,
        field: String,
        why: String,
    },
    /// The input could not be read, or the output could not be written.
    #[error("{source_name}: {error}")]
    Io {
        source_name: String,
        error: std::io::Error,
    },
    /// A whole input, or a set of parameters, is unusable (not tied to one line).
    #[error("{source_name}: {why}")]
    Unusable { source_name: String, why: String },
}

impl WorkloadError {
    pub(crate) fn at(
        source_name: &str,
        line: u64,
        field: impl Into<String>,
        why: impl Into<String>,
    ) -> Self {
        WorkloadError::Invalid {
            source_name: source_name.to_owned(),
            line,
            field: field.into(),
            why: why.into(),
        }
    }
    pub(crate) fn io(source_name: &str, error: std::io::Error) -> Self {
        WorkloadError::Io {
            source_name: source_name.to_owned(),
            error,
        }
    }
    pub(crate) fn unusable(source_name: &str, why: impl Into<String>) -> Self {
        WorkloadError::Unusable {
            source_name: source_name.to_owned(),
            why: why.into(),
        }
    }
}

/// Check a `format` tag against the one this reader knows: the same name and major version.
/// Minor versions (`name.v1.2`) are accepted, since they only add fields.
pub(crate) fn check_format(found: &str, expected: &str) -> Result<(), String> {
    if found.is_empty() {
        return Err(format!("missing `format` tag: expected \"{expected}\""));
    }
    if found == expected
        || found
            .strip_prefix(expected)
            .is_some_and(|rest| rest.starts_with('.'))
    {
        return Ok(());
    }
    let (name, _) = expected.rsplit_once(".v").unwrap_or((expected, ""));
    if found.starts_with(&format!("{name}.v")) {
        Err(format!(
            "unsupported version \"{found}\": this reader understands \"{expected}\""
        ))
    } else {
        Err(format!(
            "not a trace: format is \"{found}\", expected \"{expected}\""
        ))
    }
}
