//! Errors of the study domain: every one names the study file and the field.

/// What is wrong with a study, a record or its inputs.
#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    /// A field has an unusable value.
    #[error("{source_name}: field `{field}`: {why}")]
    Invalid {
        source_name: String,
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
