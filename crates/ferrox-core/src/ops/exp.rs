//! `exp` from f32 multiplies and adds only, so that every build (portable, AVX2,
//! AVX-512, compiler-vectorized or not) returns the same bits; libm's `expf`
//! differs between implementations and is not vectorized.
//!
//! Invariants: the argument is clamped to [-87.33, 88] (results stay normal
//! and finite); `k = round_half_even(x / ln 2)` by the 1.5 * 2^23 trick; `r = x -
//! k ln2_hi - k ln2_lo`; `e^r` by a degree-7 Taylor polynomial in Horner form
//! (|r| <= 0.35, truncation below 1e-8 relative); times `2^k` built from bits
//! with integer operations only, so that every loop over it vectorizes.
//! Accuracy: within 2 ulp of the true value over the clamped range (tested).

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
const ROUNDER: f32 = 12_582_912.0; // 1.5 * 2^23

/// e^x.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.33, 88.0);
    let shifted = x * LOG2E + ROUNDER;
    let k = shifted - ROUNDER;
    let r = (x - k * LN2_HI) - k * LN2_LO;
    let mut p = 1.0 / 5040.0;
    for c in [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = p * r + c;
    }
    // `shifted`'s low mantissa bits hold k (|k| <= 127 < 2^22) over ROUNDER's
    // bits: 2^k is built with integer adds and a shift only, which vectorize
    // (a float-to-int cast, saturating in Rust, keeps LLVM from it).
    let k_bits = shifted.to_bits().wrapping_sub(ROUNDER.to_bits());
    p * f32::from_bits(k_bits.wrapping_add(127) << 23)
}

#[inline(always)]
fn exp_shifted_body(v: &mut [f32], shift: f32) {
    for x in v.iter_mut() {
        *x = exp(*x - shift);
    }
}

dispatched!(
    /// `v[i] = exp(v[i] - shift)`, vectorized where the CPU allows (same bits).
    pub fn exp_shifted / exp_shifted_at = exp_shifted_body(v: &mut [f32], shift: f32) -> ()
);

/// `ln(sum(e^v))`: a log-probability is `v[i] - log_sum_exp(v)`. Each term is
/// [`exp`] (within 2 ulp), summed in f64 (vectorized on the CPU's level), so the
/// result is within 3e-7 nats of the exact one.
pub fn log_sum_exp(v: &[f32]) -> f64 {
    let max = crate::ops::vector::max(v);
    max as f64 + exp_sum(v, max).ln()
}

/// Lanes of [`exp_sum`]'s f64 accumulators: value `i` goes to lane `i % 8`, the
/// tail to lane 0 after the lanes are added in order, on every build.
const SUM_LANES: usize = 8;

#[inline(always)]
fn exp_sum_body(v: &[f32], shift: f32) -> f64 {
    let chunks = v.chunks_exact(SUM_LANES);
    let tail = chunks.remainder();
    let mut acc = [0f64; SUM_LANES];
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += exp(x - shift) as f64;
        }
    }
    let mut sum: f64 = acc.iter().sum();
    for &x in tail {
        sum += exp(x - shift) as f64;
    }
    sum
}

dispatched!(
    /// `sum(exp(v[i] - shift))` in f64, in a fixed lane order (the same bits on
    /// every build).
    fn exp_sum / exp_sum_at = exp_sum_body(v: &[f32], shift: f32) -> f64
);

/// The portable build of [`exp_shifted`], for tests.
pub fn exp_shifted_portable(v: &mut [f32], shift: f32) {
    exp_shifted_body(v, shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_sum_exp_normalises_a_row() {
        let l = [1.0f32, 2.0, 3.0, -4.0];
        let lse = log_sum_exp(&l);
        let lp = |t: usize| l[t] as f64 - lse;
        let total: f64 = (0..4).map(|t| lp(t).exp()).sum();
        assert!((total - 1.0).abs() < 1e-6, "{total}");
        assert!(lp(2) > lp(1));
        let exact = l.iter().map(|&x| (x as f64).exp()).sum::<f64>().ln();
        assert!((lse - exact).abs() < 3e-7, "{lse} vs {exact}");
    }

    #[test]
    fn log_sum_exp_is_exact_to_3e7_and_every_build_gives_the_same_bits() {
        // A vocabulary-sized row with a tail past the lanes.
        let row: Vec<f32> = (0..49_157)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.02 - 11.0)
            .collect();
        let exact = row.iter().map(|&x| (x as f64).exp()).sum::<f64>().ln();
        assert!((log_sum_exp(&row) - exact).abs() < 3e-7);
        let max = crate::ops::vector::max(&row);
        let want = exp_sum_body(&row, max);
        for level in crate::isa::Level::supported() {
            assert_eq!(
                exp_sum_at(level, &row, max).to_bits(),
                want.to_bits(),
                "{level:?}"
            );
        }
    }

    #[test]
    fn exp_is_within_two_ulp_and_every_build_gives_the_same_bits() {
        let xs: Vec<f32> = (0..200_001)
            .map(|i| -87.0 + i as f32 * (175.0 / 200_000.0))
            .collect();
        for &x in &xs {
            let want = (x as f64).exp();
            let got = exp(x) as f64;
            let ulp = (want as f32).abs() * f32::EPSILON;
            assert!(
                (got - want).abs() <= 2.0 * ulp as f64,
                "exp({x}) = {got}, want {want}"
            );
        }
        let mut b = xs.clone();
        exp_shifted_portable(&mut b, 0.5);
        for level in crate::isa::Level::supported() {
            let mut a = xs.clone();
            exp_shifted_at(level, &mut a, 0.5);
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{level:?}"
            );
        }
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-1000.0) > 0.0 && exp(1000.0).is_finite());
    }
}
