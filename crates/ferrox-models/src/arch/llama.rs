//! Llama (Llama 2/3.x, SmolLM, Mistral): the plain layer the other rows start
//! from.

use ferrox_core::ops::activation::Gate;
use ferrox_core::ops::rope::RopeStyle;

use super::parts::*;
use super::tensors::{Manifest, names};
use super::{ArchSpec, AttentionScale, Experts, LocalRopeBase, Softcap, WindowRule};

pub const SPEC: ArchSpec = ArchSpec {
    rope_style: RopeStyle::Normal,
    gate: Gate::Silu,
    scale_embeddings: false,
    default_rope_base: 10_000.0,
    local_rope_base: LocalRopeBase::Global,
    windows: WindowRule::None,
    attention_scale: AttentionScale::HeadDim,
    yarn_truncate: true,
    attn_softcap: Softcap::Never,
    final_softcap: Softcap::Never,
    experts: Experts::Dense,
    recurrent_layers: false,
    gated_attention: false,
    value_norm: false,
    window_shapes: false,
    shared_kv: false,
    per_layer_inputs: false,
    builtin_chat: None,
    encoder: false,
};

pub const TENSORS: Manifest = Manifest {
    before_layers: &[TOKEN_EMBD],
    layer: &[ATTN_NORM, QKV, ATTN_OUT, FFN_NORM, DENSE_FFN],
    recurrent_layer: &[],
    after_layers: &[OUTPUT_NORM, OWN_HEAD, ROPE_FREQS],
    draft_layer: &[],
    ffn_norm: names::FFN_NORM,
};
