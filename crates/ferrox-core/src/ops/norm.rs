//! RMS normalization: `y = x / sqrt(mean(x^2) + eps) * w`.
//!
//! Invariant: the mean square is reduced with [`super::vector::dot`] (fixed order),
//! so a row's result does not depend on its neighbours.

use super::vector::dot;

/// Normalizes `x` in place and scales by `w` (same length).
pub fn rms_norm(x: &mut [f32], w: &[f32], eps: f32) {
    assert_eq!(x.len(), w.len(), "one weight per value");
    let ms = dot(x, x) / x.len() as f32;
    let scale = 1.0 / (ms + eps).sqrt();
    for (v, &g) in x.iter_mut().zip(w) {
        *v = *v * scale * g;
    }
}

/// Normalizes `x` in place, unscaled (as [`rms_norm`] with a weight of ones).
pub fn rms_normalize(x: &mut [f32], eps: f32) {
    let ms = dot(x, x) / x.len() as f32;
    let scale = 1.0 / (ms + eps).sqrt();
    x.iter_mut().for_each(|v| *v *= scale);
}

/// Normalizes every `dim`-wide piece of `x`, unscaled (Gemma 4's values).
pub fn rms_normalize_each(x: &mut [f32], dim: usize, eps: f32) {
    x.chunks_exact_mut(dim).for_each(|p| rms_normalize(p, eps));
}

/// Normalizes every `dim`-wide piece of `x` (per-head QK-norm), scaling by `w`.
pub fn rms_norm_each(x: &mut [f32], dim: usize, w: &[f32], eps: f32) {
    for piece in x.chunks_exact_mut(dim) {
        rms_norm(piece, w, eps);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_gives_unit_mean_square() {
        let mut x = vec![3.0f32, -4.0, 0.0, 5.0];
        rms_norm(&mut x, &[1.0; 4], 0.0);
        let ms: f32 = x.iter().map(|v| v * v).sum::<f32>() / 4.0;
        assert!((ms - 1.0).abs() < 1e-6);
    }
}
