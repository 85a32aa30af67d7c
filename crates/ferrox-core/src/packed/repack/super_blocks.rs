//! The own path of the types whose blocks' scales (and offsets) are
//! multipliers of a 256-value super-block's bases ([`Scales::Small`]): the
//! K-quants and IQ4_XS. A row's super-block gives its bases as the file's
//! halves and each of its eight blocks its integers, moved as bytes where the
//! file's bits allow, and its multipliers, decoded once a super-block (the
//! value-by-value path decoded a block at a time; a Qwen3-30B-A3B-shape load
//! spent half its time there).
//!
//! [`Scales::Small`]: crate::packed::layout::Scales::Small

use super::{group_blocks, put_bit_plane, put_codes, put_crumbs, put_high_bits, put_nibble_lines};
use crate::blocks::{BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, ByteBlock};
use crate::kernels::reference::iquants::iq4_xs_scale;
use crate::kernels::reference::kquants::{q3k_scales, scale_min_k4};
use crate::ops::matmul::Matrix;
use crate::packed::layout::{Format, Quants, SUPER_BLOCK};
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
            put_bit_plane(format, blk, r, |i| qh[i] >> j);
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
            let qh = &self.qh[32 * h..][..32];
            put_high_bits(format, blk, r, |i| (qh[i] >> (2 * q)) & 3);
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
/// [`Quants::Crumb3`]) sign bits, and the split
/// multipliers `scales` (and `offsets`) of its two halves.
#[inline(always)]
fn put_low_bits(
    format: Format,
    out: &mut [u8],
    blocks: &[usize; PER],
    r: usize,
    (scales, offsets): ([i8; 16], [i8; 16]),
    codes: impl Fn(usize) -> ([u8; BLOCK], [u8; BLOCK]),
) {
    for (j, &at) in blocks.iter().enumerate() {
        let blk = &mut out[at..][..format.block_bytes()];
        let (crumbs, signs) = codes(j);
        put_crumbs(&mut blk[..format.quant_bytes()], r, |i| crumbs[i]);
        if format.quants == Quants::Crumb3 {
            put_bit_plane(format, blk, r, |i| signs[i]);
        }
        for h in 0..2 {
            blk[format.scales_at() + GROUP_ROWS * h + r] = scales[2 * j + h] as u8;
            if format.offset {
                blk[format.offsets_at() + GROUP_ROWS * h + r] = offsets[2 * j + h] as u8;
            }
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
        put_low_bits(format, out, blocks, r, multipliers, |j| {
            // Values 32 j ..: 2-bit lows at shift 2 (j % 4) of qs[32 (j / 4) ..],
            // less 4 (a sign bit) where bit 4 (j / 4) + j % 4 of hmask is clear.
            let (h, p) = (j / 4, j % 4);
            let mask = 1u8 << (4 * h + p);
            let qs: &[u8; BLOCK] = self.qs[32 * h..][..BLOCK].try_into().expect("32 bytes");
            (
                std::array::from_fn(|i| (qs[i] >> (2 * p)) & 3),
                std::array::from_fn(|i| (self.hmask[i] & mask == 0) as u8),
            )
        });
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
        put_low_bits(format, out, blocks, r, multipliers, |j| {
            // Values 32 j ..: 2-bit planes at shift 2 (j % 4) of qs[32 (j / 4) ..].
            let (h, p) = (j / 4, j % 4);
            let qs: &[u8; BLOCK] = self.qs[32 * h..][..BLOCK].try_into().expect("32 bytes");
            (std::array::from_fn(|i| (qs[i] >> (2 * p)) & 3), [0; BLOCK])
        });
    }
}
