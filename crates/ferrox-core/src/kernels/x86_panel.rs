//! x86 twins of the fused product's panel kernel (`ops::matmul_fused`): a
//! panel is [`PANEL`] weight rows stored k-major (`panel[k * PANEL + i]` is row
//! `i`'s value `k`), and each kernel runs `T` token rows of `x` (row `t` at
//! `x[t * cols..]`) against it.
//!
//! Invariant: `out[t][i]` is the chain `acc = fma(panel[k * PANEL + i], x[t][k],
//! acc)` over `k = 0..cols` in order, from `acc = 0`: vectors run across rows and
//! tokens, never across `k`. A fused multiply-add is correctly rounded, so this
//! is the portable twin's value bit for bit (tested in `ops::matmul_fused`).

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use crate::ops::matmul_fused::PANEL;

/// AVX-512 kernel: the whole panel (two registers a step) for `T` tokens, at
/// most 12 (24 accumulators).
///
/// # Safety
/// The CPU must have AVX-512 F and FMA; `panel.len()` must be `PANEL * cols`
/// and `x.len()` at least `T * cols`.
#[target_feature(enable = "avx512f,fma")]
pub unsafe fn panel_avx512<const T: usize>(
    panel: &[f32],
    x: &[f32],
    cols: usize,
    out: &mut [[f32; PANEL]; T],
) {
    let (w, xp) = (panel.as_ptr(), x.as_ptr());
    let mut acc = [[_mm512_setzero_ps(); 2]; T];
    // SAFETY: step k reads panel[k * PANEL..(k + 1) * PANEL] and x[t * cols + k]
    // for t < T, inside both slices (the caller's lengths).
    unsafe {
        for k in 0..cols {
            let w0 = _mm512_loadu_ps(w.add(k * PANEL));
            let w1 = _mm512_loadu_ps(w.add(k * PANEL + 16));
            for (t, a) in acc.iter_mut().enumerate() {
                let b = _mm512_set1_ps(*xp.add(t * cols + k));
                a[0] = _mm512_fmadd_ps(w0, b, a[0]);
                a[1] = _mm512_fmadd_ps(w1, b, a[1]);
            }
        }
        for (o, a) in out.iter_mut().zip(&acc) {
            _mm512_storeu_ps(o.as_mut_ptr(), a[0]);
            _mm512_storeu_ps(o.as_mut_ptr().add(16), a[1]);
        }
    }
}

/// AVX2 kernel: rows `16 * half .. 16 * half + 16` of the panel (two
/// registers a step) for `T` tokens, at most 6 (12 accumulators), into those
/// rows of `out`.
///
/// # Safety
/// The CPU must have AVX2 and FMA; `half` must be 0 or 1, `panel.len()` must
/// be `PANEL * cols` and `x.len()` at least `T * cols`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn panel_avx2<const T: usize>(
    panel: &[f32],
    half: usize,
    x: &[f32],
    cols: usize,
    out: &mut [[f32; PANEL]; T],
) {
    let (w, xp) = (panel.as_ptr(), x.as_ptr());
    let mut acc = [[_mm256_setzero_ps(); 2]; T];
    // SAFETY: as for `panel_avx512`, reading panel[k * PANEL + 16 half..][..16].
    unsafe {
        for k in 0..cols {
            let at = w.add(k * PANEL + 16 * half);
            let (w0, w1) = (_mm256_loadu_ps(at), _mm256_loadu_ps(at.add(8)));
            for (t, a) in acc.iter_mut().enumerate() {
                let b = _mm256_set1_ps(*xp.add(t * cols + k));
                a[0] = _mm256_fmadd_ps(w0, b, a[0]);
                a[1] = _mm256_fmadd_ps(w1, b, a[1]);
            }
        }
        for (o, a) in out.iter_mut().zip(&acc) {
            let o = o[16 * half..].as_mut_ptr();
            _mm256_storeu_ps(o, a[0]);
            _mm256_storeu_ps(o.add(8), a[1]);
        }
    }
}
