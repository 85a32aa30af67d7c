//! Fixed-order vector reductions: the building block of batch invariance.
//!
//! `dot` keeps [`LANES`] partial sums, lane `l` taking elements `l, l + LANES, ...`
//! of the whole-lane prefix and the tail going to lanes `0..tail` in order; the
//! lanes are folded pairwise (8+8, 4+4, 2+2, 1+1). Multiplies and adds are
//! separate IEEE operations (no FMA contraction in Rust), so any vector width
//! computes exactly this.
//!
//! Attention's kernels ([`scaled_dots_into`], [`weighted_sum`] and their
//! several-head forms) take the same lanes and order, each multiply and add
//! fused into one operation rounded once (`f32::mul_add`, IEEE
//! fusedMultiplyAdd): every build with FMA units computes exactly that too, at
//! half the arithmetic.

/// Partial sums kept by reductions.
pub const LANES: usize = 16;

#[inline(always)]
pub(crate) fn fold(acc: [f32; LANES]) -> f32 {
    let mut a = acc;
    let mut w = LANES / 2;
    while w > 0 {
        for i in 0..w {
            a[i] += a[i + w];
        }
        w /= 2;
    }
    a[0]
}

/// `acc + x * y`: fused (rounded once) when `FUSED`, else a multiply then an add.
#[inline(always)]
fn multiply_add<const FUSED: bool>(acc: f32, x: f32, y: f32) -> f32 {
    if FUSED {
        x.mul_add(y, acc)
    } else {
        acc + x * y
    }
}

/// The lanes' dot product, each step [`multiply_add`]`::<FUSED>`.
#[inline(always)]
fn lanes_dot<const FUSED: bool>(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; LANES];
    let whole = n / LANES * LANES;
    for (ca, cb) in a[..whole]
        .chunks_exact(LANES)
        .zip(b[..whole].chunks_exact(LANES))
    {
        for l in 0..LANES {
            acc[l] = multiply_add::<FUSED>(acc[l], ca[l], cb[l]);
        }
    }
    for (l, (x, y)) in a[whole..].iter().zip(&b[whole..]).enumerate() {
        acc[l] = multiply_add::<FUSED>(acc[l], *x, *y);
    }
    fold(acc)
}

#[inline(always)]
pub(crate) fn dot_body(a: &[f32], b: &[f32]) -> f32 {
    lanes_dot::<false>(a, b)
}

/// [`dot`]'s lanes and fold, each multiply-add fused: attention's dot product.
#[inline(always)]
fn fused_dot_body(a: &[f32], b: &[f32]) -> f32 {
    lanes_dot::<true>(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_body(a, b)
}

/// `sum(a[i] * b[i])` over the shorter length, in the fixed lane order.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    dot_run(crate::isa::active(), a, b)
}

/// [`dot`] on the build of `level` (panics if this CPU cannot run it).
pub fn dot_at(level: crate::isa::Level, a: &[f32], b: &[f32]) -> f32 {
    level.assert_runs_here();
    dot_run(level, a, b)
}

#[inline(always)]
fn dot_run(level: crate::isa::Level, a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if level.has_avx512() {
            // SAFETY: the feature was detected on this CPU.
            return unsafe { crate::kernels::x86::dot_f32::<false>(a, b) };
        }
        if level.has_avx2() {
            // SAFETY: the feature was detected on this CPU.
            return unsafe { dot_avx2(a, b) };
        }
    }
    let _ = level;
    dot_body(a, b)
}

/// The portable build of [`dot`] (the scalar twin the dispatched builds must equal).
pub fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    dot_body(a, b)
}

/// [`dot`] with each multiply-add fused (rounded once): the portable definition
/// of the dot products [`scaled_dots_into`] and [`scaled_dots_heads`] compute.
pub fn fused_dot_portable(a: &[f32], b: &[f32]) -> f32 {
    fused_dot_body(a, b)
}

#[inline(always)]
fn sum_body(v: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let whole = v.len() / LANES * LANES;
    for c in v[..whole].chunks_exact(LANES) {
        for l in 0..LANES {
            acc[l] += c[l];
        }
    }
    for (l, x) in v[whole..].iter().enumerate() {
        acc[l] += x;
    }
    fold(acc)
}

#[inline(always)]
fn max_body(v: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let whole = v.len() / LANES * LANES;
    for c in v[..whole].chunks_exact(LANES) {
        for l in 0..LANES {
            acc[l] = if c[l] > acc[l] { c[l] } else { acc[l] };
        }
    }
    let mut m = v[whole..]
        .iter()
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    for a in acc {
        m = if a > m { a } else { m };
    }
    m
}

dispatched!(
    /// `sum(v)` in [`dot`]'s lane order (value `i` into lane `i % LANES`, the tail
    /// into lanes `0..tail`, pairwise fold): the same bits on every build.
    pub fn sum / sum_at = sum_body(v: &[f32]) -> f32
);

dispatched!(
    /// The largest value of `v` (negative infinity when empty; NaNs are skipped). A
    /// maximum is exact, so any order gives the same value.
    pub fn max / max_at = max_body(v: &[f32]) -> f32
);

/// `acc[i] = s * v[i] + acc[i]`, each rounded once (a fused multiply-add).
#[inline]
pub fn axpy(acc: &mut [f32], s: f32, v: &[f32]) {
    for (a, &x) in acc.iter_mut().zip(v) {
        *a = s.mul_add(x, *a);
    }
}

#[inline(always)]
fn weighted_sum_body(acc: &mut [f32], weights: &[f32], rows: &[f32]) {
    for (&w, row) in weights.iter().zip(rows.chunks_exact(acc.len())) {
        axpy(acc, w, row);
    }
}

/// `out[k] = fused_dot(q, row k) * scale` for each `q.len()`-long row of `rows`,
/// in order (attention scores over a run of keys; the dot product of
/// [`fused_dot_portable`]).
pub fn scaled_dots_into(q: &[f32], rows: &[f32], scale: f32, out: &mut [f32]) {
    scaled_dots_run(crate::isa::active(), q, rows, scale, out);
}

/// [`scaled_dots_into`] on the build of `level` (panics if this CPU cannot run it).
pub fn scaled_dots_into_at(
    level: crate::isa::Level,
    q: &[f32],
    rows: &[f32],
    scale: f32,
    out: &mut [f32],
) {
    level.assert_runs_here();
    scaled_dots_run(level, q, rows, scale, out);
}

fn scaled_dots_run(level: crate::isa::Level, q: &[f32], rows: &[f32], scale: f32, out: &mut [f32]) {
    if q.is_empty() {
        return;
    }
    assert!(out.len() >= rows.len() / q.len(), "a value per row");
    #[cfg(target_arch = "x86_64")]
    if level.has_avx512() {
        #[target_feature(enable = "avx512f,fma")]
        unsafe fn avx512(q: &[f32], rows: &[f32], scale: f32, out: &mut [f32]) {
            let mut sixteen = rows.chunks_exact(16 * q.len());
            let mut k = 0;
            for block in &mut sixteen {
                let dst: &mut [f32; 16] = (&mut out[k..k + 16]).try_into().expect("16 values");
                // SAFETY: this function runs only where AVX-512 F was detected.
                unsafe { crate::kernels::x86_attention::scaled_dots_16(q, block, scale, dst) };
                k += 16;
            }
            for row in sixteen.remainder().chunks_exact(q.len()) {
                // SAFETY: as above.
                out[k] = unsafe { crate::kernels::x86::dot_f32::<true>(q, row) } * scale;
                k += 1;
            }
        }
        // SAFETY: the feature was detected on this CPU.
        return unsafe { avx512(q, rows, scale, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if level.has_avx2() {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(q: &[f32], rows: &[f32], scale: f32, out: &mut [f32]) {
            let mut eight = rows.chunks_exact(8 * q.len());
            let mut k = 0;
            for block in &mut eight {
                let dst: &mut [f32; 8] = (&mut out[k..k + 8]).try_into().expect("8 values");
                // SAFETY: this function runs only where AVX2 was detected.
                unsafe { crate::kernels::x86_attention::scaled_dots_8_avx2(q, block, scale, dst) };
                k += 8;
            }
            for row in eight.remainder().chunks_exact(q.len()) {
                out[k] = fused_dot_body(q, row) * scale;
                k += 1;
            }
        }
        // SAFETY: the feature was detected on this CPU.
        return unsafe { avx2(q, rows, scale, out) };
    }
    let _ = level;
    scaled_dots_body(q, rows, scale, out);
}

#[inline(always)]
fn scaled_dots_body(q: &[f32], rows: &[f32], scale: f32, out: &mut [f32]) {
    for (o, row) in out.iter_mut().zip(rows.chunks_exact(q.len())) {
        *o = fused_dot_body(q, row) * scale;
    }
}

/// `acc += sum_j weights[j] * rows[j]`, row after row (each element sees exactly
/// the additions of repeated [`axpy`]), `rows` holding `acc.len()`-long rows.
pub fn weighted_sum(acc: &mut [f32], weights: &[f32], rows: &[f32]) {
    weighted_sum_run(crate::isa::active(), acc, weights, rows);
}

/// [`weighted_sum`] on the build of `level` (panics if this CPU cannot run it).
pub fn weighted_sum_at(level: crate::isa::Level, acc: &mut [f32], weights: &[f32], rows: &[f32]) {
    level.assert_runs_here();
    weighted_sum_run(level, acc, weights, rows);
}

fn weighted_sum_run(level: crate::isa::Level, acc: &mut [f32], weights: &[f32], rows: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if level.has_avx512() {
            assert!(
                rows.len() >= weights.len() * acc.len(),
                "rows hold a row per weight"
            );
            // SAFETY: the feature was detected on this CPU; lengths checked above.
            return unsafe { crate::kernels::x86_attention::weighted_sum(acc, weights, rows) };
        }
        if level.has_avx2() {
            // SAFETY: the feature was detected on this CPU (the kernel checks lengths).
            return unsafe { crate::kernels::x86_attention::weighted_sum_avx2(acc, weights, rows) };
        }
    }
    let _ = level;
    weighted_sum_body(acc, weights, rows)
}

/// Query width from which [`scaled_dots_heads`] reads each row once for the group.
#[cfg(target_arch = "x86_64")]
const SHARED_READS_FROM: usize = 128;

/// [`scaled_dots_into`] for several queries over the same rows (the query heads of one
/// KV head): with `q_g` the consecutive `n`-long pieces of `qs`,
/// `out[g * stride + at + k] = fused_dot(q_g, rows[k]) * scale`, the same bits, each
/// row read once for all the queries where the CPU allows.
pub fn scaled_dots_heads(
    qs: &[f32],
    n: usize,
    rows: &[f32],
    scale: f32,
    out: &mut [f32],
    stride: usize,
    at: usize,
) {
    if n == 0 || qs.is_empty() {
        return;
    }
    let (heads, m) = (qs.len() / n, rows.len() / n);
    assert!(
        qs.len().is_multiple_of(n) && rows.len().is_multiple_of(n),
        "queries and rows of {n} values"
    );
    assert!(
        at + m <= stride || heads == 1,
        "a head's values stay inside its stride"
    );
    assert!(
        (heads - 1) * stride + at + m <= out.len(),
        "the output holds every value"
    );
    // Wide heads (Gemma 3's 256) are bound by reading the keys from L2: share
    // the reads across the group. Narrow ones are bound by arithmetic, where the
    // one-query kernel's shuffle folds win. The same bits either way.
    #[cfg(target_arch = "x86_64")]
    if n >= SHARED_READS_FROM && crate::isa::active().has_avx512() {
        // SAFETY: the feature was detected; lengths checked above.
        return unsafe {
            crate::kernels::x86_attention::scaled_dots_heads(qs, n, rows, scale, out, stride, at)
        };
    }
    for (g, q) in qs.chunks_exact(n).enumerate() {
        scaled_dots_into(
            q,
            rows,
            scale,
            &mut out[g * stride + at..g * stride + at + m],
        );
    }
}

/// [`weighted_sum`] for several heads over the same `m` rows: with `acc_g` the
/// consecutive `n`-long pieces of `accs`, `acc_g += sum_k weights[g * stride +
/// at + k] * rows[k]`, the same bits, each row read once per 4 heads where the
/// CPU allows.
pub fn weighted_sum_heads(
    accs: &mut [f32],
    n: usize,
    weights: &[f32],
    stride: usize,
    at: usize,
    m: usize,
    rows: &[f32],
) {
    if n == 0 || accs.is_empty() {
        return;
    }
    let heads = accs.len() / n;
    assert!(
        accs.len().is_multiple_of(n) && rows.len() >= m * n,
        "accumulators of {n} values, {m} rows"
    );
    assert!(
        (heads - 1) * stride + at + m <= weights.len(),
        "a weight per head and row"
    );
    #[cfg(target_arch = "x86_64")]
    if crate::isa::active().has_avx512() {
        for (i, a) in accs.chunks_mut(4 * n).enumerate() {
            // SAFETY: the feature was detected; lengths checked above.
            unsafe {
                crate::kernels::x86_attention::weighted_sum_heads(
                    a,
                    n,
                    weights,
                    stride,
                    4 * i * stride + at,
                    m,
                    rows,
                )
            };
        }
        return;
    }
    for (g, acc) in accs.chunks_exact_mut(n).enumerate() {
        weighted_sum(
            acc,
            &weights[g * stride + at..g * stride + at + m],
            &rows[..m * n],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatched_dot_equals_the_portable_twin_bit_for_bit_at_odd_lengths() {
        let mut seed = 12345u32;
        let mut r = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        for n in [0, 1, 3, 15, 16, 17, 31, 33, 127, 129, 576, 2049] {
            let a: Vec<f32> = (0..n).map(|_| r()).collect();
            let b: Vec<f32> = (0..n).map(|_| r()).collect();
            let want: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
            let got = dot(&a, &b);
            assert_eq!(got.to_bits(), dot_portable(&a, &b).to_bits(), "n = {n}");
            for level in crate::isa::Level::supported() {
                assert_eq!(
                    got.to_bits(),
                    dot_at(level, &a, &b).to_bits(),
                    "{level:?} n = {n}"
                );
            }
            assert!(
                (got as f64 - want).abs() < 1e-5 * (n as f64).max(1.0),
                "n = {n}: {got} vs {want}"
            );
        }
        // Sums follow dot's lanes (a dot with ones); maxima are exact.
        for n in [0usize, 1, 15, 16, 17, 300] {
            let v: Vec<f32> = (0..n).map(|_| r()).collect();
            let ones = vec![1.0f32; n];
            assert_eq!(
                sum(&v).to_bits(),
                dot_portable(&v, &ones).to_bits(),
                "sum of {n}"
            );
            let want = v.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            for level in crate::isa::Level::supported() {
                assert_eq!(
                    sum_at(level, &v).to_bits(),
                    sum_body(&v).to_bits(),
                    "sum of {n} {level:?}"
                );
                assert_eq!(max_at(level, &v), want, "max of {n} {level:?}");
            }
        }
        // Several heads at once give each head's bits.
        for (dk, heads, keys) in [
            (64usize, 3usize, 37usize),
            (256, 4, 16),
            (80, 5, 3),
            (16, 1, 1),
        ] {
            let qs: Vec<f32> = (0..heads * dk).map(|_| r()).collect();
            let rows: Vec<f32> = (0..keys * dk).map(|_| r()).collect();
            let (stride, at) = (keys + 5, 2);
            let mut scores = vec![0.0f32; heads * stride];
            scaled_dots_heads(&qs, dk, &rows, 0.3, &mut scores, stride, at);
            let ws: Vec<f32> = (0..heads * stride).map(|_| r()).collect();
            let mut accs = vec![0.25f32; heads * dk];
            weighted_sum_heads(&mut accs, dk, &ws, stride, at, keys, &rows);
            for g in 0..heads {
                let q = &qs[g * dk..(g + 1) * dk];
                let want: Vec<u32> = rows
                    .chunks_exact(dk)
                    .map(|k| (fused_dot_portable(q, k) * 0.3).to_bits())
                    .collect();
                let got: Vec<u32> = scores[g * stride + at..g * stride + at + keys]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect();
                assert_eq!(got, want, "scores dk {dk} head {g}");
                let mut one = vec![0.25f32; dk];
                for (j, row) in rows.chunks_exact(dk).enumerate() {
                    axpy(&mut one, ws[g * stride + at + j], row);
                }
                assert!(
                    one.iter()
                        .zip(&accs[g * dk..(g + 1) * dk])
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "values dk {dk} head {g}"
                );
            }
        }
        // The batched forms equal their one-at-a-time definitions.
        let mut fusion_shows = false;
        for dk in [1usize, 9, 15, 16, 25, 31, 64, 80, 200, 256] {
            let q: Vec<f32> = (0..dk).map(|_| r()).collect();
            let rows: Vec<f32> = (0..37 * dk).map(|_| r()).collect();
            let want: Vec<f32> = rows
                .chunks_exact(dk)
                .map(|k| fused_dot_portable(&q, k) * 0.125)
                .collect();
            // The data tells a fused product from a multiply then an add.
            fusion_shows |= rows
                .chunks_exact(dk)
                .any(|k| fused_dot_portable(&q, k) != dot_portable(&q, k));
            let w: Vec<f32> = (0..37).map(|_| r()).collect();
            let mut b = vec![0.5f32; dk];
            for (j, row) in rows.chunks_exact(dk).enumerate() {
                axpy(&mut b, w[j], row);
            }
            for level in crate::isa::Level::supported() {
                let mut got = vec![0.0f32; 37];
                scaled_dots_into_at(level, &q, &rows, 0.125, &mut got);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "dk {dk} {level:?}"
                );
                let mut a = vec![0.5f32; dk];
                weighted_sum_at(level, &mut a, &w, &rows);
                assert!(
                    a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "dk {dk} {level:?}"
                );
            }
        }
        assert!(fusion_shows, "some dot products round differently fused");
    }

    #[test]
    fn fused_scores_keep_a_negative_zero_past_the_tail() {
        // Every product underflows below zero: a fused partial sum rounds to -0.0,
        // which a lane past the tail must keep (adding +0.0 would make it +0.0).
        // Past the first 16 values every lane holds such a sum.
        for dk in [25usize, 41, 57] {
            let q = vec![-1e-30f32; dk];
            let rows = vec![1e-30f32; 16 * dk];
            let want = fused_dot_portable(&q, &rows[..dk]);
            assert_eq!(want.to_bits(), (-0.0f32).to_bits(), "dk {dk}");
            for level in crate::isa::Level::supported() {
                let mut got = vec![1.0f32; 16];
                scaled_dots_into_at(level, &q, &rows, 1.0, &mut got);
                assert!(
                    got.iter().all(|v| v.to_bits() == want.to_bits()),
                    "dk {dk} {level:?}: {got:?}"
                );
            }
        }
    }
}
