//! The own path of the types whose blocks' scales (and offsets) are
//! multipliers of a 256-value super-block's bases ([`Scales::Small`]): the
//! K-quants and IQ4_XS. A row's super-block gives its bases as the file's
//! halves and each of its eight blocks its integers, moved as bytes where the
//! file's bits allow, and its multipliers, decoded once a super-block (the
//! value-by-value path decoded a block at a time; a Qwen3-30B-A3B-shape load
//! spent half its time there).
//!
//! [`Scales::Small`]: crate::packed::layout::Scales::Small

use super::{group_blocks, put_codes, put_nibble_lines};
use crate::blocks::{BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, ByteBlock};
use crate::kernels::reference::iquants::iq4_xs_scale;
use crate::kernels::reference::kquants::{q3k_scales, scale_min_k4};
use crate::ops::matmul::Matrix;
use crate::packed::layout::{Format, SUPER_BLOCK};
use crate::packed::{BLOCK, GROUP_ROWS};

/// Blocks of 32 values per super-block.
const PER: usize = SUPER_BLOCK / BLOCK;

/// A super-block of a type packed with [`Scales::Small`](crate::packed::layout::Scales::Small).
pub(super) trait SuperBlock: ByteBlock {
    /// The scale base `d`, and the file's `dmin` for the types with offsets
    /// (Q4_K, Q5_K, Q2_K; the layout's offset base is `-dmin`), as the file's
    /// halves.
    fn bases(&self) -> ([u8; 2], Option<[u8; 2]>);

    /// Writes row `r`'s integers and multipliers into the group-blocks that
    /// start at `blocks` in `out`.
    fn put(&self, format: Format, out: &mut [u8], blocks: &[usize; PER], r: usize);
}

/// [`super::pack_group`] for a [`SuperBlock`] type in its own layout; false
/// when a base is NaN (as `put_half` says of it).
pub(super) fn pack_group_super<B: SuperBlock>(
    m: &Matrix<'_>,
    format: Format,
    g: usize,
    out: &mut [u8],
) -> bool {
    let (rows, n) = group_blocks::<B>(m, g);
    let mut exact = true;
    for sb in 0..m.cols / SUPER_BLOCK {
        let bases = format.bases_at(PER * sb);
        let blocks = std::array::from_fn(|j| format.block_at(PER * sb + j));
        for (r, row) in rows[..n].iter().enumerate() {
            let k = &row[sb];
            let (d, dmin) = k.bases();
            exact &= put_base(out, bases + 2 * r, u16::from_le_bytes(d));
            if let Some(dmin) = dmin {
                // -dmin: the half's sign bit flipped.
                let at = bases + 2 * (GROUP_ROWS + r);
                exact &= put_base(out, at, u16::from_le_bytes(dmin) ^ 0x8000);
            }
            k.put(format, out, &blocks, r);
        }
    }
    exact
}

/// Stores the half with bits `h` at `at`; false when it is NaN.
fn put_base(out: &mut [u8], at: usize, h: u16) -> bool {
    out[at..at + 2].copy_from_slice(&h.to_le_bytes());
    !(h & 0x7C00 == 0x7C00 && h & 0x03FF != 0)
}

/// Q4_K's and Q5_K's blocks: nibbles as bytes, 6-bit multipliers, and Q5_K's
/// fifth bits (bit `j` of byte `i` of `qh`: value `i` of block `j`).
#[inline(always)]
fn put_k4(
    format: Format,
    out: &mut [u8],
    blocks: &[usize; PER],
    r: usize,
    (scales, qs, qh): (&[u8; 12], &[u8; 128], Option<&[u8; 32]>),
) {
    for (j, &at) in blocks.iter().enumerate() {
        let blk = &mut out[at..][..format.block_bytes()];
        put_nibble_lines(blk, r, &qs[32 * (j / 2)..][..32], j % 2 == 1);
        if let Some(qh) = qh {
            put_plane_bits(format, blk, r, qh, j, false);
        }
        let (sc, min) = scale_min_k4(j, scales);
        blk[format.scales_at() + r] = sc;
        blk[format.offsets_at() + r] = min;
    }
}

impl SuperBlock for BlockQ4K {
    fn bases(&self) -> ([u8; 2], Option<[u8; 2]>) {
        (self.d, Some(self.dmin))
    }
    #[inline(always)]
    fn put(&self, format: Format, out: &mut [u8], blocks: &[usize; PER], r: usize) {
        put_k4(format, out, blocks, r, (&self.scales, &self.qs, None));
    }
}

impl SuperBlock for BlockQ5K {
    fn bases(&self) -> ([u8; 2], Option<[u8; 2]>) {
        (self.d, Some(self.dmin))
    }
    #[inline(always)]
    fn put(&self, format: Format, out: &mut [u8], blocks: &[usize; PER], r: usize) {
        put_k4(
            format,
            out,
            blocks,
            r,
            (&self.scales, &self.qs, Some(&self.qh)),
        );
    }
}

/// Split signed multipliers; the low nibbles moved as bytes and the two high
/// bits a value regathered eight values at a time.
impl SuperBlock for BlockQ6K {
    fn bases(&self) -> ([u8; 2], Option<[u8; 2]>) {
        (self.d, None)
    }
    #[inline(always)]
    fn put(&self, format: Format, out: &mut [u8], blocks: &[usize; PER], r: usize) {
        for (j, &at) in blocks.iter().enumerate() {
            // Values 32 j ..: low nibbles at shift 4 (q / 2) of ql[64 h + 32 (q % 2) ..],
            // high bits at shift 2 q of qh[32 h ..] (h = j / 4, q = j % 4).
            let (h, q) = (j / 4, j % 4);
            let blk = &mut out[at..][..format.block_bytes()];
            put_nibble_lines(blk, r, &self.ql[64 * h + 32 * (q % 2)..][..32], q >= 2);
            let qh = self.qh[32 * h..][..BLOCK].try_into().expect("32 bytes");
            put_crumbs_at(&mut blk[format.bits_at()..][..4 * 32], r, qh, 2 * q);
            blk[format.scales_at() + r] = self.scales[8 * h + 2 * q] as u8;
            blk[format.scales_at() + GROUP_ROWS + r] = self.scales[8 * h + 2 * q + 1] as u8;
        }
    }
}

/// The 6-bit scales less 32 as multipliers; the codes (in the file's order,
/// as IQ4_NL's) moved as bytes.
impl SuperBlock for BlockIq4Xs {
    fn bases(&self) -> ([u8; 2], Option<[u8; 2]>) {
        (self.d, None)
    }
    #[inline(always)]
    fn put(&self, format: Format, out: &mut [u8], blocks: &[usize; PER], r: usize) {
        for (j, &at) in blocks.iter().enumerate() {
            let blk = &mut out[at..][..format.block_bytes()];
            put_codes(
                blk,
                r,
                self.qs[16 * j..][..16].try_into().expect("16 bytes"),
            );
            blk[format.scales_at() + r] = iq4_xs_scale(self, j) as i8 as u8;
        }
    }
}

/// Q3_K's and Q2_K's blocks: each block's 32 values as crumbs and (Q3_K's,
/// `Quants::Crumb3`) sign bits, and the split multipliers `scales` (and
/// `offsets`) of its two halves. Block `j`'s values are bits `2 (j % 4)` of
/// `qs[32 (j / 4) ..]`; its sign bits, bit `j` of `hmask` clear.
#[inline(always)]
fn put_low_bits(
    format: Format,
    out: &mut [u8],
    blocks: &[usize; PER],
    r: usize,
    (scales, offsets): ([i8; 16], [i8; 16]),
    (qs, hmask): (&[u8; 64], Option<&[u8; 32]>),
) {
    for (j, &at) in blocks.iter().enumerate() {
        let blk = &mut out[at..][..format.block_bytes()];
        let qs = qs[32 * (j / 4)..][..BLOCK].try_into().expect("32 bytes");
        put_crumbs_at(&mut blk[..format.quant_bytes()], r, qs, 2 * (j % 4));
        if let Some(hmask) = hmask {
            put_plane_bits(format, blk, r, hmask, j, true);
        }
        for h in 0..2 {
            blk[format.scales_at() + GROUP_ROWS * h + r] = scales[2 * j + h] as u8;
            if format.offset {
                blk[format.offsets_at() + GROUP_ROWS * h + r] = offsets[2 * j + h] as u8;
            }
        }
    }
}

/// Row `r`'s crumbs of a block (`put_crumbs`: [`Quants::Crumb`]'s values,
/// [`Quants::Nibble6`]'s high bits) from the 32 bytes whose bits `shift`,
/// `shift + 1` are its values, eight values a word.
///
/// [`Quants::Crumb`]: crate::packed::layout::Quants::Crumb
/// [`Quants::Nibble6`]: crate::packed::layout::Quants::Nibble6
#[inline(always)]
fn put_crumbs_at(lines: &mut [u8], r: usize, bytes: &[u8; BLOCK], shift: usize) {
    assert!(
        lines.len() == 4 * 32 && r < GROUP_ROWS,
        "four lines of 32 bytes"
    );
    for (c, eight) in bytes.chunks_exact(8).enumerate() {
        let x = (u64::from_le_bytes(eight.try_into().expect("8 bytes")) >> shift)
            & 0x0303_0303_0303_0303;
        lines[32 * c + 2 * r] = even_crumbs(x);
        lines[32 * c + 2 * r + 1] = even_crumbs(x >> 8);
    }
}

/// The 2-bit values in bytes 0, 2, 4 and 6 of `x` as one byte, byte `2k`'s at
/// bits `2k`.
#[inline(always)]
fn even_crumbs(x: u64) -> u8 {
    let v = x & 0x0003_0003_0003_0003;
    let t = v | (v >> 14);
    (t | (t >> 28)) as u8
}

/// Row `r`'s bits of a group-block's one-bit plane (`put_bit_plane`): bit
/// `bit` of `bytes[i]` (negated where `negate`) for value `i`, two values a
/// step, eight values a word.
#[inline(always)]
fn put_plane_bits(
    format: Format,
    blk: &mut [u8],
    r: usize,
    bytes: &[u8; BLOCK],
    bit: usize,
    negate: bool,
) {
    let plane = &mut blk[format.bits_at()..][..4 * BLOCK / 2];
    for (q, eight) in bytes.chunks_exact(8).enumerate() {
        let x = u64::from_le_bytes(eight.try_into().expect("8 bytes")) >> bit;
        let y = if negate { !x } else { x } & 0x0101_0101_0101_0101;
        // Byte 2t: the bits of values 2t and 2t + 1 (of these eight).
        let pairs = y | (y >> 7);
        for t in 0..4 {
            let step = 4 * q + t;
            plane[4 * step + r / 4] |= (((pairs >> (16 * t)) & 3) as u8) << (2 * (r % 4));
        }
    }
}

impl SuperBlock for BlockQ3K {
    fn bases(&self) -> ([u8; 2], Option<[u8; 2]>) {
        (self.d, None)
    }
    #[inline(always)]
    fn put(&self, format: Format, out: &mut [u8], blocks: &[usize; PER], r: usize) {
        let multipliers = (q3k_scales(&self.scales), [0; 16]);
        put_low_bits(
            format,
            out,
            blocks,
            r,
            multipliers,
            (&self.qs, Some(&self.hmask)),
        );
    }
}

impl SuperBlock for BlockQ2K {
    fn bases(&self) -> ([u8; 2], Option<[u8; 2]>) {
        (self.d, Some(self.dmin))
    }
    #[inline(always)]
    fn put(&self, format: Format, out: &mut [u8], blocks: &[usize; PER], r: usize) {
        let multipliers = (
            self.scales.map(|s| (s & 0x0F) as i8),
            self.scales.map(|s| (s >> 4) as i8),
        );
        put_low_bits(format, out, blocks, r, multipliers, (&self.qs, None));
    }
}
