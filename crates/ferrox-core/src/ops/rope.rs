//! Rotary position embeddings.
//!
//! Two pairings, as ggml names them: `Normal` rotates adjacent pairs
//! `(x[2i], x[2i+1])` (llama family GGUFs, whose Q/K weights the converter
//! permuted); `Neox` rotates `(x[i], x[i + d/2])` (Qwen2, Gemma). Pair `i` of a
//! `d`-dim rotated span turns by `pos * base^(-2i/d)`, changed by the scalings and
//! frequency factors of [`RopeFreqs`].

/// How dimensions pair up for rotation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    Normal,
    Neox,
}

/// How positions stretch beyond the trained context (ggml's `rope_yarn`).
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// Every angle divided by `factor` (position interpolation).
    Linear { factor: f32 },
    /// YaRN: pairs that turn slowly are interpolated by `factor`, fast ones
    /// extrapolated, with a linear ramp between the correction dimensions that
    /// `orig_context`, `beta_fast` and `beta_slow` give (rounded out to whole
    /// dimensions when `truncate`, as ggml always rounds them and HF does
    /// unless a config says `truncate: false`); magnitudes scaled by
    /// `1 + 0.1 ln(factor)` when `factor > 1` (llama.cpp's net scale).
    Yarn {
        factor: f32,
        orig_context: usize,
        beta_fast: f32,
        beta_slow: f32,
        truncate: bool,
    },
}

impl std::fmt::Display for RopeScaling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RopeScaling::None => write!(f, "none"),
            RopeScaling::Linear { factor } => write!(f, "linear x{factor}"),
            RopeScaling::Yarn {
                factor,
                orig_context,
                truncate,
                ..
            } => {
                write!(f, "yarn x{factor} of {orig_context}")?;
                if !truncate {
                    write!(f, " (correction range not rounded)")?;
                }
                Ok(())
            }
        }
    }
}

/// The angular frequency of every rotated pair of one RoPE variant, and the
/// factor its cosines and sines are scaled by.
///
/// Pair `i` of a `dim`-wide rotated span turns by `pos * w[i]`, with
/// `w[i] = base^(-2i/dim) / factors[i]` then scaled as [`RopeScaling`] says
/// (llama3 and LongRoPE models give `factors` as a tensor). Frequencies and angles
/// are computed in f64 and rounded once, so a position's rotation never depends
/// on its batch.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeFreqs {
    freqs: Vec<f64>,
    mscale: f64,
}

impl RopeFreqs {
    /// The frequencies of a `dim`-wide rotated span (`dim` even).
    ///
    /// Panics when `factors` is given with a length other than `dim / 2`.
    pub fn new(
        dim: usize,
        base: f32,
        scaling: RopeScaling,
        factors: Option<&[f32]>,
        attn_factor: f32,
    ) -> RopeFreqs {
        let half = dim / 2;
        if let Some(f) = factors {
            assert_eq!(f.len(), half, "one frequency factor per rotated pair");
        }
        let base = base as f64;
        let mut mscale = attn_factor as f64;
        let ramp = match scaling {
            RopeScaling::Yarn {
                factor,
                orig_context,
                beta_fast,
                beta_slow,
                truncate,
            } => {
                if factor > 1.0 {
                    mscale *= 1.0 + 0.1 * (factor as f64).ln();
                }
                let corr = |beta: f32| {
                    dim as f64
                        * (orig_context as f64 / (beta as f64 * 2.0 * std::f64::consts::PI)).ln()
                        / (2.0 * base.ln())
                };
                let (low, high) = match truncate {
                    true => (corr(beta_fast).floor(), corr(beta_slow).ceil()),
                    false => (corr(beta_fast), corr(beta_slow)),
                };
                let (low, high) = (low.max(0.0), high.min(dim as f64 - 1.0));
                Some((low, high, 1.0 / factor as f64))
            }
            _ => None,
        };
        let freqs = (0..half)
            .map(|i| {
                let mut w = base.powf(-2.0 * i as f64 / dim as f64);
                if let Some(f) = factors {
                    w /= f[i] as f64;
                }
                match (scaling, ramp) {
                    (RopeScaling::Linear { factor }, _) => w / factor as f64,
                    (RopeScaling::Yarn { .. }, Some((low, high, scale))) => {
                        // 1 on pairs that keep their trained angle, 0 on interpolated ones.
                        let y = (i as f64 - low) / (high - low).max(0.001);
                        let keep = 1.0 - y.clamp(0.0, 1.0);
                        w * (scale * (1.0 - keep) + keep)
                    }
                    _ => w,
                }
            })
            .collect();
        RopeFreqs { freqs, mscale }
    }

    /// Rotated pairs.
    pub fn pairs(&self) -> usize {
        self.freqs.len()
    }

    /// Cosines and sines of position `pos`, scaled: `[pairs]` each.
    pub fn angles(&self, pos: usize, cos: &mut [f32], sin: &mut [f32]) {
        assert!(cos.len() >= self.freqs.len() && sin.len() >= self.freqs.len());
        for (i, &w) in self.freqs.iter().enumerate() {
            let theta = pos as f64 * w;
            cos[i] = (theta.cos() * self.mscale) as f32;
            sin[i] = (theta.sin() * self.mscale) as f32;
        }
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

    impl RopeFreqs {
        fn plain(dim: usize, base: f32) -> RopeFreqs {
            RopeFreqs::new(dim, base, RopeScaling::None, None, 1.0)
        }
    }

    #[test]
    fn rotation_preserves_norms_and_position_zero_is_identity() {
        let (mut c, mut s) = (vec![0.0; 4], vec![0.0; 4]);
        let freqs = RopeFreqs::plain(8, 10000.0);
        freqs.angles(0, &mut c, &mut s);
        let mut x: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let orig = x.clone();
        apply(&mut x, 8, 8, RopeStyle::Neox, &c, &s);
        assert_eq!(x, orig);
        freqs.angles(7, &mut c, &mut s);
        for style in [RopeStyle::Normal, RopeStyle::Neox] {
            let mut y = orig.clone();
            apply(&mut y, 8, 8, style, &c, &s);
            let n0: f32 = orig.iter().map(|v| v * v).sum();
            let n1: f32 = y.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-3);
            assert_ne!(y, orig);
        }
    }

    #[test]
    fn linear_scaling_divides_every_angle_and_factors_divide_their_pair() {
        let plain = RopeFreqs::plain(8, 10000.0);
        let linear = RopeFreqs::new(8, 10000.0, RopeScaling::Linear { factor: 4.0 }, None, 1.0);
        let factors = RopeFreqs::new(
            8,
            10000.0,
            RopeScaling::None,
            Some(&[1.0, 2.0, 1.0, 8.0]),
            1.0,
        );
        for i in 0..4 {
            assert!((linear.freqs[i] * 4.0 - plain.freqs[i]).abs() < 1e-15);
        }
        assert_eq!(factors.freqs[0], plain.freqs[0]);
        assert!((factors.freqs[3] * 8.0 - plain.freqs[3]).abs() < 1e-15);
    }

    #[test]
    fn yarn_keeps_fast_pairs_interpolates_slow_ones_and_scales_magnitude() {
        let scaling = RopeScaling::Yarn {
            factor: 4.0,
            orig_context: 64,
            beta_fast: 32.0,
            beta_slow: 1.0,
            truncate: true,
        };
        let plain = RopeFreqs::plain(64, 10000.0);
        let yarn = RopeFreqs::new(64, 10000.0, scaling, None, 1.0);
        assert_eq!(yarn.freqs[0], plain.freqs[0]);
        assert!((yarn.freqs[31] * 4.0 - plain.freqs[31]).abs() < 1e-15);
        let (mut c, mut s) = (vec![0.0; 32], vec![0.0; 32]);
        yarn.angles(0, &mut c, &mut s);
        assert!((c[0] as f64 - (1.0 + 0.1 * 4f64.ln())).abs() < 1e-6);
    }

    /// gpt-oss-20b's YaRN (64-wide heads, base 150000, x32 of 4096): HF's
    /// correction range without rounding is 8.09..17.40 (vLLM and SGLang report
    /// the same numbers); ggml rounds it out to 8..18.
    #[test]
    fn yarn_without_truncation_ramps_between_the_exact_correction_dims() {
        let scaling = |truncate| RopeScaling::Yarn {
            factor: 32.0,
            orig_context: 4096,
            beta_fast: 32.0,
            beta_slow: 1.0,
            truncate,
        };
        let plain = RopeFreqs::plain(64, 150_000.0);
        let exact = RopeFreqs::new(64, 150_000.0, scaling(false), None, 1.0);
        let rounded = RopeFreqs::new(64, 150_000.0, scaling(true), None, 1.0);
        let corr = |beta: f64| {
            64.0 * (4096.0 / (beta * 2.0 * std::f64::consts::PI)).ln() / (2.0 * 150_000f64.ln())
        };
        let (low, high) = (corr(32.0), corr(1.0));
        assert!((low - 8.0928).abs() < 1e-3 && (high - 17.398).abs() < 1e-3);
        for i in 0..32 {
            let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
            let want = plain.freqs[i] * (ramp / 32.0 + (1.0 - ramp));
            assert!((exact.freqs[i] - want).abs() < 1e-15, "pair {i}");
            let ramp = ((i as f64 - 8.0) / 10.0).clamp(0.0, 1.0);
            let want = plain.freqs[i] * (ramp / 32.0 + (1.0 - ramp));
            assert!((rounded.freqs[i] - want).abs() < 1e-15, "pair {i}");
        }
        assert_ne!(exact.freqs[9], rounded.freqs[9]);
    }
}
