//! The one error enum of ferrox-models.

use ferrox_gguf::GgufError;

/// What can be wrong with a model, as opposed to with its file format.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
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
    #[error("unknown model {name:?}; known models: {known}")]
    UnknownModel { name: String, known: String },
    #[error("invalid size {text:?}: {reason} (examples: 512MiB, 2GiB, 1.5GB, 1048576)")]
    InvalidSize { text: String, reason: String },
    #[error("chat template: {0}")]
    ChatTemplate(String),
    #[error("forward pass: {0}")]
    Forward(String),
    #[error("KV plan: {0}")]
    KvPlan(String),
}
