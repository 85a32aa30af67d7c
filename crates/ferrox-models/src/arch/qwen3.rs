//! Qwen3 (dense): per-head QK-norm, no biases.

use super::parts::*;
use super::tensors::{Manifest, names};
use super::{ArchSpec, qwen2};

/// Qwen2's table: what sets Qwen3 apart is in its tensors.
pub const SPEC: ArchSpec = qwen2::SPEC;

pub const TENSORS: Manifest = Manifest {
    before_layers: &[TOKEN_EMBD],
    layer: &[ATTN_NORM, QKV, QK_NORM, ATTN_OUT, FFN_NORM, DENSE_FFN],
    recurrent_layer: &[],
    after_layers: &[OUTPUT_NORM, OWN_HEAD],
    draft_layer: &[],
    ffn_norm: names::FFN_NORM,
};
