//! Fragments of tensor lists that several architectures share, in the order
//! their converters write them.

use super::tensors::names as n;
use super::tensors::{Dim::*, Part, Presence::Optional, Role, req};

pub const TOKEN_EMBD: &[Part] = &[req(n::TOKEN_EMBD, Role::Embedding, &[Embd, Vocab])];

pub const OUTPUT_NORM: &[Part] = &[req(n::OUTPUT_NORM, Role::Gain, &[Embd])];

/// An output head of its own; without it the head is the embeddings.
pub const OWN_HEAD: &[Part] = &[req(n::OUTPUT, Role::Head, &[Embd, Vocab]).presence(Optional)];

/// Llama 3's per-pair RoPE frequency factors.
pub const ROPE_FREQS: &[Part] =
    &[req(n::ROPE_FREQS, Role::RopeFactors, &[RopePairs]).presence(Optional)];

/// LongRoPE's two factor sets.
pub const LONGROPE: &[Part] = &[
    req(n::ROPE_FACTORS_LONG, Role::RopeFactors, &[RopePairs]).presence(Optional),
    req(n::ROPE_FACTORS_SHORT, Role::RopeFactors, &[RopePairs]).presence(Optional),
];

pub const ATTN_NORM: &[Part] = &[req(n::ATTN_NORM, Role::Gain, &[Embd])];

pub const QKV: &[Part] = &[
    req(n::ATTN_Q, Role::Linear, &[Embd, QOut]),
    req(n::ATTN_K, Role::Linear, &[Embd, KOut]),
    req(n::ATTN_V, Role::Linear, &[Embd, VOut]),
];

pub const QKV_BIASES: &[Part] = &[
    req(n::ATTN_Q_BIAS, Role::Bias, &[QOut]),
    req(n::ATTN_K_BIAS, Role::Bias, &[KOut]),
    req(n::ATTN_V_BIAS, Role::Bias, &[VOut]),
];

pub const QK_NORM: &[Part] = &[
    req(n::ATTN_Q_NORM, Role::Gain, &[HeadK]),
    req(n::ATTN_K_NORM, Role::Gain, &[HeadK]),
];

pub const ATTN_OUT: &[Part] = &[req(n::ATTN_OUTPUT, Role::Linear, &[AttnOut, Embd])];

pub const POST_ATTN_NORM: &[Part] = &[req(n::POST_ATTENTION_NORM, Role::Gain, &[Embd])];

pub const FFN_NORM: &[Part] = &[req(n::FFN_NORM, Role::Gain, &[Embd])];

pub const DENSE_FFN: &[Part] = &[
    req(n::FFN_GATE, Role::Linear, &[Embd, Ff]),
    req(n::FFN_UP, Role::Linear, &[Embd, Ff]),
    req(n::FFN_DOWN, Role::Linear, &[Ff, Embd]),
];

pub const POST_FFW_NORM: &[Part] = &[req(n::POST_FFW_NORM, Role::Gain, &[Embd])];

/// Routed experts: an f32 router, then each expert's gate, up and down
/// matrices stacked in 3-D tensors.
pub const ROUTED_EXPERTS: &[Part] = &[
    req(n::FFN_GATE_INP, Role::Router, &[Embd, Experts]),
    req(n::FFN_GATE_EXPS, Role::Linear, &[Embd, ExpertFf, Experts]),
    req(n::FFN_UP_EXPS, Role::Linear, &[Embd, ExpertFf, Experts]),
    req(n::FFN_DOWN_EXPS, Role::Linear, &[ExpertFf, Embd, Experts]),
];
