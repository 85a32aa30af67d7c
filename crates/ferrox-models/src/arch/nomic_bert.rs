//! nomic-bert (nomic-embed-text v1 and v1.5): BERT's encoder with rotary
//! positions (NeoX pairs, no position embeddings), a fused QKV and a SwiGLU
//! feed-forward without biases (`crate::encoder`, llama.cpp's
//! `src/models/bert.cpp` for `LLM_ARCH_NOMIC_BERT`).

use ferrox_core::ops::activation::Gate;
use ferrox_core::ops::rope::RopeStyle;

use super::tensors::{Dim::*, Manifest, Part, Presence::Optional, Role, names as n, req};
use super::{ArchSpec, bert};

pub const SPEC: ArchSpec = ArchSpec {
    gate: Gate::Silu,
    rope_style: RopeStyle::Neox,
    ..bert::SPEC
};

const EMBEDDINGS: &[Part] = &[
    req(n::TOKEN_EMBD, Role::Embedding, &[Embd, Vocab]),
    req(n::TOKEN_TYPES, Role::Embedding, &[Embd, TokenTypes]).presence(Optional),
    req(n::TOKEN_EMBD_NORM, Role::Gain, &[Embd]),
    req(n::TOKEN_EMBD_NORM_BIAS, Role::Bias, &[Embd]),
];

const LAYER: &[Part] = &[
    req(n::ATTN_QKV, Role::Linear, &[Embd, QkvOut]),
    req(n::ATTN_OUTPUT, Role::Linear, &[AttnOut, Embd]),
    req(n::ATTN_OUTPUT_NORM, Role::Gain, &[Embd]),
    req(n::ATTN_OUTPUT_NORM_BIAS, Role::Bias, &[Embd]),
    req(n::FFN_UP, Role::Linear, &[Embd, Ff]),
    req(n::FFN_GATE, Role::Linear, &[Embd, Ff]),
    req(n::FFN_DOWN, Role::Linear, &[Ff, Embd]),
    req(n::LAYER_OUTPUT_NORM, Role::Gain, &[Embd]),
    req(n::LAYER_OUTPUT_NORM_BIAS, Role::Bias, &[Embd]),
];

pub const TENSORS: Manifest = Manifest {
    before_layers: &[EMBEDDINGS],
    layer: &[LAYER],
    recurrent_layer: &[],
    after_layers: &[],
    draft_layer: &[],
    ffn_norm: n::ATTN_OUTPUT_NORM,
};
