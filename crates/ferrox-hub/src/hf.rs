//! Models from the Hugging Face Hub: `hf.co/USER/REPO[:QUANT]` (llama-server's
//! `-hf`, Ollama's `pull hf.co/...`) and `USER/REPO/FILE.gguf`.
//!
//! Built on the `hf-hub` crate (sync API): it honours `HF_ENDPOINT` and `HF_HOME`
//! and writes the standard cache layout (`$HF_HOME/hub/models--USER--REPO/`,
//! blobs named by their etag, snapshots per commit), so files other tools
//! downloaded are found and the reverse. Downloads resume from the partial file
//! and show a progress bar. `HF_TOKEN` (else the token file in `HF_HOME`)
//! authenticates. A fresh download of an LFS file is checked against the sha256
//! its etag names; a mismatch deletes it.
//!
//! A quant tag picks the repository's `.gguf` whose name contains it
//! (case-insensitive); without a tag, `Q4_K_M` when present (llama-server's
//! default), else the only `.gguf`. A tag is resolved from the local snapshot
//! first, so a cached model starts without the network.

use crate::progress::{ForHf, Progress, TerminalBar};
use std::path::{Path, PathBuf};

use hf_hub::api::sync::{ApiBuilder, ApiError};
use hf_hub::{Cache, Repo, RepoType};
use sha2::{Digest, Sha256};

/// What can go wrong fetching from the Hub.
#[derive(Debug, thiserror::Error)]
pub enum HfError {
    #[error("{repo} has no .gguf file (files: {files})")]
    NoGguf { repo: String, files: String },
    #[error("{repo} has no .gguf matching {quant:?}; its .gguf files: {files}")]
    NoMatch {
        repo: String,
        quant: String,
        files: String,
    },
    #[error("{repo} has several .gguf files; name one with :QUANT or /FILE.gguf: {files}")]
    Ambiguous { repo: String, files: String },
    #[error(
        "{file} is one part of a split GGUF; ferrox loads single-file GGUFs only (merge the parts with llama-gguf-split --merge)"
    )]
    Split { file: String },
    /// The Hub client's error, whose message already carries its causes (so
    /// it is not also given as a source, which would print them twice).
    #[error("Hugging Face Hub: {0}")]
    Api(ApiError),
    #[error("{file}: sha256 {got} does not match the Hub's {want}; the download was deleted")]
    Checksum {
        file: String,
        want: String,
        got: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl From<ApiError> for HfError {
    fn from(e: ApiError) -> HfError {
        HfError::Api(e)
    }
}

/// A model on the Hub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HfRef {
    /// `USER/REPO`.
    pub repo: String,
    pub pick: Pick,
}

/// Which file of the repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pick {
    File(String),
    Quant(String),
    Default,
}

impl HfRef {
    /// Parses `hf.co/USER/REPO[:QUANT]`, `huggingface.co/...`, or
    /// `USER/REPO/FILE.gguf`; `None` for anything else.
    pub fn parse(arg: &str) -> Option<HfRef> {
        let hub = ["hf.co/", "huggingface.co/", "https://huggingface.co/"]
            .iter()
            .find_map(|p| arg.strip_prefix(p));
        let rest = hub.unwrap_or(arg);
        let parts: Vec<&str> = rest.split('/').collect();
        let valid = |s: &str| !s.is_empty() && !s.contains(':') && s != "." && s != "..";
        match parts[..] {
            [user, repo_tag] if hub.is_some() => {
                let (repo, pick) = match repo_tag.split_once(':') {
                    Some((r, q)) if !q.is_empty() => (r, Pick::Quant(q.to_string())),
                    Some(_) => return None,
                    None => (repo_tag, Pick::Default),
                };
                (valid(user) && valid(repo)).then(|| HfRef {
                    repo: format!("{user}/{repo}"),
                    pick,
                })
            }
            [user, repo, ref file @ ..]
                if !file.is_empty()
                    && file.last().is_some_and(|f| f.ends_with(".gguf"))
                    && file.iter().all(|f| valid(f)) =>
            {
                (valid(user) && valid(repo)).then(|| HfRef {
                    repo: format!("{user}/{repo}"),
                    pick: Pick::File(file.join("/")),
                })
            }
            _ => None,
        }
    }
}

fn cache() -> Cache {
    Cache::from_env()
}

/// `.gguf` files in the cached snapshot of `repo`, if any.
fn cached_files(repo: &str) -> Vec<String> {
    let dir = cache()
        .path()
        .join(format!("models--{}", repo.replace('/', "--")));
    let Ok(commit) = std::fs::read_to_string(dir.join("refs/main")) else {
        return Vec::new();
    };
    let snapshot = dir.join("snapshots").join(commit.trim());
    let mut found = Vec::new();
    collect_gguf(&snapshot, &snapshot, &mut found);
    found
}

fn collect_gguf(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_gguf(root, &p, out);
        } else if p.extension().is_some_and(|x| x == "gguf")
            && let Ok(rel) = p.strip_prefix(root)
        {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

/// Whether `file` is a part of a split GGUF (`NAME-00001-of-00003.gguf`).
fn is_split_part(file: &str) -> bool {
    let stem = file.trim_end_matches(".gguf");
    let mut parts = stem.rsplitn(3, '-');
    let (Some(total), Some(of), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    of == "of" && digits(total) && rest.rsplit('-').next().is_some_and(digits)
}

/// The file `pick` names among `files` (all of the repository's files); split
/// GGUF parts are refused.
fn choose(repo: &str, pick: &Pick, files: &[String]) -> Result<String, HfError> {
    let file = choose_any(repo, pick, files)?;
    if is_split_part(&file) {
        return Err(HfError::Split { file });
    }
    Ok(file)
}

fn choose_any(repo: &str, pick: &Pick, files: &[String]) -> Result<String, HfError> {
    let ggufs: Vec<&String> = files.iter().filter(|f| f.ends_with(".gguf")).collect();
    let list = |v: &[&String]| v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
    let matching = |q: &str| -> Vec<&String> {
        let q = q.to_ascii_lowercase();
        ggufs
            .iter()
            .copied()
            .filter(|f| f.to_ascii_lowercase().contains(&q))
            .collect()
    };
    let one = |m: Vec<&String>, quant: &str| match m.len() {
        1 => Ok(m[0].clone()),
        0 => Err(HfError::NoMatch {
            repo: repo.into(),
            quant: quant.into(),
            files: list(&ggufs),
        }),
        _ => Err(HfError::Ambiguous {
            repo: repo.into(),
            files: list(&m),
        }),
    };
    match pick {
        Pick::File(f) => Ok(f.clone()),
        Pick::Quant(q) => one(matching(q), q),
        Pick::Default => match ggufs.len() {
            0 => Err(HfError::NoGguf {
                repo: repo.into(),
                files: files.join(", "),
            }),
            1 => Ok(ggufs[0].clone()),
            _ => one(matching("q4_k_m"), "Q4_K_M"),
        },
    }
}

/// The local path of `r`, downloading it into the Hub cache when absent (a
/// bar on a terminal).
pub fn fetch(r: &HfRef) -> Result<PathBuf, HfError> {
    fetch_with(r, &mut TerminalBar::default())
}

/// [`fetch`], reporting the download to `progress`.
pub fn fetch_with(r: &HfRef, progress: &mut dyn Progress) -> Result<PathBuf, HfError> {
    let repo = Repo::new(r.repo.clone(), RepoType::Model);
    let cached = cache().repo(repo.clone());
    let file = match &r.pick {
        Pick::File(f) if is_split_part(f) => return Err(HfError::Split { file: f.clone() }),
        Pick::File(f) => f.clone(),
        pick => match choose(&r.repo, pick, &cached_files(&r.repo)) {
            Ok(f) => f,
            Err(_) => {
                let api = api()?.repo(repo.clone());
                let files: Vec<String> = api
                    .info()?
                    .siblings
                    .into_iter()
                    .map(|s| s.rfilename)
                    .collect();
                choose(&r.repo, pick, &files)?
            }
        },
    };
    if let Some(path) = cached.get(&file) {
        return Ok(path);
    }
    let path = api()?
        .repo(repo)
        .download_with_progress(&file, ForHf(progress))?;
    verify(&path, &file)?;
    Ok(path)
}

/// The local path of `r` when it is in the Hub cache (nothing is fetched).
pub fn cached(r: &HfRef) -> Option<PathBuf> {
    let file = match &r.pick {
        Pick::File(f) => f.clone(),
        pick => choose(&r.repo, pick, &cached_files(&r.repo)).ok()?,
    };
    cache()
        .repo(Repo::new(r.repo.clone(), RepoType::Model))
        .get(&file)
}

fn api() -> Result<hf_hub::api::sync::Api, HfError> {
    let token = std::env::var("HF_TOKEN")
        .ok()
        .filter(|t| !t.trim().is_empty())
        .or_else(|| cache().token());
    Ok(ApiBuilder::from_env()
        .with_token(token)
        .with_progress(false)
        .build()?)
}

/// Checks a fresh download against the sha256 its blob is named by (LFS files;
/// small git files are named by a git hash and are not checked).
fn verify(path: &Path, file: &str) -> Result<(), HfError> {
    let io = |source| HfError::Io {
        path: path.display().to_string(),
        source,
    };
    let blob = std::fs::canonicalize(path).map_err(io)?;
    let want = blob
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if want.len() != 64 || !want.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(());
    }
    let mut h = Sha256::new();
    let mut f = std::fs::File::open(&blob).map_err(io)?;
    std::io::copy(&mut f, &mut h).map_err(io)?;
    let got = format!("{:x}", h.finalize());
    if got != want {
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_file(&blob);
        return Err(HfError::Checksum {
            file: file.into(),
            want,
            got,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_as_llama_server_and_ollama_write_them() {
        let q = |repo: &str, p: Pick| {
            Some(HfRef {
                repo: repo.into(),
                pick: p,
            })
        };
        assert_eq!(
            HfRef::parse("hf.co/bartowski/Llama-3.2-1B-GGUF:Q4_K_M"),
            q("bartowski/Llama-3.2-1B-GGUF", Pick::Quant("Q4_K_M".into()))
        );
        assert_eq!(HfRef::parse("huggingface.co/a/b"), q("a/b", Pick::Default));
        assert_eq!(
            HfRef::parse("a/b/sub/m-Q8_0.gguf"),
            q("a/b", Pick::File("sub/m-Q8_0.gguf".into()))
        );
        for bad in [
            "a/b",
            "hf.co/a",
            "hf.co/a/b:",
            "./m.gguf",
            "hf.co/../b",
            "x.gguf",
        ] {
            assert_eq!(HfRef::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn split_gguf_parts_are_refused_by_name() {
        assert!(is_split_part("m-Q4_K_M-00001-of-00003.gguf"));
        assert!(!is_split_part("m-Q4_K_M.gguf"));
        assert!(!is_split_part("of-00003.gguf"));
        let files = vec!["big/m-Q8_0-00001-of-00002.gguf".to_string()];
        let e = choose("a/b", &Pick::Quant("Q8_0".into()), &files).unwrap_err();
        assert!(e.to_string().contains("split GGUF"), "{e}");
    }

    #[test]
    fn quant_tags_pick_one_file_or_say_which_exist() {
        let files: Vec<String> = ["README.md", "m-Q4_K_M.gguf", "m-Q8_0.gguf"]
            .map(String::from)
            .to_vec();
        let c = |p: Pick| choose("a/b", &p, &files);
        assert_eq!(c(Pick::Quant("q8_0".into())).unwrap(), "m-Q8_0.gguf");
        assert_eq!(c(Pick::Default).unwrap(), "m-Q4_K_M.gguf");
        let e = c(Pick::Quant("IQ2_XS".into())).unwrap_err().to_string();
        assert!(e.contains("m-Q8_0.gguf") && e.contains("IQ2_XS"), "{e}");
        let e = c(Pick::Quant("m-".into())).unwrap_err().to_string();
        assert!(e.contains("several"), "{e}");
    }
}
