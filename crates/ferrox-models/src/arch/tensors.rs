//! The tensor manifest: each architecture lists the tensors of its files, in
//! the order its converter writes them, each with a shape written in
//! hyper-parameters, whether a file must have it, and what it holds.
//!
//! Everything that reads or writes tensors by name works from this list: the
//! loader checks a file against it (every listed tensor it needs, the right
//! shape, nothing unlisted), `inspect` names the features it finds, and the test
//! kit's random-weight files are written from it. A tensor's name is written
//! once, as a constant of [`names`].

use std::collections::BTreeMap;

use crate::error::ModelError;
use crate::hparams::{AttentionKind, HyperParams};

/// Tensor names, as suffixes of `blk.N.` for layer tensors.
pub mod names {
    pub const TOKEN_EMBD: &str = "token_embd.weight";
    pub const OUTPUT_NORM: &str = "output_norm.weight";
    pub const OUTPUT: &str = "output.weight";
    pub const ROPE_FREQS: &str = "rope_freqs.weight";
    pub const ROPE_FACTORS_LONG: &str = "rope_factors_long.weight";
    pub const ROPE_FACTORS_SHORT: &str = "rope_factors_short.weight";
    pub const PER_LAYER_TOKEN_EMBD: &str = "per_layer_token_embd.weight";
    pub const PER_LAYER_MODEL_PROJ: &str = "per_layer_model_proj.weight";
    pub const PER_LAYER_PROJ_NORM: &str = "per_layer_proj_norm.weight";

    pub const ATTN_NORM: &str = "attn_norm.weight";
    pub const ATTN_Q: &str = "attn_q.weight";
    pub const ATTN_K: &str = "attn_k.weight";
    pub const ATTN_V: &str = "attn_v.weight";
    pub const ATTN_QKV: &str = "attn_qkv.weight";
    /// A fused QKV's bias (read beside it, not listed).
    pub const ATTN_QKV_BIAS: &str = "attn_qkv.bias";
    pub const ATTN_Q_BIAS: &str = "attn_q.bias";
    pub const ATTN_K_BIAS: &str = "attn_k.bias";
    pub const ATTN_V_BIAS: &str = "attn_v.bias";
    pub const ATTN_Q_NORM: &str = "attn_q_norm.weight";
    pub const ATTN_K_NORM: &str = "attn_k_norm.weight";
    pub const ATTN_OUTPUT: &str = "attn_output.weight";
    pub const ATTN_OUTPUT_BIAS: &str = "attn_output.bias";
    pub const ATTN_SINKS: &str = "attn_sinks.weight";
    pub const ATTN_GATE: &str = "attn_gate.weight";
    pub const POST_ATTENTION_NORM: &str = "post_attention_norm.weight";
    pub const FFN_NORM: &str = "ffn_norm.weight";
    pub const FFN_GATE: &str = "ffn_gate.weight";
    pub const FFN_UP: &str = "ffn_up.weight";
    pub const FFN_DOWN: &str = "ffn_down.weight";
    pub const POST_FFW_NORM: &str = "post_ffw_norm.weight";
    pub const FFN_GATE_INP: &str = "ffn_gate_inp.weight";
    pub const FFN_GATE_INP_BIAS: &str = "ffn_gate_inp.bias";
    pub const FFN_GATE_INP_SCALE: &str = "ffn_gate_inp.scale";
    pub const FFN_GATE_EXPS: &str = "ffn_gate_exps.weight";
    pub const FFN_UP_EXPS: &str = "ffn_up_exps.weight";
    pub const FFN_DOWN_EXPS: &str = "ffn_down_exps.weight";
    pub const FFN_GATE_UP_EXPS: &str = "ffn_gate_up_exps.weight";
    pub const FFN_GATE_EXPS_BIAS: &str = "ffn_gate_exps.bias";
    pub const FFN_UP_EXPS_BIAS: &str = "ffn_up_exps.bias";
    pub const FFN_DOWN_EXPS_BIAS: &str = "ffn_down_exps.bias";
    pub const FFN_DOWN_EXPS_SCALE: &str = "ffn_down_exps.scale";
    pub const POST_FFW_NORM_1: &str = "post_ffw_norm_1.weight";
    pub const PRE_FFW_NORM_2: &str = "pre_ffw_norm_2.weight";
    pub const POST_FFW_NORM_2: &str = "post_ffw_norm_2.weight";
    pub const SSM_BETA: &str = "ssm_beta.weight";
    pub const SSM_ALPHA: &str = "ssm_alpha.weight";
    pub const SSM_CONV1D: &str = "ssm_conv1d.weight";
    pub const SSM_DT_BIAS: &str = "ssm_dt.bias";
    pub const SSM_A: &str = "ssm_a";
    pub const SSM_NORM: &str = "ssm_norm.weight";
    pub const SSM_OUT: &str = "ssm_out.weight";
    pub const INP_GATE: &str = "inp_gate.weight";
    pub const PROJ: &str = "proj.weight";
    pub const POST_NORM: &str = "post_norm.weight";
    pub const LAYER_OUTPUT_SCALE: &str = "layer_output_scale.weight";
    pub const NEXTN_EH_PROJ: &str = "nextn.eh_proj.weight";
    pub const NEXTN_ENORM: &str = "nextn.enorm.weight";
    pub const NEXTN_HNORM: &str = "nextn.hnorm.weight";
    pub const NEXTN_EMBED_TOKENS: &str = "nextn.embed_tokens.weight";
    pub const NEXTN_SHARED_HEAD_NORM: &str = "nextn.shared_head_norm.weight";
    pub const NEXTN_SHARED_HEAD_HEAD: &str = "nextn.shared_head_head.weight";

    // Encoders (BERT).
    pub const TOKEN_TYPES: &str = "token_types.weight";
    pub const POSITION_EMBD: &str = "position_embd.weight";
    pub const TOKEN_EMBD_NORM: &str = "token_embd_norm.weight";
    pub const TOKEN_EMBD_NORM_BIAS: &str = "token_embd_norm.bias";
    pub const ATTN_OUTPUT_NORM: &str = "attn_output_norm.weight";
    pub const ATTN_OUTPUT_NORM_BIAS: &str = "attn_output_norm.bias";
    pub const LAYER_OUTPUT_NORM: &str = "layer_output_norm.weight";
    pub const LAYER_OUTPUT_NORM_BIAS: &str = "layer_output_norm.bias";
    pub const CLS: &str = "cls.weight";
    pub const CLS_OUT: &str = "cls.output.weight";
}

/// One dimension of a tensor's shape, read from the hyper-parameters (and, for
/// a layer's tensors, that layer's attention shape and feed-forward width).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Dim {
    One,
    Embd,
    /// Twice it: a multi-token-prediction block's two inputs side by side.
    Embd2,
    Vocab,
    /// The layer's feed-forward width.
    Ff,
    /// Twice it: a fused gate-up matrix.
    Ff2,
    /// Query rows: heads times key width, twice that with a gate per head.
    QOut,
    /// KV heads times key width.
    KOut,
    /// KV heads times value width.
    VOut,
    /// `QOut + KOut + VOut`: a fused QKV matrix.
    QkvOut,
    /// Heads times value width: the attention output's input.
    AttnOut,
    /// The layer's key width per head.
    HeadK,
    Heads,
    Experts,
    ExpertFf,
    /// Twice it: a fused gate-up expert.
    ExpertFf2,
    /// Rotated pairs of a full layer's head.
    RopePairs,
    /// Width of one layer's per-token input.
    PerLayer,
    /// `PerLayer` times the layers.
    PerLayerAll,
    /// Gated delta-net: convolution channels (queries, keys and values).
    ConvChannels,
    /// Gated delta-net: convolution taps.
    ConvTaps,
    /// Gated delta-net: value width (value heads times head width).
    DeltaValue,
    /// Gated delta-net: value heads.
    DeltaHeads,
    /// Gated delta-net: head width.
    DeltaHead,
    /// Positions of an absolute position embedding (the context length).
    Positions,
    /// Token types of an encoder (`tokenizer.ggml.token_type_count`).
    TokenTypes,
    /// Outputs of a classification head (`classifier.output_labels`).
    ClsOut,
}

/// Whether a file must have a tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Presence {
    Required,
    /// Some files of the architecture have it; when present it is read.
    Optional,
    /// Another converter's spelling of a tensor listed before it, read when
    /// that one is absent (never written by the test kit).
    Alternative,
    /// Required on a layer that keeps its own KV, optional on a layer that
    /// reads an earlier layer's (the converter may still write it).
    OwnKv,
}

/// When a listed tensor belongs to the file at all.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum When {
    Always,
    /// The file has routed experts (`expert_count`).
    Experts,
    /// The file has per-layer token inputs.
    PerLayerInputs,
}

/// What a tensor holds: how the loader reads it, and what values a
/// random-weight file gives it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Token embedding rows, `[n_embd, vocab]`.
    Embedding,
    /// A weight matrix (a stack of them when 3-D: experts); a 2-D one may carry
    /// a `.bias` of its rows beside it.
    Linear,
    /// The output head.
    Head,
    /// Per-layer token embedding rows.
    PerLayerEmbedding,
    /// The experts' router, kept in f32.
    Router,
    /// A multiplier near one: a norm's weight, the router's input scale.
    Gain,
    Bias,
    RouterBias,
    /// Each head's sink logit.
    Sinks,
    /// Each expert's output scale.
    ExpertScale,
    /// A layer's output scale.
    OutputScale,
    /// Delta-net convolution taps.
    Conv,
    /// Delta-net time-step bias.
    DtBias,
    /// Delta-net decay, `-exp(A_log)`.
    Decay,
    /// Per-pair RoPE frequency factors.
    RopeFactors,
}

impl Role {
    /// Whether the loader reads it as f32 values (checked by element count),
    /// rather than as a matrix in the file's type (checked by shape).
    pub fn is_vector(self) -> bool {
        !matches!(
            self,
            Role::Embedding | Role::Linear | Role::Head | Role::PerLayerEmbedding | Role::Router
        )
    }

    /// Whether a `.bias` of the matrix's rows may stand beside it unlisted.
    fn may_carry_bias(self) -> bool {
        matches!(self, Role::Linear | Role::Head | Role::Router)
    }
}

/// One listed tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub name: &'static str,
    pub role: Role,
    /// ggml order: a matrix is `[cols, rows]`, experts `[cols, rows, n]`.
    pub shape: &'static [Dim],
    pub presence: Presence,
    pub when: When,
}

/// A required tensor.
pub const fn req(name: &'static str, role: Role, shape: &'static [Dim]) -> Part {
    Part {
        name,
        role,
        shape,
        presence: Presence::Required,
        when: When::Always,
    }
}

impl Part {
    pub const fn presence(self, presence: Presence) -> Part {
        Part { presence, ..self }
    }

    pub const fn when(self, when: When) -> Part {
        Part { when, ..self }
    }
}

/// An architecture's tensors: the model-wide ones around the layers, and each
/// layer's by its kind, each list a sequence of shared fragments.
#[derive(Copy, Clone, Debug)]
pub struct Manifest {
    pub before_layers: &'static [&'static [Part]],
    /// An attention layer.
    pub layer: &'static [&'static [Part]],
    /// A gated delta-net layer (architectures with recurrent layers).
    pub recurrent_layer: &'static [&'static [Part]],
    pub after_layers: &'static [&'static [Part]],
    /// A multi-token-prediction block after the trunk (`nextn_predict_layers`
    /// of them, numbered on from the trunk's layers).
    pub draft_layer: &'static [&'static [Part]],
    /// Which listed norm is the one before the feed-forward.
    pub ffn_norm: &'static str,
}

/// A listed tensor resolved for one file: its full name and shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    pub name: String,
    pub role: Role,
    pub shape: Vec<usize>,
    /// Whether a file must have it (`OwnKv` resolved for its layer).
    pub required: bool,
    /// Another tensor's alternative spelling.
    pub alternative: bool,
    /// The layer it belongs to.
    pub layer: Option<usize>,
}

impl Manifest {
    /// Whether any list names `name`.
    pub fn lists(&self, name: &str) -> bool {
        self.parts().any(|p| p.name == name)
    }

    fn parts(&self) -> impl Iterator<Item = &'static Part> {
        [
            self.before_layers,
            self.layer,
            self.recurrent_layer,
            self.after_layers,
            self.draft_layer,
        ]
        .into_iter()
        .flatten()
        .flat_map(|f| f.iter())
    }

    /// Every tensor a file of `hp` may have, in the converter's order.
    pub fn resolve(&self, hp: &HyperParams) -> Vec<Tensor> {
        let globals = |lists: &[&[Part]]| -> Vec<Tensor> {
            lists
                .iter()
                .flat_map(|f| f.iter())
                .filter_map(|p| resolve_part(p, hp, None))
                .collect()
        };
        let mut all = globals(self.before_layers);
        for i in 0..hp.n_layers {
            let lists = match hp.layers[i] {
                AttentionKind::Recurrent => self.recurrent_layer,
                _ => self.layer,
            };
            all.extend(
                lists
                    .iter()
                    .flat_map(|f| f.iter())
                    .filter_map(|p| resolve_part(p, hp, Some(i))),
            );
        }
        all.extend(globals(self.after_layers));
        // Last, so that the trunk's tensors come as they would without them.
        for i in hp.n_layers..hp.n_layers + hp.n_draft_layers {
            all.extend(
                self.draft_layer
                    .iter()
                    .flat_map(|f| f.iter())
                    .filter_map(|p| resolve_part(p, hp, Some(i))),
            );
        }
        all
    }
}

/// The full name of tensor `name` of layer `layer` (or a model-wide one).
pub fn full_name(name: &str, layer: Option<usize>) -> String {
    match layer {
        Some(i) => format!("blk.{i}.{name}"),
        None => name.to_string(),
    }
}

fn resolve_part(p: &Part, hp: &HyperParams, layer: Option<usize>) -> Option<Tensor> {
    let belongs = match p.when {
        When::Always => true,
        When::Experts => hp.moe.is_some(),
        When::PerLayerInputs => hp.n_embd_per_layer > 0,
    };
    let own_kv = layer.is_none_or(|i| hp.layer_attention(i).kv_layer == i);
    belongs.then(|| Tensor {
        name: full_name(p.name, layer),
        role: p.role,
        shape: p.shape.iter().map(|&d| dim(d, hp, layer)).collect(),
        required: match p.presence {
            Presence::Required => true,
            Presence::OwnKv => own_kv,
            Presence::Optional | Presence::Alternative => false,
        },
        alternative: p.presence == Presence::Alternative,
        layer,
    })
}

/// The size of dimension `d` in a file of `hp`, for layer `layer`'s tensors.
pub fn dim(d: Dim, hp: &HyperParams, layer: Option<usize>) -> usize {
    let layer_of = || layer.expect("a layer dimension on a layer tensor");
    let attention = || hp.layer_attention(layer_of());
    let moe = || hp.moe.expect("an expert dimension on an expert tensor");
    let delta = || {
        hp.delta_net
            .expect("a delta-net dimension on a delta-net layer")
    };
    let gates = if hp.spec().gated_attention { 2 } else { 1 };
    match d {
        Dim::One => 1,
        Dim::Embd => hp.n_embd,
        Dim::Embd2 => 2 * hp.n_embd,
        Dim::Vocab => hp.vocab_size,
        Dim::Ff => hp.ff_of(layer_of()),
        Dim::Ff2 => 2 * hp.ff_of(layer_of()),
        Dim::QOut => gates * hp.n_heads * attention().head_dim_k,
        Dim::KOut => attention().n_kv_heads * attention().head_dim_k,
        Dim::VOut => attention().n_kv_heads * attention().head_dim_v,
        Dim::QkvOut => [Dim::QOut, Dim::KOut, Dim::VOut]
            .into_iter()
            .map(|d| dim(d, hp, layer))
            .sum(),
        Dim::AttnOut => hp.n_heads * attention().head_dim_v,
        Dim::HeadK => attention().head_dim_k,
        Dim::Heads => hp.n_heads,
        Dim::Experts => moe().n_experts,
        Dim::ExpertFf => moe().n_ff_expert,
        Dim::ExpertFf2 => 2 * moe().n_ff_expert,
        Dim::RopePairs => hp.rope_dim / 2,
        Dim::PerLayer => hp.n_embd_per_layer,
        Dim::PerLayerAll => hp.n_embd_per_layer * hp.n_layers,
        Dim::ConvChannels => delta().conv_channels(),
        Dim::ConvTaps => delta().conv_kernel,
        Dim::DeltaValue => delta().value_dim(),
        Dim::DeltaHeads => delta().n_v_heads,
        Dim::DeltaHead => delta().head_dim,
        Dim::Positions => hp.context_length,
        Dim::TokenTypes => hp.n_token_types,
        Dim::ClsOut => hp.n_cls_out,
    }
}

/// A file's tensors checked against the manifest: each required one present,
/// each present one of its listed shape (a matrix by shape, a vector by its
/// element count), and none unlisted.
pub fn check(
    listed: &[Tensor],
    file: &[ferrox_gguf::TensorInfo],
    hp: &HyperParams,
) -> Result<(), ModelError> {
    let architecture = hp.architecture.gguf_name();
    let in_file: BTreeMap<&str, &ferrox_gguf::TensorInfo> =
        file.iter().map(|t| (t.name.as_str(), t)).collect();
    for t in listed {
        match in_file.get(t.name.as_str()) {
            None if t.required => {
                return Err(ModelError::MissingTensor {
                    name: t.name.clone(),
                    architecture,
                });
            }
            None => {}
            Some(info) => check_shape(t, info)?,
        }
    }
    let by_name: BTreeMap<&str, &Tensor> = listed.iter().map(|t| (t.name.as_str(), t)).collect();
    let may_be_bias = |name: &str| {
        name.strip_suffix(".bias").is_some_and(|stem| {
            by_name
                .get(format!("{stem}.weight").as_str())
                .is_some_and(|t| t.role.may_carry_bias() && t.shape.len() == 2)
        })
    };
    match file
        .iter()
        .find(|f| !by_name.contains_key(f.name.as_str()) && !may_be_bias(&f.name))
    {
        None => Ok(()),
        Some(unlisted) => Err(ModelError::UnusedTensor {
            name: unlisted.name.clone(),
            architecture,
        }),
    }
}

fn check_shape(t: &Tensor, info: &ferrox_gguf::TensorInfo) -> Result<(), ModelError> {
    let found: Vec<u64> = info.shape.clone();
    let fits = match t.role.is_vector() {
        true => info.n_elements() == t.shape.iter().product::<usize>() as u64,
        false => found
            .iter()
            .map(|&d| d as usize)
            .eq(t.shape.iter().copied()),
    };
    match fits {
        true => Ok(()),
        false => Err(ModelError::WrongShape {
            name: t.name.clone(),
            found,
            expected: t.shape.clone(),
        }),
    }
}
