//! x86 kernels of attention (`ops::vector`'s scores and weighted sums): each
//! multiply-add fused (FMA, rounded once) in the sixteen lanes and pairwise fold
//! of the portable twins, so every function returns their bits (tested in
//! `ops::vector`). Callers must have checked the features each function names.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use crate::kernels::x86::{dot_4x4, fold_16};
use crate::ops::vector::LANES;

/// `out[k] = fused_dot(q, rows[k]) * scale` for 16 rows of `q.len()` values: each
/// exactly `x86::dot_f32``::<true>` (same chunks, same masked tail, same pairwise
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
/// exactly `x86::dot_f32``::<true>`'s (through [`dot_4x4`], 4 rows by 4 queries,
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
