//! What the served model's file says of itself, read once at start-up: its
//! family, size, quantization and metadata, as Ollama's `/api/show`,
//! `/api/tags` and `/api/ps` report a model.

use std::time::SystemTime;

use ferrox_gguf::{GgufFile, Value as Meta};
use serde_json::{Map, Value};

/// A model file's facts.
#[derive(Clone, Debug, Default)]
pub struct ModelCard {
    /// `general.architecture` (`llama`, `gemma3`, ...).
    pub family: String,
    /// Weights in the file.
    pub parameters: u64,
    /// The quantization mix (`Q4_K_M`), from `general.file_type`, else the
    /// type most of the weights' bytes are in.
    pub quantization: String,
    pub file_bytes: u64,
    /// When the file was last written.
    pub modified: Option<SystemTime>,
    /// The file's sha256, where known without reading it (see
    /// `ferrox_hub::model_ref::known_sha256`).
    pub digest: Option<String>,
    /// The metadata's scalar values by key, with `general.parameter_count`
    /// (Ollama's `model_info`; arrays such as the vocabulary are left out).
    pub info: Map<String, Value>,
}

impl ModelCard {
    /// The card of `file`, with its `digest` when known.
    pub fn of(file: &GgufFile, digest: Option<String>) -> ModelCard {
        let h = file.header();
        let parameters: u64 = h.tensors.iter().map(|t| t.n_elements()).sum();
        let mut info: Map<String, Value> = h
            .metadata
            .iter()
            .filter_map(|(k, v)| scalar(v).map(|v| (k.to_string(), v)))
            .collect();
        info.insert("general.parameter_count".into(), parameters.into());
        ModelCard {
            family: h
                .metadata
                .string_opt("general.architecture")
                .ok()
                .flatten()
                .unwrap_or_default(),
            parameters,
            quantization: quantization(file),
            file_bytes: file.bytes().len() as u64,
            modified: file
                .path()
                .and_then(|p| std::fs::metadata(p).ok())
                .and_then(|m| m.modified().ok()),
            digest,
            info,
        }
    }

    /// The size in Ollama's words: `135M`, `8.0B`.
    pub fn parameter_size(&self) -> String {
        let n = self.parameters as f64;
        if n >= 1e9 {
            format!("{:.1}B", n / 1e9)
        } else if n >= 1e6 {
            format!("{:.0}M", n / 1e6)
        } else {
            format!("{:.0}K", n / 1e3)
        }
    }
}

fn scalar(v: &Meta) -> Option<Value> {
    Some(match v {
        Meta::U8(x) => (*x).into(),
        Meta::I8(x) => (*x).into(),
        Meta::U16(x) => (*x).into(),
        Meta::I16(x) => (*x).into(),
        Meta::U32(x) => (*x).into(),
        Meta::I32(x) => (*x).into(),
        Meta::U64(x) => (*x).into(),
        Meta::I64(x) => (*x).into(),
        Meta::F32(x) => serde_json::Number::from_f64(f64::from(*x))?.into(),
        Meta::F64(x) => serde_json::Number::from_f64(*x)?.into(),
        Meta::Bool(x) => (*x).into(),
        Meta::String(x) => x.clone().into(),
        Meta::Array(_) => return None,
    })
}

fn quantization(file: &GgufFile) -> String {
    let h = file.header();
    let named = h
        .metadata
        .count_opt("general.file_type")
        .ok()
        .flatten()
        .and_then(|id| u32::try_from(id).ok())
        .and_then(ferrox_gguf::file_type_name);
    if let Some(name) = named {
        return name.to_string();
    }
    let mut bytes: Vec<(&str, u64)> = Vec::new();
    for t in &h.tensors {
        match bytes.iter_mut().find(|(n, _)| *n == t.dtype.name()) {
            Some(e) => e.1 += t.n_bytes as u64,
            None => bytes.push((t.dtype.name(), t.n_bytes as u64)),
        }
    }
    bytes
        .into_iter()
        .max_by_key(|&(_, b)| b)
        .map_or_else(String::new, |(n, _)| n.to_uppercase())
}
