//! Element-wise activations of the feed-forward blocks.

/// SiLU (`x * sigmoid(x)`), the llama family's gate.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU with the tanh approximation (`gelu_pytorch_tanh`), Gemma's gate.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)).tanh())
}

/// `gate[i] = act(gate[i]) * up[i]`.
pub fn gated(gate: &mut [f32], up: &[f32], act: fn(f32) -> f32) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = act(*g) * u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_match_their_definitions() {
        for x in [-6.0f32, -1.0, -0.1, 0.0, 0.3, 2.0, 8.0] {
            let xd = x as f64;
            let silu_ref = xd / (1.0 + (-xd).exp());
            assert!((silu(x) as f64 - silu_ref).abs() < 1e-6, "silu({x})");
            let gelu_ref = 0.5 * xd * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd.powi(3))).tanh());
            assert!((gelu_tanh(x) as f64 - gelu_ref).abs() < 1e-6, "gelu({x})");
        }
    }
}
