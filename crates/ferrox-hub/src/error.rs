//! The one error enum of ferrox-hub.

use crate::hf::HfError;

/// Why a model file could not be found, fetched or verified.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("unknown model {name:?}; known models: {known}{}", spelling_hint(name))]
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

/// How a name from another tool is spelled here: a bare `USER/REPO` is a
/// Hugging Face repository, an Ollama library name (`llama3.2`, `qwen3:8b`)
/// has no file to fetch.
fn spelling_hint(name: &str) -> String {
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        [user, repo] if !user.is_empty() && !repo.is_empty() => {
            format!("; a Hugging Face repository is hf.co/{name}[:QUANT]")
        }
        [_] => "; Ollama's library names are not fetched here: give a GGUF on the Hugging \
                Face Hub as hf.co/USER/REPO[:QUANT] (e.g. hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M)"
            .to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_tools_names_get_the_spelling_here() {
        let e = |name: &str| {
            HubError::UnknownModel {
                name: name.into(),
                known: "a".into(),
            }
            .to_string()
        };
        assert!(
            e("bartowski/Llama-3.2-1B-Instruct-GGUF")
                .contains("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF[:QUANT]")
        );
        assert!(e("llama3.2:1b").contains("Ollama's library names"));
        assert!(!e("a/b/c").contains("hf.co"));
    }
}
