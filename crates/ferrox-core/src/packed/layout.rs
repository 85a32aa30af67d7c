//! Repacked weight matrices: the GGUF blocks of 16 rows interleaved so that one
//! vector register holds two adjacent values of each of the 16 rows (the operand
//! shape of `vpdpwssd`, one 32-bit lane per row).
//!
//! Every 32-value block `b` of a row is `value[i] = scale[i / 16] * w[i] + offset[i / 16]`
//! with small integers `w` and f32 `scale` / `offset` taken from the GGUF block
//! without rounding (`d`, `d * sc` of the K-quants and `-8 d`, `m`, `-dmin * m` are
//! all exact in f32). A group of 16 rows stores, block after block:
//!
//! * the integers, in 16 steps of two values per row (step `p` holds values `2p`,
//!   `2p + 1` of rows 0..16, row-major in the step). [`Quants::Nibble`] stores two
//!   steps per 32 bytes (step `2c` in the low nibbles, `2c + 1` in the high);
//!   [`Quants::Nibble5`] adds a plane of fifth bits; [`Quants::Byte`] stores one
//!   step per 32 bytes as signed bytes, [`Quants::Crumb`] four as 2-bit values
//!   ([`Quants::Crumb3`] with a plane of sign bits);
//! * 16 scales (32 when the two halves of the block have their own: Q3_K, Q6_K,
//!   Q2_K), stored as [`Scales`] say;
//! * 16 offsets for the types that have them (32 when split: Q2_K).
//!
//! The K-quants and IQ4_XS store each scale and offset as the file does: a small
//! signed integer multiplier per block ([`Scales::Small`]) of a per-row base per
//! 256-value super-block (`d`, `-dmin`), the bases just before the super-block's
//! first block (they stream in with it).
//! The kernels form `base * multiplier` in f32, which is exact, so the function is
//! the one of f32 scales; a multiplier takes a byte (the file's 4 to 8 bits).
//! Q6_K's values are stored as Q4's nibbles plus a plane of two high bits
//! ([`Quants::Nibble6`]), 6 bits a value as in the file.
//!
//! Rows past the matrix's last (the padding of the last group) are zeros. Each
//! group starts on a 64-byte boundary.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::blocks::{IQ4_NL_VALUES, MXFP4_VALUES};
use crate::dtype::DType;
use crate::ops::matmul::Matrix;
use crate::pool::{Parallel, for_each_chunk_mut};

pub use super::block_parts::{BlockParts, SmallScales, block_parts};
use super::repack::pack_group;

use super::storage::PackedStorage;
use super::{BLOCK, GROUP_ROWS};

/// Steps of two values per block.
pub(super) const STEPS: usize = BLOCK / 2;

/// How the integers of a block are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quants {
    /// Unsigned 4-bit values, two steps per 32 bytes.
    Nibble,
    /// Unsigned 5-bit values: the low 4 bits as [`Quants::Nibble`], then the fifth
    /// bits, one little-endian u32 per step (bit `2 r + e` for value `e` of row `r`).
    Nibble5,
    /// Signed 8-bit values, one step per 32 bytes.
    Byte,
    /// Unsigned 2-bit values (Q2_K's), four steps per 32 bytes: byte `j` of
    /// line `c` holds steps `4c..4c + 4`, step `4c + k` at bits `2k`, `2k + 1`
    /// (as [`Quants::Nibble6`]'s high bits).
    Crumb,
    /// Signed 3-bit values `v` (Q3_K's) as `v = c - 4 m`: the crumbs `c` (`v`'s
    /// low 2 bits) as [`Quants::Crumb`], then the bits `m` (set where `v < 0`,
    /// where the file's high bit is clear) as [`Quants::Nibble5`]'s fifth bits.
    /// (As signed bytes, a Q3_K_M decode step read 1.5x the file's bytes.)
    Crumb3,
    /// Indices into a 16-value grid of signed bytes (IQ4_NL's, MXFP4's), stored
    /// as [`Quants::Nibble`]; the kernels look the values up.
    Grid(Grid),
    /// Signed 6-bit values `v` stored as `v + 32`: the low 4 bits as
    /// [`Quants::Nibble`], then the two high bits of four steps per 32 bytes
    /// (byte `j` of line `c` holds those of steps `4c..4c + 4`, step `4c + k` at
    /// bits `2k`, `2k + 1`).
    Nibble6,
}

/// The non-linear 4-bit grids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grid {
    /// IQ4_NL's and IQ4_XS's (`kvalues_iq4nl`).
    Iq4,
    /// MXFP4's E2M1 values, doubled.
    Mxfp4,
}

impl Grid {
    /// The 16 values.
    pub fn values(self) -> &'static [i8; 16] {
        match self {
            Grid::Iq4 => &IQ4_NL_VALUES,
            Grid::Mxfp4 => &MXFP4_VALUES,
        }
    }
}

/// How a group-block stores its scales and offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scales {
    /// IEEE singles.
    F32,
    /// IEEE halves (chosen only when every one of the matrix converts exactly).
    Half,
    /// One signed byte per scale (and offset), times its row's base of the block's
    /// 256-value super-block: halves stored before the super-block's first block,
    /// 16 scale bases then (with offsets) 16 offset bases.
    Small,
}

/// Values per super-block of the formats with [`Scales::Small`].
pub const SUPER_BLOCK: usize = 256;

/// The packed form of one GGUF storage type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Format {
    pub quants: Quants,
    /// Blocks carry an additive offset.
    pub offset: bool,
    /// The two 16-value halves of a block have their own scales (and offsets, when
    /// the format has offsets).
    pub split: bool,
    pub scales: Scales,
}

impl Format {
    /// The packed form of `dtype` (with half scales where the type's scales are
    /// halves, small ones where they are multipliers of a super-block's base), or
    /// `None` when the type stays on the f32 path.
    pub fn for_dtype(dtype: DType) -> Option<Format> {
        use Scales::{Half, Small};
        let f = |quants, offset, split, scales| {
            Some(Format {
                quants,
                offset,
                split,
                scales,
            })
        };
        match dtype {
            DType::Q4_0 | DType::Q4_1 => f(Quants::Nibble, true, false, Half),
            DType::Q4_K => f(Quants::Nibble, true, false, Small),
            DType::Q2_K => f(Quants::Crumb, true, true, Small),
            DType::Q5_0 | DType::Q5_1 => f(Quants::Nibble5, true, false, Half),
            DType::Q5_K => f(Quants::Nibble5, true, false, Small),
            DType::Q8_0 => f(Quants::Byte, false, false, Half),
            DType::IQ4_NL => f(Quants::Grid(Grid::Iq4), false, false, Half),
            DType::MXFP4 => f(Quants::Grid(Grid::Mxfp4), false, false, Half),
            DType::Q6_K => f(Quants::Nibble6, false, true, Small),
            DType::Q3_K => f(Quants::Crumb3, false, true, Small),
            DType::IQ4_XS => f(Quants::Grid(Grid::Iq4), false, false, Small),
            _ => None,
        }
    }

    /// Whether the halves of a block have their own offsets (Q2_K): the kernel then
    /// takes the activations' half sums.
    pub fn needs_half_sums(self) -> bool {
        self.split && self.offset
    }

    /// Bytes of the integers of one group-block (without the high bits).
    pub fn quant_bytes(self) -> usize {
        match self.quants {
            Quants::Nibble | Quants::Nibble5 | Quants::Nibble6 | Quants::Grid(_) => {
                GROUP_ROWS * BLOCK / 2
            }
            Quants::Byte => GROUP_ROWS * BLOCK,
            Quants::Crumb | Quants::Crumb3 => GROUP_ROWS * BLOCK / 4,
        }
    }

    /// Where the high bits of a group-block start ([`Quants::Nibble5`],
    /// [`Quants::Nibble6`], [`Quants::Crumb3`]).
    pub fn bits_at(self) -> usize {
        self.quant_bytes()
    }

    /// Bytes of the high bits of one group-block.
    fn bits_bytes(self) -> usize {
        match self.quants {
            Quants::Nibble5 | Quants::Crumb3 => 4 * STEPS,
            Quants::Nibble6 => 8 * STEPS,
            Quants::Nibble | Quants::Byte | Quants::Grid(_) | Quants::Crumb => 0,
        }
    }

    /// Scales per group-block.
    pub fn scales(self) -> usize {
        if self.split {
            2 * GROUP_ROWS
        } else {
            GROUP_ROWS
        }
    }

    /// Bytes of one stored scale or offset.
    pub fn scale_size(self) -> usize {
        match self.scales {
            Scales::F32 => 4,
            Scales::Half => 2,
            Scales::Small => 1,
        }
    }

    /// Where the scales of a group-block start.
    pub fn scales_at(self) -> usize {
        self.quant_bytes() + self.bits_bytes()
    }

    /// Where the offsets of a group-block start.
    pub fn offsets_at(self) -> usize {
        self.scales_at() + self.scales() * self.scale_size()
    }

    /// Bytes of one group-block: integers, high bits, scales, offsets.
    pub fn block_bytes(self) -> usize {
        self.offsets_at()
            + if self.offset {
                self.scales() * self.scale_size()
            } else {
                0
            }
    }

    /// Bytes of one super-block's bases ([`Scales::Small`]; else none): 16 halves
    /// for the scales, 16 for the offsets.
    pub fn bases_bytes(self) -> usize {
        match self.scales {
            Scales::Small => 2 * GROUP_ROWS * if self.offset { 2 } else { 1 },
            Scales::F32 | Scales::Half => 0,
        }
    }

    /// Where, in a group, the bases of block `b`'s super-block start: just before
    /// the super-block's first block, so that they stream in with it.
    pub fn bases_at(self, b: usize) -> usize {
        let per = SUPER_BLOCK / BLOCK;
        b / per * (self.bases_bytes() + per * self.block_bytes())
    }

    /// Where, in a group, block `b` starts.
    pub fn block_at(self, b: usize) -> usize {
        let per = SUPER_BLOCK / BLOCK;
        self.bases_at(b) + self.bases_bytes() + b % per * self.block_bytes()
    }

    /// Bytes of a group of `nb` blocks (before its padding to 64 bytes); `nb` is
    /// a whole number of super-blocks for [`Scales::Small`].
    pub fn group_bytes(self, nb: usize) -> usize {
        let per = SUPER_BLOCK / BLOCK;
        nb * self.block_bytes() + nb.div_ceil(per) * self.bases_bytes()
    }
}

/// A weight matrix in the packed layout.
pub struct PackedMatrix {
    pub dtype: DType,
    pub format: Format,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// 64-byte lines per group.
    group_lines: usize,
    storage: PackedStorage,
}

impl std::fmt::Debug for PackedMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedMatrix")
            .field("dtype", &self.dtype)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .finish_non_exhaustive()
    }
}

/// Groups packed between two reports of finished rows
/// ([`PackedMatrix::pack_releasing`]): 1,024 rows, 1-4 MiB of a large model's
/// matrix, enough work to keep the pool's threads busy.
const RELEASE_GROUPS: usize = 64;

impl PackedMatrix {
    /// Repacks `m`, or `None` when its type has no packed format. Runs on `pool`.
    pub fn pack(m: &Matrix<'_>, pool: &dyn Parallel) -> Option<PackedMatrix> {
        Self::pack_releasing(m, pool, |_| {})
    }

    /// [`PackedMatrix::pack`], calling `done` with the byte range of `m`'s
    /// storage (`0..rows * row_bytes`) of each batch of rows once it is packed
    /// and will not be read again, so that a caller can let a mapped file's pages
    /// go while the copy grows (the two are never resident whole together).
    /// Ranges come in order; where the preferred scales fail part-way and the
    /// packing starts over with f32 scales, the rows are reported again.
    pub fn pack_releasing(
        m: &Matrix<'_>,
        pool: &dyn Parallel,
        mut done: impl FnMut(std::ops::Range<usize>),
    ) -> Option<PackedMatrix> {
        let format = Format::for_dtype(m.dtype)?;
        if !m.cols.is_multiple_of(BLOCK) {
            return None;
        }
        // Released rows stay readable (a mapped file's pages come back on
        // touch), so when the preferred scales cannot hold a scale the f32-scale
        // packing starts over from the same source.
        if let Some(p) = Self::pack_as(m, format, pool, Some(&mut done)) {
            return Some(p);
        }
        Self::pack_as(
            m,
            Format {
                scales: Scales::F32,
                ..format
            },
            pool,
            Some(&mut done),
        )
    }

    /// Packs `m` in `format`; `None` when a scale or offset is not exact in it.
    /// With `done`, each batch of rows is reported once packed (see
    /// [`PackedMatrix::pack_releasing`]).
    pub(crate) fn pack_as(
        m: &Matrix<'_>,
        format: Format,
        pool: &dyn Parallel,
        mut done: Option<&mut dyn FnMut(std::ops::Range<usize>)>,
    ) -> Option<PackedMatrix> {
        let nb = m.cols / BLOCK;
        if format.scales == Scales::Small {
            assert!(
                nb.is_multiple_of(SUPER_BLOCK / BLOCK),
                "{} rows are whole super-blocks",
                m.dtype
            );
        }
        let group_lines = format.group_bytes(nb).div_ceil(64);
        let groups = m.rows.div_ceil(GROUP_ROWS);
        let mut storage = PackedStorage::zeroed(groups * group_lines * 64);
        let per_group = 64 * group_lines.max(1);
        for (batch, chunk) in storage.chunks_mut(per_group * RELEASE_GROUPS).enumerate() {
            let g0 = batch * RELEASE_GROUPS;
            let inexact = AtomicBool::new(false);
            for_each_chunk_mut(pool, chunk, per_group, |k, group| {
                if !inexact.load(Ordering::Relaxed) && !pack_group(m, format, g0 + k, group) {
                    inexact.store(true, Ordering::Relaxed);
                }
            });
            if inexact.into_inner() {
                return None;
            }
            if let Some(done) = done.as_mut() {
                let rows = g0 * GROUP_ROWS..(m.rows).min((g0 + RELEASE_GROUPS) * GROUP_ROWS);
                done(rows.start * m.row_bytes()..rows.end * m.row_bytes());
            }
        }
        Some(PackedMatrix {
            dtype: m.dtype,
            format,
            rows: m.rows,
            cols: m.cols,
            group_lines,
            storage,
        })
    }

    /// Blocks of 32 values per row.
    pub fn blocks(&self) -> usize {
        self.cols / BLOCK
    }

    /// Groups of [`GROUP_ROWS`] rows (the last one padded).
    pub fn groups(&self) -> usize {
        self.rows.div_ceil(GROUP_ROWS)
    }

    /// The bytes of group `g`: its blocks, each [`Format::block_bytes`] long, with
    /// their super-blocks' bases ([`Format::block_at`], [`Format::bases_at`]).
    pub fn group(&self, g: usize) -> &[u8] {
        let bytes = 64 * self.group_lines;
        &self.storage[g * bytes..(g + 1) * bytes]
    }

    /// Bytes held.
    pub fn byte_len(&self) -> usize {
        self.storage.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_rows::random_row;

    #[test]
    fn scales_a_half_cannot_hold_fall_back_to_f32() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let mut row = random_row(DType::Q4_0, 2, 5);
        row[0..2].copy_from_slice(&half::f16::from_f32(60000.0).to_bits().to_le_bytes()); // -8 d overflows a half
        let m = Matrix::new(DType::Q4_0, 1, 64, &row).unwrap();
        assert_eq!(
            PackedMatrix::pack(&m, &pool).unwrap().format.scales,
            Scales::F32
        );
        let fine = random_row(DType::Q4_0, 2, 5);
        assert!(
            PackedMatrix::pack(&Matrix::new(DType::Q4_0, 1, 64, &fine).unwrap(), &pool)
                .unwrap()
                .format
                .scales
                == Scales::Half
        );
    }

    #[test]
    fn packing_reports_each_batch_of_rows_once_in_order_and_packs_the_same_bytes() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        // 2.5 batches of rows, the last group partial.
        let rows = RELEASE_GROUPS * GROUP_ROWS * 5 / 2 + 3;
        let bytes: Vec<u8> = (0..rows)
            .flat_map(|r| random_row(DType::Q4_0, 2, 7 + r as u64))
            .collect();
        let m = Matrix::new(DType::Q4_0, rows, 64, &bytes).unwrap();
        let mut reported = Vec::new();
        let p = PackedMatrix::pack_releasing(&m, &pool, |r| reported.push(r)).unwrap();
        let batch = RELEASE_GROUPS * GROUP_ROWS * m.row_bytes();
        assert_eq!(
            reported,
            [0..batch, batch..2 * batch, 2 * batch..bytes.len()],
            "batches of rows, in order, covering the matrix"
        );
        let whole = PackedMatrix::pack(&m, &pool).unwrap();
        assert!((0..p.groups()).all(|g| p.group(g) == whole.group(g)));
        // A fallback to f32 scales part-way (-8 d overflows a half) reports the rows again from the start.
        let mut odd = bytes.clone();
        let last = (rows - 1) * m.row_bytes();
        odd[last..last + 2].copy_from_slice(&half::f16::from_f32(60000.0).to_bits().to_le_bytes());
        let m = Matrix::new(DType::Q4_0, rows, 64, &odd).unwrap();
        let mut reported = Vec::new();
        let p = PackedMatrix::pack_releasing(&m, &pool, |r| reported.push(r)).unwrap();
        assert_eq!(p.format.scales, Scales::F32);
        assert_eq!(reported.first(), Some(&(0..batch)));
        assert_eq!(reported.last(), Some(&(2 * batch..odd.len())));
    }
}
