//! Errors of the eval-set core, each carrying the file, line and field a user needs to fix the input.

use std::fmt;

/// Where in an input file something went wrong. `line` is 1-based; 0 means "unknown line".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file as the caller named it (the crate reads no files; callers pass the name along).
    pub file: String,
    /// 1-based line, or 0 when the format gives no line (e.g. an error about the whole file).
    pub line: usize,
    /// The field path, e.g. `cases[3].checks[0].pattern`; empty when the whole line or file is meant.
    pub field: String,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if !self.field.is_empty() {
            write!(f, ": field `{}`", self.field)?;
        }
        Ok(())
    }
}

/// Everything that can be wrong with an eval set, an outputs file, a results file or an import.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The input is not well-formed YAML/JSON/CSV, or a value does not fit its field.
    #[error("{at}: {message}")]
    Invalid {
        /// Where.
        at: Location,
        /// What, in words.
        message: String,
    },
    /// A `format` tag names a format or major version this reader does not know.
    #[error("{at}: unsupported format {found:?} (this reader understands {expected:?})")]
    UnsupportedFormat {
        /// Where.
        at: Location,
        /// The tag found in the file.
        found: String,
        /// The tag this reader accepts.
        expected: String,
    },
}

impl EvalError {
    /// A shorthand for [`EvalError::Invalid`].
    pub fn invalid(
        file: &str,
        line: usize,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::Invalid {
            at: Location {
                file: file.to_owned(),
                line,
                field: field.into(),
            },
            message: message.into(),
        }
    }

    /// Where the error is.
    pub fn location(&self) -> &Location {
        match self {
            Self::Invalid { at, .. } | Self::UnsupportedFormat { at, .. } => at,
        }
    }

    /// Turns a YAML error into one that names the file, line and field path.
    pub(crate) fn from_yaml(file: &str, err: &serde_norway::Error) -> Self {
        let line = err.location().map_or(0, |l| l.line());
        let text = err.to_string();
        // serde_norway renders "path: message at line L column C"; we keep path and message apart.
        let text = strip_position(&text);
        let (field, message) = split_path(text);
        Self::invalid(file, line, field, message)
    }

    /// Turns a JSON error at a known line (JSONL) into one that names the file, line and field path.
    pub(crate) fn from_json_line(
        file: &str,
        line: usize,
        err: &serde_path_to_error::Error<serde_json::Error>,
    ) -> Self {
        let path = err.path().to_string();
        let field = if path == "." { String::new() } else { path };
        let inner = err.inner().to_string();
        Self::invalid(file, line, field, strip_position(&inner).to_owned())
    }
}

fn strip_position(text: &str) -> &str {
    match text.rfind(" at line ") {
        Some(i) if text[i..].contains("column") => &text[..i],
        _ => text,
    }
}

/// serde_norway prefixes a message with the path of the value (`cases[2].checks[0]: ...`).
fn split_path(text: &str) -> (String, String) {
    if let Some((path, message)) = text.split_once(": ") {
        let looks_like_path = !path.is_empty()
            && !path.contains(' ')
            && path
                .chars()
                .all(|c| c.is_alphanumeric() || "_-.[]".contains(c));
        if looks_like_path {
            return (path.to_owned(), message.to_owned());
        }
    }
    (String::new(), text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_renders_file_line_field() {
        let e = EvalError::invalid("a.yaml", 12, "cases[0].id", "must not be empty");
        assert_eq!(
            e.to_string(),
            "a.yaml:12: field `cases[0].id`: must not be empty"
        );
    }

    #[test]
    fn yaml_path_is_split_from_message() {
        assert_eq!(
            split_path("cases[1].checks[0]: unknown variant `foo`"),
            (
                "cases[1].checks[0]".to_owned(),
                "unknown variant `foo`".to_owned()
            )
        );
        assert_eq!(split_path("plain message: with colon").0, "");
    }
}
