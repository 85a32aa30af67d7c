//! gpt-oss (20B, 120B): attention with biases and per-head sinks, alternating
//! 128-token windows, YaRN, and routed experts with biases and a clamped
//! SwiGLU, gated by a softmax over the chosen experts' logits.

use ferrox_core::ops::activation::Gate;
use ferrox_core::ops::rope::RopeStyle;

use super::parts::*;
use super::tensors::names as n;
use super::tensors::{Dim::*, Manifest, Part, Role, req};
use super::{ArchSpec, Experts, WindowRule, llama};

pub const SPEC: ArchSpec = ArchSpec {
    rope_style: RopeStyle::Neox,
    gate: Gate::SwigluOai,
    windows: WindowRule::Pattern {
        pattern: 2,
        default_window: Some(128),
    },
    yarn_truncate: false,
    experts: Experts::TopKSoftmax,
    ..llama::SPEC
};

/// The output bias, each head's sink logit, and the feed-forward's norm, which
/// gpt-oss calls `post_attention_norm`.
const SINKS: &[Part] = &[
    req(n::ATTN_OUTPUT_BIAS, Role::Bias, &[Embd]),
    req(n::ATTN_SINKS, Role::Sinks, &[Heads]),
    req(n::POST_ATTENTION_NORM, Role::Gain, &[Embd]),
];

/// The router with its bias, the experts, then each expert's biases.
const BIASED_EXPERTS: &[Part] = &[
    req(n::FFN_GATE_INP, Role::Router, &[Embd, Experts]),
    req(n::FFN_GATE_INP_BIAS, Role::RouterBias, &[Experts]),
    req(n::FFN_GATE_EXPS, Role::Linear, &[Embd, ExpertFf, Experts]),
    req(n::FFN_UP_EXPS, Role::Linear, &[Embd, ExpertFf, Experts]),
    req(n::FFN_DOWN_EXPS, Role::Linear, &[ExpertFf, Embd, Experts]),
    req(n::FFN_GATE_EXPS_BIAS, Role::Bias, &[ExpertFf, Experts]),
    req(n::FFN_UP_EXPS_BIAS, Role::Bias, &[ExpertFf, Experts]),
    req(n::FFN_DOWN_EXPS_BIAS, Role::Bias, &[Embd, Experts]),
];

pub const TENSORS: Manifest = Manifest {
    before_layers: &[TOKEN_EMBD],
    layer: &[ATTN_NORM, QKV, QKV_BIASES, ATTN_OUT, SINKS, BIASED_EXPERTS],
    recurrent_layer: &[],
    after_layers: &[OUTPUT_NORM, OWN_HEAD],
    draft_layer: &[],
    ffn_norm: n::POST_ATTENTION_NORM,
};
