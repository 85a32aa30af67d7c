//! Element-wise activations of the feed-forward blocks, built on `ops::exp` (f32
//! multiplies and adds only), so the vectorized builds chosen at run time give
//! the portable bits.

use super::exp::exp;

/// SiLU (`x * sigmoid(x)`), the llama family's gate.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

/// GELU with the tanh approximation (`gelu_pytorch_tanh`), Gemma's gate, with
/// `tanh(z) = 1 - 2 / (e^(2z) + 1)`.
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let z = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    let tanh = 1.0 - 2.0 / (exp(2.0 * z) + 1.0);
    0.5 * x * (1.0 + tanh)
}

/// The gate activation of a feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    Silu,
    GeluTanh,
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
    }
}

dispatched!(
    /// `gate[i] = act(gate[i]) * up[i]`, vectorized where the CPU allows (same bits).
    pub fn gated / gated_at = gated_body(gate: &mut [f32], up: &[f32], act: Gate) -> ()
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
        }
        let xs: Vec<f32> = (0..4099).map(|i| (i as f32 - 2049.0) / 97.0).collect();
        for act in [Gate::Silu, Gate::GeluTanh] {
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
