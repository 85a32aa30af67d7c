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
    BlockIq4Nl, BlockIq4Xs, BlockMxfp4, BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K,
    BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0, blocks_of, f16_le,
};
use crate::dtype::DType;
use crate::kernels::reference::{self, iquants, kquants, kquants::scale_min_k4};
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

// The remaining block types decode through their reference loops, one block at a
// time (the same operations, so the same bits), inlined into each build.
#[inline(always)]
fn q2_k(b: &BlockQ2K, y: &mut [f32]) {
    kquants::dequantize_q2_k(std::slice::from_ref(b), y);
}

#[inline(always)]
fn q3_k(b: &BlockQ3K, y: &mut [f32]) {
    kquants::dequantize_q3_k(std::slice::from_ref(b), y);
}

#[inline(always)]
fn iq4_nl(b: &BlockIq4Nl, y: &mut [f32]) {
    iquants::dequantize_iq4_nl(std::slice::from_ref(b), y);
}

#[inline(always)]
fn mxfp4(b: &BlockMxfp4, y: &mut [f32]) {
    crate::kernels::reference::mxfp4::dequantize_mxfp4(std::slice::from_ref(b), y);
}

#[inline(always)]
fn iq4_xs(b: &BlockIq4Xs, y: &mut [f32]) {
    iquants::dequantize_iq4_xs(std::slice::from_ref(b), y);
}

/// The f32 of IEEE half bits `h`: exactly `half::f16::to_f32` (NaNs quieted, as
/// F16C does), written without branches so that loops of it vectorize.
#[inline(always)]
pub(crate) fn f16_value(h: u16) -> f32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7FFF;
    // Normal: rebias the exponent by 127 - 15.
    let normal = (em << 13) + (112 << 23);
    // Infinity or NaN (quiet bit set on NaNs).
    let special = (em << 13) | 0x7F80_0000 | if em > 0x7C00 { 0x0040_0000 } else { 0 };
    // Zero or subnormal: em * 2^-24, exact in f32.
    let small = (em as f32 * f32::from_bits(0x3380_0000)).to_bits();
    let bits = if em >= 0x7C00 {
        special
    } else if em < 0x0400 {
        small
    } else {
        normal
    };
    f32::from_bits(sign | bits)
}

/// The f32 of bfloat16 bits `h` (its upper half).
#[inline(always)]
fn bf16_value(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// The f32 of one stored float value (`bytes` holds exactly its bytes).
#[inline(always)]
fn float_value<const F: u8>(bytes: &[u8]) -> f32 {
    match F {
        FLOAT32 => f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
        FLOAT16 => f16_value(u16::from_le_bytes([bytes[0], bytes[1]])),
        _ => bf16_value(u16::from_le_bytes([bytes[0], bytes[1]])),
    }
}

/// Bytes of one stored float value.
const fn float_size(f: u8) -> usize {
    if f == FLOAT32 { 4 } else { 2 }
}

const FLOAT32: u8 = 0;
const FLOAT16: u8 = 1;
const BFLOAT16: u8 = 2;

/// Expands `$run!(F)` for the float storage types; evaluates to false for others.
macro_rules! by_float {
    ($dtype:expr, $run:ident) => {
        match $dtype {
            DType::F32 => $run!(FLOAT32),
            DType::F16 => $run!(FLOAT16),
            DType::BF16 => $run!(BFLOAT16),
            _ => false,
        }
    };
}

/// Decodes `LANES` float values from `bytes` (exactly their bytes).
#[inline(always)]
fn float_chunk<const F: u8>(bytes: &[u8]) -> [f32; LANES] {
    let size = float_size(F);
    let mut v = [0.0f32; LANES];
    for (o, b) in v.iter_mut().zip(bytes.chunks_exact(size)) {
        *o = float_value::<F>(b);
    }
    v
}

#[inline(always)]
fn float_dequantize<const F: u8>(w: &[u8], out: &mut [f32]) -> bool {
    let size = float_size(F);
    let mut chunks = out.chunks_exact_mut(LANES);
    for (o, b) in (&mut chunks).zip(w.chunks_exact(size * LANES)) {
        o.copy_from_slice(&float_chunk::<F>(b));
    }
    let done = out.len() / LANES * LANES;
    for (o, b) in out[done..]
        .iter_mut()
        .zip(w[size * done..].chunks_exact(size))
    {
        *o = float_value::<F>(b);
    }
    true
}

/// `dot(row, x)` for a float row, value by value into the lanes of `dot`.
#[inline(always)]
fn float_dot<const F: u8>(w: &[u8], x: &[f32], acc: &mut [f32; LANES]) -> bool {
    let size = float_size(F);
    let whole = x.len() / LANES * LANES;
    for (b, cx) in w
        .chunks_exact(size * LANES)
        .zip(x[..whole].chunks_exact(LANES))
    {
        let v = float_chunk::<F>(b);
        for l in 0..LANES {
            acc[l] += v[l] * cx[l];
        }
    }
    for (l, (b, &xv)) in w[size * whole..]
        .chunks_exact(size)
        .zip(&x[whole..])
        .enumerate()
    {
        acc[l] += float_value::<F>(b) * xv;
    }
    true
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
            DType::Q2_K => run!(BlockQ2K, 256, q2_k),
            DType::Q3_K => run!(BlockQ3K, 256, q3_k),
            DType::IQ4_NL => run!(BlockIq4Nl, 32, iq4_nl),
            DType::IQ4_XS => run!(BlockIq4Xs, 256, iq4_xs),
            DType::MXFP4 => run!(BlockMxfp4, 32, mxfp4),
            _ => false,
        }
    }};
}

#[inline(always)]
fn dequantize_body(dtype: DType, w: &[u8], out: &mut [f32]) {
    macro_rules! float {
        ($f:ident) => {
            float_dequantize::<$f>(w, out)
        };
    }
    if by_float!(dtype, float) {
        return;
    }
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
    macro_rules! float {
        ($f:ident) => {
            float_dot::<$f>(w, x, &mut acc)
        };
    }
    if by_float!(dtype, float) {
        return fold(acc);
    }
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
    /// The compiler-vectorized build of [`dequantize_row`].
    pub fn dequantize_row_autovec / dequantize_row_autovec_at = dequantize_body(dtype: DType, w: &[u8], out: &mut [f32]) -> ()
);

/// Dequantizes one row (`out.len()` values of `dtype` in `w`), bit-exact with
/// [`reference::dequantize`], on the build of the process's kernel level: F16
/// by F16C's `vcvtph2ps` on x86 (a KV cache's keys and values are widened
/// this way every step), every other type by the compiler-vectorized build.
/// Lengths must already be checked.
pub fn dequantize_row(dtype: DType, w: &[u8], out: &mut [f32]) {
    dequantize_row_run(crate::isa::active(), dtype, w, out)
}

/// [`dequantize_row`] on the build of `level` (panics if this CPU cannot run it).
pub fn dequantize_row_at(level: crate::isa::Level, dtype: DType, w: &[u8], out: &mut [f32]) {
    level.assert_runs_here();
    dequantize_row_run(level, dtype, w, out)
}

fn dequantize_row_run(level: crate::isa::Level, dtype: DType, w: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if level.has_avx2() && dtype == DType::F16 {
        assert!(
            w.len() >= 2 * out.len(),
            "an F16 row of {} values",
            out.len()
        );
        // SAFETY: AVX2 levels have F16C (`isa`); the length is checked above.
        return unsafe { super::x86::widen_f16(w, out) };
    }
    dequantize_row_autovec::run(level, dtype, w, out)
}

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
    #[cfg(target_arch = "x86_64")]
    if level.has_avx2() && dtype == DType::F16 {
        // SAFETY: AVX2 levels have F16C (`isa`); the length is checked above.
        return unsafe { super::x86::dot_f16_avx2(w, x) };
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
            DType::IQ4_NL,
            DType::IQ4_XS,
            DType::MXFP4,
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
            for level in crate::isa::Level::supported() {
                assert_eq!(
                    dot_row_at(level, t, &w, &vals).to_bits(),
                    crate::ops::vector::dot_portable(&want, &vals).to_bits(),
                    "{t} {level:?}"
                );
            }
        }
    }

    /// Every half bit pattern (zeros, subnormals, infinities, NaNs) converts to the
    /// bits of the reference conversion, in every build.
    #[test]
    fn every_float_bit_pattern_dequantizes_to_the_reference_bits() {
        for t in [DType::F16, DType::BF16] {
            let w: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
            let mut want = vec![0.0; 65536];
            reference::dequantize(t, &w, &mut want).unwrap();
            for level in crate::isa::Level::supported() {
                let mut got = vec![0.0; 65536];
                dequantize_row_at(level, t, &w, &mut got);
                if let Some(i) = (0..65536).find(|&i| got[i].to_bits() != want[i].to_bits()) {
                    panic!("{t} {level:?}: {i:#06x} gives {} not {}", got[i], want[i]);
                }
            }
        }
    }
}
