//! Helpers for tests in every crate that run on the real models and golden files.
//!
//! A test that needs a real model calls [`real_model`]; when the file is absent it
//! prints why and the test returns early, unless `FERROX_REQUIRE_MODELS=1` (set by
//! `.ci/run`, which fetches the models first), where absence is a failure.

use std::path::PathBuf;

use crate::catalog;

fn required() -> bool {
    std::env::var("FERROX_REQUIRE_MODELS").is_ok_and(|v| v == "1")
}

fn absent(what: &str, hint: &str) -> Option<PathBuf> {
    assert!(!required(), "FERROX_REQUIRE_MODELS=1 but {what} is missing ({hint})");
    eprintln!("SKIPPED: {what} is missing ({hint})");
    None
}

/// The cached file of catalog model `name`, or `None` (with the reason printed).
pub fn real_model(name: &str) -> Option<PathBuf> {
    let model = catalog::find(name).expect("a catalog name");
    match model.cached() {
        Some(p) => Some(p),
        None => absent(&format!("model {name}"), &format!("run `ferrox pull {name}`, or set FERROX_MODELS_DIR")),
    }
}

/// The golden reference directory (`FERROX_GOLDEN_DIR`, else `../shared/golden`
/// beside the repository).
pub fn golden_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("FERROX_GOLDEN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/golden"));
    if dir.is_dir() { Some(dir) } else { absent(&format!("golden directory {}", dir.display()), "set FERROX_GOLDEN_DIR") }
}

/// The golden file `name` parsed as JSON lines.
pub fn golden_rows(name: &str) -> Option<Vec<serde_json::Value>> {
    let path = golden_dir()?.join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Some(text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).expect("golden JSON")).collect())
}
