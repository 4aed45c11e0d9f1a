//! Errors of the study domain: every one names the study file and the field.

/// What is wrong with a study, a record or its inputs.
#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    /// A field has an unusable value.
    #[error("{source_name}{}: field `{field}`: {why}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Invalid {
        source_name: String,
        /// The field's line in the study file, where it is known.
        line: Option<u64>,
        field: String,
        why: String,
    },
    /// The study file is not valid TOML or has unknown keys.
    #[error("{source_name}:{line}: {why}")]
    Syntax {
        source_name: String,
        line: u64,
        why: String,
    },
    /// A locked study's stored hash does not match its content.
    #[error(
        "study `{name}` v{version}: stored lock hash {stored} but the content hashes to {computed}: the study was changed after it was locked"
    )]
    Tampered {
        name: String,
        version: u32,
        stored: String,
        computed: String,
    },
    /// An operation needs a locked study.
    #[error(
        "study `{name}` v{version} is not locked: runs start only on locked studies (`shortlist study lock`)"
    )]
    NotLocked { name: String, version: u32 },
}

impl StudyError {
    /// The error with the line of its field in `text` (the study file) filled in, where known.
    pub fn with_line_from(self, text: &str) -> StudyError {
        match self {
            StudyError::Invalid {
                source_name,
                line: None,
                field,
                why,
            } => StudyError::Invalid {
                line: crate::study::line_of(text, &field),
                source_name,
                field,
                why,
            },
            other => other,
        }
    }
}
