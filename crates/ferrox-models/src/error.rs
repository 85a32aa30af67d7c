//! The one error enum of ferrox-models.

use ferrox_gguf::GgufError;
use ferrox_text::TextError;

/// What can be wrong with a model, as opposed to with its file format.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The tokenizer's metadata or the chat template.
    #[error(transparent)]
    Text(#[from] TextError),
    #[error("unsupported architecture {found:?}; ferrox supports: {supported}")]
    UnsupportedArchitecture { found: String, supported: String },
    #[error("invalid hyper-parameter {key}: {reason}")]
    InvalidHyperParameter { key: String, reason: String },
    #[error(
        "tensor {name:?} is not part of the {architecture} architecture as ferrox implements it; \
         refusing a model it would run wrong"
    )]
    UnusedTensor {
        name: String,
        architecture: &'static str,
    },
    #[error("tensor {name:?} is missing; the {architecture} architecture needs it")]
    MissingTensor {
        name: String,
        architecture: &'static str,
    },
    #[error(
        "tensor {name:?} has shape {found:?}; this file's hyper-parameters give it {expected:?}"
    )]
    WrongShape {
        name: String,
        found: Vec<u64>,
        expected: Vec<usize>,
    },
    #[error("forward pass: {0}")]
    Forward(String),
    /// An encoder (embeddings only) where a generating model is needed, or
    /// the other way round.
    #[error("{architecture} is {kind}")]
    WrongKind {
        architecture: &'static str,
        kind: &'static str,
    },
    /// The compute threads could not be started.
    #[error("cannot start compute threads: {0}")]
    Threads(String),
}
