//! Fixed-order vector reductions: the building block of batch invariance.
//!
//! `dot` keeps [`LANES`] partial sums, lane `l` taking elements `l, l + LANES, ...`
//! of the whole-lane prefix and the tail going to lanes `0..tail` in order; the
//! lanes are folded pairwise (8+8, 4+4, 2+2, 1+1). Multiplies and adds are
//! separate IEEE operations (no FMA contraction in Rust), so any vector width
//! computes exactly this.

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

#[inline(always)]
fn dot_body(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; LANES];
    let whole = n / LANES * LANES;
    for (ca, cb) in a[..whole]
        .chunks_exact(LANES)
        .zip(b[..whole].chunks_exact(LANES))
    {
        for l in 0..LANES {
            acc[l] += ca[l] * cb[l];
        }
    }
    for (l, (x, y)) in a[whole..].iter().zip(&b[whole..]).enumerate() {
        acc[l] += x * y;
    }
    fold(acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_body(a, b)
}

/// `sum(a[i] * b[i])` over the shorter length, in the fixed lane order.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the feature was detected on this CPU.
            return unsafe { crate::kernels::x86::dot_f32(a, b) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the feature was detected on this CPU.
            return unsafe { dot_avx2(a, b) };
        }
    }
    dot_body(a, b)
}

/// The portable build of [`dot`] (the scalar twin the dispatched builds must equal).
pub fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    dot_body(a, b)
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

/// `sum(v)` in [`dot`]'s lane order (value `i` into lane `i % LANES`, the tail
/// into lanes `0..tail`, pairwise fold): the same bits on every build.
pub fn sum(v: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512vl,avx2")]
        unsafe fn avx512(v: &[f32]) -> f32 {
            sum_body(v)
        }
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            // SAFETY: the features were detected on this CPU.
            return unsafe { avx512(v) };
        }
    }
    sum_body(v)
}

/// The largest value of `v` (negative infinity when empty; NaNs are skipped). A
/// maximum is exact, so any order gives the same value.
pub fn max(v: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512vl,avx2")]
        unsafe fn avx512(v: &[f32]) -> f32 {
            max_body(v)
        }
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            // SAFETY: the features were detected on this CPU.
            return unsafe { avx512(v) };
        }
    }
    max_body(v)
}

/// `acc[i] += s * v[i]`.
#[inline]
pub fn axpy(acc: &mut [f32], s: f32, v: &[f32]) {
    for (a, &x) in acc.iter_mut().zip(v) {
        *a += s * x;
    }
}

#[inline(always)]
fn scaled_dots_body(q: &[f32], rows: &[f32], scale: f32, out: &mut Vec<f32>) {
    for row in rows.chunks_exact(q.len()) {
        out.push(dot_body(q, row) * scale);
    }
}

#[inline(always)]
fn weighted_sum_body(acc: &mut [f32], weights: &[f32], rows: &[f32]) {
    for (&w, row) in weights.iter().zip(rows.chunks_exact(acc.len())) {
        axpy(acc, w, row);
    }
}

/// `out.push(dot(q, row) * scale)` for each `q.len()`-long row of `rows`, in order
/// (attention scores over a run of keys).
pub fn scaled_dots(q: &[f32], rows: &[f32], scale: f32, out: &mut Vec<f32>) {
    if q.is_empty() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512(q: &[f32], rows: &[f32], scale: f32, out: &mut Vec<f32>) {
            let mut sixteen = rows.chunks_exact(16 * q.len());
            let mut buf = [0.0f32; 16];
            for block in &mut sixteen {
                // SAFETY: this function runs only where AVX-512 F was detected.
                unsafe { crate::kernels::x86::scaled_dots_16(q, block, scale, &mut buf) };
                out.extend_from_slice(&buf);
            }
            for row in sixteen.remainder().chunks_exact(q.len()) {
                // SAFETY: as above.
                out.push(unsafe { crate::kernels::x86::dot_f32(q, row) } * scale);
            }
        }
        // SAFETY: the feature was detected on this CPU.
        return unsafe { avx512(q, rows, scale, out) };
    }
    scaled_dots_body(q, rows, scale, out)
}

/// `acc += sum_j weights[j] * rows[j]`, row after row (each element sees exactly
/// the additions of repeated [`axpy`]), `rows` holding `acc.len()`-long rows.
pub fn weighted_sum(acc: &mut [f32], weights: &[f32], rows: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            assert!(
                rows.len() >= weights.len() * acc.len(),
                "rows hold a row per weight"
            );
            // SAFETY: the feature was detected on this CPU; lengths checked above.
            return unsafe { crate::kernels::x86::weighted_sum(acc, weights, rows) };
        }
        #[target_feature(enable = "avx2")]
        unsafe fn avx2(acc: &mut [f32], weights: &[f32], rows: &[f32]) {
            weighted_sum_body(acc, weights, rows)
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the feature was detected on this CPU.
            return unsafe { avx2(acc, weights, rows) };
        }
    }
    weighted_sum_body(acc, weights, rows)
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
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: detected.
                assert_eq!(
                    got.to_bits(),
                    unsafe { dot_avx2(&a, &b) }.to_bits(),
                    "avx2 n = {n}"
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
            assert_eq!(sum(&v).to_bits(), sum_body(&v).to_bits(), "sum of {n}");
            let want = v.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            assert_eq!(max(&v), want, "max of {n}");
        }
        // The batched forms equal their one-at-a-time definitions.
        for dk in [1usize, 15, 16, 64, 80, 200, 256] {
            let q: Vec<f32> = (0..dk).map(|_| r()).collect();
            let rows: Vec<f32> = (0..37 * dk).map(|_| r()).collect();
            let mut got = Vec::new();
            scaled_dots(&q, &rows, 0.125, &mut got);
            let want: Vec<f32> = rows
                .chunks_exact(dk)
                .map(|k| dot_portable(&q, k) * 0.125)
                .collect();
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "dk {dk}"
            );
            let w: Vec<f32> = (0..37).map(|_| r()).collect();
            let (mut a, mut b) = (vec![0.5f32; dk], vec![0.5f32; dk]);
            weighted_sum(&mut a, &w, &rows);
            for (j, row) in rows.chunks_exact(dk).enumerate() {
                axpy(&mut b, w[j], row);
            }
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "dk {dk}"
            );
        }
    }
}
