//! Packing a group of 16 rows ([`pack_group`]): the GGUF blocks of each row
//! written into the group's blocks in the layout of [`super::layout`].
//!
//! The value-by-value path takes every block apart into its integers, scales
//! and offsets ([`parts`]) and puts them together again; it serves every type.
//! The types a model's bytes are mostly in have their own path, which moves
//! the file's bytes as they lie: [`WholeBlock`]s (Q4_0, Q4_1, IQ4_NL, MXFP4,
//! Q8_0), the K-quants and IQ4_XS. Each gives the bytes of the value-by-value path
//! (tested).

use half::slice::HalfFloatSliceExt;

mod super_blocks;
use super_blocks::pack_group_super;

use super::block_parts::{Integers, Stored, WholeBlock, parts};
use super::layout::{Format, Quants, STEPS, SUPER_BLOCK, Scales, SmallScales};
use super::{BLOCK, GROUP_ROWS};
use crate::blocks::{
    BlockIq4Nl, BlockIq4Xs, BlockMxfp4, BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K,
    BlockQ5K, BlockQ6K, BlockQ8_0, ByteBlock, blocks_of,
};
use crate::dtype::DType;
use crate::ops::matmul::Matrix;

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
        Quants::Nibble | Quants::Grid(_) => put_nibble_lines(blk, r, &w.map(|v| v as u8), false),
        Quants::Nibble5 => {
            put_nibble_lines(blk, r, &w.map(|v| v as u8), false);
            put_bit_plane(format, blk, r, |i| (w[i] as u8) >> 4);
        }
        Quants::Nibble6 => {
            let u = w.map(|v| (v + 32) as u8);
            put_nibble_lines(blk, r, &u, false);
            put_crumbs(&mut blk[format.bits_at()..][..8 * STEPS], r, |i| u[i] >> 4);
        }
        Quants::Byte => put_bytes(blk, r, w),
        Quants::Crumb => put_crumbs(&mut blk[..format.quant_bytes()], r, |i| w[i] as u8),
        Quants::Crumb3 => {
            put_crumbs(&mut blk[..format.quant_bytes()], r, |i| w[i] as u8 & 3);
            put_bit_plane(format, blk, r, |i| (w[i] < 0) as u8);
        }
    }
}

/// Stores row `r`'s bits of a group-block's one-bit plane ([`Quants::Nibble5`]'s
/// fifth bits, [`Quants::Crumb3`]'s sign bits): bit 0 of `bit(i)` for value `i`,
/// at bit `lane = 2 r + i % 2` of step `i / 2`'s little-endian u32 (whose other
/// rows' bits it keeps).
#[inline(always)]
fn put_bit_plane(format: Format, blk: &mut [u8], r: usize, bit: impl Fn(usize) -> u8) {
    let bits = &mut blk[format.bits_at()..][..4 * STEPS];
    for i in 0..BLOCK {
        let (step, lane) = (i / 2, 2 * r + i % 2);
        bits[4 * step + lane / 8] |= (bit(i) & 1) << (lane % 8);
    }
}

/// Stores row `r`'s 2-bit values (`two(i)`, 0..4, for value `i`) in four
/// lines of 32 bytes: step `p`'s at bits `2 (p % 4)` of byte `lane` of line
/// `p / 4`, lanes `2 r` (even values) and `2 r + 1` (odd values) this row's
/// alone ([`Quants::Crumb`], [`Quants::Nibble6`]'s high bits). Constant
/// shifts, one store a byte (a shift by the step ran scalar and was the
/// largest part of a Q6_K repack).
#[inline(always)]
fn put_crumbs(lines: &mut [u8], r: usize, two: impl Fn(usize) -> u8) {
    assert!(
        lines.len() == 4 * 32 && r < GROUP_ROWS,
        "four lines of 32 bytes"
    );
    for c in 0..BLOCK / 8 {
        let two = |k: usize| two(8 * c + k);
        lines[32 * c + 2 * r] = two(0) | two(2) << 2 | two(4) << 4 | two(6) << 6;
        lines[32 * c + 2 * r + 1] = two(1) | two(3) << 2 | two(5) << 4 | two(7) << 6;
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
pub(super) fn pack_group(m: &Matrix<'_>, format: Format, g: usize, out: &mut [u8]) -> bool {
    // The super-block types' own layout; with f32 scales (a base a half could
    // not hold) they take the value-by-value path.
    let small = format.scales == Scales::Small;
    match m.dtype {
        DType::Q4_0 => pack_group_whole::<BlockQ4_0>(m, format, g, out),
        DType::Q4_1 => pack_group_whole::<BlockQ4_1>(m, format, g, out),
        DType::IQ4_NL => pack_group_whole::<BlockIq4Nl>(m, format, g, out),
        DType::MXFP4 => pack_group_whole::<BlockMxfp4>(m, format, g, out),
        DType::Q8_0 => pack_group_whole::<BlockQ8_0>(m, format, g, out),
        DType::Q4_K if small => pack_group_super::<BlockQ4K>(m, format, g, out),
        DType::Q5_K if small => pack_group_super::<BlockQ5K>(m, format, g, out),
        DType::Q6_K if small => pack_group_super::<BlockQ6K>(m, format, g, out),
        DType::Q3_K if small => pack_group_super::<BlockQ3K>(m, format, g, out),
        DType::Q2_K if small => pack_group_super::<BlockQ2K>(m, format, g, out),
        DType::IQ4_XS if small => pack_group_super::<BlockIq4Xs>(m, format, g, out),
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
    let (rows, n) = group_blocks::<B>(m, g);
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

/// The blocks of group `g`'s rows (each read in first, [`warm`]) and how
/// many rows the group has (the rest of its 16 are padding, left zero).
fn group_blocks<'a, B: ByteBlock>(m: &Matrix<'a>, g: usize) -> ([&'a [B]; GROUP_ROWS], usize) {
    let first = g * GROUP_ROWS;
    let n = GROUP_ROWS.min(m.rows - first);
    let rows = std::array::from_fn(|r| {
        if r < n {
            let row = m.row(first + r);
            warm(row);
            blocks_of::<B>(row).expect("whole blocks")
        } else {
            &[]
        }
    });
    (rows, n)
}

/// Row `r`'s eight nibble lines of a group-block from the 32 bytes whose low
/// (`high`: high) nibbles are the block's 32 values: line `c` holds values
/// `4c`, `4c + 1` (low nibbles) and `4c + 2`, `4c + 3` (high nibbles) of row
/// `r` in bytes `2r`, `2r + 1` (steps `2c`, `2c + 1`).
#[inline(always)]
fn put_nibble_lines(blk: &mut [u8], r: usize, bytes: &[u8], high: bool) {
    assert!(
        bytes.len() == BLOCK && r < GROUP_ROWS && blk.len() >= 8 * 32,
        "a block's bytes and a group-block's nibble lines"
    );
    for (c, four) in bytes.chunks_exact(4).enumerate() {
        let q = u32::from_le_bytes(four.try_into().expect("4 bytes"));
        put_pair(blk, c, r, nibble_pair(q, high));
    }
}

/// The byte pair of a nibble line from four bytes `q` (little-endian) of
/// codes: values `4c .. 4c + 4` in their low nibbles (`high`: high nibbles)
/// become `v0 | v2 << 4` and `v1 | v3 << 4`.
#[inline(always)]
fn nibble_pair(q: u32, high: bool) -> u16 {
    let q = if high { q >> 4 } else { q };
    ((q & 0x0F0F) | ((q >> 12) & 0xF0F0)) as u16
}

/// Stores row `r`'s byte pair of nibble line `c` of a group-block.
#[inline(always)]
fn put_pair(blk: &mut [u8], c: usize, r: usize, pair: u16) {
    blk[32 * c + 2 * r..][..2].copy_from_slice(&pair.to_le_bytes());
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

/// [`put_nibble_lines`] of the values whose codes are `qs` in the file's order:
/// lines 0..4 take the low nibbles of four bytes, lines 4..8 the high.
#[inline(always)]
fn put_codes(blk: &mut [u8], r: usize, qs: &[u8; 16]) {
    assert!(
        r < GROUP_ROWS && blk.len() >= 8 * 32,
        "a group-block's nibble lines"
    );
    for (c, four) in qs.chunks_exact(4).enumerate() {
        let q = u32::from_le_bytes(four.try_into().expect("4 bytes"));
        put_pair(blk, c, r, nibble_pair(q, false));
        put_pair(blk, c + 4, r, nibble_pair(q, true));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_rows::random_row;

    #[test]
    fn every_own_path_packs_the_bytes_of_the_value_by_value_path() {
        for dtype in [
            DType::Q4_0,
            DType::Q4_1,
            DType::IQ4_NL,
            DType::MXFP4,
            DType::Q8_0,
            DType::Q4_K,
            DType::Q5_K,
            DType::Q6_K,
            DType::IQ4_XS,
            DType::Q3_K,
            DType::Q2_K,
        ] {
            let (rows, cols) = (GROUP_ROWS + 5, 512);
            let bytes: Vec<u8> = (0..rows)
                .flat_map(|r| random_row(dtype, cols / dtype.block_len(), 11 + r as u64))
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
}
