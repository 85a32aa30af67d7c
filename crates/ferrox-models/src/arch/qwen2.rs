//! Qwen2 / Qwen2.5: the llama layout with QKV biases and NeoX RoPE.

use ferrox_core::ops::rope::RopeStyle;

use super::parts::*;
use super::tensors::{Manifest, names};
use super::{ArchSpec, llama};

pub const SPEC: ArchSpec = ArchSpec {
    rope_style: RopeStyle::Neox,
    default_rope_base: 1_000_000.0,
    ..llama::SPEC
};

pub const TENSORS: Manifest = Manifest {
    before_layers: &[TOKEN_EMBD],
    layer: &[ATTN_NORM, QKV, QKV_BIASES, ATTN_OUT, FFN_NORM, DENSE_FFN],
    recurrent_layer: &[],
    after_layers: &[OUTPUT_NORM, OWN_HEAD],
    draft_layer: &[],
    ffn_norm: names::FFN_NORM,
};
