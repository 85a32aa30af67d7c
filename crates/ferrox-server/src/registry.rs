//! Several models on one server (`ferrox serve --models-dir DIR`): each GGUF
//! in the folder is a model named by its file stem, loaded on first use into
//! a serving state of its own (engine, tokenizer, template, routes), and
//! unloaded when `--models-max` would be exceeded (the least recently used
//! goes), when its keep-alive runs out (Ollama's `keep_alive`, `0` at once),
//! or on `POST /models/unload`. The model the server started with is adopted
//! as a loaded one: it unloads as the others do, and loads again from its
//! path when next asked for.
//!
//! Invariants: a model is loaded once however many requests ask for it at
//! once (loads are serialized); a load that would not fit the memory budget
//! is refused before anything is read, naming what is loaded; unloading
//! drops the registry's hold only, so requests in flight on the model finish
//! and its memory is freed after the last one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;

use crate::error::ApiError;
use crate::state::AppState;

/// Why a folder model could not be started: the loader's own error, with its
/// causes as its sources.
pub type LoadError = Box<dyn std::error::Error + Send + Sync>;

/// Builds the serving state of the model at a path, with its id (a blocking
/// call: it reads the file and starts an engine).
pub type Loader = Arc<dyn Fn(&Path, &str) -> Result<Arc<AppState>, LoadError> + Send + Sync>;

/// `e` and its causes, as one line.
fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// How long a model stays loaded after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepAlive {
    /// Until the server stops (or `--models-max` evicts it).
    Forever,
    For(Duration),
}

impl KeepAlive {
    /// When a model kept from now unloads (`None`: never).
    fn expiry(self) -> Option<Instant> {
        match self {
            KeepAlive::Forever => None,
            KeepAlive::For(d) => Some(Instant::now() + d),
        }
    }

    /// Ollama's spellings: a number of seconds (negative: forever), or a
    /// duration such as `"5m"`, `"1h"`, `"30s"`, `"0"`.
    pub fn parse(v: &serde_json::Value) -> Option<KeepAlive> {
        let secs = match v {
            serde_json::Value::Number(n) => n.as_f64()?,
            serde_json::Value::String(s) => {
                let s = s.trim();
                let (num, unit) = s
                    .find(|c: char| c.is_ascii_alphabetic())
                    .map_or((s, "s"), |i| (&s[..i], &s[i..]));
                let n: f64 = num.trim().parse().ok()?;
                n * match unit {
                    "ms" => 0.001,
                    "s" => 1.0,
                    "m" => 60.0,
                    "h" => 3600.0,
                    _ => return None,
                }
            }
            _ => return None,
        };
        Some(if secs < 0.0 {
            KeepAlive::Forever
        } else {
            KeepAlive::For(Duration::from_secs_f64(secs))
        })
    }
}

/// A loaded model.
#[derive(Clone)]
pub struct Loaded {
    pub id: String,
    /// Its file.
    pub path: PathBuf,
    pub state: Arc<AppState>,
    /// Its routes.
    pub app: Router,
    /// What it holds in memory: the file and its KV budget.
    pub bytes: u64,
    pub last_used: Instant,
    /// When it unloads (`None`: not before the server stops).
    pub expires: Option<Instant>,
}

/// A model adopted from outside the folder (the started one): its id, its
/// file, and the other names it answers to.
#[derive(Clone, Debug)]
struct Adopted {
    id: String,
    path: PathBuf,
    aliases: Vec<String>,
}

impl Loaded {
    /// Whether `name` names this model: its id, an alias, or its file name
    /// (an Ollama name may add `:latest`).
    fn answers_to(&self, name: &str) -> bool {
        let bare = name.strip_suffix(":latest").unwrap_or(name);
        self.id == bare
            || self.state.aliases.iter().any(|a| a == bare)
            || self.path.file_name().is_some_and(|f| f == bare)
    }

    /// `state`, loaded from `path` as `id` now, kept for `keep`.
    fn new(id: String, path: PathBuf, state: Arc<AppState>, keep: KeepAlive) -> Loaded {
        Loaded {
            id,
            path,
            app: crate::routes::router(Arc::clone(&state)),
            bytes: footprint(&state),
            state,
            last_used: Instant::now(),
            expires: keep.expiry(),
        }
    }
}

/// The models of a folder, and those loaded.
pub struct Registry {
    dir: PathBuf,
    max_loaded: usize,
    memory_budget: u64,
    default_keep_alive: KeepAlive,
    loader: Loader,
    adopted: std::sync::Mutex<Vec<Adopted>>,
    loaded: tokio::sync::Mutex<Vec<Loaded>>,
}

/// The KV bytes a serving state may hold at most.
fn kv_bytes(st: &AppState) -> u64 {
    let c = st.engine.ceiling();
    c.plan.as_ref().map_or(0, |p| p.total_bytes())
}

/// What a model in memory costs: its file (mapped) and its KV budget.
pub fn footprint(st: &AppState) -> u64 {
    st.facts.card.file_bytes + kv_bytes(st)
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("dir", &self.dir)
            .field("max_loaded", &self.max_loaded)
            .field("memory_budget", &self.memory_budget)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// The models of `dir`: at most `max_loaded` loaded, all within
    /// `memory_budget` bytes.
    pub fn new(
        dir: PathBuf,
        max_loaded: usize,
        memory_budget: u64,
        default_keep_alive: KeepAlive,
        loader: Loader,
    ) -> Registry {
        Registry {
            dir,
            max_loaded: max_loaded.max(1),
            memory_budget,
            default_keep_alive,
            loader,
            adopted: std::sync::Mutex::new(Vec::new()),
            loaded: tokio::sync::Mutex::new(Vec::new()),
        }
    }

    /// Takes `state`, loaded from `path` outside the registry (the started
    /// model), as a loaded model kept by the default keep-alive; it answers
    /// to its id and aliases, and loads again from `path` once unloaded.
    pub async fn adopt(&self, state: Arc<AppState>, path: PathBuf) {
        self.adopted.lock().expect("never poisoned").push(Adopted {
            id: state.model_id.clone(),
            path: path.clone(),
            aliases: state.aliases.clone(),
        });
        let id = state.model_id.clone();
        let m = Loaded::new(id, path, state, self.default_keep_alive);
        self.loaded.lock().await.push(m);
    }

    /// The model `name`, if it is loaded, without counting a use.
    pub async fn peek(&self, name: &str) -> Option<Loaded> {
        let loaded = self.loaded.lock().await;
        loaded.iter().find(|m| m.answers_to(name)).cloned()
    }

    /// Every model, by id, sorted: those adopted, then the folder's (by file
    /// stem) that are not.
    pub fn available(&self) -> Vec<(String, PathBuf)> {
        let adopted = self.adopted.lock().expect("never poisoned").clone();
        let mut folder = self.folder();
        folder.retain(|(id, _)| !adopted.iter().any(|a| a.id == *id));
        adopted
            .into_iter()
            .map(|a| (a.id, a.path))
            .chain(folder)
            .collect()
    }

    /// The folder's models, by id (file stem), sorted.
    fn folder(&self) -> Vec<(String, PathBuf)> {
        let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "gguf"))
            .filter_map(|p| Some((p.file_stem()?.to_string_lossy().into_owned(), p)))
            .collect();
        out.sort();
        out
    }

    /// The model `name` names: an adopted one by its id or an alias, or the
    /// folder's by its id or file name; an Ollama name may add `:latest`.
    fn find(&self, name: &str) -> Option<(String, PathBuf)> {
        let bare = name.strip_suffix(":latest").unwrap_or(name);
        let adopted = self.adopted.lock().expect("never poisoned").clone();
        if let Some(a) = adopted
            .into_iter()
            .find(|a| a.id == bare || a.aliases.iter().any(|x| x == bare))
        {
            return Some((a.id, a.path));
        }
        self.available()
            .into_iter()
            .find(|(id, p)| id == bare || p.file_name().is_some_and(|f| f == bare))
    }

    /// The 404 for a name the folder does not have, listing what it has.
    fn unknown(&self, name: &str) -> ApiError {
        let ids: Vec<String> = self.available().into_iter().map(|(id, _)| id).collect();
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "model_not_found",
            format!(
                "model {name:?} is not served here; this server serves {}",
                ids.join(", ")
            ),
        )
    }

    /// The model `name`, loaded if it is not (evicting the least recently used
    /// past `--models-max`); `keep_alive` (else the default) sets when it
    /// unloads.
    pub async fn get(&self, name: &str, keep_alive: Option<KeepAlive>) -> Result<Loaded, ApiError> {
        let keep = keep_alive.unwrap_or(self.default_keep_alive);
        let mut loaded = self.loaded.lock().await;
        let touch = |m: &mut Loaded| {
            m.last_used = Instant::now();
            m.expires = keep.expiry();
            m.clone()
        };
        // A loaded model is found without reading the folder.
        if let Some(m) = loaded.iter_mut().find(|m| m.answers_to(name)) {
            return Ok(touch(m));
        }
        let (id, path) = self.find(name).ok_or_else(|| self.unknown(name))?;
        // Named by an alias of the adopted model that its reload does not keep.
        if let Some(m) = loaded.iter_mut().find(|m| m.id == id) {
            return Ok(touch(m));
        }
        let file_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
        while loaded.len() >= self.max_loaded {
            let lru = (0..loaded.len())
                .min_by_key(|&i| loaded[i].last_used)
                .expect("a model is loaded");
            let gone = loaded.remove(lru);
            tracing::info!(model = %gone.id, "unloaded (least recently used; --models-max {})", self.max_loaded);
        }
        self.check_memory(&id, file_bytes, &loaded)?;
        let (loader, p, model) = (Arc::clone(&self.loader), path.clone(), id.clone());
        let state = tokio::task::spawn_blocking(move || loader(&p, &model))
            .await
            .map_err(|e| ApiError::internal(format!("loading {id} failed: {e}")))?
            .map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    "model_load_failed",
                    format!(
                        "model {id:?} could not be loaded: {}",
                        with_causes(e.as_ref())
                    ),
                )
            })?;
        tracing::info!(model = %id, path = %path.display(), "loaded");
        let m = Loaded::new(id, path, state, keep);
        loaded.push(m.clone());
        Ok(m)
    }

    /// Refuses a load whose file alone would not fit beside what is loaded.
    fn check_memory(&self, id: &str, file_bytes: u64, loaded: &[Loaded]) -> Result<(), ApiError> {
        let held: u64 = loaded.iter().map(|m| m.bytes).sum::<u64>();
        if held + file_bytes <= self.memory_budget {
            return Ok(());
        }
        let gb = |b: u64| format!("{:.2} GB", b as f64 / 1e9);
        let list: Vec<String> = loaded
            .iter()
            .map(|m| format!("{} ({})", m.id, gb(m.bytes)))
            .collect();
        Err(ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "server_error",
            "insufficient_memory",
            format!(
                "model {id:?} does not fit: its file is {} and the loaded models hold {} of the {} budget (--models-memory); loaded: {}; unload one (POST /models/unload, or keep_alive: 0) or lower --models-max",
                gb(file_bytes),
                gb(held),
                gb(self.memory_budget),
                if list.is_empty() {
                    "none".into()
                } else {
                    list.join(", ")
                }
            ),
        ))
    }

    /// Unloads `name`; whether it was loaded.
    pub async fn unload(&self, name: &str) -> Result<bool, ApiError> {
        let (id, _) = self.find(name).ok_or_else(|| self.unknown(name))?;
        let mut loaded = self.loaded.lock().await;
        let before = loaded.len();
        loaded.retain(|m| m.id != id);
        Ok(loaded.len() < before)
    }

    /// The loaded models, most recently used last.
    pub async fn loaded(&self) -> Vec<Loaded> {
        let mut l = self.loaded.lock().await.clone();
        l.sort_by_key(|m| m.last_used);
        l
    }

    /// Unloads the models whose keep-alive ran out.
    pub async fn reap(&self) {
        let now = Instant::now();
        let mut loaded = self.loaded.lock().await;
        loaded.retain(|m| {
            let keep = m.expires.is_none_or(|t| t > now);
            if !keep {
                tracing::info!(model = %m.id, "unloaded (keep-alive ran out)");
            }
            keep
        });
    }

    /// Asks every loaded model's engine to stop (at shutdown).
    pub async fn shutdown(&self) {
        for m in self.loaded.lock().await.iter() {
            m.state.engine.shutdown();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keep_alive_reads_ollamas_spellings() {
        let d = |s: f64| Some(KeepAlive::For(Duration::from_secs_f64(s)));
        assert_eq!(KeepAlive::parse(&json!("5m")), d(300.0));
        assert_eq!(KeepAlive::parse(&json!("1h")), d(3600.0));
        assert_eq!(KeepAlive::parse(&json!("30s")), d(30.0));
        assert_eq!(KeepAlive::parse(&json!("0")), d(0.0));
        assert_eq!(KeepAlive::parse(&json!(0)), d(0.0));
        assert_eq!(KeepAlive::parse(&json!(90)), d(90.0));
        assert_eq!(KeepAlive::parse(&json!(-1)), Some(KeepAlive::Forever));
        assert_eq!(KeepAlive::parse(&json!("-1m")), Some(KeepAlive::Forever));
        assert_eq!(KeepAlive::parse(&json!("soon")), None);
        assert_eq!(KeepAlive::parse(&json!("5 parsecs")), None);
    }
}
