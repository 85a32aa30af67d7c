//! Gemma 4's families: four layers (a window layer, a full one, then again),
//! every key and tensor name the converter writes for the model copied.

use ferrox_gguf::{Array, GgufWriter, Value};

use super::{Family, Shape};

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
pub(super) struct LayerShape {
    window: bool,
    n_kv_heads: usize,
    ff: usize,
    /// Values are the keys (no `attn_v`).
    pub(super) values_are_keys: bool,
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

    pub(super) fn gemma4_shape(&self, shape: Shape, i: usize) -> LayerShape {
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
}
