//! A GGUF file held in memory: memory-mapped from disk, or owned bytes (tests and
//! tiny in-memory models). The only place in the crate that touches the filesystem.
//!
//! Invariant: the header was parsed from exactly the bytes this value holds, so
//! every tensor view is in bounds.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::error::{GgufError, Result};
use crate::parse::{self, Gguf};
use crate::tensor::TensorView;

enum Backing {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

/// A parsed GGUF file and its bytes.
pub struct GgufFile {
    path: Option<PathBuf>,
    backing: Backing,
    header: Gguf,
}

impl GgufFile {
    /// Memory-maps and parses the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; ferrox never writes model files it has open.
        // A file truncated by another process while mapped is outside this contract
        // (as for every mmap-based loader).
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let header = Gguf::parse(&map)?;
        Ok(GgufFile {
            path: Some(path.to_path_buf()),
            backing: Backing::Mapped(map),
            header,
        })
    }

    /// Parses GGUF bytes held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        let header = Gguf::parse(&bytes)?;
        Ok(GgufFile {
            path: None,
            backing: Backing::Owned(bytes),
            header,
        })
    }

    /// The parsed header.
    pub fn header(&self) -> &Gguf {
        &self.header
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        match &self.backing {
            Backing::Mapped(m) => m,
            Backing::Owned(v) => v,
        }
    }

    /// Tells the OS that `range` of the file will not be read soon (its bytes
    /// live on elsewhere, e.g. repacked): its pages leave this process's
    /// resident memory and are read from the file again if touched. The bytes
    /// seen through [`GgufFile::bytes`] do not change. Nothing happens for
    /// bytes held in memory, or where the OS takes no such advice.
    ///
    /// Panics when `range` is not inside the file.
    pub fn release(&self, range: std::ops::Range<usize>) {
        assert!(
            range.start <= range.end && range.end <= self.bytes().len(),
            "a range of the file"
        );
        #[cfg(unix)]
        if let Backing::Mapped(map) = &self.backing {
            // SAFETY: the map is shared and read-only (`Mmap::map`): after
            // MADV_DONTNEED a read refills each page from the file, which
            // ferrox never writes (the contract under which it is mapped at
            // all), so every live reference into it still reads the same bytes.
            // The advice is only advice: a refusal changes nothing.
            let _ = unsafe {
                map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    range.start,
                    range.len(),
                )
            };
        }
    }

    /// Where the file came from, when it came from disk.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Tensor `name` with its bytes.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        self.header.tensor(self.bytes(), name)
    }

    /// Every tensor, in file order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> {
        let bytes = self.bytes();
        self.header
            .tensors
            .iter()
            .map(move |info| parse::view(info, bytes).expect("checked when parsed"))
    }
}
