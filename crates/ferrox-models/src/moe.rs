//! Routing of a mixture-of-experts feed-forward (pure): which experts each
//! token goes to and with what weight, as llama.cpp's `build_moe_ffn` decides.
//! Softmax gating (Qwen3-MoE): probabilities by a softmax over every expert's
//! router logit, the `n_used` most probable experts (the lower index first on a
//! tie), their probabilities renormalized to sum to 1 when the architecture
//! says so (the sum clamped below at 2^-14, as llama.cpp does). Top-k-then-
//! softmax gating (gpt-oss): the `n_used` largest logits, weighted by a softmax
//! over those alone. Either is then scaled by `expert_weights_scale` when the
//! file gives one.
//!
//! Invariant: a token's route depends on its own logits only, so the experts it
//! reaches and their weights do not depend on the other tokens of a batch
//! (SPEC S3); [`Routes::by_expert`] lists every token once per chosen expert.

use crate::hparams::{Gating, MoeParams};

/// Each token's experts, best first, with their weights: `[n][n_used]` each.
#[derive(Clone, Debug, PartialEq)]
pub struct Routes {
    pub n_used: usize,
    pub experts: Vec<usize>,
    pub weights: Vec<f32>,
}

/// llama.cpp's floor on a weight sum it divides by (the smallest F16 normal).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

/// The routes of `n` tokens from their router logits `[n][n_experts]`.
pub fn route(logits: &[f32], moe: &MoeParams) -> Routes {
    let (e, k) = (moe.n_experts, moe.n_used);
    assert!(
        e > 0 && k <= e && logits.len().is_multiple_of(e),
        "logits are whole rows of {e} experts, {k} used"
    );
    let n = logits.len() / e;
    let mut routes = Routes {
        n_used: k,
        experts: Vec::with_capacity(n * k),
        weights: Vec::with_capacity(n * k),
    };
    let mut probs = vec![0.0f32; e];
    let mut order: Vec<usize> = Vec::with_capacity(e);
    let mut weights = vec![0.0f32; k];
    let scale = moe.weights_scale.unwrap_or(1.0);
    for row in logits.chunks_exact(e) {
        let ranked = match moe.gating {
            Gating::SoftmaxThenTopK => {
                probs.copy_from_slice(row);
                softmax(&mut probs);
                &probs[..]
            }
            Gating::TopKThenSoftmax => row,
        };
        order.clear();
        order.extend(0..e);
        // Stable: equal values keep the lower index first.
        order.sort_by(|&a, &b| ranked[b].total_cmp(&ranked[a]));
        let chosen = &order[..k];
        weights
            .iter_mut()
            .zip(chosen)
            .for_each(|(w, &i)| *w = ranked[i]);
        match moe.gating {
            Gating::SoftmaxThenTopK if moe.normalize => {
                let sum = weights.iter().sum::<f32>().max(MIN_WEIGHT_SUM);
                weights.iter_mut().for_each(|w| *w /= sum);
            }
            Gating::SoftmaxThenTopK => {}
            Gating::TopKThenSoftmax => softmax(&mut weights),
        }
        routes.experts.extend_from_slice(chosen);
        routes.weights.extend(weights.iter().map(|w| w * scale));
    }
    routes
}

/// `v = softmax(v)` in f32, shifted by the maximum.
fn softmax(v: &mut [f32]) {
    let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for o in v.iter_mut() {
        *o = (*o - max).exp();
        sum += *o;
    }
    v.iter_mut().for_each(|o| *o /= sum);
}

impl Routes {
    /// Number of tokens routed.
    pub fn tokens(&self) -> usize {
        self.experts.len() / self.n_used.max(1)
    }

    /// For each of `n_experts` experts, the `(token, rank)` pairs routed to it,
    /// in token order: a batch reads each chosen expert once, for all its rows.
    pub fn by_expert(&self, n_experts: usize) -> Vec<Vec<(usize, usize)>> {
        let mut groups = vec![Vec::new(); n_experts];
        for (slot, &e) in self.experts.iter().enumerate() {
            groups[e].push((slot / self.n_used, slot % self.n_used));
        }
        groups
    }

    /// The weight of token `t`'s rank-`r` expert.
    pub fn weight(&self, t: usize, r: usize) -> f32 {
        self.weights[t * self.n_used + r]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(n_experts: usize, n_used: usize, normalize: bool, scale: Option<f32>) -> MoeParams {
        MoeParams {
            n_experts,
            n_used,
            n_ff_expert: 8,
            weights_scale: scale,
            normalize,
            gating: Gating::SoftmaxThenTopK,
        }
    }

    #[test]
    fn top_k_then_softmax_weighs_the_chosen_logits_alone() {
        let logits = [1.0f32, -1.0, 3.0, 0.0];
        let moe = MoeParams {
            gating: Gating::TopKThenSoftmax,
            ..params(4, 2, false, None)
        };
        let r = route(&logits, &moe);
        assert_eq!(r.experts, vec![2, 0]);
        let w0 = 1.0 / (1.0 + (-2.0f64).exp());
        assert!((r.weight(0, 0) as f64 - w0).abs() < 1e-6);
        assert!((r.weight(0, 0) + r.weight(0, 1) - 1.0).abs() < 1e-6);
        // The other experts' logits do not move the weights.
        let r2 = route(&[1.0, 2.9, 3.0, 2.95], &moe);
        let r3 = route(&[1.0, 2.9, 3.0, -9.0], &moe);
        assert_eq!(r2.experts, vec![2, 3]);
        assert_eq!(r3.experts, vec![2, 1]);
    }

    #[test]
    fn the_most_probable_experts_are_chosen_and_renormalized() {
        // Token 0 prefers experts 2 then 0; token 1 prefers 1 then 3.
        let logits = [1.0, -1.0, 3.0, 0.0, 0.0, 2.0, 0.0, 1.0];
        let r = route(&logits, &params(4, 2, true, None));
        assert_eq!(r.experts, vec![2, 0, 1, 3]);
        let p = |row: &[f32], i: usize| {
            let z: f64 = row.iter().map(|&v| (v as f64).exp()).sum();
            (row[i] as f64).exp() / z
        };
        let (a, b) = (p(&logits[..4], 2), p(&logits[..4], 0));
        assert!((r.weight(0, 0) as f64 - a / (a + b)).abs() < 1e-6);
        assert!((r.weight(0, 0) + r.weight(0, 1) - 1.0).abs() < 1e-6);
        let raw = route(&logits, &params(4, 2, false, Some(2.5)));
        assert!((raw.weight(0, 0) as f64 - 2.5 * a).abs() < 1e-6);
        assert_eq!(
            r.by_expert(4),
            vec![vec![(0, 1)], vec![(1, 0)], vec![(0, 0)], vec![(1, 1)]]
        );
    }

    #[test]
    fn ties_go_to_the_lower_index_and_rows_are_independent() {
        let r = route(&[0.5, 0.5, 0.5], &params(3, 2, true, None));
        assert_eq!(r.experts, vec![0, 1]);
        let one = route(&[0.3, 0.9, -0.2, 0.1], &params(4, 2, true, None));
        let two = route(
            &[5.0, 0.0, 0.0, 0.0, 0.3, 0.9, -0.2, 0.1],
            &params(4, 2, true, None),
        );
        assert_eq!(&two.experts[2..], &one.experts[..]);
        assert_eq!(&two.weights[2..], &one.weights[..]);
    }
}
