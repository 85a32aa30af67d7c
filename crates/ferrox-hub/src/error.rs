//! The one error enum of ferrox-hub.

use crate::hf::HfError;

/// Why a model file could not be found, fetched or verified.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("unknown model {name:?}; known models: {known}")]
    UnknownModel { name: String, known: String },
    #[error("{arg} is a directory; give the GGUF file inside it (-m {arg}/MODEL.gguf)")]
    Directory { arg: String },
    #[error("model file {0} does not exist")]
    NoSuchFile(String),
    #[error(transparent)]
    Hf(#[from] HfError),
    /// A local file operation, with what was being done.
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    /// The package index or a download, with the address.
    #[error("{what}: {source}")]
    Http { what: String, source: ureq::Error },
    /// The package index answered something unusable.
    #[error("package index: {0}")]
    Index(String),
    #[error("{what}: {source}")]
    Wheel {
        what: String,
        source: zip::result::ZipError,
    },
    /// Bytes that do not hash (or measure) to what was announced.
    #[error("{0}")]
    Corrupt(String),
}

impl HubError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HubError {
        let what = what.into();
        move |source| HubError::Io { what, source }
    }
}
