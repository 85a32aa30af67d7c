//! Gemma 2: sandwich norms, GeGLU, soft-capped attention and logits,
//! alternating sliding windows.

use ferrox_core::ops::activation::Gate;
use ferrox_core::ops::rope::RopeStyle;
use ferrox_text::chat::BuiltinTemplate;

use super::parts::*;
use super::tensors::{Manifest, names};
use super::{ArchSpec, AttentionScale, Softcap, WindowRule, llama};

pub const SPEC: ArchSpec = ArchSpec {
    rope_style: RopeStyle::Neox,
    gate: Gate::GeluTanh,
    scale_embeddings: true,
    windows: WindowRule::Pattern {
        pattern: 2,
        default_window: Some(4096),
    },
    attention_scale: AttentionScale::GemmaBig { layers: 46 },
    attn_softcap: Softcap::Key {
        default: Some(50.0),
    },
    final_softcap: Softcap::Key {
        default: Some(30.0),
    },
    builtin_chat: Some(BuiltinTemplate::GemmaTurns),
    ..llama::SPEC
};

/// The head is always the embeddings.
pub const TENSORS: Manifest = Manifest {
    before_layers: &[TOKEN_EMBD],
    layer: &[
        ATTN_NORM,
        QKV,
        ATTN_OUT,
        FFN_NORM,
        DENSE_FFN,
        POST_ATTN_NORM,
        POST_FFW_NORM,
    ],
    recurrent_layer: &[],
    after_layers: &[OUTPUT_NORM],
    draft_layer: &[],
    ffn_norm: names::FFN_NORM,
};
