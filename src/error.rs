//! One error type for the whole crate. Messages say what went wrong and how to fix it.

use thiserror::Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum Error {
    /// config.json is missing, unreadable or inconsistent.
    #[error("invalid model config: {0}")]
    Config(String),
    /// A weights file is missing, truncated, of an unsupported dtype, or lacks a tensor.
    #[error("invalid weights: {0}")]
    Weights(String),
    /// A tensor exists but has the wrong shape.
    #[error("tensor `{name}` has shape {got:?}, expected {expected:?}: the weights do not match config.json")]
    Shape { name: String, got: Vec<usize>, expected: Vec<usize> },
    /// The tokenizer files are missing or unreadable.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The user's input cannot be processed (empty text, no mask token, ...).
    #[error("invalid input: {0}")]
    Input(String),
    /// No GPU adapter, device lost, a limit exceeded, or a shader failed.
    #[error("gpu: {0}")]
    Gpu(String),
    /// A GGUF file is malformed or hostile.
    #[error("gguf: {0}")]
    Gguf(String),
    /// A long call (fine-tuning) was stopped by its caller; nothing was changed.
    #[error("stopped: {0}")]
    Stopped(String),
    #[error("{context}: {source}")]
    Io { context: String, #[source] source: std::io::Error },
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }
}
