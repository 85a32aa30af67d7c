//! The non-linear 4-bit types IQ4_NL and IQ4_XS (ggml's `dequantize_row_iq4_nl`,
//! `dequantize_row_iq4_xs` and their dots with Q8_0 / Q8_K activations).
//!
//! Each nibble indexes [`IQ4_NL_VALUES`]; nibble `j` of byte `i` of a 32-value
//! group is value `i` (low) or `i + 16` (high).

use crate::blocks::{BlockIq4Nl, BlockIq4Xs, BlockQ8_0, BlockQ8K, IQ4_NL_VALUES, f16_le};
use crate::dtype::{QK, QK_K};

/// The `values` of one 32-value group of nibbles (IQ4_NL's grid, MXFP4's
/// doubled E2M1 values): nibble `j` of byte `i` is value `i` (low) or `i + 16`.
pub(crate) fn nibble_values(qs: &[u8], values: &[i8; 16]) -> [i8; QK] {
    let mut w = [0i8; QK];
    for (i, &q) in qs.iter().enumerate() {
        w[i] = values[(q & 0x0F) as usize];
        w[i + 16] = values[(q >> 4) as usize];
    }
    w
}

fn grid(qs: &[u8]) -> [i8; QK] {
    nibble_values(qs, &IQ4_NL_VALUES)
}

/// The integer dot of one 32-value group of weights with a Q8_0 block's values.
pub(crate) fn group_dot(w: &[i8; QK], q: &[i8; QK]) -> i32 {
    w.iter().zip(q).map(|(&p, &q)| p as i32 * q as i32).sum()
}

/// The signed scale (`ls - 32`) of group `g` of an IQ4_XS block.
#[inline]
pub fn iq4_xs_scale(b: &BlockIq4Xs, g: usize) -> i32 {
    let low = (b.scales_l[g / 2] >> (4 * (g % 2))) & 0x0F;
    let high = (u16::from_le_bytes(b.scales_h) >> (2 * g)) & 3;
    (low as i32 | (high as i32) << 4) - 32
}

/// Grid integers of group `g` (32 values) of an IQ4_XS block.
#[inline]
pub fn iq4_xs_group(b: &BlockIq4Xs, g: usize) -> [i8; QK] {
    grid(&b.qs[16 * g..16 * g + 16])
}

/// Grid integers of an IQ4_NL block.
#[inline]
pub fn iq4_nl_group(b: &BlockIq4Nl) -> [i8; QK] {
    grid(&b.qs)
}

/// Quantizes `x` (whole 32-value blocks) to IQ4_NL: `d` maps the block's
/// largest magnitude onto the grid's end (-127), then each value takes the
/// nearest grid point. A valid encoding, simpler than ggml's scale search (it is
/// for making test models, not for shipping weights).
pub fn quantize_iq4_nl(x: &[f32], out: &mut [BlockIq4Nl]) {
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let max = xb
            .iter()
            .copied()
            .fold(0.0f32, |m, v| if v.abs() > m.abs() { v } else { m });
        let d = max / IQ4_NL_VALUES[0] as f32;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        let nearest = |v: f32| {
            let t = v * id;
            (0..16)
                .min_by(|&a, &c| {
                    let (ea, ec) = (
                        (t - IQ4_NL_VALUES[a] as f32).abs(),
                        (t - IQ4_NL_VALUES[c] as f32).abs(),
                    );
                    ea.total_cmp(&ec)
                })
                .expect("16 grid points") as u8
        };
        b.d = half::f16::from_f32(d).to_bits().to_le_bytes();
        for i in 0..16 {
            b.qs[i] = nearest(xb[i]) | nearest(xb[i + 16]) << 4;
        }
    }
}

/// Dequantizes IQ4_NL blocks into `out`.
#[inline]
pub fn dequantize_iq4_nl(blocks: &[BlockIq4Nl], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_le(b.d);
        for (v, &q) in y.iter_mut().zip(&iq4_nl_group(b)) {
            *v = d * q as f32;
        }
    }
}

/// Dequantizes IQ4_XS blocks into `out`.
#[inline]
pub fn dequantize_iq4_xs(blocks: &[BlockIq4Xs], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_le(b.d);
        for (g, yg) in y.chunks_exact_mut(QK).enumerate() {
            let dl = d * iq4_xs_scale(b, g) as f32;
            for (v, &q) in yg.iter_mut().zip(&iq4_xs_group(b, g)) {
                *v = dl * q as f32;
            }
        }
    }
}

/// IQ4_NL weights times Q8_0 activations.
pub fn dot_iq4_nl_q8_0(w: &[BlockIq4Nl], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let sumi = group_dot(&iq4_nl_group(x), &y.qs);
        sum += sumi as f32 * (f16_le(x.d) * f16_le(y.d));
    }
    sum
}

/// IQ4_XS weights times Q8_K activations.
pub fn dot_iq4_xs_q8_k(w: &[BlockIq4Xs], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for g in 0..QK_K / QK {
            let dot: i32 = iq4_xs_group(x, g)
                .iter()
                .zip(&y.qs[QK * g..QK * g + QK])
                .map(|(&p, &q)| p as i32 * q as i32)
                .sum();
            sumi += iq4_xs_scale(x, g) * dot;
        }
        sum += f16_le(x.d) * y.d * sumi as f32;
    }
    sum
}
