//! A GGUF block of 32 values read as the packed layout stores it: small
//! integers, and the f32 scales and offsets (or the super-block bases and
//! multipliers) that give `value[i] = scale[i / 16] * w[i] + offset[i / 16]`
//! exactly (see [`super::layout`]).

use crate::blocks::{
    BlockIq4Nl, BlockIq4Xs, BlockMxfp4, BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K,
    BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0, ByteBlock, blocks_of, e8m0_to_f32_half,
    f16_le,
};
use crate::dtype::DType;
use crate::kernels::reference::iquants::{iq4_nl_group, iq4_xs_group, iq4_xs_scale};
use crate::kernels::reference::kquants::q3k_scales;
use crate::kernels::reference::kquants::scale_min_k4;
use crate::kernels::reference::mxfp4::mxfp4_group;

use super::BLOCK;

/// One 32-value block of a row, split into integers, scales and offset.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockParts {
    pub w: [i8; BLOCK],
    /// Scale of values 0..16 and of values 16..32 (equal unless the format splits).
    pub scale: [f32; 2],
    /// Offset of values 0..16 and of values 16..32 (equal unless the format splits).
    pub offset: [f32; 2],
    /// The same scales and offsets as the file stores them, for the types whose
    /// blocks share a super-block's bases: `scale[h] = scale_base * scale_mul[h]`
    /// and `offset[h] = offset_base * offset_mul[h]`, exactly.
    pub small: Option<SmallScales>,
}

/// A block's scales and offsets as integer multipliers of its super-block's bases.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SmallScales {
    pub scale_base: f32,
    pub scale_mul: [i8; 2],
    pub offset_base: f32,
    pub offset_mul: [i8; 2],
}

impl SmallScales {
    pub(super) fn new(
        scale_base: f32,
        scale_mul: [i8; 2],
        offset_base: f32,
        offset_mul: [i8; 2],
    ) -> Self {
        SmallScales {
            scale_base,
            scale_mul,
            offset_base,
            offset_mul,
        }
    }

    /// The f32 scales and offsets these stand for.
    fn values(self) -> ([f32; 2], [f32; 2]) {
        let times = |base: f32, m: [i8; 2]| m.map(|m| base * m as f32);
        (
            times(self.scale_base, self.scale_mul),
            times(self.offset_base, self.offset_mul),
        )
    }
}

/// A block of 32 values under one scale and offset whose packed integers are
/// the file's own bytes ([`Stored`]): Q4_0, Q4_1, IQ4_NL, MXFP4 and Q8_0. The
/// repack moves them as bytes (`repack::pack_group_whole`), never one value at
/// a time.
pub(super) trait WholeBlock: ByteBlock {
    /// The integers as the file stores them.
    fn stored(&self) -> Stored<'_>;
    /// The block's scale and offset: `value = scale * w + offset`, with `w`
    /// the integer (Q4_0, Q4_1, Q8_0) or the grid's value at the code (IQ4_NL,
    /// MXFP4).
    fn scale_offset(&self) -> (f32, f32);
}

/// A [`WholeBlock`]'s integers in the file.
pub(super) enum Stored<'a> {
    /// 4-bit codes: `qs[j] & 15` is value `j`, `qs[j] >> 4` value `j + 16`.
    Codes(&'a [u8; 16]),
    /// Signed bytes, one a value.
    Bytes(&'a [i8; BLOCK]),
}

impl WholeBlock for BlockQ4_0 {
    fn stored(&self) -> Stored<'_> {
        Stored::Codes(&self.qs)
    }
    fn scale_offset(&self) -> (f32, f32) {
        let d = f16_le(self.d);
        (d, -8.0 * d)
    }
}

impl WholeBlock for BlockQ4_1 {
    fn stored(&self) -> Stored<'_> {
        Stored::Codes(&self.qs)
    }
    fn scale_offset(&self) -> (f32, f32) {
        (f16_le(self.d), f16_le(self.m))
    }
}

impl WholeBlock for BlockIq4Nl {
    fn stored(&self) -> Stored<'_> {
        Stored::Codes(&self.qs)
    }
    fn scale_offset(&self) -> (f32, f32) {
        (f16_le(self.d), 0.0)
    }
}

impl WholeBlock for BlockMxfp4 {
    fn stored(&self) -> Stored<'_> {
        Stored::Codes(&self.qs)
    }
    fn scale_offset(&self) -> (f32, f32) {
        (e8m0_to_f32_half(self.e), 0.0)
    }
}

impl WholeBlock for BlockQ8_0 {
    fn stored(&self) -> Stored<'_> {
        Stored::Bytes(&self.qs)
    }
    fn scale_offset(&self) -> (f32, f32) {
        (f16_le(self.d), 0.0)
    }
}

/// The parts of block `b` (of 32 values) of a row of `dtype` stored in `row`.
/// `dtype` must have a [`Format`](super::layout::Format) and `row` hold whole blocks.
pub fn block_parts(dtype: DType, row: &[u8], b: usize) -> BlockParts {
    parts(dtype, row, b, Integers::Values)
}

/// What [`BlockParts::w`] holds for the grid types (IQ4_NL, IQ4_XS, MXFP4).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Integers {
    /// The grid's values (every type: the integers of the block's function).
    Values,
    /// The file's 4-bit codes, indices into the grid (what the packed layout
    /// stores, taken without a look-up there and back).
    Codes,
}

/// [`block_parts`], with the grid types' integers as `integers` says.
#[inline]
pub(super) fn parts(dtype: DType, row: &[u8], b: usize, integers: Integers) -> BlockParts {
    let mut w = [0i8; BLOCK];
    let (sub, g) = (b / 8, b % 8);
    let plain = |scale, offset| (scale, offset, None);
    let small = |s: SmallScales| {
        let (scale, offset) = s.values();
        (scale, offset, Some(s))
    };
    let (scale, offset, small) = match dtype {
        DType::Q4_0 | DType::Q4_1 => {
            let (qs, (d, m)) = if dtype == DType::Q4_0 {
                let k = &blocks_of::<BlockQ4_0>(row).expect("whole blocks")[b];
                (&k.qs, k.scale_offset())
            } else {
                let k = &blocks_of::<BlockQ4_1>(row).expect("whole blocks")[b];
                (&k.qs, k.scale_offset())
            };
            nibbles(qs, &mut w);
            plain([d, d], [m; 2])
        }
        DType::Q5_0 | DType::Q5_1 => {
            let (qs, qh, d, m) = if dtype == DType::Q5_0 {
                let k = &blocks_of::<BlockQ5_0>(row).expect("whole blocks")[b];
                (k.qs, k.qh, f16_le(k.d), None)
            } else {
                let k = &blocks_of::<BlockQ5_1>(row).expect("whole blocks")[b];
                (k.qs, k.qh, f16_le(k.d), Some(f16_le(k.m)))
            };
            nibbles(&qs, &mut w);
            let h = u32::from_le_bytes(qh);
            for (i, v) in w.iter_mut().enumerate() {
                *v |= (((h >> i) & 1) << 4) as i8;
            }
            // Q5_0 is d * (q - 16): the -16 d becomes the offset.
            plain([d, d], [m.unwrap_or(-16.0 * d); 2])
        }
        DType::Q8_0 => {
            let k = &blocks_of::<BlockQ8_0>(row).expect("whole blocks")[b];
            w = k.qs;
            let (d, m) = k.scale_offset();
            plain([d, d], [m; 2])
        }
        DType::Q4_K | DType::Q5_K => {
            let (d, dmin, scales, qs, qh) = if dtype == DType::Q4_K {
                let k = &blocks_of::<BlockQ4K>(row).expect("whole blocks")[sub];
                (
                    f16_le(k.d),
                    f16_le(k.dmin),
                    k.scales,
                    &k.qs[32 * (g / 2)..32 * (g / 2) + 32],
                    None,
                )
            } else {
                let k = &blocks_of::<BlockQ5K>(row).expect("whole blocks")[sub];
                (
                    f16_le(k.d),
                    f16_le(k.dmin),
                    k.scales,
                    &k.qs[32 * (g / 2)..32 * (g / 2) + 32],
                    Some(k.qh),
                )
            };
            let (sc, m) = scale_min_k4(g, &scales);
            // Loops of a fixed length without a branch: they vectorize.
            let shift = 4 * (g % 2);
            let qs: &[u8; BLOCK] = qs.try_into().expect("32 bytes");
            for (v, &q) in w.iter_mut().zip(qs) {
                *v = ((q >> shift) & 0x0F) as i8;
            }
            if let Some(qh) = qh {
                for (v, &h) in w.iter_mut().zip(&qh) {
                    *v |= (((h >> g) & 1) << 4) as i8;
                }
            }
            small(SmallScales::new(d, [sc as i8; 2], -dmin, [m as i8; 2]))
        }
        DType::Q6_K => {
            let k = &blocks_of::<BlockQ6K>(row).expect("whole blocks")[sub];
            let (h, q) = (g / 4, g % 4);
            let ql: &[u8; BLOCK] = k.ql[64 * h + 32 * (q % 2)..][..BLOCK].try_into().unwrap();
            let qh: &[u8; BLOCK] = k.qh[32 * h..][..BLOCK].try_into().unwrap();
            let (low_shift, high_shift) = (4 * (q / 2), 2 * q);
            for ((v, &l), &hb) in w.iter_mut().zip(ql).zip(qh) {
                let low = (l >> low_shift) & 0x0F;
                let high = (hb >> high_shift) & 3;
                *v = (low | (high << 4)) as i8 - 32;
            }
            let mul = [k.scales[8 * h + 2 * q], k.scales[8 * h + 2 * q + 1]];
            small(SmallScales::new(f16_le(k.d), mul, 0.0, [0; 2]))
        }
        DType::Q2_K => {
            let k = &blocks_of::<BlockQ2K>(row).expect("whole blocks")[sub];
            // Values 32 g .. 32 g + 32: 2-bit planes at shift 2 (g % 4) of bytes
            // 32 (g / 4) ..; 16-value groups 2 g and 2 g + 1 carry the scales.
            let (h, p) = (g / 4, g % 4);
            for (i, v) in w.iter_mut().enumerate() {
                *v = ((k.qs[32 * h + i] >> (2 * p)) & 3) as i8;
            }
            let sc = [k.scales[2 * g], k.scales[2 * g + 1]];
            small(SmallScales::new(
                f16_le(k.d),
                sc.map(|s| (s & 0x0F) as i8),
                -f16_le(k.dmin),
                sc.map(|s| (s >> 4) as i8),
            ))
        }
        DType::Q3_K => {
            let k = &blocks_of::<BlockQ3K>(row).expect("whole blocks")[sub];
            // Values 32 g .. 32 g + 32 of the block: 2-bit lows at shift 2 (g % 4)
            // of bytes 32 (g / 4) .., high bit (set: no -4) in bit 4 (g / 4) + g % 4.
            let (h, p) = (g / 4, g % 4);
            let mask = 1u8 << (4 * h + p);
            for (i, v) in w.iter_mut().enumerate() {
                let low = ((k.qs[32 * h + i] >> (2 * p)) & 3) as i8;
                *v = low - if k.hmask[i] & mask != 0 { 0 } else { 4 };
            }
            let scales = q3k_scales(&k.scales);
            small(SmallScales::new(
                f16_le(k.d),
                [scales[2 * g], scales[2 * g + 1]],
                0.0,
                [0; 2],
            ))
        }
        DType::IQ4_NL => {
            let k = &blocks_of::<BlockIq4Nl>(row).expect("whole blocks")[b];
            w = grid(integers, &k.qs, || iq4_nl_group(k));
            let (d, m) = k.scale_offset();
            plain([d, d], [m; 2])
        }
        DType::MXFP4 => {
            let k = &blocks_of::<BlockMxfp4>(row).expect("whole blocks")[b];
            w = grid(integers, &k.qs, || mxfp4_group(k));
            let (d, m) = k.scale_offset();
            plain([d, d], [m; 2])
        }
        DType::IQ4_XS => {
            let k = &blocks_of::<BlockIq4Xs>(row).expect("whole blocks")[sub];
            w = grid(integers, &k.qs[16 * g..16 * g + 16], || iq4_xs_group(k, g));
            let ls = iq4_xs_scale(k, g) as i8; // -32..32
            small(SmallScales::new(f16_le(k.d), [ls; 2], 0.0, [0; 2]))
        }
        other => panic!("{other} has no packed format"),
    };
    BlockParts {
        w,
        scale,
        offset,
        small,
    }
}

/// A grid type's integers: its `values`, or the codes in `qs`.
#[inline(always)]
fn grid(integers: Integers, qs: &[u8], values: impl FnOnce() -> [i8; BLOCK]) -> [i8; BLOCK] {
    match integers {
        Integers::Values => values(),
        Integers::Codes => codes(qs.try_into().expect("16 bytes")),
    }
}

/// The 4-bit codes of 32 values (low nibbles first).
#[inline(always)]
fn codes(qs: &[u8; 16]) -> [i8; BLOCK] {
    let mut w = [0i8; BLOCK];
    nibbles(qs, &mut w);
    w
}

#[inline(always)]
fn nibbles(qs: &[u8; 16], w: &mut [i8; BLOCK]) {
    for j in 0..16 {
        w[j] = (qs[j] & 0x0F) as i8;
        w[j + 16] = (qs[j] >> 4) as i8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::reference;
    use crate::kernels::test_rows::random_row;

    #[test]
    fn block_parts_rebuild_the_reference_dequantization() {
        for t in crate::packed::kernel::tests::TYPES {
            let n = 512;
            let row = random_row(t, n / t.block_len(), 3);
            let mut want = vec![0.0; n];
            reference::dequantize(t, &row, &mut want).unwrap();
            for b in 0..n / BLOCK {
                let p = block_parts(t, &row, b);
                for i in 0..BLOCK {
                    let got = p.scale[i / 16] * p.w[i] as f32 + p.offset[i / 16];
                    let w = want[b * BLOCK + i];
                    assert!(
                        (got - w).abs() <= 1e-6 * (1.0 + w.abs()),
                        "{t} block {b} value {i}: {got} vs {w}"
                    );
                }
            }
        }
    }
}
