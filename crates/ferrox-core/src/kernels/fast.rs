//! Vectorizable twins of the reference dequantization, and the fused row dot
//! product the forward pass runs on.
//!
//! Invariants:
//! * Every function here produces exactly the bits of its reference twin: the same
//!   f32 operations per value, in the same order (tested at odd lengths). Only the
//!   loop shapes differ, written so LLVM vectorizes them; builds for AVX-512 and
//!   AVX2 are chosen at run time.
//! * `dot_row(t, w, x)` equals `ops::vector::dot(dequantize(t, w), x)` bit for bit:
//!   value `i` of the row is accumulated into lane `i % LANES` in index order and the
//!   lanes are folded the same way. So a row can be dotted fused (decode) or
//!   dequantized once and swept over many tokens (prefill) with identical results.

use crate::blocks::{
    BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0, blocks_of,
    f16_le,
};
use crate::dtype::DType;
use crate::kernels::reference::{self, kquants::scale_min_k4};
use crate::ops::vector::{LANES, fold};

#[inline(always)]
fn q4_0(b: &BlockQ4_0, y: &mut [f32]) {
    let d = f16_le(b.d);
    for j in 0..16 {
        y[j] = d * ((b.qs[j] & 0x0F) as i32 - 8) as f32;
        y[j + 16] = d * ((b.qs[j] >> 4) as i32 - 8) as f32;
    }
}

#[inline(always)]
fn q4_1(b: &BlockQ4_1, y: &mut [f32]) {
    let (d, m) = (f16_le(b.d), f16_le(b.m));
    for j in 0..16 {
        y[j] = d * (b.qs[j] & 0x0F) as f32 + m;
        y[j + 16] = d * (b.qs[j] >> 4) as f32 + m;
    }
}

#[inline(always)]
fn q5_0(b: &BlockQ5_0, y: &mut [f32]) {
    let d = f16_le(b.d);
    let h = u32::from_le_bytes(b.qh);
    for j in 0..16 {
        let lo = ((b.qs[j] & 0x0F) as u32 | (((h >> j) & 1) << 4)) as i32;
        let hi = ((b.qs[j] >> 4) as u32 | (((h >> (j + 16)) & 1) << 4)) as i32;
        y[j] = d * (lo - 16) as f32;
        y[j + 16] = d * (hi - 16) as f32;
    }
}

#[inline(always)]
fn q5_1(b: &BlockQ5_1, y: &mut [f32]) {
    let (d, m) = (f16_le(b.d), f16_le(b.m));
    let h = u32::from_le_bytes(b.qh);
    for j in 0..16 {
        let lo = (b.qs[j] & 0x0F) as u32 | (((h >> j) & 1) << 4);
        let hi = (b.qs[j] >> 4) as u32 | (((h >> (j + 16)) & 1) << 4);
        y[j] = d * lo as f32 + m;
        y[j + 16] = d * hi as f32 + m;
    }
}

#[inline(always)]
fn q8_0(b: &BlockQ8_0, y: &mut [f32]) {
    let d = f16_le(b.d);
    for j in 0..32 {
        y[j] = d * b.qs[j] as f32;
    }
}

#[inline(always)]
fn q4_k(b: &BlockQ4K, y: &mut [f32]) {
    let (d, dmin) = (f16_le(b.d), f16_le(b.dmin));
    for g in 0..8 {
        let (sc, m) = scale_min_k4(g, &b.scales);
        let (dl, ml) = (d * sc as f32, dmin * m as f32);
        let q = &b.qs[32 * (g / 2)..32 * (g / 2) + 32];
        let shift = 4 * (g % 2);
        let yg = &mut y[32 * g..32 * g + 32];
        for l in 0..32 {
            yg[l] = dl * ((q[l] >> shift) & 0x0F) as f32 - ml;
        }
    }
}

#[inline(always)]
fn q5_k(b: &BlockQ5K, y: &mut [f32]) {
    let (d, dmin) = (f16_le(b.d), f16_le(b.dmin));
    for g in 0..8 {
        let (sc, m) = scale_min_k4(g, &b.scales);
        let (dl, ml) = (d * sc as f32, dmin * m as f32);
        let q = &b.qs[32 * (g / 2)..32 * (g / 2) + 32];
        let shift = 4 * (g % 2);
        let yg = &mut y[32 * g..32 * g + 32];
        for l in 0..32 {
            let v = ((q[l] >> shift) & 0x0F) | (((b.qh[l] >> g) & 1) << 4);
            yg[l] = dl * v as f32 - ml;
        }
    }
}

#[inline(always)]
fn q6_k(b: &BlockQ6K, y: &mut [f32]) {
    let d = f16_le(b.d);
    for h in 0..2 {
        let ql = &b.ql[64 * h..64 * h + 64];
        let qh = &b.qh[32 * h..32 * h + 32];
        for k in 0..4 {
            let yk = &mut y[128 * h + 32 * k..128 * h + 32 * k + 32];
            let qlk = &ql[32 * (k % 2)..32 * (k % 2) + 32];
            let (d0, d1) = (
                d * b.scales[8 * h + 2 * k] as f32,
                d * b.scales[8 * h + 2 * k + 1] as f32,
            );
            for l in 0..32 {
                let low = (qlk[l] >> (4 * (k / 2))) & 0x0F;
                let high = (qh[l] >> (2 * k)) & 3;
                let q = (low | (high << 4)) as i32 - 32;
                yk[l] = if l < 16 { d0 } else { d1 } * q as f32;
            }
        }
    }
}

/// Expands `$body` for every block of `$w` decoded into `$buf` (a `[f32; $n]`),
/// for each storage type with a fast decoder; evaluates to false for the others.
/// A macro rather than closures so that everything inlines into the
/// target-feature builds below.
macro_rules! for_each_block {
    ($dtype:expr, $w:expr, |$i:ident, $buf:ident, $n:ident| $body:block) => {{
        macro_rules! run {
            ($block:ty, $len:expr, $decode:ident) => {{
                let blocks: &[$block] = blocks_of($w).expect("row length checked by the caller");
                let mut $buf = [0.0f32; $len];
                let $n = $len;
                for ($i, b) in blocks.iter().enumerate() {
                    $decode(b, &mut $buf);
                    $body
                }
                true
            }};
        }
        match $dtype {
            DType::Q4_0 => run!(BlockQ4_0, 32, q4_0),
            DType::Q4_1 => run!(BlockQ4_1, 32, q4_1),
            DType::Q5_0 => run!(BlockQ5_0, 32, q5_0),
            DType::Q5_1 => run!(BlockQ5_1, 32, q5_1),
            DType::Q8_0 => run!(BlockQ8_0, 32, q8_0),
            DType::Q4_K => run!(BlockQ4K, 256, q4_k),
            DType::Q5_K => run!(BlockQ5K, 256, q5_k),
            DType::Q6_K => run!(BlockQ6K, 256, q6_k),
            _ => false,
        }
    }};
}

#[inline(always)]
fn dequantize_body(dtype: DType, w: &[u8], out: &mut [f32]) {
    let done = for_each_block!(dtype, w, |i, buf, n| {
        out[n * i..n * i + n].copy_from_slice(&buf);
    });
    if !done {
        reference::dequantize(dtype, w, out).expect("row length checked by the caller");
    }
}

#[inline(always)]
fn accumulate(acc: &mut [f32; LANES], v: &[f32], x: &[f32]) {
    for (cv, cx) in v.chunks_exact(LANES).zip(x.chunks_exact(LANES)) {
        for l in 0..LANES {
            acc[l] += cv[l] * cx[l];
        }
    }
}

#[inline(always)]
fn dot_row_body(dtype: DType, w: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let done = for_each_block!(dtype, w, |i, buf, n| {
        accumulate(&mut acc, &buf, &x[n * i..n * i + n]);
    });
    if done {
        return fold(acc);
    }
    let mut row = vec![0.0f32; x.len()];
    reference::dequantize(dtype, w, &mut row).expect("row length checked by the caller");
    crate::ops::vector::dot(&row, x)
}

dispatched!(
    /// Dequantizes one row (`out.len()` values of `dtype` in `w`), bit-exact with
    /// [`reference::dequantize`]. Lengths must already be checked.
    pub fn dequantize_row / dequantize_row_at = dequantize_body(dtype: DType, w: &[u8], out: &mut [f32]) -> ()
);

dispatched!(
    /// The compiler-vectorized build of [`dot_row`].
    pub fn dot_row_autovec / dot_row_autovec_at = dot_row_body(dtype: DType, w: &[u8], x: &[f32]) -> f32
);

/// `dot(dequantize(w), x)` without materializing the row, on the build of the
/// process's kernel level: hand-written AVX-512 where it runs, else the
/// compiler-vectorized build; the same bits either way.
///
/// # Panics
/// Unless `w` holds exactly `x.len()` values of `dtype` in whole blocks (the
/// AVX-512 build reads `x` through raw pointers, so this is checked in every
/// build).
pub fn dot_row(dtype: DType, w: &[u8], x: &[f32]) -> f32 {
    dot_row_run(crate::isa::active(), dtype, w, x)
}

/// [`dot_row`] on the build of `level` (panics if this CPU cannot run it).
pub fn dot_row_at(level: crate::isa::Level, dtype: DType, w: &[u8], x: &[f32]) -> f32 {
    level.assert_runs_here();
    dot_row_run(level, dtype, w, x)
}

fn dot_row_run(level: crate::isa::Level, dtype: DType, w: &[u8], x: &[f32]) -> f32 {
    assert_eq!(
        dtype.row_bytes(x.len()),
        Some(w.len()),
        "a row of {} values of {dtype:?} in {} bytes",
        x.len(),
        w.len()
    );
    #[cfg(target_arch = "x86_64")]
    if level.has_avx512() {
        // SAFETY: the level runs here (the callers' contract); lengths checked above.
        if let Some(v) = unsafe { super::x86::dot_row(dtype, w, x) } {
            return v;
        }
    }
    dot_row_autovec::run(level, dtype, w, x)
}

/// The portable build of [`dot_row`], for tests.
pub fn dot_row_portable(dtype: DType, w: &[u8], x: &[f32]) -> f32 {
    dot_row_body(dtype, w, x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::reference::quantize;
    use crate::kernels::test_rows::{random, random_row};

    /// The AVX-512 build reads `x` through raw pointers: a row whose byte length
    /// does not match `x` panics at every level instead.
    #[test]
    fn a_mismatched_row_panics_at_every_level() {
        let w = random_row(DType::Q4_K, 2, 3);
        for level in crate::isa::Level::supported() {
            for n in [256, 300, 768] {
                let x = vec![1.0f32; n];
                let r = std::panic::catch_unwind(|| dot_row_at(level, DType::Q4_K, &w, &x));
                assert!(r.is_err(), "{level:?} {n} values");
            }
            let x = vec![1.0f32; 512];
            dot_row_at(level, DType::Q4_K, &w, &x);
        }
    }

    /// Every build this CPU runs, not only the active one.
    #[test]
    fn fast_dequantization_and_fused_dots_equal_the_reference_bit_for_bit() {
        let types = [
            DType::Q4_0,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q5_1,
            DType::Q8_0,
            DType::Q2_K,
            DType::Q3_K,
            DType::Q4_K,
            DType::Q5_K,
            DType::Q6_K,
        ];
        for t in types {
            for nb in [1usize, 3, 15, 17, 33] {
                let w = random_row(t, nb, 7 + nb as u64);
                let n = nb * t.block_len();
                let mut want = vec![0.0; n];
                reference::dequantize(t, &w, &mut want).unwrap();
                let x: Vec<f32> = random(n, 99)
                    .iter()
                    .map(|&b| b as f32 / 128.0 - 1.0)
                    .collect();
                let portable = dot_row_portable(t, &w, &x);
                assert_eq!(
                    portable.to_bits(),
                    crate::ops::vector::dot_portable(&want, &x).to_bits(),
                    "{t} x{nb} dot"
                );
                for level in crate::isa::Level::supported() {
                    let mut got = vec![0.0; n];
                    dequantize_row_at(level, t, &w, &mut got);
                    assert!(
                        want.iter()
                            .zip(&got)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{t} x{nb} dequantize {level:?}"
                    );
                    assert_eq!(
                        dot_row_at(level, t, &w, &x).to_bits(),
                        portable.to_bits(),
                        "{t} x{nb} fused dot {level:?}"
                    );
                    assert_eq!(
                        dot_row_autovec_at(level, t, &w, &x).to_bits(),
                        portable.to_bits(),
                        "{t} x{nb} vectorized dot {level:?}"
                    );
                }
            }
        }
        for t in [DType::F32, DType::F16, DType::BF16] {
            let vals: Vec<f32> = (0..67).map(|i| i as f32 * 0.37 - 9.0).collect();
            let w = quantize(t, &vals).unwrap();
            let mut want = vec![0.0; 67];
            reference::dequantize(t, &w, &mut want).unwrap();
            assert_eq!(
                dot_row(t, &w, &vals).to_bits(),
                crate::ops::vector::dot(&want, &vals).to_bits(),
                "{t}"
            );
        }
    }
}
