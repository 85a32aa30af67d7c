//! RMS normalization: `y = x / sqrt(mean(x^2) + eps) * w`; and layer
//! normalization (encoders): `y = (x - mean) / sqrt(var + eps) * w + b`.
//!
//! Invariant: the mean square is reduced with [`super::vector::dot`] (fixed order),
//! and a layer norm's moments in f64 in index order, so a row's result does not
//! depend on its neighbours.

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

/// Layer-normalizes `x` in place: centred, scaled to unit variance (the mean
/// square of the centred values, as ggml's `norm`), then `* w + b`.
pub fn layer_norm(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    assert!(
        x.len() == w.len() && x.len() == b.len(),
        "one weight and bias per value"
    );
    let n = x.len() as f64;
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
    let scale = 1.0 / (var + eps as f64).sqrt();
    for ((v, &g), &c) in x.iter_mut().zip(w).zip(b) {
        *v = ((*v as f64 - mean) * scale) as f32 * g + c;
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
    fn layer_norm_centres_and_scales() {
        let mut x = vec![1.0f32, 2.0, 3.0, 6.0];
        layer_norm(&mut x, &[2.0; 4], &[0.5; 4], 0.0);
        let mean: f32 = x.iter().sum::<f32>() / 4.0;
        assert!((mean - 0.5).abs() < 1e-6, "{mean}");
        let var: f32 = x.iter().map(|v| (v - 0.5) * (v - 0.5)).sum::<f32>() / 4.0;
        assert!((var - 4.0).abs() < 1e-5, "{var}");
    }

    #[test]
    fn rms_norm_gives_unit_mean_square() {
        let mut x = vec![3.0f32, -4.0, 0.0, 5.0];
        rms_norm(&mut x, &[1.0; 4], 0.0);
        let ms: f32 = x.iter().map(|v| v * v).sum::<f32>() / 4.0;
        assert!((ms - 1.0).abs() < 1e-6);
    }
}
