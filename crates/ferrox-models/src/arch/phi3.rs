//! Phi-3 / 3.5 / 4: fused QKV and gate-up matrices, LongRoPE factors.

use ferrox_core::ops::rope::RopeStyle;

use super::parts::*;
use super::tensors::names as n;
use super::tensors::{
    Dim::*,
    Manifest, Part,
    Presence::{Alternative, Optional},
    Role, req,
};
use super::{ArchSpec, llama};

pub const SPEC: ArchSpec = ArchSpec {
    rope_style: RopeStyle::Neox,
    ..llama::SPEC
};

/// The fused `attn_qkv` (queries, keys, then values), or the three apart.
const FUSED_QKV: &[Part] = &[
    req(n::ATTN_QKV, Role::Linear, &[Embd, QkvOut]).presence(Optional),
    req(n::ATTN_Q, Role::Linear, &[Embd, QOut]).presence(Alternative),
    req(n::ATTN_K, Role::Linear, &[Embd, KOut]).presence(Alternative),
    req(n::ATTN_V, Role::Linear, &[Embd, VOut]).presence(Alternative),
];

/// `ffn_up` holds the gate rows, then the up rows.
const FUSED_GATE_UP: &[Part] = &[
    req(n::FFN_UP, Role::Linear, &[Embd, Ff2]),
    req(n::FFN_DOWN, Role::Linear, &[Ff, Embd]),
];

pub const TENSORS: Manifest = Manifest {
    before_layers: &[TOKEN_EMBD],
    layer: &[ATTN_NORM, FUSED_QKV, ATTN_OUT, FFN_NORM, FUSED_GATE_UP],
    recurrent_layer: &[],
    after_layers: &[OUTPUT_NORM, OWN_HEAD, LONGROPE],
    draft_layer: &[],
    ffn_norm: n::FFN_NORM,
};
