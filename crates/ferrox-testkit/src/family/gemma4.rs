//! Gemma 4's families: four layers (a window layer, a full one, then again),
//! every key and tensor name the converter writes for the model copied.

use ferrox_core::DType;
use ferrox_gguf::{Array, GgufWriter, Value};

use super::{Builder, Family, Shape, dense_ffn};

/// The Gemma 4 model a family copies.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Gemma4Like {
    /// 31B: window layers with more KV heads of half the width, full layers
    /// whose values are their keys (`attention_k_eq_v`), KV heads per layer.
    Dense,
    /// E2B: one KV head, the last two layers read the first two's KV and are
    /// twice as wide inside, per-layer token inputs.
    E2b,
    /// 26B-A4B: the 31B's attention, and routed experts beside the dense
    /// feed-forward.
    Moe,
}

/// Window of the window layers (the real models' 512-1024; 8 here, so the
/// prompts outrun it).
const WINDOW: usize = 8;
/// Width of the per-layer token inputs (E2B's 256).
const PER_LAYER: usize = 32;

/// One layer's attention and feed-forward shape.
struct LayerShape {
    window: bool,
    n_kv_heads: usize,
    head_dim: usize,
    ff: usize,
    /// Values are the keys (no `attn_v`).
    values_are_keys: bool,
}

impl Family {
    fn like(&self) -> Gemma4Like {
        self.gemma4.expect("a Gemma 4 family")
    }

    /// Shared-KV layers at the end (E2B: the second half).
    fn shared_kv_layers(&self) -> usize {
        match self.like() {
            Gemma4Like::Dense | Gemma4Like::Moe => 0,
            Gemma4Like::E2b => self.n_layers() / 2,
        }
    }

    fn gemma4_shape(&self, shape: Shape, i: usize) -> LayerShape {
        let window = i.is_multiple_of(2);
        let shared = i >= self.n_layers() - self.shared_kv_layers();
        let (n_kv_heads, values_are_keys) = match self.like() {
            Gemma4Like::Dense | Gemma4Like::Moe if window => (2, false),
            Gemma4Like::Dense | Gemma4Like::Moe => (1, true),
            Gemma4Like::E2b => (1, false),
        };
        LayerShape {
            window,
            n_kv_heads,
            head_dim: if window {
                shape.head_dim / 2
            } else {
                shape.head_dim
            },
            ff: if shared { 2 * shape.n_ff } else { shape.n_ff },
            values_are_keys,
        }
    }

    /// The Gemma 4 keys beyond the common ones.
    pub(super) fn gemma4_metadata(&self, w: &mut GgufWriter, shape: Shape) {
        let k = |s: &str| format!("gemma4.{s}");
        let u = |n: usize| Value::U32(n as u32);
        if let Some(e) = self.experts {
            w.set(k("expert_count"), u(e.n_experts))
                .set(k("expert_used_count"), u(e.n_used))
                .set(k("expert_feed_forward_length"), u(shape.expert_ff));
        }
        let layers: Vec<LayerShape> = (0..self.n_layers())
            .map(|i| self.gemma4_shape(shape, i))
            .collect();
        let (hd, hd_swa) = (shape.head_dim, shape.head_dim / 2);
        w.set(k("attention.sliding_window"), u(WINDOW))
            .set(
                k("attention.sliding_window_pattern"),
                Value::Array(Array::Bool(layers.iter().map(|l| l.window).collect())),
            )
            .set(k("attention.key_length"), u(hd))
            .set(k("attention.value_length"), u(hd))
            .set(k("attention.key_length_swa"), u(hd_swa))
            .set(k("attention.value_length_swa"), u(hd_swa))
            .set(k("rope.dimension_count"), u(hd))
            .set(k("rope.dimension_count_swa"), u(hd_swa))
            .set(k("rope.freq_base_swa"), Value::F32(10_000.0))
            .set(k("final_logit_softcapping"), Value::F32(30.0))
            .set(k("attention.shared_kv_layers"), u(self.shared_kv_layers()));
        let per_layer = |f: &dyn Fn(&LayerShape) -> usize| {
            Value::Array(Array::I32(layers.iter().map(|l| f(l) as i32).collect()))
        };
        match self.like() {
            Gemma4Like::Dense | Gemma4Like::Moe => {
                w.set(k("attention.head_count_kv"), per_layer(&|l| l.n_kv_heads))
                    .set(k("embedding_length_per_layer_input"), u(0));
            }
            Gemma4Like::E2b => {
                w.set(k("feed_forward_length"), per_layer(&|l| l.ff))
                    .set(k("embedding_length_per_layer_input"), u(PER_LAYER));
            }
        }
    }

    /// Layer `i`: attention in its own shape, sandwich norms, the feed-forward,
    /// the per-layer input block (E2B) and the output scale.
    pub(super) fn gemma4_layer(&self, b: &mut Builder, i: usize) {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let d = b.shape.n_embd;
        let l = self.gemma4_shape(b.shape, i);
        let (q, kv) = (self.n_heads * l.head_dim, l.n_kv_heads * l.head_dim);
        b.vector(n("attn_norm"), d, 0.2, 1.0);
        b.matrix(n("attn_q"), d, q);
        b.matrix(n("attn_k"), d, kv);
        if !l.values_are_keys {
            b.matrix(n("attn_v"), d, kv);
        }
        b.vector(n("attn_q_norm"), l.head_dim, 0.2, 1.0);
        b.vector(n("attn_k_norm"), l.head_dim, 0.2, 1.0);
        b.matrix(n("attn_output"), q, d);
        b.vector(n("post_attention_norm"), d, 0.2, 1.0);
        b.vector(n("ffn_norm"), d, 0.2, 1.0);
        dense_ffn(b, i, d, l.ff);
        if self.like() == Gemma4Like::Moe {
            self.gemma4_experts(b, i);
        }
        b.vector(n("post_ffw_norm"), d, 0.2, 1.0);
        if self.like() == Gemma4Like::E2b {
            b.matrix(n("inp_gate"), d, PER_LAYER);
            b.matrix(n("proj"), PER_LAYER, d);
            b.vector(n("post_norm"), d, 0.2, 1.0);
        }
        b.vector(n("layer_output_scale"), 1, 0.3, 0.7);
    }

    /// 26B-A4B's experts beside the dense path: their norms, an F32 router with
    /// its input scale, fused gate-up experts and per-expert output scales.
    fn gemma4_experts(&self, b: &mut Builder, i: usize) {
        let n = |s: &str| format!("blk.{i}.{s}");
        let e = self.experts.expect("a mixture-of-experts family");
        let (d, eff) = (b.shape.n_embd, b.shape.expert_ff);
        b.vector(n("post_ffw_norm_1.weight"), d, 0.2, 1.0);
        b.vector(n("pre_ffw_norm_2.weight"), d, 0.2, 1.0);
        b.vector(n("post_ffw_norm_2.weight"), d, 0.2, 1.0);
        // Logits spread by about 3 (the router's input is normed to 1/sqrt(d)
        // per value), so routing is decided away from ties.
        let v = b.rnd.values(d * e.n_experts, 3.0 * (3.0f32).sqrt(), 0.0);
        b.tensor(n("ffn_gate_inp.weight"), DType::F32, &[d, e.n_experts], &v);
        b.vector(n("ffn_gate_inp.scale"), d, 0.2, 1.0);
        let s = (3.0 / d as f32).sqrt();
        b.matrices(n("ffn_gate_up_exps.weight"), d, 2 * eff, e.n_experts, s);
        let s = (3.0 / eff as f32).sqrt();
        b.matrices(n("ffn_down_exps.weight"), eff, d, e.n_experts, s);
        b.vector(n("ffn_down_exps.scale"), e.n_experts, 0.3, 1.0);
    }

    /// Proportional RoPE's factors for the full layers (a quarter of each head
    /// turns; the converter's `1e30` stops the rest), and the per-layer input
    /// tensors (E2B).
    pub(super) fn gemma4_globals(&self, b: &mut Builder, n_vocab: usize) {
        let pairs = b.shape.head_dim / 2;
        let factors: Vec<f32> = (0..pairs)
            .map(|p| if p < pairs / 4 { 1.0 } else { 1e30 })
            .collect();
        b.tensor("rope_freqs.weight".into(), DType::F32, &[pairs], &factors);
        if self.like() == Gemma4Like::E2b {
            let (d, width) = (b.shape.n_embd, PER_LAYER * self.n_layers());
            b.matrix_scaled("per_layer_token_embd.weight".into(), width, n_vocab, 0.3);
            b.matrix("per_layer_model_proj.weight".into(), d, width);
            b.vector("per_layer_proj_norm.weight".into(), PER_LAYER, 0.2, 1.0);
        }
    }
}
