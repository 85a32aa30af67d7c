//! Qwen3.5 (dense): three gated delta-net (linear attention) layers in four,
//! each with a fixed-size recurrent state per sequence, then a full attention
//! layer with an output gate, QK-norm and partial NeoX RoPE.

use ferrox_core::ops::rope::RopeStyle;

use super::parts::*;
use super::tensors::names as n;
use super::tensors::{Dim::*, Manifest, Part, Presence::Optional, Role, req};
use super::{ArchSpec, llama};

pub const SPEC: ArchSpec = ArchSpec {
    rope_style: RopeStyle::Neox,
    default_rope_base: 10_000_000.0,
    recurrent_layers: true,
    gated_attention: true,
    ..llama::SPEC
};

/// A gated delta-net (llama.cpp's names): the fused convolution input, the
/// output gate, the write strength and decay inputs, the convolution, the
/// time-step bias and decay, the gated output norm and the output.
const DELTA_NET: &[Part] = &[
    req(n::ATTN_QKV, Role::Linear, &[Embd, ConvChannels]),
    req(n::ATTN_GATE, Role::Linear, &[Embd, DeltaValue]),
    req(n::SSM_BETA, Role::Linear, &[Embd, DeltaHeads]),
    req(n::SSM_ALPHA, Role::Linear, &[Embd, DeltaHeads]),
    req(n::SSM_CONV1D, Role::Conv, &[ConvTaps, ConvChannels]),
    req(n::SSM_DT_BIAS, Role::DtBias, &[DeltaHeads]),
    req(n::SSM_A, Role::Decay, &[DeltaHeads]),
    req(n::SSM_NORM, Role::Gain, &[DeltaHead]),
    req(n::SSM_OUT, Role::Linear, &[DeltaValue, Embd]),
];

/// A multi-token-prediction block's own tensors (llama.cpp's `nextn.*`): the
/// projection of its two normed inputs, their norms, and the optional
/// embeddings, head norm and head of its own (Qwen3.5 shares the trunk's).
const NEXTN: &[Part] = &[
    req(n::NEXTN_EH_PROJ, Role::Linear, &[Embd2, Embd]),
    req(n::NEXTN_ENORM, Role::Gain, &[Embd]),
    req(n::NEXTN_HNORM, Role::Gain, &[Embd]),
    req(n::NEXTN_EMBED_TOKENS, Role::Embedding, &[Embd, Vocab]).presence(Optional),
    req(n::NEXTN_SHARED_HEAD_NORM, Role::Gain, &[Embd]).presence(Optional),
    req(n::NEXTN_SHARED_HEAD_HEAD, Role::Head, &[Embd, Vocab]).presence(Optional),
];

/// The feed-forward's norm is called `post_attention_norm`. The draft block
/// (the MTP head) is a full-attention layer with its `nextn` tensors.
pub const TENSORS: Manifest = Manifest {
    before_layers: &[TOKEN_EMBD],
    layer: &[ATTN_NORM, QKV, QK_NORM, ATTN_OUT, POST_ATTN_NORM, DENSE_FFN],
    recurrent_layer: &[ATTN_NORM, DELTA_NET, POST_ATTN_NORM, DENSE_FFN],
    after_layers: &[OUTPUT_NORM, OWN_HEAD],
    draft_layer: &[
        NEXTN,
        ATTN_NORM,
        QKV,
        QK_NORM,
        ATTN_OUT,
        POST_ATTN_NORM,
        DENSE_FFN,
    ],
    ffn_norm: n::POST_ATTENTION_NORM,
};
