//! AVX-512 twins of the fused row dot product (`kernels::fast::dot_row`), and the
//! register tiles of the f32-activation matrix product (AVX-512 and AVX2).
//!
//! Invariants: one `__m512` accumulator is exactly the [`LANES`] = 16 partial sums
//! of the portable code; each 16-value chunk of a row is dequantized with the same
//! f32 operations as the reference (`d * q`, `+ m` or `- m`, never fused) and added
//! as `acc + w * x` (multiply, then add: no FMA), chunk after chunk in row order;
//! the lanes are folded by the portable `fold`. So every function here returns the
//! bits of its portable twin (tested in `kernels::fast`).
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
unsafe fn fold_16(acc: &[__m512; 16]) -> [f32; 16] {
    // SAFETY: register-only arithmetic and a store into a local array; callers
    // run with AVX-512 F.
    unsafe {
        // Level 8: [a lanes 0..8 + 8..16 | b lanes 0..8 + 8..16] for pairs.
        let l8: [__m512; 8] = std::array::from_fn(|j| {
            let (a, b) = (acc[2 * j], acc[2 * j + 1]);
            _mm512_add_ps(
                _mm512_shuffle_f32x4(a, b, 0x44),
                _mm512_shuffle_f32x4(a, b, 0xEE),
            )
        });
        // Level 4: 128-bit lane L of l4[j] holds accumulator 4 j + L.
        let l4: [__m512; 4] = std::array::from_fn(|j| {
            let (a, b) = (l8[2 * j], l8[2 * j + 1]);
            _mm512_add_ps(
                _mm512_shuffle_f32x4(a, b, 0x88),
                _mm512_shuffle_f32x4(a, b, 0xDD),
            )
        });
        // Level 2: lane L of l2[j]: [acc 8 j + L: two sums, acc 8 j + 4 + L: two sums].
        let l2: [__m512; 2] = std::array::from_fn(|j| {
            let (a, b) = (l4[2 * j], l4[2 * j + 1]);
            _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xEE))
        });
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

/// `out[k] = fused_dot(q, rows[k]) * scale` for 16 rows of `q.len()` values: each
/// exactly [`dot_f32`]`::<true>` (same chunks, same masked tail, same pairwise
/// fold), the 16 folds done together by shuffles (level `w` adds lane `i + w` to
/// lane `i` of every row, as `fold` does).
///
/// # Safety
/// The CPU must have AVX-512 F and FMA; `rows` holds 16 rows of `q.len()` values.
#[target_feature(enable = "avx512f,fma")]
pub unsafe fn scaled_dots_16(q: &[f32], rows: &[f32], scale: f32, out: &mut [f32; 16]) {
    let n = q.len();
    debug_assert_eq!(rows.len(), 16 * n);
    let whole = n / LANES * LANES;
    let mut acc = [_mm512_setzero_ps(); 16];
    // SAFETY: every load is within q[..n] and the k-th row rows[k n..(k + 1) n].
    unsafe {
        let mut i = 0;
        while i < whole {
            let qv = _mm512_loadu_ps(q.as_ptr().add(i));
            for (k, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(qv, _mm512_loadu_ps(rows.as_ptr().add(k * n + i)), *a);
            }
            i += LANES;
        }
        let tail = n - whole;
        if tail > 0 {
            let mask: __mmask16 = ((1u32 << tail) - 1) as u16;
            let qv = _mm512_maskz_loadu_ps(mask, q.as_ptr().add(whole));
            for (k, a) in acc.iter_mut().enumerate() {
                let y = _mm512_maskz_loadu_ps(mask, rows.as_ptr().add(k * n + whole));
                *a = _mm512_mask3_fmadd_ps(qv, y, *a, mask);
            }
        }
        let folded = fold_16(&acc);
        for (o, f) in out.iter_mut().zip(folded) {
            *o = f * scale;
        }
    }
}

/// `acc += sum_j weights[j] * rows[j]`, each element updated as `w * x + acc`
/// rounded once, row after row (the bits of repeated `axpy`), up to 256 values
/// of `acc` held in registers across all rows (rows are read once per 256
/// values).
///
/// # Safety
/// The CPU must have AVX-512 F and FMA; `rows` holds `weights.len()` rows of
/// `acc.len()`.
#[target_feature(enable = "avx512f,fma")]
pub unsafe fn weighted_sum(acc: &mut [f32], weights: &[f32], rows: &[f32]) {
    // SAFETY: the caller's contract.
    unsafe {
        if acc.len() > 4 * LANES {
            weighted_sum_chunks::<16>(acc, weights, rows)
        } else {
            weighted_sum_chunks::<4>(acc, weights, rows)
        }
    }
}

#[inline]
#[target_feature(enable = "avx512f,fma")]
unsafe fn weighted_sum_chunks<const K: usize>(acc: &mut [f32], weights: &[f32], rows: &[f32]) {
    let n = acc.len();
    debug_assert!(rows.len() >= weights.len() * n);
    let mut c = 0;
    // SAFETY: every access is inside acc[..n] and rows[j n..(j + 1) n].
    unsafe {
        while c < n {
            let width = (n - c).min(K * LANES);
            let masks: [__mmask16; K] = std::array::from_fn(|k| {
                let have = width.saturating_sub(k * LANES).min(LANES);
                ((1u32 << have) - 1) as u16
            });
            let live = width.div_ceil(LANES);
            let mut a: [__m512; K] = std::array::from_fn(|k| {
                _mm512_maskz_loadu_ps(masks[k], acc.as_ptr().add(c + k * LANES))
            });
            for (j, &w) in weights.iter().enumerate() {
                let wv = _mm512_set1_ps(w);
                let row = rows.as_ptr().add(j * n + c);
                for k in 0..live {
                    a[k] = _mm512_fmadd_ps(
                        wv,
                        _mm512_maskz_loadu_ps(masks[k], row.add(k * LANES)),
                        a[k],
                    );
                }
            }
            for k in 0..live {
                _mm512_mask_storeu_ps(acc.as_mut_ptr().add(c + k * LANES), masks[k], a[k]);
            }
            c += width;
        }
    }
}

/// `out[g * stride + at + k] = fused_dot(q_g, rows[k]) * scale` for the queries
/// `q_g` (consecutive `n`-long pieces of `qs`) and every `n`-long row: each value
/// exactly [`dot_f32`]`::<true>`'s (through [`dot_4x4`], 4 rows by 4 queries,
/// padded by repeating the last and dropping the copies), so a row is read once
/// for all the queries of a KV group.
///
/// # Safety
/// The CPU must have AVX-512 F and FMA; `qs` and `rows` hold whole pieces of
/// `n > 0`, and `out` every `g * stride + at + k`.
#[target_feature(enable = "avx512f,fma")]
pub unsafe fn scaled_dots_heads(
    qs: &[f32],
    n: usize,
    rows: &[f32],
    scale: f32,
    out: &mut [f32],
    stride: usize,
    at: usize,
) {
    let (heads, m) = (qs.len() / n, rows.len() / n);
    let row = |k: usize| &rows[k * n..(k + 1) * n];
    let query = |g: usize| &qs[g * n..(g + 1) * n];
    for h0 in (0..heads).step_by(4) {
        let hq: [&[f32]; 4] = std::array::from_fn(|i| query((h0 + i).min(heads - 1)));
        for k0 in (0..m).step_by(4) {
            let kr: [&[f32]; 4] = std::array::from_fn(|i| row((k0 + i).min(m - 1)));
            let mut o = [[0.0f32; 4]; 4];
            // SAFETY: the feature is this function's; the eight slices have length n.
            unsafe { dot_4x4::<true>(kr, hq, &mut o) };
            for (i, ok) in o.iter().enumerate().take(m - k0) {
                for (h, &v) in ok.iter().enumerate().take(heads - h0) {
                    out[(h0 + h) * stride + at + k0 + i] = v * scale;
                }
            }
        }
    }
}

/// `acc_g += sum_k w_g[k] * rows[k]` for the heads `acc_g` (consecutive `n`-long
/// pieces of `accs`, at most 4) with `w_g[k] = weights[g * stride + at + k]`, each
/// element updated as `w * x + acc` rounded once, row after row (the bits of
/// repeated `axpy`), a row's 64-value chunk loaded once for all the heads.
///
/// # Safety
/// The CPU must have AVX-512 F and FMA; at most 4 heads; `rows` holds `m` rows
/// of `n`; `weights` every `g * stride + at + k`, `k < m`.
#[target_feature(enable = "avx512f,fma")]
pub unsafe fn weighted_sum_heads(
    accs: &mut [f32],
    n: usize,
    weights: &[f32],
    stride: usize,
    at: usize,
    m: usize,
    rows: &[f32],
) {
    let heads = accs.len() / n;
    debug_assert!(heads <= 4 && rows.len() >= m * n);
    let mut c = 0;
    // SAFETY: every access is inside accs, rows[k n..(k + 1) n] (k < m) and the
    // weights the caller vouches for.
    unsafe {
        while c < n {
            let width = (n - c).min(4 * LANES);
            let masks: [__mmask16; 4] = std::array::from_fn(|k| {
                let have = width.saturating_sub(k * LANES).min(LANES);
                ((1u32 << have) - 1) as u16
            });
            let live = width.div_ceil(LANES);
            let mut a = [[_mm512_setzero_ps(); 4]; 4];
            for g in 0..heads {
                for k in 0..live {
                    a[g][k] =
                        _mm512_maskz_loadu_ps(masks[k], accs.as_ptr().add(g * n + c + k * LANES));
                }
            }
            for j in 0..m {
                let row = rows.as_ptr().add(j * n + c);
                let v: [__m512; 4] = std::array::from_fn(|k| {
                    if k < live {
                        _mm512_maskz_loadu_ps(masks[k], row.add(k * LANES))
                    } else {
                        _mm512_setzero_ps()
                    }
                });
                for g in 0..heads {
                    let wv = _mm512_set1_ps(*weights.get_unchecked(g * stride + at + j));
                    for k in 0..live {
                        a[g][k] = _mm512_fmadd_ps(wv, v[k], a[g][k]);
                    }
                }
            }
            for g in 0..heads {
                for k in 0..live {
                    _mm512_mask_storeu_ps(
                        accs.as_mut_ptr().add(g * n + c + k * LANES),
                        masks[k],
                        a[g][k],
                    );
                }
            }
            c += width;
        }
    }
}

/// `out[k] = fused_dot(q, rows[k]) * scale` for 8 rows of `q.len()` values with
/// AVX2 and FMA: each exactly `fused_dot_portable`'s lanes (16 partial sums kept
/// as two 8-wide halves, the tail into lanes `0..tail`, then the pairwise fold
/// 8+8, 4+4, 2+2, 1+1), the 8 folds done together by 128-bit and in-lane
/// shuffles.
///
/// # Safety
/// The CPU must have AVX2 and FMA; `rows` holds 8 rows of `q.len()` values.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn scaled_dots_8_avx2(q: &[f32], rows: &[f32], scale: f32, out: &mut [f32; 8]) {
    let n = q.len();
    assert_eq!(rows.len(), 8 * n, "8 rows of the query's length");
    let whole = n / LANES * LANES;
    let mut lo = [_mm256_setzero_ps(); 8];
    let mut hi = [_mm256_setzero_ps(); 8];
    // SAFETY: every load is within q[..n] and the k-th row rows[k n..(k + 1) n]
    // (the tail's masked loads read only lanes below `tail`).
    unsafe {
        let mut i = 0;
        while i < whole {
            let (q0, q1) = (
                _mm256_loadu_ps(q.as_ptr().add(i)),
                _mm256_loadu_ps(q.as_ptr().add(i + 8)),
            );
            for k in 0..8 {
                let r = rows.as_ptr().add(k * n + i);
                lo[k] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(r), lo[k]);
                hi[k] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(r.add(8)), hi[k]);
            }
            i += LANES;
        }
        let tail = n - whole;
        if tail > 0 {
            let mask = |from: usize| {
                let m: [i32; 8] = std::array::from_fn(|l| if from + l < tail { -1 } else { 0 });
                _mm256_loadu_si256(m.as_ptr().cast())
            };
            let (m0, m1) = (mask(0), mask(8));
            // A masked-off lane is never read, so the second half's address may
            // lie past the row when the tail is 8 or shorter.
            let (q0, q1) = (
                _mm256_maskload_ps(q.as_ptr().add(whole), m0),
                _mm256_maskload_ps(q.as_ptr().wrapping_add(whole + 8), m1),
            );
            // Lanes at or past the tail keep their partial sum as it is (a fused
            // sum may be -0.0, which adding +0.0 would change).
            let (keep0, keep1) = (_mm256_castsi256_ps(m0), _mm256_castsi256_ps(m1));
            for k in 0..8 {
                let r = rows.as_ptr().add(k * n + whole);
                let sum = _mm256_fmadd_ps(q0, _mm256_maskload_ps(r, m0), lo[k]);
                lo[k] = _mm256_blendv_ps(lo[k], sum, keep0);
                let r1 = r.wrapping_add(8);
                let sum = _mm256_fmadd_ps(q1, _mm256_maskload_ps(r1, m1), hi[k]);
                hi[k] = _mm256_blendv_ps(hi[k], sum, keep1);
            }
        }
    }
    // Level 8: lanes i + (i + 8) of each row.
    let l8: [__m256; 8] = std::array::from_fn(|k| _mm256_add_ps(lo[k], hi[k]));
    // Level 4: [row 2j | row 2j + 1], lanes i + (i + 4).
    let l4: [__m256; 4] = std::array::from_fn(|j| {
        let (a, b) = (l8[2 * j], l8[2 * j + 1]);
        _mm256_add_ps(
            _mm256_permute2f128_ps(a, b, 0x20),
            _mm256_permute2f128_ps(a, b, 0x31),
        )
    });
    // Level 2: [rows 4j, 4j + 2 | rows 4j + 1, 4j + 3], two lanes each, i + (i + 2).
    let l2: [__m256; 2] = std::array::from_fn(|j| {
        let (a, b) = (l4[2 * j], l4[2 * j + 1]);
        _mm256_add_ps(_mm256_shuffle_ps(a, b, 0x44), _mm256_shuffle_ps(a, b, 0xEE))
    });
    // Level 1: [rows 0, 2, 4, 6 | rows 1, 3, 5, 7].
    let l1 = _mm256_add_ps(
        _mm256_shuffle_ps(l2[0], l2[1], 0x88),
        _mm256_shuffle_ps(l2[0], l2[1], 0xDD),
    );
    let mut t = [0.0f32; 8];
    // SAFETY: `t` holds 8 values.
    unsafe { _mm256_storeu_ps(t.as_mut_ptr(), _mm256_mul_ps(l1, _mm256_set1_ps(scale))) };
    *out = [t[0], t[4], t[1], t[5], t[2], t[6], t[3], t[7]];
}

/// `acc += sum_j weights[j] * rows[j]` with AVX2 and FMA, 64 outputs at a time
/// held in registers while every row is added: each output sees exactly the
/// fused multiply-adds of repeated `axpy`, in row order (outputs are
/// independent, so blocking them changes no bits).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn weighted_sum_avx2(acc: &mut [f32], weights: &[f32], rows: &[f32]) {
    let d = acc.len();
    assert!(
        rows.len() >= weights.len() * d,
        "rows hold a row per weight"
    );
    let whole = d / 64 * 64;
    for base in (0..whole).step_by(64) {
        // SAFETY: acc[base..base + 64] and rows[j d + base..j d + base + 64] are in
        // bounds (base + 64 <= d, j < weights.len(), checked above).
        unsafe {
            let a = acc.as_mut_ptr().add(base);
            let mut r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(a.add(8 * i)));
            for (j, &w) in weights.iter().enumerate() {
                let wv = _mm256_set1_ps(w);
                let row = rows.as_ptr().add(j * d + base);
                for (i, x) in r.iter_mut().enumerate() {
                    *x = _mm256_fmadd_ps(wv, _mm256_loadu_ps(row.add(8 * i)), *x);
                }
            }
            for (i, x) in r.iter().enumerate() {
                _mm256_storeu_ps(a.add(8 * i), *x);
            }
        }
    }
    if whole < d {
        for (j, &w) in weights.iter().enumerate() {
            let row = &rows[j * d + whole..(j + 1) * d];
            for (a, &x) in acc[whole..].iter_mut().zip(row) {
                *a = w.mul_add(x, *a);
            }
        }
    }
}
