//! The engine's error type: what went wrong and where (model path, metadata key, tensor name).

use std::path::PathBuf;

/// Everything the engine can report to a caller. Bad input (a corrupt file, an unknown
/// architecture, a prompt over the context limit) is an error value, never a panic.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The model file could not be opened or read.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said (in the message, not as a source, so that an error
        /// chain does not print it twice).
        error: std::io::Error,
    },
    /// The GGUF container is malformed: bad magic, truncated, impossible counts.
    #[error("not a readable GGUF file ({source_name}): {message}")]
    Gguf {
        /// Where the bytes came from (a path, or a caller-chosen label for in-memory data).
        source_name: String,
        /// What candle's reader said.
        message: String,
    },
    /// A metadata key the model needs is missing or has the wrong type.
    #[error("GGUF metadata `{key}`: {message}")]
    Metadata {
        /// The metadata key.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// The file is a model of an architecture this engine does not implement.
    #[error("unsupported architecture {0:?}: this engine runs `llama` and `gemma3`")]
    UnknownArchitecture(String),
    /// A tensor is missing, truncated or has an unexpected shape.
    #[error("tensor `{name}`: {message}")]
    Tensor {
        /// The tensor name in the GGUF file.
        name: String,
        /// What is wrong with it.
        message: String,
    },
    /// The tokenizer could not be rebuilt from the metadata, or failed on input.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template could not be compiled or rendered.
    #[error("chat template: {0}")]
    Template(String),
    /// The prompt plus the requested output does not fit the context window.
    #[error(
        "context limit exceeded: {prompt_tokens} prompt tokens + {max_tokens} max new tokens > context of {context} tokens"
    )]
    ContextLimit {
        /// Tokens in the prompt.
        prompt_tokens: usize,
        /// New tokens requested.
        max_tokens: usize,
        /// The engine's context window.
        context: usize,
    },
    /// A request parameter is out of range.
    #[error("invalid parameter `{field}`: {message}")]
    InvalidParameter {
        /// The parameter.
        field: &'static str,
        /// Why it is rejected.
        message: String,
    },
    /// A tensor operation failed inside the forward pass (a bug or an exhausted resource).
    #[error("compute: {0}")]
    Compute(String),
    /// The engine thread is gone or refused the request.
    #[error("engine unavailable: {0}")]
    Unavailable(String),
}

impl From<candle_core::Error> for EngineError {
    fn from(err: candle_core::Error) -> Self {
        EngineError::Compute(err.to_string())
    }
}

/// Shorthand for results in this crate.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::path::Path;

    #[test]
    fn a_missing_file_names_the_path_and_the_reason_once() {
        let e = crate::engine::load_tokenizer_file(Path::new("/nonexistent/model.gguf"))
            .expect_err("no such file");
        let msg = e.to_string();
        assert!(msg.starts_with("/nonexistent/model.gguf: "), "{msg}");
        assert_eq!(msg.matches("No such file").count(), 1, "{msg}");
        // No source either, so a printed error chain does not repeat the reason.
        assert!(e.source().is_none());
    }
}
