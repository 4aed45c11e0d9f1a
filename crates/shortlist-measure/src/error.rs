//! The crate's error type: every failure names its input, and where a line is involved, the line
//! and the field.

use std::fmt;

/// What went wrong while reading or merging measurement data.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// A line of an input is malformed or inconsistent.
    #[error("{source_name}:{line}: field `{field}`: {why}")]
    Invalid {
        source_name: String,
        line: u64,
        field: String,
        why: String,
    },
    /// The input could not be read.
    #[error("{source_name}: {error}")]
    Io {
        source_name: String,
        error: std::io::Error,
    },
    /// A value that is not tied to one line (a whole document, an argument) is unusable.
    #[error("{source_name}: {why}")]
    Unusable { source_name: String, why: String },
    /// Two histograms cannot be merged honestly.
    #[error("{0}")]
    Merge(#[from] MergeError),
}

impl MeasureError {
    pub(crate) fn at(
        source_name: &str,
        line: u64,
        field: impl Into<String>,
        why: impl Into<String>,
    ) -> Self {
        MeasureError::Invalid {
            source_name: source_name.to_owned(),
            line,
            field: field.into(),
            why: why.into(),
        }
    }
    pub(crate) fn io(source_name: &str, error: std::io::Error) -> Self {
        MeasureError::Io {
            source_name: source_name.to_owned(),
            error,
        }
    }
    pub(crate) fn unusable(source_name: &str, why: impl Into<String>) -> Self {
        MeasureError::Unusable {
            source_name: source_name.to_owned(),
            why: why.into(),
        }
    }
}

/// Why histograms were not merged. There is no lossy fallback: the only honest path for
/// mismatched layouts is back to the raw samples.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MergeError {
    #[error(
        "bucket edges differ between {first} and {second} ({detail}); merging them would fabricate \
         precision. Refusing: the only correct path is back to the raw samples"
    )]
    EdgesDiffer {
        first: String,
        second: String,
        detail: String,
    },
    #[error(
        "{first} is in {first_unit} but {second} is in {second_unit}; refusing to merge different units"
    )]
    UnitsDiffer {
        first: String,
        first_unit: String,
        second: String,
        second_unit: String,
    },
    #[error(
        "{first} measures `{first_metric}` but {second} measures `{second_metric}`; refusing to merge different metrics"
    )]
    MetricsDiffer {
        first: String,
        first_metric: String,
        second: String,
        second_metric: String,
    },
    #[error(
        "{first} and {second} were recorded with different HDR configurations ({detail}); refusing to merge"
    )]
    HdrConfigDiffers {
        first: String,
        second: String,
        detail: String,
    },
    #[error("merging {input} would count more than 2^64 − 1 observations; refusing to merge")]
    CountsOverflow { input: String },
    #[error("nothing to merge")]
    Empty,
}

/// Check a `format` tag against the one this reader knows: the same name and major version.
/// Minor versions (`name.v1.2`) are accepted, since they only add fields.
pub(crate) fn check_format(found: &str, expected: &str) -> Result<(), String> {
    if found.is_empty() {
        return Err(format!("missing `format` tag: expected \"{expected}\""));
    }
    let matches = found == expected
        || found
            .strip_prefix(expected)
            .is_some_and(|rest| rest.starts_with('.'));
    if matches {
        return Ok(());
    }
    let (name, _) = expected.rsplit_once(".v").unwrap_or((expected, ""));
    if let Some(version) = found
        .strip_prefix(name)
        .and_then(|rest| rest.strip_prefix(".v"))
    {
        return Err(format!(
            "unknown major version \"{found}\" (v{version}); this build reads \"{expected}\" only"
        ));
    }
    Err(format!("\"{found}\" is not a {expected} file"))
}

/// A number formatted for people: milliseconds for latencies.
pub(crate) struct Millis(pub f64);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0 * 1000.0;
        if ms.abs() >= 100.0 {
            write!(f, "{ms:.0} ms")
        } else if ms.abs() >= 1.0 {
            write!(f, "{ms:.1} ms")
        } else {
            write!(f, "{ms:.3} ms")
        }
    }
}
