//! Scalar reference kernels for the 32-value block family: Q4_0, Q4_1, Q5_0, Q5_1,
//! Q8_0, Q8_1.
//!
//! Invariants:
//! * Dequantization does the same f32 operations, in the same order, as the `gguf`
//!   Python package (`d * q`, then `+ m`), so it is bit-exact against
//!   `shared/golden/dequant-*.jsonl`. No fused multiply-add.
//! * Quantization follows ggml's `quantize_row_*_ref`: scale from the value of
//!   largest magnitude, f16 scales, ggml's rounding (`roundf` for Q8, truncation of
//!   `x + 8.5` / `x + 16.5` for the 4/5-bit types).
//! * Dot products accumulate each block's integer products exactly in `i32`, then
//!   fold blocks into an `f32` sum in block order (a fixed order: the SIMD twins
//!   must produce the same value for the same blocks).

use crate::blocks::{
    BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, f16_le, f16_le_bytes,
};
use crate::dtype::QK;

const HALF: usize = QK / 2;

#[inline(always)]
fn nibbles(qs: &[u8; HALF], j: usize) -> (i32, i32) {
    ((qs[j] & 0x0F) as i32, (qs[j] >> 4) as i32)
}

#[inline(always)]
fn fifth_bits(qh: [u8; 4], j: usize) -> (i32, i32) {
    let h = u32::from_le_bytes(qh);
    (
        (((h >> j) & 1) << 4) as i32,
        (((h >> (j + HALF)) & 1) << 4) as i32,
    )
}

/// Dequantizes Q4_0 blocks into `out` (`out.len() == 32 * blocks.len()`).
pub fn dequantize_q4_0(blocks: &[BlockQ4_0], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_le(b.d);
        for j in 0..HALF {
            let (lo, hi) = nibbles(&b.qs, j);
            y[j] = d * (lo - 8) as f32;
            y[j + HALF] = d * (hi - 8) as f32;
        }
    }
}

/// Dequantizes Q4_1 blocks into `out`.
pub fn dequantize_q4_1(blocks: &[BlockQ4_1], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (f16_le(b.d), f16_le(b.m));
        for j in 0..HALF {
            let (lo, hi) = nibbles(&b.qs, j);
            y[j] = d * lo as f32 + m;
            y[j + HALF] = d * hi as f32 + m;
        }
    }
}

/// Dequantizes Q5_0 blocks into `out`.
pub fn dequantize_q5_0(blocks: &[BlockQ5_0], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_le(b.d);
        for j in 0..HALF {
            let (lo, hi) = nibbles(&b.qs, j);
            let (hl, hh) = fifth_bits(b.qh, j);
            y[j] = d * ((lo | hl) - 16) as f32;
            y[j + HALF] = d * ((hi | hh) - 16) as f32;
        }
    }
}

/// Dequantizes Q5_1 blocks into `out`.
pub fn dequantize_q5_1(blocks: &[BlockQ5_1], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (f16_le(b.d), f16_le(b.m));
        for j in 0..HALF {
            let (lo, hi) = nibbles(&b.qs, j);
            let (hl, hh) = fifth_bits(b.qh, j);
            y[j] = d * (lo | hl) as f32 + m;
            y[j + HALF] = d * (hi | hh) as f32 + m;
        }
    }
}

/// Dequantizes Q8_0 blocks into `out`.
pub fn dequantize_q8_0(blocks: &[BlockQ8_0], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_le(b.d);
        for (yj, &q) in y.iter_mut().zip(&b.qs) {
            *yj = d * q as f32;
        }
    }
}

/// Dequantizes Q8_1 blocks into `out` (`s` is not needed to recover values).
pub fn dequantize_q8_1(blocks: &[BlockQ8_1], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_le(b.d);
        for (yj, &q) in y.iter_mut().zip(&b.qs) {
            *yj = d * q as f32;
        }
    }
}

/// The value of largest magnitude in `x` (first one on ties) and its magnitude.
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter()
        .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

/// Quantizes `x` (a multiple of 32 values) to Q4_0.
pub fn quantize_q4_0(x: &[f32], out: &mut [BlockQ4_0]) {
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let (max, _) = signed_absmax(xb);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16_le_bytes(d);
        for j in 0..HALF {
            let lo = ((xb[j] * id + 8.5) as i32).min(15) as u8;
            let hi = ((xb[j + HALF] * id + 8.5) as i32).min(15) as u8;
            b.qs[j] = lo | (hi << 4);
        }
    }
}

/// Quantizes `x` to Q4_1.
pub fn quantize_q4_1(x: &[f32], out: &mut [BlockQ4_1]) {
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16_le_bytes(d);
        b.m = f16_le_bytes(min);
        for j in 0..HALF {
            let lo = (((xb[j] - min) * id + 0.5) as i32).min(15) as u8;
            let hi = (((xb[j + HALF] - min) * id + 0.5) as i32).min(15) as u8;
            b.qs[j] = lo | (hi << 4);
        }
    }
}

/// Quantizes `x` to Q5_0.
pub fn quantize_q5_0(x: &[f32], out: &mut [BlockQ5_0]) {
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let (max, _) = signed_absmax(xb);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16_le_bytes(d);
        let mut qh = 0u32;
        for j in 0..HALF {
            let lo = ((xb[j] * id + 16.5) as i32).min(31) as u32;
            let hi = ((xb[j + HALF] * id + 16.5) as i32).min(31) as u32;
            b.qs[j] = ((lo & 0x0F) | ((hi & 0x0F) << 4)) as u8;
            qh |= ((lo >> 4) & 1) << j;
            qh |= ((hi >> 4) & 1) << (j + HALF);
        }
        b.qh = qh.to_le_bytes();
    }
}

/// Quantizes `x` to Q5_1.
pub fn quantize_q5_1(x: &[f32], out: &mut [BlockQ5_1]) {
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16_le_bytes(d);
        b.m = f16_le_bytes(min);
        let mut qh = 0u32;
        for j in 0..HALF {
            let lo = (((xb[j] - min) * id + 0.5) as i32).min(31) as u32;
            let hi = (((xb[j + HALF] - min) * id + 0.5) as i32).min(31) as u32;
            b.qs[j] = ((lo & 0x0F) | ((hi & 0x0F) << 4)) as u8;
            qh |= ((lo >> 4) & 1) << j;
            qh |= ((hi >> 4) & 1) << (j + HALF);
        }
        b.qh = qh.to_le_bytes();
    }
}

/// Quantizes `x` to Q8_0 (the activation type of Q4_0, Q5_0 and Q8_0 weights).
pub fn quantize_q8_0(x: &[f32], out: &mut [BlockQ8_0]) {
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let (_, amax) = signed_absmax(xb);
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16_le_bytes(d);
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = (v * id).round() as i8;
        }
    }
}

/// Quantizes `x` to Q8_1 (the activation type of Q4_1 and Q5_1 weights).
pub fn quantize_q8_1(x: &[f32], out: &mut [BlockQ8_1]) {
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let (_, amax) = signed_absmax(xb);
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = (v * id).round() as i8;
            sum += *q as i32;
        }
        b.d = f16_le_bytes(d);
        b.s = f16_le_bytes(sum as f32 * d);
    }
}

/// Dot product of Q4_0 weights with Q8_0 activations.
pub fn dot_q4_0_q8_0(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for j in 0..HALF {
            let (lo, hi) = nibbles(&x.qs, j);
            sumi += (lo - 8) * y.qs[j] as i32 + (hi - 8) * y.qs[j + HALF] as i32;
        }
        sum += sumi as f32 * (f16_le(x.d) * f16_le(y.d));
    }
    sum
}

/// Dot product of Q4_1 weights with Q8_1 activations: `d_w d_a sum(q_w q_a) + m_w s_a`.
pub fn dot_q4_1_q8_1(w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for j in 0..HALF {
            let (lo, hi) = nibbles(&x.qs, j);
            sumi += lo * y.qs[j] as i32 + hi * y.qs[j + HALF] as i32;
        }
        sum += sumi as f32 * (f16_le(x.d) * f16_le(y.d)) + f16_le(x.m) * f16_le(y.s);
    }
    sum
}

/// Dot product of Q5_0 weights with Q8_0 activations.
pub fn dot_q5_0_q8_0(w: &[BlockQ5_0], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for j in 0..HALF {
            let (lo, hi) = nibbles(&x.qs, j);
            let (hl, hh) = fifth_bits(x.qh, j);
            sumi += ((lo | hl) - 16) * y.qs[j] as i32 + ((hi | hh) - 16) * y.qs[j + HALF] as i32;
        }
        sum += sumi as f32 * (f16_le(x.d) * f16_le(y.d));
    }
    sum
}

/// Dot product of Q5_1 weights with Q8_1 activations.
pub fn dot_q5_1_q8_1(w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for j in 0..HALF {
            let (lo, hi) = nibbles(&x.qs, j);
            let (hl, hh) = fifth_bits(x.qh, j);
            sumi += (lo | hl) * y.qs[j] as i32 + (hi | hh) * y.qs[j + HALF] as i32;
        }
        sum += sumi as f32 * (f16_le(x.d) * f16_le(y.d)) + f16_le(x.m) * f16_le(y.s);
    }
    sum
}

/// Dot product of Q8_0 weights with Q8_0 activations.
pub fn dot_q8_0_q8_0(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let sumi: i32 =
            x.qs.iter()
                .zip(&y.qs)
                .map(|(&p, &q)| p as i32 * q as i32)
                .sum();
        sum += sumi as f32 * (f16_le(x.d) * f16_le(y.d));
    }
    sum
}
