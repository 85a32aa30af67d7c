//! Turning `-m MODEL` into a file: a path to a GGUF, a Hugging Face Hub model
//! (`hf.co/USER/REPO[:QUANT]`, `USER/REPO/FILE.gguf`) or a catalog name, each
//! fetched on first use. Without `-m`, the default model.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use ferrox_models::catalog;

use crate::fetch;
use crate::hf::{self, HfRef};

/// Resolves a model argument to a local GGUF file, fetching catalog models.
pub fn resolve(arg: Option<&str>) -> Result<PathBuf> {
    let arg = arg.unwrap_or(catalog::DEFAULT_MODEL);
    let as_path = Path::new(arg);
    if as_path.is_file() {
        return Ok(as_path.to_path_buf());
    }
    if let Some(r) = HfRef::parse(arg) {
        return Ok(hf::fetch(&r)?);
    }
    if arg.ends_with(".gguf") || arg.contains('/') {
        bail!("model file {arg} does not exist");
    }
    let model = catalog::find(arg)?;
    fetch::fetch(model, &catalog::models_dir())
}
