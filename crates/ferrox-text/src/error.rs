//! The one error enum of ferrox-text.

use ferrox_gguf::GgufError;

/// What can be wrong with a model's text side: its vocabulary metadata or its
/// chat template.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// A tokenizer key of the metadata is missing, malformed or inconsistent.
    #[error("invalid tokenizer metadata {key}: {reason}")]
    InvalidMetadata { key: String, reason: String },
    /// A template that fails to parse or render, naming its line.
    #[error("chat template: {0}")]
    ChatTemplate(String),
}
