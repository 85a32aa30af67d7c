//! Rotary position embeddings.
//!
//! Two pairings, as ggml names them: `Normal` rotates adjacent pairs
//! `(x[2i], x[2i+1])` (llama family GGUFs, whose Q/K weights the converter
//! permuted); `Neox` rotates `(x[i], x[i + d/2])` (Qwen2, Gemma). Pair `i` of a
//! `d`-dim rotated span turns by `pos * base^(-2i/d)`; angles are computed in f64
//! and rounded once, so a position's rotation never depends on its batch.

/// How dimensions pair up for rotation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    Normal,
    Neox,
}

/// Cosines and sines of one position: `[rope_dim / 2]` each.
pub fn angles(pos: usize, rope_dim: usize, base: f32, cos: &mut [f32], sin: &mut [f32]) {
    for i in 0..rope_dim / 2 {
        let theta = pos as f64 * (base as f64).powf(-2.0 * i as f64 / rope_dim as f64);
        cos[i] = theta.cos() as f32;
        sin[i] = theta.sin() as f32;
    }
}

/// Rotates the first `rope_dim` dimensions of every `head_dim`-wide head in `x`.
pub fn apply(
    x: &mut [f32],
    head_dim: usize,
    rope_dim: usize,
    style: RopeStyle,
    cos: &[f32],
    sin: &[f32],
) {
    let half = rope_dim / 2;
    for head in x.chunks_exact_mut(head_dim) {
        for i in 0..half {
            let (a, b) = match style {
                RopeStyle::Normal => (2 * i, 2 * i + 1),
                RopeStyle::Neox => (i, i + half),
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * cos[i] - x1 * sin[i];
            head[b] = x0 * sin[i] + x1 * cos[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_preserves_norms_and_position_zero_is_identity() {
        let (mut c, mut s) = (vec![0.0; 4], vec![0.0; 4]);
        angles(0, 8, 10000.0, &mut c, &mut s);
        let mut x: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let orig = x.clone();
        apply(&mut x, 8, 8, RopeStyle::Neox, &c, &s);
        assert_eq!(x, orig);
        angles(7, 8, 10000.0, &mut c, &mut s);
        for style in [RopeStyle::Normal, RopeStyle::Neox] {
            let mut y = orig.clone();
            apply(&mut y, 8, 8, style, &c, &s);
            let n0: f32 = orig.iter().map(|v| v * v).sum();
            let n1: f32 = y.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-3);
            assert_ne!(y, orig);
        }
    }
}
