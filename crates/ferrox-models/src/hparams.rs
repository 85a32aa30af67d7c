//! Architecture and hyper-parameters read from GGUF metadata.
//!
//! Invariants: a `HyperParams` value is consistent (heads divide evenly, every
//! count positive), so code downstream never re-checks it. Keys follow llama.cpp's
//! `{arch}.{name}` convention; defaults are llama.cpp's where the file may omit a
//! key (head dim = embedding / heads, KV heads = heads, and the per-architecture
//! defaults of [`ArchSpec`]). A key that would change the function but is not
//! implemented (mixture of experts, an unknown RoPE scaling) is refused by name.

use ferrox_core::ops::rope::RopeScaling;
use ferrox_gguf::Metadata;

pub use crate::arch::{ArchSpec, Architecture};
use crate::arch::{AttentionScale, Experts, LocalRopeBase, Softcap};
use crate::error::ModelError;
use crate::pooling::Pooling;

mod layers;

use layers::{HeadShape, ShapeKeys};

/// How one layer attends.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKind {
    /// Every earlier position.
    Full,
    /// The last `window` positions (the current one included).
    SlidingWindow { window: usize },
    /// No attention: a gated delta-net layer, whose recurrent state stands for
    /// every earlier position (Qwen3.5's linear attention).
    Recurrent,
}

/// The hyper-parameters of a model.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct HyperParams {
    pub architecture: Architecture,
    pub name: Option<String>,
    /// Layers of the main pass.
    pub n_layers: usize,
    /// Multi-token-prediction blocks after them (`nextn_predict_layers`): a
    /// draft head the main pass does not run ([`HyperParams::draft_block`]).
    pub n_draft_layers: usize,
    pub n_embd: usize,
    /// The widest feed-forward of any layer.
    pub n_ff: usize,
    /// Each layer's feed-forward width: `[n_layers]` (Gemma 4's shared-KV
    /// layers may be twice as wide).
    pub layer_ff: Vec<usize>,
    pub n_heads: usize,
    /// KV heads of full-attention layers (every layer's are in `attention`).
    pub n_kv_heads: usize,
    /// Per-head dimension of queries and keys of full-attention layers.
    pub head_dim_k: usize,
    /// Per-head dimension of values of full-attention layers.
    pub head_dim_v: usize,
    pub context_length: usize,
    pub vocab_size: usize,
    pub rms_eps: f32,
    pub rope_freq_base: f32,
    /// RoPE base of sliding-window layers (Gemma 3), else equal to `rope_freq_base`.
    pub rope_freq_base_local: f32,
    /// Dimensions rotated by RoPE per head of full-attention layers.
    pub rope_dim: usize,
    /// How RoPE stretches positions (the file's `rope.scaling.*`).
    #[serde(serialize_with = "as_text")]
    pub rope_scaling: RopeScaling,
    /// Scale of RoPE's cosines and sines (`rope.scaling.attn_factor`, LongRoPE).
    pub rope_attn_factor: f32,
    /// The context the model was trained on before scaling.
    pub rope_orig_context: usize,
    /// Multiplier of attention scores before the softmax.
    pub attn_scale: f32,
    /// Soft-cap of attention scores (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// Soft-cap of the output logits (Gemma 2).
    pub final_softcap: Option<f32>,
    /// Attention kind of each layer: `[n_layers]`.
    pub layers: Vec<AttentionKind>,
    /// Attention shape of each layer: `[n_layers]`.
    pub attention: Vec<LayerAttention>,
    /// Width of each layer's per-layer token input (Gemma 4's
    /// `embedding_length_per_layer_input`; 0 without).
    pub n_embd_per_layer: usize,
    /// The routed experts of a mixture-of-experts model.
    pub moe: Option<MoeParams>,
    /// The gated delta-net layers' sizes, when the model has such layers.
    pub delta_net: Option<DeltaNetParams>,
    /// How the file says its embeddings are pooled (`pooling_type`), if it
    /// says.
    pub pooling: Option<Pooling>,
    /// An encoder's token types (`tokenizer.ggml.token_type_count`; 0 for a
    /// decoder).
    pub n_token_types: usize,
    /// A classification head's outputs (`classifier.output_labels`, else 1).
    pub n_cls_out: usize,
}

/// How one layer's attention is shaped, and whose KV it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LayerAttention {
    pub n_kv_heads: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    /// Dimensions rotated by RoPE per head.
    pub rope_dim: usize,
    /// The layer whose keys and values it attends to: itself, or for a
    /// shared-KV layer (Gemma 4) the last earlier layer of its kind, which it
    /// then neither computes nor stores.
    pub kv_layer: usize,
}

/// The sizes of a gated delta-net layer (llama.cpp's `ssm.*` keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeltaNetParams {
    /// Taps of the causal depthwise convolution (`ssm.conv_kernel`).
    pub conv_kernel: usize,
    /// Query and key heads (`ssm.group_count`).
    pub n_k_heads: usize,
    /// Value heads, each with its own state (`ssm.time_step_rank`).
    pub n_v_heads: usize,
    /// Width of a query, key and value head (`ssm.state_size`; the value
    /// width `ssm.inner_size / n_v_heads` must equal it).
    pub head_dim: usize,
}

impl DeltaNetParams {
    /// Channels of the convolution: queries, keys, then values.
    pub fn conv_channels(&self) -> usize {
        (2 * self.n_k_heads + self.n_v_heads) * self.head_dim
    }

    /// Width of all value heads together.
    pub fn value_dim(&self) -> usize {
        self.n_v_heads * self.head_dim
    }

    /// Floats of one layer's recurrent state: the convolution's last
    /// `conv_kernel - 1` inputs, then each value head's `head_dim²` matrix.
    pub fn state_floats(&self) -> usize {
        (self.conv_kernel - 1) * self.conv_channels()
            + self.n_v_heads * self.head_dim * self.head_dim
    }
}

/// A mixture-of-experts feed-forward's sizes.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct MoeParams {
    /// Experts per layer.
    pub n_experts: usize,
    /// Experts each token is routed to.
    pub n_used: usize,
    /// Hidden width of one expert.
    pub n_ff_expert: usize,
    /// Multiplier of the routing weights (`expert_weights_scale`), if any.
    pub weights_scale: Option<f32>,
    /// Whether the chosen experts' weights are renormalized to sum to 1.
    pub normalize: bool,
    /// Whether the softmax comes before the choice or over the chosen.
    pub gating: Gating,
}

/// How router logits become expert weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Gating {
    /// Softmax over every expert, then the most probable (Qwen3-MoE).
    SoftmaxThenTopK,
    /// The largest logits, then a softmax over those (gpt-oss).
    TopKThenSoftmax,
}

fn as_text<S: serde::Serializer>(v: &RopeScaling, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

fn invalid(key: &str, reason: impl Into<String>) -> ModelError {
    ModelError::InvalidHyperParameter {
        key: key.to_string(),
        reason: reason.into(),
    }
}

fn positive(m: &Metadata, key: &str) -> Result<usize, ModelError> {
    match m.count(key)? {
        0 => Err(invalid(key, "must be positive")),
        n => Ok(n),
    }
}

impl HyperParams {
    /// Reads and checks the hyper-parameters of the model described by `m`.
    pub fn from_metadata(m: &Metadata) -> Result<HyperParams, ModelError> {
        let architecture = Architecture::from_gguf_name(m.str("general.architecture")?)?;
        let a = architecture.gguf_name();
        let key = |name: &str| format!("{a}.{name}");
        let blocks = positive(m, &key("block_count"))?;
        // Multi-token-prediction blocks (Qwen3.5) follow the trunk: a draft
        // head the main pass does not run (llama.cpp's `n_layer()`).
        let n_draft_layers = m.count_opt(&key("nextn_predict_layers"))?.unwrap_or(0);
        if n_draft_layers >= blocks {
            return Err(invalid(
                &key("nextn_predict_layers"),
                format!("{n_draft_layers} draft blocks of {blocks}"),
            ));
        }
        let n_layers = blocks - n_draft_layers;
        let n_embd = positive(m, &key("embedding_length"))?;
        let layer_ff = match layers::per_layer_counts(m, &key("feed_forward_length"), n_layers)? {
            Some(ff) => ff,
            None => vec![positive(m, &key("feed_forward_length"))?; n_layers],
        };
        let n_ff = layer_ff.iter().copied().max().unwrap_or(0);
        let n_heads = positive(m, &key("attention.head_count"))?;
        let spec = architecture.spec();
        let delta_net = delta_net_params(m, &key, spec.recurrent_layers)?;
        let layers = match delta_net {
            Some(_) => layers::recurrent_kinds(m, &key, n_layers)?,
            None => layers::layer_kinds(m, &key, spec.windows, n_layers)?,
        };
        let (full, attention) = head_shapes(m, &key, &spec, (n_embd, n_heads), &layers)?;
        // The full layers' KV heads stand for the model's (the first layer's
        // when none is full).
        let n_kv_heads = attention[layers
            .iter()
            .position(|k| *k == AttentionKind::Full)
            .unwrap_or(0)]
        .n_kv_heads;
        let HeadShape {
            head_dim_k,
            head_dim_v,
            rope_dim,
        } = full;
        let n_embd_per_layer = match spec.per_layer_inputs {
            true => m.count(&key("embedding_length_per_layer_input"))?,
            false => 0,
        };
        let context_length = positive(m, &key("context_length"))?;
        let vocab_size = match m.count_opt(&key("vocab_size"))? {
            Some(n) => n,
            None => m.string_array("tokenizer.ggml.tokens")?.len(),
        };
        let moe = moe_params(m, &key, architecture, n_ff)?;
        // The norms' epsilon: RMS norms', or an encoder's layer norms'.
        let rms_eps = match spec.encoder {
            false => m.float_opt(&key("attention.layer_norm_rms_epsilon"))?,
            true => m.float_opt(&key("attention.layer_norm_epsilon"))?,
        }
        .unwrap_or(1e-5) as f32;
        let rope_freq_base = m
            .float_opt(&key("rope.freq_base"))?
            .unwrap_or(spec.default_rope_base as f64) as f32;
        let rope_orig_context = m
            .count_opt(&key("rope.scaling.original_context_length"))?
            .unwrap_or(context_length);
        let rope_scaling = rope_scaling(m, &key, rope_orig_context, spec.yarn_truncate)?;
        let rope_attn_factor = m
            .float_opt(&key("rope.scaling.attn_factor"))?
            .unwrap_or(1.0) as f32;
        let rope_freq_base_local = match spec.local_rope_base {
            LocalRopeBase::Key { default } => m
                .float_opt(&key("rope.freq_base_swa"))?
                .map(|b| b as f32)
                .or(default)
                .unwrap_or(rope_freq_base),
            LocalRopeBase::Global => rope_freq_base,
        };
        let attn_scale = match spec.attention_scale {
            AttentionScale::GemmaBig { layers } if layers == n_layers => {
                1.0 / ((n_embd / n_heads) as f32).sqrt()
            }
            AttentionScale::One => 1.0,
            _ => 1.0 / (head_dim_k as f32).sqrt(),
        };
        let pooling = match m.count_opt(&key("pooling_type"))? {
            Some(code) => Some(Pooling::from_gguf(code as u64).ok_or_else(|| {
                invalid(
                    &key("pooling_type"),
                    format!("{code} is not a pooling type"),
                )
            })?),
            None => None,
        };
        Ok(HyperParams {
            architecture,
            name: m.string_opt("general.name")?,
            n_layers,
            n_draft_layers,
            n_embd,
            n_ff,
            layer_ff,
            n_heads,
            n_kv_heads,
            head_dim_k,
            head_dim_v,
            context_length,
            vocab_size,
            rms_eps,
            rope_freq_base,
            rope_freq_base_local,
            rope_dim,
            rope_scaling,
            rope_attn_factor,
            rope_orig_context,
            attn_scale,
            attn_softcap: softcap(m, &key("attn_logit_softcapping"), spec.attn_softcap)?,
            final_softcap: softcap(m, &key("final_logit_softcapping"), spec.final_softcap)?,
            layers,
            attention,
            n_embd_per_layer,
            moe,
            delta_net,
            pooling,
            n_token_types: match spec.encoder {
                true => m.count_opt("tokenizer.ggml.token_type_count")?.unwrap_or(0),
                false => 0,
            },
            n_cls_out: match m.get(&key("classifier.output_labels")) {
                Some(_) => m
                    .string_array(&key("classifier.output_labels"))?
                    .len()
                    .max(1),
                None => 1,
            },
        })
    }

    /// The architecture's table.
    pub fn spec(&self) -> ArchSpec {
        self.architecture.spec()
    }

    /// The attention shape of layer `i`, a draft block's included (`i >=
    /// n_layers`: a full-attention layer with its own KV).
    pub fn layer_attention(&self, i: usize) -> LayerAttention {
        self.attention.get(i).copied().unwrap_or(LayerAttention {
            n_kv_heads: self.n_kv_heads,
            head_dim_k: self.head_dim_k,
            head_dim_v: self.head_dim_v,
            rope_dim: self.rope_dim,
            kv_layer: i,
        })
    }

    /// The feed-forward width of layer `i`, a draft block's included (the
    /// model's widest).
    pub fn ff_of(&self, i: usize) -> usize {
        self.layer_ff.get(i).copied().unwrap_or(self.n_ff)
    }

    /// The hyper-parameters of draft block `j` run alone, as a model of one
    /// full-attention layer (its KV is its own); `None` past the file's draft
    /// blocks.
    pub fn draft_block(&self, j: usize) -> Option<HyperParams> {
        (j < self.n_draft_layers).then(|| {
            let i = self.n_layers + j;
            HyperParams {
                n_layers: 1,
                n_draft_layers: 0,
                n_ff: self.ff_of(i),
                layer_ff: vec![self.ff_of(i)],
                layers: vec![AttentionKind::Full],
                attention: vec![LayerAttention {
                    kv_layer: 0,
                    ..self.layer_attention(i)
                }],
                ..self.clone()
            }
        })
    }

    /// The sliding window, if any layer has one.
    pub fn sliding_window(&self) -> Option<usize> {
        self.layers.iter().find_map(|k| match k {
            AttentionKind::SlidingWindow { window } => Some(*window),
            AttentionKind::Full | AttentionKind::Recurrent => None,
        })
    }
}

/// The head shape of full-attention layers, and every layer's attention shape
/// (`dims` = embedding width, query heads).
fn head_shapes(
    m: &Metadata,
    key: &dyn Fn(&str) -> String,
    spec: &ArchSpec,
    (n_embd, n_heads): (usize, usize),
    kinds: &[AttentionKind],
) -> Result<(HeadShape, Vec<LayerAttention>), ModelError> {
    let full = full_head_shape(m, key, n_embd, n_heads)?;
    if spec.gated_attention && full.head_dim_v != full.head_dim_k {
        return Err(invalid(
            &key("attention.value_length"),
            format!(
                "{}: a gated attention head's values are as wide as its keys ({})",
                full.head_dim_v, full.head_dim_k
            ),
        ));
    }
    let kv_heads = layers::per_layer_counts(m, &key("attention.head_count_kv"), kinds.len())?
        .unwrap_or_else(|| vec![n_heads; kinds.len()]);
    let attention = layers::layer_attention(
        m,
        kinds,
        &ShapeKeys {
            key,
            n_heads,
            kv_heads: &kv_heads,
            full,
            window_shapes: spec.window_shapes,
            shared_kv: spec.shared_kv,
        },
    )?;
    Ok((full, attention))
}

/// The head shape of full-attention layers: `key_length` (else `n_embd /
/// n_heads`), `value_length` (else the key width), `rope.dimension_count` (else
/// the whole head).
fn full_head_shape(
    m: &Metadata,
    key: &dyn Fn(&str) -> String,
    n_embd: usize,
    n_heads: usize,
) -> Result<HeadShape, ModelError> {
    let head_dim_k = match m.count_opt(&key("attention.key_length"))? {
        Some(d) => d,
        None if n_embd.is_multiple_of(n_heads) => n_embd / n_heads,
        None => {
            return Err(invalid(
                &key("attention.head_count"),
                format!("{n_heads} does not divide {n_embd}"),
            ));
        }
    };
    HeadShape {
        head_dim_k,
        head_dim_v: m
            .count_opt(&key("attention.value_length"))?
            .unwrap_or(head_dim_k),
        rope_dim: m
            .count_opt(&key("rope.dimension_count"))?
            .unwrap_or(head_dim_k),
    }
    .checked(&key("rope.dimension_count"))
}

/// The experts of an architecture that routes them; an `expert_count` on one
/// that does not is refused by name (ferrox would run it as dense).
fn moe_params(
    m: &Metadata,
    key: &dyn Fn(&str) -> String,
    architecture: Architecture,
    n_ff: usize,
) -> Result<Option<MoeParams>, ModelError> {
    let count = m.count_opt(&key("expert_count"))?.unwrap_or(0);
    let (normalize, gating) = match architecture.spec().experts {
        Experts::SoftmaxTopK { normalize } => (normalize, Gating::SoftmaxThenTopK),
        Experts::TopKSoftmax => (false, Gating::TopKThenSoftmax),
        Experts::BesideDense if count == 0 => return Ok(None),
        Experts::BesideDense => (true, Gating::SoftmaxThenTopK),
        Experts::Dense => {
            return match count {
                0 => Ok(None),
                n => Err(invalid(
                    &key("expert_count"),
                    format!(
                        "{n} experts: this architecture is not a mixture-of-experts one in ferrox (qwen3moe, gpt-oss and gemma4 are)"
                    ),
                )),
            };
        }
    };
    let n_experts = positive(m, &key("expert_count"))?;
    let n_used = positive(m, &key("expert_used_count"))?;
    if n_used > n_experts {
        return Err(invalid(
            &key("expert_used_count"),
            format!("{n_used} used of {n_experts} experts"),
        ));
    }
    let n_ff_expert = match m.count_opt(&key("expert_feed_forward_length"))? {
        Some(0) => {
            return Err(invalid(
                &key("expert_feed_forward_length"),
                "must be positive",
            ));
        }
        Some(n) => n,
        // llama.cpp's fallback for files without the key.
        None => (n_ff / n_used).max(1),
    };
    let weights_scale = m
        .float_opt(&key("expert_weights_scale"))?
        .map(|s| s as f32)
        .filter(|&s| s != 0.0 && s != 1.0);
    Ok(Some(MoeParams {
        n_experts,
        n_used,
        n_ff_expert,
        weights_scale,
        normalize,
        gating,
    }))
}

/// The file's RoPE scaling: `rope.scaling.type` (llama.cpp's default "linear")
/// and `rope.scaling.factor` (or the older `rope.scale_linear`).
fn rope_scaling(
    m: &Metadata,
    key: &dyn Fn(&str) -> String,
    orig_context: usize,
    truncate: bool,
) -> Result<RopeScaling, ModelError> {
    let kind = m
        .string_opt(&key("rope.scaling.type"))?
        .unwrap_or_else(|| "linear".into());
    let factor = match m.float_opt(&key("rope.scaling.factor"))? {
        Some(f) => f,
        None => m.float_opt(&key("rope.scale_linear"))?.unwrap_or(0.0),
    } as f32;
    if !(factor.is_finite() && factor >= 0.0) {
        return Err(invalid(
            &key("rope.scaling.factor"),
            format!("{factor} is not a scale"),
        ));
    }
    let unscaled = factor == 0.0 || factor == 1.0;
    if let Some(mul) = m.float_opt(&key("rope.scaling.yarn_log_multiplier"))?
        && mul != 0.0
    {
        return Err(invalid(
            &key("rope.scaling.yarn_log_multiplier"),
            "YaRN with a log multiplier (DeepSeek) is not supported",
        ));
    }
    let yarn_beta = |name: &str, default: f64| -> Result<f32, ModelError> {
        Ok(m.float_opt(&key(name))?.unwrap_or(default) as f32)
    };
    Ok(match kind.as_str() {
        "none" => RopeScaling::None,
        "linear" | "longrope" if unscaled => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor },
        "yarn" if unscaled => RopeScaling::None,
        "yarn" => RopeScaling::Yarn {
            factor,
            orig_context,
            beta_fast: yarn_beta("rope.scaling.yarn_beta_fast", 32.0)?,
            beta_slow: yarn_beta("rope.scaling.yarn_beta_slow", 1.0)?,
            truncate,
        },
        other => {
            return Err(invalid(
                &key("rope.scaling.type"),
                format!(
                    "RoPE scaling {other:?} is not supported (none, linear, yarn, longrope are)"
                ),
            ));
        }
    })
}

/// The delta-net sizes of an architecture with recurrent layers (every key
/// required, as llama.cpp requires them).
fn delta_net_params(
    m: &Metadata,
    key: &dyn Fn(&str) -> String,
    recurrent: bool,
) -> Result<Option<DeltaNetParams>, ModelError> {
    if !recurrent {
        return Ok(None);
    }
    let conv_kernel = positive(m, &key("ssm.conv_kernel"))?;
    let n_k_heads = positive(m, &key("ssm.group_count"))?;
    let n_v_heads = positive(m, &key("ssm.time_step_rank"))?;
    let head_dim = positive(m, &key("ssm.state_size"))?;
    let inner = positive(m, &key("ssm.inner_size"))?;
    if n_v_heads % n_k_heads != 0 {
        return Err(invalid(
            &key("ssm.group_count"),
            format!("{n_k_heads} key heads do not divide {n_v_heads} value heads"),
        ));
    }
    if inner != n_v_heads * head_dim {
        return Err(invalid(
            &key("ssm.inner_size"),
            format!(
                "{inner} is not {n_v_heads} value heads of the state size {head_dim} (a delta-net value head is as wide as a key head)"
            ),
        ));
    }
    Ok(Some(DeltaNetParams {
        conv_kernel,
        n_k_heads,
        n_v_heads,
        head_dim,
    }))
}

/// A soft-cap as the architecture reads it; 0 means none.
fn softcap(m: &Metadata, key: &str, rule: Softcap) -> Result<Option<f32>, ModelError> {
    let Softcap::Key { default } = rule else {
        return Ok(None);
    };
    let cap = m.float_opt(key)?.map(|c| c as f32).or(default);
    match cap {
        Some(c) if !(c.is_finite() && c >= 0.0) => Err(invalid(key, format!("{c} is not a cap"))),
        Some(c) if c > 0.0 => Ok(Some(c)),
        _ => Ok(None),
    }
}
