//! The bytes of a packed matrix: an anonymous mapping rather than a heap vector.
//!
//! * Its pages are zero until written, so no pass of zeroes precedes the
//!   packing, and the threads that pack a batch of rows fault its pages in, in
//!   parallel (a zeroed `Vec` wrote the whole copy on the loading thread first).
//! * It is page-aligned, so every group (a whole number of 64-byte lines)
//!   starts on a cache line.
//!
//! It is not advised into transparent huge pages: on the project's VM that
//! made a load's system time 0.8 -> 3.4 s (Qwen3-8B shape, the kernel zeroing
//! fresh 2 MiB pages) for no decode speed it could show.

use std::ops::{Deref, DerefMut};

/// Zero-initialised, page-aligned bytes.
pub(crate) struct PackedStorage {
    map: memmap2::MmapMut,
    len: usize,
}

impl PackedStorage {
    /// `len` zero bytes. Panics when the system has no memory to map, as a
    /// vector's allocation aborts.
    pub(crate) fn zeroed(len: usize) -> PackedStorage {
        // A mapping of 0 bytes is refused; one page stands in for it.
        let map = memmap2::MmapMut::map_anon(len.max(1))
            .unwrap_or_else(|e| panic!("mapping {len} bytes for a packed matrix: {e}"));
        PackedStorage { map, len }
    }
}

impl Deref for PackedStorage {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map[..self.len]
    }
}

impl DerefMut for PackedStorage {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.map[..self.len]
    }
}
