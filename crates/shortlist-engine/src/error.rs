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
    /// The bytes are not a GGUF file at all: they do not start with the magic `GGUF` (a text
    /// file, a safetensors file or an HTML error page saved under a `.gguf` name).
    #[error("{source_name}: not a GGUF file ({})", describe_magic(first_bytes))]
    NotGguf {
        /// Where the bytes came from (a path, or a caller-chosen label for in-memory data).
        source_name: String,
        /// The first (up to four) bytes found instead of the magic.
        first_bytes: Vec<u8>,
    },
    /// The GGUF container is malformed: unsupported version, truncated, impossible counts.
    #[error("{source_name}: not a readable GGUF file: {message}")]
    Gguf {
        /// Where the bytes came from (a path, or a caller-chosen label for in-memory data).
        source_name: String,
        /// What is wrong, in the file's terms (candle's reader error without its backtrace).
        message: String,
    },
    /// An error about the contents of the model file `path` (metadata, tensors, tokenizer,
    /// template) that does not name the file by itself.
    #[error("{path}: {error}")]
    InModel {
        /// The model file (or the caller's label for in-memory data).
        path: String,
        /// What is wrong (in the message, not as a source, so that an error chain does not print
        /// it twice).
        error: Box<EngineError>,
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
    /// The device asked for cannot be used (no CUDA build, no driver, no such GPU, no room).
    #[error("device {device}: {why}")]
    Device {
        /// The device as named (`cuda:0`).
        device: String,
        /// What is missing, and what to do.
        why: String,
    },
    /// The engine thread is gone or refused the request.
    #[error("engine unavailable: {0}")]
    Unavailable(String),
    /// The HTTP server cannot listen on its address (busy, not this machine's, not allowed).
    #[error("{addr} {}", listen_reason(error))]
    Listen {
        /// The address asked for, as given.
        addr: String,
        /// What the operating system said (in the message, not as a source).
        error: std::io::Error,
    },
}

fn listen_reason(error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::AddrInUse => {
            "is already in use: another program listens there; stop it or choose another address"
                .to_owned()
        }
        ErrorKind::AddrNotAvailable => "is not an address of this machine".to_owned(),
        ErrorKind::PermissionDenied => {
            "cannot be listened on: permission denied (ports below 1024 need privileges)".to_owned()
        }
        ErrorKind::InvalidInput => format!("is not a valid address (host:port): {error}"),
        _ => format!("cannot be listened on: {error}"),
    }
}

impl EngineError {
    /// This error, naming the model file `path` unless it already does (an I/O or GGUF error
    /// names it, and a second mention would only repeat it).
    pub(crate) fn in_model(self, path: &str) -> Self {
        match self {
            EngineError::Io { .. }
            | EngineError::NotGguf { .. }
            | EngineError::Gguf { .. }
            | EngineError::InModel { .. } => self,
            other => EngineError::InModel {
                path: path.to_owned(),
                error: Box::new(other),
            },
        }
    }
}

/// The magic a GGUF file starts with.
pub(crate) const GGUF_MAGIC: [u8; 4] = *b"GGUF";

fn describe_magic(first: &[u8]) -> String {
    let quoted = format!("\"{}\"", first.escape_ascii());
    match first.len() {
        0 => "the file is empty, expected it to start with \"GGUF\"".to_owned(),
        n if n < GGUF_MAGIC.len() => {
            format!("the file has only {n} bytes, {quoted}, expected it to start with \"GGUF\"")
        }
        _ => format!("the first 4 bytes are {quoted}, expected \"GGUF\""),
    }
}

/// What a candle error says, in one line and without the backtrace candle attaches when
/// `RUST_BACKTRACE` is set (its `WithBacktrace` variant prints the whole trace in its message).
pub(crate) fn candle_message(err: &candle_core::Error) -> String {
    use candle_core::Error as E;
    match err {
        E::WithBacktrace { inner, .. } => candle_message(inner),
        E::Context { inner, context } => format!("{context}: {}", candle_message(inner)),
        E::WithPath { inner, path } => format!("{}: {}", path.display(), candle_message(inner)),
        E::WrappedContext { wrapped, context } => format!("{context}: {wrapped}"),
        E::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            "truncated: the data ends before what its header announces".to_owned()
        }
        other => other.to_string(),
    }
}

impl From<candle_core::Error> for EngineError {
    fn from(err: candle_core::Error) -> Self {
        EngineError::Compute(candle_message(&err))
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
