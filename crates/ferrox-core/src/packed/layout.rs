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
//!   step per 32 bytes as signed bytes;
//! * 16 scales (32 when the two halves of the block have their own: Q3_K, Q6_K,
//!   Q2_K), stored as [`Scales`] say;
//! * 16 offsets for the types that have them (32 when split: Q2_K).
//!
//! The K-quants and IQ4_XS store each scale and offset as the file does: a small
//! signed integer multiplier per block ([`Scales::Small`]) of a per-row base per
//! 256-value super-block (`d`, `-dmin`), the bases just before the super-block's
//! first block (they stream in with it).
//! The kernels form `base * multiplier` in f32, which is exact, so the function is
//! the one of f32 scales; the bytes read per weight are the file's, or fewer.
//! Q6_K's values are stored as Q4's nibbles plus a plane of two high bits
//! ([`Quants::Nibble6`]), 6 bits a value as in the file.
//!
//! Rows past the matrix's last (the padding of the last group) are zeros. Each
//! group starts on a 64-byte boundary.

use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use crate::blocks::{IQ4_NL_VALUES, MXFP4_VALUES};
use crate::dtype::DType;
use crate::ops::matmul::Matrix;

pub use super::block_parts::{BlockParts, SmallScales, block_parts};
use super::block_parts::{Integers, Stored, WholeBlock, parts};
use crate::blocks::{BlockIq4Nl, BlockMxfp4, BlockQ4_0, BlockQ4_1, BlockQ8_0, blocks_of};

use super::storage::PackedStorage;
use super::{BLOCK, GROUP_ROWS};

/// Steps of two values per block.
const STEPS: usize = BLOCK / 2;

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
            DType::Q2_K => f(Quants::Nibble, true, true, Small),
            DType::Q5_0 | DType::Q5_1 => f(Quants::Nibble5, true, false, Half),
            DType::Q5_K => f(Quants::Nibble5, true, false, Small),
            DType::Q8_0 => f(Quants::Byte, false, false, Half),
            DType::IQ4_NL => f(Quants::Grid(Grid::Iq4), false, false, Half),
            DType::MXFP4 => f(Quants::Grid(Grid::Mxfp4), false, false, Half),
            DType::Q6_K => f(Quants::Nibble6, false, true, Small),
            DType::Q3_K => f(Quants::Byte, false, true, Small),
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
        }
    }

    /// Where the high bits of a group-block start ([`Quants::Nibble5`],
    /// [`Quants::Nibble6`]).
    pub fn bits_at(self) -> usize {
        self.quant_bytes()
    }

    /// Bytes of the high bits of one group-block.
    fn bits_bytes(self) -> usize {
        match self.quants {
            Quants::Nibble5 => 4 * STEPS,
            Quants::Nibble6 => 8 * STEPS,
            Quants::Nibble | Quants::Byte | Quants::Grid(_) => 0,
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
    pub fn pack(m: &Matrix<'_>, pool: &rayon::ThreadPool) -> Option<PackedMatrix> {
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
        pool: &rayon::ThreadPool,
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
        pool: &rayon::ThreadPool,
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
            let exact = pool.install(|| {
                chunk
                    .par_chunks_mut(per_group)
                    .enumerate()
                    .all(|(k, group)| pack_group(m, format, g0 + k, group))
            });
            if !exact {
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

/// Stores `v` at `at` in the format's scale width (for [`Scales::Small`], its
/// multiplier `mul`); false when a half cannot hold it.
fn put_scale(format: Format, blk: &mut [u8], at: usize, v: f32, mul: i8) -> bool {
    match format.scales {
        Scales::F32 => {
            blk[at..at + 4].copy_from_slice(&v.to_le_bytes());
            true
        }
        Scales::Half => put_half(blk, at, v),
        Scales::Small => {
            blk[at] = mul as u8;
            true
        }
    }
}

/// Stores `v` as an IEEE half at `at`; false when the half is not `v` exactly.
#[inline(always)]
fn put_half(out: &mut [u8], at: usize, v: f32) -> bool {
    let h = half::f16::from_f32(v);
    out[at..at + 2].copy_from_slice(&h.to_bits().to_le_bytes());
    h.to_f32() == v
}

/// Stores the integers of block `p` for row `r` of a group-block.
fn put_quants(format: Format, blk: &mut [u8], r: usize, w: &[i8; BLOCK]) {
    match format.quants {
        // A grid type's integers are the file's codes (`Integers::Codes`): the
        // grid's indices.
        Quants::Nibble | Quants::Grid(_) => put_nibbles(blk, r, &w.map(|v| v as u8)),
        Quants::Nibble5 => {
            put_nibbles(blk, r, &w.map(|v| v as u8));
            // Step p's fifth bits: bit `lane` of a 32-bit word.
            let bits = &mut blk[format.bits_at()..][..4 * STEPS];
            for (i, &v) in w.iter().enumerate() {
                let (step, lane) = (i / 2, 2 * r + i % 2);
                bits[4 * step + lane / 8] |= (((v as u8) >> 4) & 1) << (lane % 8);
            }
        }
        Quants::Nibble6 => {
            let u = w.map(|v| (v + 32) as u8);
            put_nibbles(blk, r, &u);
            // Step p's two high bits: bits 2 (p % 4) of byte `lane` of line p / 4,
            // lanes 2 r (even values) and 2 r + 1 (odd values) this row's alone.
            // Constant shifts, one store a byte (a shift by the step ran scalar
            // and was the largest part of a Q6_K repack).
            let bits = &mut blk[format.bits_at()..][..8 * STEPS];
            for (c, eight) in u.chunks_exact(8).enumerate() {
                let hi = |k: usize| eight[k] >> 4;
                bits[32 * c + 2 * r] = hi(0) | hi(2) << 2 | hi(4) << 4 | hi(6) << 6;
                bits[32 * c + 2 * r + 1] = hi(1) | hi(3) << 2 | hi(5) << 4 | hi(7) << 6;
            }
        }
        Quants::Byte => put_bytes(blk, r, w),
    }
}

/// The low nibbles of a row's 32 values: line `c` holds values `4c`, `4c + 1`
/// (low nibbles) and `4c + 2`, `4c + 3` (high nibbles) of row `r` in bytes
/// `2r`, `2r + 1` (steps `2c`, `2c + 1`).
#[inline(always)]
fn put_nibbles(blk: &mut [u8], r: usize, u: &[u8; BLOCK]) {
    assert!(
        r < GROUP_ROWS && blk.len() >= 8 * 32,
        "a group-block's nibble lines"
    );
    for (c, four) in u.chunks_exact(4).enumerate() {
        // Both bytes at once: the low nibbles of values 4c, 4c + 1, and those of
        // the next two above them.
        let q = u32::from_le_bytes(four.try_into().expect("4 values"));
        let pair = (q & 0x0F0F) | ((q >> 12) & 0xF0F0);
        blk[32 * c + 2 * r..][..2].copy_from_slice(&(pair as u16).to_le_bytes());
    }
}

/// Reads one byte of each cache line of `bytes`, so that the lines come in
/// together (independent loads) before the block loop reads them 16 rows
/// across, a block at a time. Read that way straight from DRAM (a mapped file
/// on its first pass), each line had waited for the one before it: the load of
/// a block's bytes was 40 % of a gpt-oss-20b load's samples.
#[inline(always)]
fn warm(bytes: &[u8]) {
    for line in bytes.iter().step_by(64) {
        std::hint::black_box(*line);
    }
}

/// Packs group `g` of `m` into `out`; false when a scale or offset is not exact.
/// Block by block, each group-block written whole by its 16 rows while it is
/// in L1 (row by row, a row's blocks were spread over the whole group).
fn pack_group(m: &Matrix<'_>, format: Format, g: usize, out: &mut [u8]) -> bool {
    match m.dtype {
        DType::Q4_0 => pack_group_whole::<BlockQ4_0>(m, format, g, out),
        DType::Q4_1 => pack_group_whole::<BlockQ4_1>(m, format, g, out),
        DType::IQ4_NL => pack_group_whole::<BlockIq4Nl>(m, format, g, out),
        DType::MXFP4 => pack_group_whole::<BlockMxfp4>(m, format, g, out),
        DType::Q8_0 => pack_group_whole::<BlockQ8_0>(m, format, g, out),
        _ => pack_group_values(m, format, g, out),
    }
}

/// [`pack_group`] for every type: each block taken apart into its integers,
/// scales and offsets ([`parts`]) and put together in the packed layout.
fn pack_group_values(m: &Matrix<'_>, format: Format, g: usize, out: &mut [u8]) -> bool {
    let nb = m.cols / BLOCK;
    let (bb, size) = (format.block_bytes(), format.scale_size());
    let first = g * GROUP_ROWS;
    let n = GROUP_ROWS.min(m.rows - first); // padding rows stay zero
    let rows: [&[u8]; GROUP_ROWS] =
        std::array::from_fn(|r| if r < n { m.row(first + r) } else { &[] });
    for row in &rows[..n] {
        warm(row);
    }
    let halves = if format.split { 2 } else { 1 };
    let mut exact = true;
    for b in 0..nb {
        let bases_at = (format.scales == Scales::Small && b % (SUPER_BLOCK / BLOCK) == 0)
            .then(|| format.bases_at(b));
        let block_at = format.block_at(b);
        for (r, row) in rows[..n].iter().enumerate() {
            let p = parts(m.dtype, row, b, Integers::Codes);
            let small = match (format.scales, p.small) {
                (Scales::Small, Some(s)) => s,
                (Scales::Small, None) => panic!("{} has no small scales", m.dtype),
                (_, s) => s.unwrap_or(SmallScales::new(0.0, [0; 2], 0.0, [0; 2])),
            };
            if let Some(at) = bases_at {
                let at = at + 2 * r;
                exact &= put_half(out, at, small.scale_base);
                if format.offset {
                    exact &= put_half(out, at + 2 * GROUP_ROWS, small.offset_base);
                }
            }
            let blk = &mut out[block_at..][..bb];
            put_quants(format, blk, r, &p.w);
            for h in 0..halves {
                let at = size * (GROUP_ROWS * h + r);
                exact &= put_scale(
                    format,
                    blk,
                    format.scales_at() + at,
                    p.scale[h],
                    small.scale_mul[h],
                );
                if format.offset {
                    exact &= put_scale(
                        format,
                        blk,
                        format.offsets_at() + at,
                        p.offset[h],
                        small.offset_mul[h],
                    );
                }
            }
        }
    }
    exact
}

/// [`pack_group`] for the types whose packed integers are the file's bytes
/// ([`WholeBlock`]): each row's codes or bytes move to its byte pairs of the
/// group-block as they are, and a group-block's scales are converted together
/// (a gpt-oss load spent most of its packing taking MXFP4 and Q8_0 blocks
/// apart into values and putting them back, a scale at a time).
fn pack_group_whole<B: WholeBlock>(
    m: &Matrix<'_>,
    format: Format,
    g: usize,
    out: &mut [u8],
) -> bool {
    let bb = format.block_bytes();
    let first = g * GROUP_ROWS;
    let n = GROUP_ROWS.min(m.rows - first); // padding rows stay zero
    let rows: [&[B]; GROUP_ROWS] = std::array::from_fn(|r| {
        if r < n {
            let row = m.row(first + r);
            warm(row);
            blocks_of::<B>(row).expect("whole blocks")
        } else {
            &[]
        }
    });
    let mut exact = true;
    let (mut scales, mut offsets) = ([0.0; GROUP_ROWS], [0.0; GROUP_ROWS]);
    for b in 0..m.cols / BLOCK {
        let blk = &mut out[format.block_at(b)..][..bb];
        for (r, row) in rows[..n].iter().enumerate() {
            let k = &row[b];
            match k.stored() {
                Stored::Codes(qs) => put_codes(blk, r, qs),
                Stored::Bytes(qs) => put_bytes(blk, r, qs),
            }
            (scales[r], offsets[r]) = k.scale_offset();
        }
        exact &= put_scales(format, &mut blk[format.scales_at()..], &scales[..n]);
        if format.offset {
            exact &= put_scales(format, &mut blk[format.offsets_at()..], &offsets[..n]);
        }
    }
    exact
}

/// Stores the scales (or offsets) `v` of a group-block's first rows at the
/// start of `out`, f32 or halves (converted together); false when a half is
/// not its value exactly. Not for [`Scales::Small`].
fn put_scales(format: Format, out: &mut [u8], v: &[f32]) -> bool {
    match format.scales {
        Scales::F32 => {
            for (to, v) in out.chunks_exact_mut(4).zip(v) {
                to.copy_from_slice(&v.to_le_bytes());
            }
            true
        }
        Scales::Half => {
            let mut h = [half::f16::ZERO; GROUP_ROWS];
            let mut back = [0.0f32; GROUP_ROWS];
            let (h, back) = (&mut h[..v.len()], &mut back[..v.len()]);
            h.convert_from_f32_slice(v);
            h.convert_to_f32_slice(back);
            for (to, h) in out.chunks_exact_mut(2).zip(h.iter()) {
                to.copy_from_slice(&h.to_bits().to_le_bytes());
            }
            back == v
        }
        Scales::Small => unreachable!("small scales are stored as multipliers"),
    }
}

/// Stores row `r`'s 32 signed bytes `w` in a [`Quants::Byte`] group-block:
/// step `p` at bytes `32 p + 2 r` and `32 p + 2 r + 1`.
#[inline(always)]
fn put_bytes(blk: &mut [u8], r: usize, w: &[i8; BLOCK]) {
    assert!(
        r < GROUP_ROWS && blk.len() >= STEPS * 32,
        "a group-block's byte lines"
    );
    for (p, pair) in w.chunks_exact(2).enumerate() {
        blk[32 * p + 2 * r] = pair[0] as u8;
        blk[32 * p + 2 * r + 1] = pair[1] as u8;
    }
}

/// [`put_nibbles`] of the values whose codes are `qs` in the file's order:
/// lines 0..4 take the low nibbles of four bytes, lines 4..8 the high.
#[inline(always)]
fn put_codes(blk: &mut [u8], r: usize, qs: &[u8; 16]) {
    assert!(
        r < GROUP_ROWS && blk.len() >= 8 * 32,
        "a group-block's nibble lines"
    );
    for (c, four) in qs.chunks_exact(4).enumerate() {
        let q = u32::from_le_bytes(four.try_into().expect("4 bytes"));
        let low = (q & 0x0F0F) | ((q >> 12) & 0xF0F0);
        let high = ((q >> 4) & 0x0F0F) | ((q >> 16) & 0xF0F0);
        blk[32 * c + 2 * r..][..2].copy_from_slice(&(low as u16).to_le_bytes());
        blk[32 * (c + 4) + 2 * r..][..2].copy_from_slice(&(high as u16).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_rows::random_row;

    #[test]
    fn whole_block_types_pack_the_bytes_of_the_value_by_value_path() {
        for dtype in [
            DType::Q4_0,
            DType::Q4_1,
            DType::IQ4_NL,
            DType::MXFP4,
            DType::Q8_0,
        ] {
            let (rows, cols) = (GROUP_ROWS + 5, 96);
            let bytes: Vec<u8> = (0..rows)
                .flat_map(|r| random_row(dtype, cols / BLOCK, 11 + r as u64))
                .collect();
            let m = Matrix::new(dtype, rows, cols, &bytes).unwrap();
            let format = Format::for_dtype(dtype).unwrap();
            let len = 64 * format.group_bytes(cols / BLOCK).div_ceil(64);
            for g in 0..2 {
                let (mut fast, mut slow) = (vec![0u8; len], vec![0u8; len]);
                let fast_exact = pack_group(&m, format, g, &mut fast);
                let slow_exact = pack_group_values(&m, format, g, &mut slow);
                assert_eq!(fast_exact, slow_exact, "{dtype}");
                assert!(fast == slow, "{dtype}: group {g} packs other bytes");
            }
        }
    }

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
