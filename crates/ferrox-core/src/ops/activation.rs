//! Element-wise activations of the feed-forward blocks, built on `ops::exp` (f32
//! multiplies and adds only), so the vectorized builds chosen at run time give
//! the portable bits.

use super::exp::exp;

/// SiLU (`x * sigmoid(x)`), the llama family's gate.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

/// GELU with the tanh approximation (`gelu_pytorch_tanh`), Gemma's gate.
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let z = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    0.5 * x * (1.0 + tanh(z))
}

/// tanh from [`exp`]: `sign(x) * (1 - 2 / (e^(2|x|) + 1))`, within 1.2e-7 of
/// the true value (an absolute bound: it is the rounding of `1 - ...` near 1,
/// and of the quotient near 0).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    (1.0 - 2.0 / (exp(2.0 * x.abs()) + 1.0)).copysign(x)
}

#[inline(always)]
fn softcap_body(values: &mut [f32], cap: f32) {
    values.iter_mut().for_each(|v| *v = cap * tanh(*v / cap));
}

dispatched!(
    /// Soft-capping, `v[i] = cap * tanh(v[i] / cap)` (Gemma's attention scores
    /// and logits), vectorized where the CPU allows (same bits).
    pub fn softcap / softcap_at = softcap_body(values: &mut [f32], cap: f32) -> ()
);

/// gpt-oss's clamped SwiGLU (ggml's `swiglu_oai`): the gate capped above at
/// `SWIGLU_OAI_LIMIT`, the up value clamped to `±SWIGLU_OAI_LIMIT`, then
/// `g * sigmoid(alpha * g) * (u + 1)`.
#[inline(always)]
pub fn swiglu_oai(g: f32, u: f32) -> f32 {
    let x = g.min(SWIGLU_OAI_LIMIT);
    let y = u.clamp(-SWIGLU_OAI_LIMIT, SWIGLU_OAI_LIMIT);
    x / (1.0 + exp(SWIGLU_OAI_ALPHA * -x)) * (y + 1.0)
}

/// The sigmoid's slope of [`swiglu_oai`] (llama.cpp's constant for gpt-oss).
pub const SWIGLU_OAI_ALPHA: f32 = 1.702;
/// The clamp of [`swiglu_oai`].
pub const SWIGLU_OAI_LIMIT: f32 = 7.0;

/// The gate activation of a feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    Silu,
    GeluTanh,
    /// [`swiglu_oai`] (gpt-oss's experts).
    SwigluOai,
}

#[inline(always)]
fn gated_body(gate: &mut [f32], up: &[f32], act: Gate) {
    match act {
        Gate::Silu => gate
            .iter_mut()
            .zip(up)
            .for_each(|(g, &u)| *g = silu(*g) * u),
        Gate::GeluTanh => gate
            .iter_mut()
            .zip(up)
            .for_each(|(g, &u)| *g = gelu_tanh(*g) * u),
        Gate::SwigluOai => gate
            .iter_mut()
            .zip(up)
            .for_each(|(g, &u)| *g = swiglu_oai(*g, u)),
    }
}

dispatched!(
    /// `gate[i] = act(gate[i]) * up[i]`, vectorized where the CPU allows (same bits).
    pub fn gated / gated_at = gated_body(gate: &mut [f32], up: &[f32], act: Gate) -> ()
);

#[inline(always)]
fn silu_body(values: &mut [f32]) {
    values.iter_mut().for_each(|v| *v = silu(*v));
}

dispatched!(
    /// `values[i] = silu(values[i])` (Qwen3.5's delta-net convolution),
    /// vectorized where the CPU allows (same bits).
    pub fn silu_each / silu_each_at = silu_body(values: &mut [f32]) -> ()
);

#[inline(always)]
fn gelu_tanh_body(values: &mut [f32]) {
    values.iter_mut().for_each(|v| *v = gelu_tanh(*v));
}

dispatched!(
    /// `values[i] = gelu_tanh(values[i])` (BERT's feed-forward), vectorized
    /// where the CPU allows (same bits).
    pub fn gelu_tanh_each / gelu_tanh_each_at = gelu_tanh_body(values: &mut [f32]) -> ()
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_match_their_definitions_and_every_build_gives_the_same_bits() {
        for x in [
            -60.0f32, -6.0, -1.0, -0.1, -1e-4, 0.0, 1e-4, 0.3, 2.0, 8.0, 60.0,
        ] {
            let xd = x as f64;
            let silu_ref = xd / (1.0 + (-xd).exp());
            assert!(
                (silu(x) as f64 - silu_ref).abs() < 1e-6 * (1.0 + xd.abs()),
                "silu({x})"
            );
            let gelu_ref = 0.5
                * xd
                * (1.0
                    + ((2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd.powi(3))).tanh());
            assert!(
                (gelu_tanh(x) as f64 - gelu_ref).abs() < 1e-6 * (1.0 + xd.abs()),
                "gelu({x})"
            );
            for u in [-9.0f32, -1.0, 0.0, 0.5, 8.0] {
                let (g, uc) = (xd.min(7.0), (u as f64).clamp(-7.0, 7.0));
                let oai_ref = g / (1.0 + (-1.702 * g).exp()) * (uc + 1.0);
                assert!(
                    (swiglu_oai(x, u) as f64 - oai_ref).abs() < 1e-5 * (1.0 + oai_ref.abs()),
                    "swiglu_oai({x}, {u})"
                );
            }
        }
        let xs: Vec<f32> = (0..4099).map(|i| (i as f32 - 2049.0) / 97.0).collect();
        for &x in &xs {
            let want = (x as f64).tanh();
            assert!((tanh(x) as f64 - want).abs() <= 1.2e-7, "tanh({x})");
        }
        assert_eq!((tanh(1e4), tanh(-1e4), tanh(0.0)), (1.0, -1.0, 0.0));
        let mut g = xs.clone();
        gelu_tanh_body(&mut g);
        for level in crate::isa::Level::supported() {
            let mut a = xs.clone();
            gelu_tanh_each_at(level, &mut a);
            assert!(
                a.iter().zip(&g).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{level:?}"
            );
        }
        for level in crate::isa::Level::supported() {
            let mut a = xs.clone();
            silu_each_at(level, &mut a);
            assert!(
                a.iter()
                    .zip(&xs)
                    .all(|(y, &x)| y.to_bits() == silu(x).to_bits()),
                "silu, {level:?}"
            );
        }
        let mut b = xs.clone();
        softcap_body(&mut b, 30.0);
        for level in crate::isa::Level::supported() {
            let mut a = xs.clone();
            softcap_at(level, &mut a, 30.0);
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "softcap {level:?}"
            );
        }
        for act in [Gate::Silu, Gate::GeluTanh, Gate::SwigluOai] {
            let mut b = xs.clone();
            gated_body(&mut b, &xs, act);
            for level in crate::isa::Level::supported() {
                let mut a = xs.clone();
                gated_at(level, &mut a, &xs, act);
                assert!(
                    a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{act:?} {level:?}"
                );
            }
        }
    }
}
