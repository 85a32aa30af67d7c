//! Scalar reference dot products of K-quant weights with Q8_K activations.
//!
//! Invariants:
//! * Within a block every product of quants is summed exactly in `i32` (a block
//!   holds 256 products of at most 127 * 63 each: no overflow), weighted by the
//!   integer group scales; floats enter once per block:
//!   `sum += (d_w * d_a) * isum - (dmin_w * d_a) * mins`.
//! * Blocks are folded into the `f32` sum in block order. SIMD twins must give
//!   the same integers per block; their float folding is tested within tolerance.
//! * Minimums are applied through the activation's `bsums`, as ggml does.

use super::kquants::{q3k_scales, q6k_value, scale_min_k4};
use crate::blocks::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, f16_le};

/// Dot product of Q2_K weights with Q8_K activations.
pub fn dot_q2_k_q8_k(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let (mut isum, mut mins) = (0i32, 0i32);
        for g in 0..16 {
            let (h, p, off) = (g / 8, (g % 8) / 2, 16 * (g % 2));
            let mut gsum = 0i32;
            for l in 0..16 {
                let q = ((x.qs[32 * h + off + l] >> (2 * p)) & 3) as i32;
                gsum += q * y.qs[16 * g + l] as i32;
            }
            isum += (x.scales[g] & 0x0F) as i32 * gsum;
            mins += (x.scales[g] >> 4) as i32 * y.bsums[g] as i32;
        }
        sum += f16_le(x.d) * y.d * isum as f32 - f16_le(x.dmin) * y.d * mins as f32;
    }
    sum
}

/// Dot product of Q3_K weights with Q8_K activations.
pub fn dot_q3_k_q8_k(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let scales = q3k_scales(&x.scales);
        let mut isum = 0i32;
        for (g, &sc) in scales.iter().enumerate() {
            let (h, p, off) = (g / 8, (g % 8) / 2, 16 * (g % 2));
            let mask = 1u8 << (4 * h + p);
            let mut gsum = 0i32;
            for l in 0..16 {
                let low = ((x.qs[32 * h + off + l] >> (2 * p)) & 3) as i32;
                let q = low - if x.hmask[off + l] & mask != 0 { 0 } else { 4 };
                gsum += q * y.qs[16 * g + l] as i32;
            }
            isum += sc as i32 * gsum;
        }
        sum += f16_le(x.d) * y.d * isum as f32;
    }
    sum
}

/// Dot product of Q4_K weights with Q8_K activations.
pub fn dot_q4_k_q8_k(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let (mut isum, mut mins) = (0i32, 0i32);
        for g in 0..8 {
            let (sc, m) = scale_min_k4(g, &x.scales);
            let shift = 4 * (g % 2);
            let mut gsum = 0i32;
            for l in 0..32 {
                let q = ((x.qs[32 * (g / 2) + l] >> shift) & 0x0F) as i32;
                gsum += q * y.qs[32 * g + l] as i32;
            }
            isum += sc as i32 * gsum;
            mins += m as i32 * (y.bsums[2 * g] as i32 + y.bsums[2 * g + 1] as i32);
        }
        sum += f16_le(x.d) * y.d * isum as f32 - f16_le(x.dmin) * y.d * mins as f32;
    }
    sum
}

/// Dot product of Q5_K weights with Q8_K activations.
pub fn dot_q5_k_q8_k(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let (mut isum, mut mins) = (0i32, 0i32);
        for g in 0..8 {
            let (sc, m) = scale_min_k4(g, &x.scales);
            let shift = 4 * (g % 2);
            let mut gsum = 0i32;
            for l in 0..32 {
                let low = (x.qs[32 * (g / 2) + l] >> shift) & 0x0F;
                let q = (low | (((x.qh[l] >> g) & 1) << 4)) as i32;
                gsum += q * y.qs[32 * g + l] as i32;
            }
            isum += sc as i32 * gsum;
            mins += m as i32 * (y.bsums[2 * g] as i32 + y.bsums[2 * g + 1] as i32);
        }
        sum += f16_le(x.d) * y.d * isum as f32 - f16_le(x.dmin) * y.d * mins as f32;
    }
    sum
}

/// Dot product of Q6_K weights with Q8_K activations.
pub fn dot_q6_k_q8_k(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut isum = 0i32;
        for g in 0..16 {
            let gsum: i32 = (0..16)
                .map(|l| q6k_value(x, 16 * g + l) * y.qs[16 * g + l] as i32)
                .sum();
            isum += x.scales[g] as i32 * gsum;
        }
        sum += f16_le(x.d) * y.d * isum as f32;
    }
    sum
}
