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
    for (ca, cb) in a[..whole].chunks_exact(LANES).zip(b[..whole].chunks_exact(LANES)) {
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

/// `acc[i] += s * v[i]`.
#[inline]
pub fn axpy(acc: &mut [f32], s: f32, v: &[f32]) {
    for (a, &x) in acc.iter_mut().zip(v) {
        *a += s * x;
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
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: detected.
                assert_eq!(got.to_bits(), unsafe { dot_avx2(&a, &b) }.to_bits(), "avx2 n = {n}");
            }
            assert!((got as f64 - want).abs() < 1e-5 * (n as f64).max(1.0), "n = {n}: {got} vs {want}");
        }
    }
}
