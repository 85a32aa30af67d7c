//! Gemma 4 (E2B, E4B, 31B, 26B-A4B): Gemma 3's layout with window layers listed
//! one by one and shaped apart (their own head width, KV heads, rotated dims
//! and RoPE base), unscaled attention over RMS-normed values, full layers whose
//! values may be their keys and whose RoPE turns a quarter of each head, the
//! last layers reading earlier layers' KV, per-layer token inputs, a per-layer
//! output scale, and routed experts beside the dense feed-forward.

use super::parts::*;
use super::tensors::names as n;
use super::tensors::{
    Dim::*,
    Manifest, Part,
    Presence::{Alternative, Optional, OwnKv},
    Role, When, req,
};
use super::{ArchSpec, AttentionScale, Experts, LocalRopeBase, WindowRule, gemma3};

pub const SPEC: ArchSpec = ArchSpec {
    windows: WindowRule::Pattern {
        pattern: 6,
        default_window: None,
    },
    attention_scale: AttentionScale::One,
    local_rope_base: LocalRopeBase::Key { default: None },
    value_norm: true,
    window_shapes: true,
    shared_kv: true,
    per_layer_inputs: true,
    experts: Experts::BesideDense,
    builtin_chat: None,
    ..gemma3::SPEC
};

/// Attention whose layer may read an earlier layer's KV (then its own key
/// tensors, if written, are passed over) and whose values may be its keys (no
/// `attn_v`).
const ATTENTION: &[Part] = &[
    req(n::ATTN_Q, Role::Linear, &[Embd, QOut]),
    req(n::ATTN_K, Role::Linear, &[Embd, KOut]).presence(OwnKv),
    req(n::ATTN_V, Role::Linear, &[Embd, VOut]).presence(Optional),
    req(n::ATTN_Q_NORM, Role::Gain, &[HeadK]),
    req(n::ATTN_K_NORM, Role::Gain, &[HeadK]).presence(OwnKv),
];

/// The experts beside the dense path: their norms, an f32 router with its
/// input scale, gate-up experts fused per expert (or apart) and per-expert
/// output scales.
const EXPERTS: &[Part] = &[
    req(n::POST_FFW_NORM_1, Role::Gain, &[Embd]).when(When::Experts),
    req(n::PRE_FFW_NORM_2, Role::Gain, &[Embd]).when(When::Experts),
    req(n::POST_FFW_NORM_2, Role::Gain, &[Embd]).when(When::Experts),
    req(n::FFN_GATE_INP, Role::Router, &[Embd, Experts]).when(When::Experts),
    req(n::FFN_GATE_INP_SCALE, Role::Gain, &[Embd]).when(When::Experts),
    req(
        n::FFN_GATE_UP_EXPS,
        Role::Linear,
        &[Embd, ExpertFf2, Experts],
    )
    .presence(Optional)
    .when(When::Experts),
    req(n::FFN_GATE_EXPS, Role::Linear, &[Embd, ExpertFf, Experts])
        .presence(Alternative)
        .when(When::Experts),
    req(n::FFN_UP_EXPS, Role::Linear, &[Embd, ExpertFf, Experts])
        .presence(Alternative)
        .when(When::Experts),
    req(n::FFN_DOWN_EXPS, Role::Linear, &[ExpertFf, Embd, Experts]).when(When::Experts),
    req(n::FFN_DOWN_EXPS_SCALE, Role::ExpertScale, &[Experts])
        .presence(Optional)
        .when(When::Experts),
];

/// A layer's use of its per-layer token input.
const PER_LAYER_BLOCK: &[Part] = &[
    req(n::INP_GATE, Role::Linear, &[Embd, PerLayer]).when(When::PerLayerInputs),
    req(n::PROJ, Role::Linear, &[PerLayer, Embd]).when(When::PerLayerInputs),
    req(n::POST_NORM, Role::Gain, &[Embd]).when(When::PerLayerInputs),
];

const OUTPUT_SCALE: &[Part] =
    &[req(n::LAYER_OUTPUT_SCALE, Role::OutputScale, &[One]).presence(Optional)];

/// The model-wide per-layer input tensors.
const PER_LAYER_INPUTS: &[Part] = &[
    req(
        n::PER_LAYER_TOKEN_EMBD,
        Role::PerLayerEmbedding,
        &[PerLayerAll, Vocab],
    )
    .when(When::PerLayerInputs),
    req(n::PER_LAYER_MODEL_PROJ, Role::Linear, &[Embd, PerLayerAll]).when(When::PerLayerInputs),
    req(n::PER_LAYER_PROJ_NORM, Role::Gain, &[PerLayer]).when(When::PerLayerInputs),
];

pub const TENSORS: Manifest = Manifest {
    before_layers: &[TOKEN_EMBD],
    layer: &[
        ATTN_NORM,
        ATTENTION,
        ATTN_OUT,
        POST_ATTN_NORM,
        FFN_NORM,
        DENSE_FFN,
        EXPERTS,
        POST_FFW_NORM,
        PER_LAYER_BLOCK,
        OUTPUT_SCALE,
    ],
    recurrent_layer: &[],
    after_layers: &[OUTPUT_NORM, OWN_HEAD, ROPE_FREQS, PER_LAYER_INPUTS],
    draft_layer: &[],
    ffn_norm: n::FFN_NORM,
};
