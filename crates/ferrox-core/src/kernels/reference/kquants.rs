//! Scalar reference dequantization for the 256-value K-quant family (Q2_K .. Q6_K),
//! and quantization of activations to Q8_K.
//!
//! Invariants:
//! * Dequantization does the f32 operations of the `gguf` Python package in the
//!   same order: the group scale first (`d * sc`, `dmin * m`), then `scale * q`,
//!   then `- min`. No fused multiply-add. Bit-exact against the golden files.
//! * Scale unpacking (`scale_min_k4`, `q3k_scales`) is the one place that knows
//!   the packed 6-bit layouts; the dot products in `kdot.rs` reuse it.
//! * Q8_K quantization follows ggml's `quantize_row_q8_K_ref`: the scale maps
//!   the signed value of largest magnitude to -127 (round half to even), and
//!   `bsums` are exact sums of 16 quants.

use crate::blocks::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, K_SCALE_SIZE, f16_le,
};
use crate::dtype::QK_K;

/// The 6-bit scale and min of group `j` (0..8) of a Q4_K / Q5_K block.
#[inline(always)]
pub fn scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The 16 signed scales (already offset by -32) of a Q3_K block.
#[inline(always)]
pub fn q3k_scales(packed: &[u8; K_SCALE_SIZE]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let low = if i < 8 {
            packed[i] & 0x0F
        } else {
            packed[i - 8] >> 4
        };
        let high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
        *o = ((low | (high << 4)) as i8) - 32;
    }
    out
}

/// Dequantizes Q2_K blocks into `out` (`out.len() == 256 * blocks.len()`).
#[inline]
pub fn dequantize_q2_k(blocks: &[BlockQ2K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_le(b.d), f16_le(b.dmin));
        for (g, yg) in y.chunks_exact_mut(16).enumerate() {
            // Group g: half h = g / 8 of the block, 2-bit plane p = (g % 8) / 2,
            // bytes 16 * (g % 2) .. +16 of that half's 32 quant bytes.
            let (h, p, off) = (g / 8, (g % 8) / 2, 16 * (g % 2));
            let sc = b.scales[g];
            let dl = d * (sc & 0x0F) as f32;
            let ml = dmin * (sc >> 4) as f32;
            for (l, v) in yg.iter_mut().enumerate() {
                let q = (b.qs[32 * h + off + l] >> (2 * p)) & 3;
                *v = dl * q as f32 - ml;
            }
        }
    }
}

/// Dequantizes Q3_K blocks into `out`.
#[inline]
pub fn dequantize_q3_k(blocks: &[BlockQ3K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_le(b.d);
        let scales = q3k_scales(&b.scales);
        for (g, yg) in y.chunks_exact_mut(16).enumerate() {
            let (h, p, off) = (g / 8, (g % 8) / 2, 16 * (g % 2));
            let mask = 1u8 << (4 * h + p);
            let dl = d * scales[g] as f32;
            for (l, v) in yg.iter_mut().enumerate() {
                let low = ((b.qs[32 * h + off + l] >> (2 * p)) & 3) as i8;
                let q = low - if b.hmask[off + l] & mask != 0 { 0 } else { 4 };
                *v = dl * q as f32;
            }
        }
    }
}

/// Dequantizes Q4_K blocks into `out`.
pub fn dequantize_q4_k(blocks: &[BlockQ4K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_le(b.d), f16_le(b.dmin));
        for (g, yg) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = scale_min_k4(g, &b.scales);
            let (dl, ml) = (d * sc as f32, dmin * m as f32);
            let bytes = &b.qs[32 * (g / 2)..32 * (g / 2) + 32];
            let shift = 4 * (g % 2);
            for (v, &q) in yg.iter_mut().zip(bytes) {
                *v = dl * ((q >> shift) & 0x0F) as f32 - ml;
            }
        }
    }
}

/// Dequantizes Q5_K blocks into `out`.
pub fn dequantize_q5_k(blocks: &[BlockQ5K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_le(b.d), f16_le(b.dmin));
        for (g, yg) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = scale_min_k4(g, &b.scales);
            let (dl, ml) = (d * sc as f32, dmin * m as f32);
            let bytes = &b.qs[32 * (g / 2)..32 * (g / 2) + 32];
            let shift = 4 * (g % 2);
            for (l, (v, &q)) in yg.iter_mut().zip(bytes).enumerate() {
                let high = ((b.qh[l] >> g) & 1) << 4;
                *v = dl * (((q >> shift) & 0x0F) | high) as f32 - ml;
            }
        }
    }
}

/// The 6-bit quant `i` (0..256) of a Q6_K block, offset to -32..31.
#[inline(always)]
pub fn q6k_value(b: &BlockQ6K, i: usize) -> i32 {
    // Values come in two halves of 128; within a half, quarter k (0..4) of 32 values
    // takes nibble k / 2 of ql[64 h + 32 (k % 2) + l] and bits 2k..2k+2 of qh[32 h + l].
    let (h, r) = (i / 128, i % 128);
    let (k, l) = (r / 32, r % 32);
    let low = (b.ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0F;
    let high = (b.qh[32 * h + l] >> (2 * k)) & 3;
    (low | (high << 4)) as i32 - 32
}

/// Dequantizes Q6_K blocks into `out`.
pub fn dequantize_q6_k(blocks: &[BlockQ6K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_le(b.d);
        for (g, yg) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * b.scales[g] as f32;
            for (l, v) in yg.iter_mut().enumerate() {
                *v = dl * q6k_value(b, 16 * g + l) as f32;
            }
        }
    }
}

/// Quantizes `x` (a multiple of 256 values) to Q8_K.
pub fn quantize_q8_k(x: &[f32], out: &mut [BlockQ8K]) {
    for (xb, b) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *b = BlockQ8K::default();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = ((iscale * v).round_ties_even() as i32).min(127) as i8;
        }
        for (s, group) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
            *s = group.iter().map(|&q| q as i16).sum();
        }
        b.d = 1.0 / iscale;
    }
}

/// Dequantizes Q8_K blocks into `out`.
pub fn dequantize_q8_k(blocks: &[BlockQ8K], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        for (v, &q) in y.iter_mut().zip(&b.qs) {
            *v = b.d * q as f32;
        }
    }
}
