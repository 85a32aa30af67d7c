//! AVX-512 twins of the fused row dot product (`kernels::fast::dot_row`), and the
//! register tiles of the f32-activation matrix product (AVX-512 and AVX2).
//!
//! Invariants: one `__m512` accumulator is exactly the [`LANES`] = 16 partial sums
//! of the portable code; each 16-value chunk of a row is dequantized with the same
//! f32 operations as the reference (`d * q`, `+ m` or `- m`, never fused) and added
//! as `acc + w * x` (multiply, then add: no FMA; [`dot_f32`] and [`dot_4x4`] fuse
//! when asked, for attention), chunk after chunk in row order; the lanes are
//! folded by the portable `fold`. So every function here returns the bits of its
//! portable twin (tested in `kernels::fast` and `ops::vector`). Attention's own
//! kernels are in `x86_attention`.
//!
//! Callers must have checked that the CPU has the features each function names
//! and that `w` holds whole blocks for `x.len()` values.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use crate::blocks::{
    BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0, blocks_of,
    f16_le,
};
use crate::dtype::DType;
use crate::kernels::reference::kquants::scale_min_k4;
use crate::ops::vector::{LANES, fold};

#[inline(always)]
unsafe fn finish(acc: __m512) -> f32 {
    let mut lanes = [0.0f32; LANES];
    // SAFETY: 16 f32 fit the array.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc) };
    fold(lanes)
}

/// `[finish(acc[0]), .., finish(acc[15])]`: the 16 pairwise folds (level `w`
/// adds lane `i + w` to lane `i`, as `fold` does) done together by shuffles.
#[inline(always)]
pub(crate) unsafe fn fold_16(acc: &[__m512; 16]) -> [f32; 16] {
    // SAFETY: register-only arithmetic and a store into a local array; callers
    // run with AVX-512 F.
    unsafe {
        // No closure (`std::array::from_fn(|j| ..)`) holds an intrinsic: a
        // closure does not take the caller's target features, so its
        // intrinsics may stay calls (they did, once other code moved).
        // Level 8: [a lanes 0..8 + 8..16 | b lanes 0..8 + 8..16] for pairs.
        let mut l8 = [_mm512_setzero_ps(); 8];
        for (j, l) in l8.iter_mut().enumerate() {
            let (a, b) = (acc[2 * j], acc[2 * j + 1]);
            *l = _mm512_add_ps(
                _mm512_shuffle_f32x4(a, b, 0x44),
                _mm512_shuffle_f32x4(a, b, 0xEE),
            );
        }
        // Level 4: 128-bit lane L of l4[j] holds accumulator 4 j + L.
        let mut l4 = [_mm512_setzero_ps(); 4];
        for (j, l) in l4.iter_mut().enumerate() {
            let (a, b) = (l8[2 * j], l8[2 * j + 1]);
            *l = _mm512_add_ps(
                _mm512_shuffle_f32x4(a, b, 0x88),
                _mm512_shuffle_f32x4(a, b, 0xDD),
            );
        }
        // Level 2: lane L of l2[j]: [acc 8 j + L: two sums, acc 8 j + 4 + L: two sums].
        let mut l2 = [_mm512_setzero_ps(); 2];
        for (j, l) in l2.iter_mut().enumerate() {
            let (a, b) = (l4[2 * j], l4[2 * j + 1]);
            *l = _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xEE));
        }
        // Level 1: lane 4 L + m holds accumulator L + 4 m.
        let l1 = _mm512_add_ps(
            _mm512_shuffle_ps(l2[0], l2[1], 0x88),
            _mm512_shuffle_ps(l2[0], l2[1], 0xDD),
        );
        let mut lanes = [0.0f32; 16];
        _mm512_storeu_ps(lanes.as_mut_ptr(), l1);
        std::array::from_fn(|k| lanes[4 * (k % 4) + k / 4])
    }
}

/// `acc + a * b`: one fused multiply-add (rounded once) when `FUSED`, else a
/// multiply then an add (`ops::vector`'s two dot products).
#[inline(always)]
unsafe fn multiply_add<const FUSED: bool>(acc: __m512, a: __m512, b: __m512) -> __m512 {
    // SAFETY: register-only arithmetic; callers run with AVX-512 F and FMA.
    unsafe {
        if FUSED {
            _mm512_fmadd_ps(a, b, acc)
        } else {
            _mm512_add_ps(acc, _mm512_mul_ps(a, b))
        }
    }
}

/// [`multiply_add`] in the lanes of `mask`; the others keep `acc`.
#[inline(always)]
unsafe fn multiply_add_masked<const FUSED: bool>(
    acc: __m512,
    mask: __mmask16,
    a: __m512,
    b: __m512,
) -> __m512 {
    // SAFETY: as [`multiply_add`].
    unsafe {
        if FUSED {
            _mm512_mask3_fmadd_ps(a, b, acc, mask)
        } else {
            _mm512_mask_add_ps(acc, mask, acc, _mm512_mul_ps(a, b))
        }
    }
}

/// `acc + w * x[0..16]`.
#[inline(always)]
unsafe fn step(acc: __m512, w: __m512, x: *const f32) -> __m512 {
    // SAFETY: callers run with AVX-512 F and pass 16 readable floats at `x`.
    unsafe { _mm512_add_ps(acc, _mm512_mul_ps(w, _mm512_loadu_ps(x))) }
}

/// 16 bytes at `p` widened to 16 u32 lanes.
#[inline(always)]
unsafe fn u8x16(p: *const u8) -> __m512i {
    // SAFETY: callers run with AVX-512 F and pass 16 readable bytes at `p`.
    unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast())) }
}

/// `(v >> s) & mask` per lane.
#[inline(always)]
unsafe fn bits(v: __m512i, s: u32, mask: i32) -> __m512i {
    // SAFETY: register-only arithmetic; callers run with AVX-512 F.
    unsafe {
        _mm512_and_si512(
            _mm512_srlv_epi32(v, _mm512_set1_epi32(s as i32)),
            _mm512_set1_epi32(mask),
        )
    }
}

#[inline(always)]
unsafe fn float(v: __m512i) -> __m512 {
    // SAFETY: register-only arithmetic; callers run with AVX-512 F.
    unsafe { _mm512_cvtepi32_ps(v) }
}

/// Dot product of one row of `dtype` in `w` with `x`, for the types with an
/// AVX-512 twin; `None` for the others.
///
/// # Safety
/// The CPU must have AVX-512 F and BW, AVX2 and F16C, and `w` must hold whole
/// blocks of `dtype` for exactly `x.len()` values.
#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
pub unsafe fn dot_row(dtype: DType, w: &[u8], x: &[f32]) -> Option<f32> {
    let mut acc = _mm512_setzero_ps();
    let xp = x.as_ptr();
    // SAFETY: (the whole body) `w` holds whole blocks for x.len() values (caller), so
    // every 16-value chunk read from `x` at 32 i + 16 k (or 256 i + ...) is in bounds.
    unsafe {
        match dtype {
            DType::Q4_0 => {
                for (i, b) in blocks_of::<BlockQ4_0>(w).ok()?.iter().enumerate() {
                    let d = _mm512_set1_ps(f16_le(b.d));
                    let q = u8x16(b.qs.as_ptr());
                    let eight = _mm512_set1_epi32(8);
                    let lo = float(_mm512_sub_epi32(bits(q, 0, 0x0F), eight));
                    let hi = float(_mm512_sub_epi32(bits(q, 4, 0x0F), eight));
                    acc = step(acc, _mm512_mul_ps(d, lo), xp.add(32 * i));
                    acc = step(acc, _mm512_mul_ps(d, hi), xp.add(32 * i + 16));
                }
            }
            DType::Q4_1 => {
                for (i, b) in blocks_of::<BlockQ4_1>(w).ok()?.iter().enumerate() {
                    let (d, m) = (_mm512_set1_ps(f16_le(b.d)), _mm512_set1_ps(f16_le(b.m)));
                    let q = u8x16(b.qs.as_ptr());
                    let lo = _mm512_add_ps(_mm512_mul_ps(d, float(bits(q, 0, 0x0F))), m);
                    let hi = _mm512_add_ps(_mm512_mul_ps(d, float(bits(q, 4, 0x0F))), m);
                    acc = step(acc, lo, xp.add(32 * i));
                    acc = step(acc, hi, xp.add(32 * i + 16));
                }
            }
            DType::Q5_0 | DType::Q5_1 => {
                let shifts_lo =
                    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
                let shifts_hi = _mm512_add_epi32(shifts_lo, _mm512_set1_epi32(16));
                let one = _mm512_set1_epi32(1);
                let fifth = |h: u32, shifts: __m512i| {
                    _mm512_slli_epi32(
                        _mm512_and_si512(
                            _mm512_srlv_epi32(_mm512_set1_epi32(h as i32), shifts),
                            one,
                        ),
                        4,
                    )
                };
                if dtype == DType::Q5_0 {
                    for (i, b) in blocks_of::<BlockQ5_0>(w).ok()?.iter().enumerate() {
                        let d = _mm512_set1_ps(f16_le(b.d));
                        let h = u32::from_le_bytes(b.qh);
                        let q = u8x16(b.qs.as_ptr());
                        let sixteen = _mm512_set1_epi32(16);
                        let lo = _mm512_sub_epi32(
                            _mm512_or_si512(bits(q, 0, 0x0F), fifth(h, shifts_lo)),
                            sixteen,
                        );
                        let hi = _mm512_sub_epi32(
                            _mm512_or_si512(bits(q, 4, 0x0F), fifth(h, shifts_hi)),
                            sixteen,
                        );
                        acc = step(acc, _mm512_mul_ps(d, float(lo)), xp.add(32 * i));
                        acc = step(acc, _mm512_mul_ps(d, float(hi)), xp.add(32 * i + 16));
                    }
                } else {
                    for (i, b) in blocks_of::<BlockQ5_1>(w).ok()?.iter().enumerate() {
                        let (d, m) = (_mm512_set1_ps(f16_le(b.d)), _mm512_set1_ps(f16_le(b.m)));
                        let h = u32::from_le_bytes(b.qh);
                        let q = u8x16(b.qs.as_ptr());
                        let lo = _mm512_or_si512(bits(q, 0, 0x0F), fifth(h, shifts_lo));
                        let hi = _mm512_or_si512(bits(q, 4, 0x0F), fifth(h, shifts_hi));
                        acc = step(
                            acc,
                            _mm512_add_ps(_mm512_mul_ps(d, float(lo)), m),
                            xp.add(32 * i),
                        );
                        acc = step(
                            acc,
                            _mm512_add_ps(_mm512_mul_ps(d, float(hi)), m),
                            xp.add(32 * i + 16),
                        );
                    }
                }
            }
            DType::Q8_0 => {
                for (i, b) in blocks_of::<BlockQ8_0>(w).ok()?.iter().enumerate() {
                    let d = _mm512_set1_ps(f16_le(b.d));
                    let p = b.qs.as_ptr().cast::<u8>();
                    let lo = float(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.cast())));
                    let hi = float(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(16).cast())));
                    acc = step(acc, _mm512_mul_ps(d, lo), xp.add(32 * i));
                    acc = step(acc, _mm512_mul_ps(d, hi), xp.add(32 * i + 16));
                }
            }
            DType::Q4_K | DType::Q5_K => {
                let five = dtype == DType::Q5_K;
                let q4 = if five {
                    &[][..]
                } else {
                    blocks_of::<BlockQ4K>(w).ok()?
                };
                let q5 = if five {
                    blocks_of::<BlockQ5K>(w).ok()?
                } else {
                    &[][..]
                };
                let n = if five { q5.len() } else { q4.len() };
                for i in 0..n {
                    let (d, dmin, scales, qs, qh) = if five {
                        let b = &q5[i];
                        (f16_le(b.d), f16_le(b.dmin), &b.scales, &b.qs, Some(&b.qh))
                    } else {
                        let b = &q4[i];
                        (f16_le(b.d), f16_le(b.dmin), &b.scales, &b.qs, None)
                    };
                    for g in 0..8 {
                        let (sc, m) = scale_min_k4(g, scales);
                        let (dl, ml) = (
                            _mm512_set1_ps(d * sc as f32),
                            _mm512_set1_ps(dmin * m as f32),
                        );
                        let shift = 4 * (g as u32 % 2);
                        let base = 32 * (g / 2);
                        for half in 0..2 {
                            let mut q = bits(u8x16(qs.as_ptr().add(base + 16 * half)), shift, 0x0F);
                            if let Some(qh) = qh {
                                let hb = _mm512_slli_epi32(
                                    bits(u8x16(qh.as_ptr().add(16 * half)), g as u32, 1),
                                    4,
                                );
                                q = _mm512_or_si512(q, hb);
                            }
                            let v = _mm512_sub_ps(_mm512_mul_ps(dl, float(q)), ml);
                            acc = step(acc, v, xp.add(256 * i + 32 * g + 16 * half));
                        }
                    }
                }
            }
            DType::Q6_K => {
                let thirty_two = _mm512_set1_epi32(32);
                for (i, b) in blocks_of::<BlockQ6K>(w).ok()?.iter().enumerate() {
                    let d = f16_le(b.d);
                    for h in 0..2 {
                        for k in 0..4 {
                            for half in 0..2 {
                                let ql =
                                    u8x16(b.ql.as_ptr().add(64 * h + 32 * (k % 2) + 16 * half));
                                let qh = u8x16(b.qh.as_ptr().add(32 * h + 16 * half));
                                let low = bits(ql, 4 * (k as u32 / 2), 0x0F);
                                let high = _mm512_slli_epi32(bits(qh, 2 * k as u32, 3), 4);
                                let q = _mm512_sub_epi32(_mm512_or_si512(low, high), thirty_two);
                                let dl = _mm512_set1_ps(d * b.scales[8 * h + 2 * k + half] as f32);
                                acc = step(
                                    acc,
                                    _mm512_mul_ps(dl, float(q)),
                                    xp.add(256 * i + 128 * h + 32 * k + 16 * half),
                                );
                            }
                        }
                    }
                }
            }
            _ => return None,
        }
        Some(finish(acc))
    }
}

/// `dot(a, b)` of `ops::vector` with one accumulator register, each multiply-add
/// fused when `FUSED` (attention's dot product, `fused_dot_portable`).
///
/// # Safety
/// The CPU must have AVX-512 F and FMA (every level with AVX-512 has both).
#[inline]
#[target_feature(enable = "avx512f,fma")]
pub unsafe fn dot_f32<const FUSED: bool>(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let whole = n / LANES * LANES;
    let mut acc = _mm512_setzero_ps();
    // SAFETY: every load is within the first `n` values of both slices.
    unsafe {
        let mut i = 0;
        while i < whole {
            acc = multiply_add::<FUSED>(
                acc,
                _mm512_loadu_ps(a.as_ptr().add(i)),
                _mm512_loadu_ps(b.as_ptr().add(i)),
            );
            i += LANES;
        }
        let tail = n - whole;
        if tail > 0 {
            let mask: __mmask16 = ((1u32 << tail) - 1) as u16;
            let x = _mm512_maskz_loadu_ps(mask, a.as_ptr().add(whole));
            let y = _mm512_maskz_loadu_ps(mask, b.as_ptr().add(whole));
            acc = multiply_add_masked::<FUSED>(acc, mask, x, y);
        }
        finish(acc)
    }
}

/// `out[r][t] = dot(w[r], x[t])` for 4 weight rows and 4 token rows of equal
/// length: 16 accumulators kept in registers, each reduced exactly as [`dot_f32`]
/// reduces its pair with the same `FUSED` (same chunks in the same order, same
/// tail, same fold).
///
/// # Safety
/// The CPU must have AVX-512 F and FMA, and all eight slices must have the same
/// length.
#[target_feature(enable = "avx512f,fma")]
pub unsafe fn dot_4x4<const FUSED: bool>(w: [&[f32]; 4], x: [&[f32]; 4], out: &mut [[f32; 4]; 4]) {
    let n = w[0].len();
    let whole = n / LANES * LANES;
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    // SAFETY: every row holds `n` values (caller), so all loads are in bounds.
    unsafe {
        let mut i = 0;
        while i < whole {
            let xv = [
                _mm512_loadu_ps(x[0].as_ptr().add(i)),
                _mm512_loadu_ps(x[1].as_ptr().add(i)),
                _mm512_loadu_ps(x[2].as_ptr().add(i)),
                _mm512_loadu_ps(x[3].as_ptr().add(i)),
            ];
            for r in 0..4 {
                let wv = _mm512_loadu_ps(w[r].as_ptr().add(i));
                for t in 0..4 {
                    acc[r][t] = multiply_add::<FUSED>(acc[r][t], wv, xv[t]);
                }
            }
            i += LANES;
        }
        let tail = n - whole;
        if tail > 0 {
            let mask: __mmask16 = ((1u32 << tail) - 1) as u16;
            for r in 0..4 {
                let wv = _mm512_maskz_loadu_ps(mask, w[r].as_ptr().add(whole));
                for t in 0..4 {
                    let xv = _mm512_maskz_loadu_ps(mask, x[t].as_ptr().add(whole));
                    acc[r][t] = multiply_add_masked::<FUSED>(acc[r][t], mask, wv, xv);
                }
            }
        }
        let folded = fold_16(&[
            acc[0][0], acc[0][1], acc[0][2], acc[0][3], acc[1][0], acc[1][1], acc[1][2], acc[1][3],
            acc[2][0], acc[2][1], acc[2][2], acc[2][3], acc[3][0], acc[3][1], acc[3][2], acc[3][3],
        ]);
        for (k, f) in folded.into_iter().enumerate() {
            out[k / 4][k % 4] = f;
        }
    }
}

/// Widens the F16 values of `w` into `out` (`out.len()` of them) with F16C's
/// `vcvtph2ps`: exact, as the reference conversion (NaNs quieted alike).
///
/// # Safety
/// The CPU must have AVX2 and F16C, and `w.len() >= 2 * out.len()`.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn widen_f16(w: &[u8], out: &mut [f32]) {
    let n = out.len();
    let whole = n / 8 * 8;
    // SAFETY: chunk `i` reads w[2 i..2 i + 16] and writes out[i..i + 8], inside
    // both for `i + 8 <= whole <= n` (the caller's lengths).
    unsafe {
        let mut i = 0;
        while i < whole {
            let h = _mm_loadu_si128(w.as_ptr().add(2 * i).cast());
            _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            i += 8;
        }
    }
    for (o, b) in out[whole..].iter_mut().zip(w[2 * whole..].chunks_exact(2)) {
        *o = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
    }
}

/// `fast::dot_row` of an F16 row (`w` holds `2 x.len()` bytes) on AVX2 with F16C:
/// `vcvtph2ps` widens exactly (as the reference conversion, NaNs quieted), a 16-value
/// chunk's halves go to lanes 0..8 and 8..16 in two registers, `acc + w * x` without
/// FMA, the tail to lanes `0..tail` in order, then the portable `fold`.
///
/// # Safety
/// The CPU must have AVX2 and F16C, and `w.len() == 2 * x.len()`.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn dot_f16_avx2(w: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    let whole = n / LANES * LANES;
    let mut lanes = [0.0f32; LANES];
    // SAFETY: chunk `i` reads w[2 i..2 i + 32] and x[i..i + 16], inside both
    // slices for `i + 16 <= whole` (the caller's lengths).
    unsafe {
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i < whole {
            let h = _mm256_loadu_si256(w.as_ptr().add(2 * i).cast());
            let a = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
            let b = _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(h));
            lo = _mm256_add_ps(lo, _mm256_mul_ps(a, _mm256_loadu_ps(x.as_ptr().add(i))));
            hi = _mm256_add_ps(hi, _mm256_mul_ps(b, _mm256_loadu_ps(x.as_ptr().add(i + 8))));
            i += LANES;
        }
        _mm256_storeu_ps(lanes.as_mut_ptr(), lo);
        _mm256_storeu_ps(lanes.as_mut_ptr().add(8), hi);
    }
    for (l, (b, &xv)) in w[2 * whole..].chunks_exact(2).zip(&x[whole..]).enumerate() {
        lanes[l] += half::f16::from_le_bytes([b[0], b[1]]).to_f32() * xv;
    }
    fold(lanes)
}

/// `out[r][t] = dot(w[r], x[t])` (of `ops::vector`) for `R` weight rows and `T`
/// token rows of equal length on AVX2, the accumulators in registers. A dot's 16
/// lanes are two 8-lane registers; lanes 0..8 take chunk offsets 0..8 and lanes
/// 8..16 offsets 8..16, so the two halves are independent sums, swept in two
/// passes (`R * T` registers live, not twice that). Each lane adds `w * x` value
/// after value as `dot` does (no FMA), the tail goes to lanes `0..tail` in order,
/// and the lanes fold by the portable `fold`: the bits of `dot`.
///
/// # Safety
/// The CPU must have AVX2, and all `R + T` slices must have the same length.
#[target_feature(enable = "avx2")]
pub unsafe fn dot_tile_avx2<const R: usize, const T: usize>(
    w: [&[f32]; R],
    x: [&[f32]; T],
    out: &mut [[f32; T]; R],
) {
    let n = w[0].len();
    let whole = n / LANES * LANES;
    let mut lanes = [[[0.0f32; LANES]; T]; R];
    for half in 0..2 {
        let mut acc = [[_mm256_setzero_ps(); T]; R];
        // SAFETY: every row holds `n` values (caller) and `i + 8 <= whole <= n`.
        unsafe {
            let mut i = 8 * half;
            while i < whole {
                let xv: [__m256; T] =
                    std::array::from_fn(|t| _mm256_loadu_ps(x[t].as_ptr().add(i)));
                for (accr, wr) in acc.iter_mut().zip(&w) {
                    let wv = _mm256_loadu_ps(wr.as_ptr().add(i));
                    for (a, xt) in accr.iter_mut().zip(&xv) {
                        *a = _mm256_add_ps(*a, _mm256_mul_ps(wv, *xt));
                    }
                }
                i += LANES;
            }
            for (lr, accr) in lanes.iter_mut().zip(&acc) {
                for (lt, a) in lr.iter_mut().zip(accr) {
                    _mm256_storeu_ps(lt.as_mut_ptr().add(8 * half), *a);
                }
            }
        }
    }
    for r in 0..R {
        for t in 0..T {
            let l = &mut lanes[r][t];
            for (j, (a, b)) in w[r][whole..].iter().zip(&x[t][whole..]).enumerate() {
                l[j] += a * b;
            }
            out[r][t] = fold(*l);
        }
    }
}
