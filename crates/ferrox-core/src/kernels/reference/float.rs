//! Scalar reference kernels for float storage: F32, F16, BF16 (little-endian bytes).
//!
//! Invariants: conversions to f32 are exact (every f16 and bf16 is an f32); dot
//! products with f32 activations accumulate in f32 in index order.

#[inline(always)]
fn pairs(bytes: &[u8]) -> impl Iterator<Item = u16> + '_ {
    bytes
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
}

/// Copies little-endian f32 bytes into `out`.
pub fn f32_from_le(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// Widens IEEE half values to f32.
pub fn f16_to_f32(bytes: &[u8], out: &mut [f32]) {
    for (o, h) in out.iter_mut().zip(pairs(bytes)) {
        *o = half::f16::from_bits(h).to_f32();
    }
}

/// Widens bfloat16 values to f32 (the upper half of the f32 bits).
pub fn bf16_to_f32(bytes: &[u8], out: &mut [f32]) {
    for (o, h) in out.iter_mut().zip(pairs(bytes)) {
        *o = f32::from_bits((h as u32) << 16);
    }
}

/// Dot product of little-endian f32 weights with `x`.
pub fn dot_f32(w: &[u8], x: &[f32]) -> f32 {
    w.chunks_exact(4)
        .zip(x)
        .map(|(b, &v)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * v)
        .fold(0.0, |s, p| s + p)
}

/// Dot product of f16 weights with `x`.
pub fn dot_f16(w: &[u8], x: &[f32]) -> f32 {
    pairs(w)
        .zip(x)
        .map(|(h, &v)| half::f16::from_bits(h).to_f32() * v)
        .fold(0.0, |s, p| s + p)
}

/// Dot product of bf16 weights with `x`.
pub fn dot_bf16(w: &[u8], x: &[f32]) -> f32 {
    pairs(w)
        .zip(x)
        .map(|(h, &v)| f32::from_bits((h as u32) << 16) * v)
        .fold(0.0, |s, p| s + p)
}
