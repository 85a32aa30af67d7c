//! Gemma 3: Gemma 2's layout with QK-norm, five window layers in six and a
//! separate RoPE base for them.

use super::parts::*;
use super::tensors::{Manifest, names};
use super::{ArchSpec, AttentionScale, LocalRopeBase, Softcap, WindowRule, gemma2};

pub const SPEC: ArchSpec = ArchSpec {
    default_rope_base: 1_000_000.0,
    local_rope_base: LocalRopeBase::Key {
        default: Some(10_000.0),
    },
    windows: WindowRule::Pattern {
        pattern: 6,
        default_window: None,
    },
    attention_scale: AttentionScale::GemmaBig { layers: 62 },
    attn_softcap: Softcap::Never,
    final_softcap: Softcap::Key { default: None },
    ..gemma2::SPEC
};

/// The head is always the embeddings.
pub const TENSORS: Manifest = Manifest {
    before_layers: &[TOKEN_EMBD],
    layer: &[
        ATTN_NORM,
        QKV,
        QK_NORM,
        ATTN_OUT,
        POST_ATTN_NORM,
        FFN_NORM,
        DENSE_FFN,
        POST_FFW_NORM,
    ],
    recurrent_layer: &[],
    after_layers: &[OUTPUT_NORM],
    draft_layer: &[],
    ffn_norm: names::FFN_NORM,
};
