//! Qwen3-MoE (30B-A3B, 235B-A22B): Qwen3's attention, a routed
//! mixture-of-experts feed-forward.

use super::parts::*;
use super::tensors::{Manifest, names};
use super::{ArchSpec, Experts, qwen3};

pub const SPEC: ArchSpec = ArchSpec {
    experts: Experts::SoftmaxTopK { normalize: true },
    ..qwen3::SPEC
};

pub const TENSORS: Manifest = Manifest {
    before_layers: &[TOKEN_EMBD],
    layer: &[ATTN_NORM, QKV, QK_NORM, ATTN_OUT, FFN_NORM, ROUTED_EXPERTS],
    recurrent_layer: &[],
    after_layers: &[OUTPUT_NORM, OWN_HEAD],
    draft_layer: &[],
    ffn_norm: names::FFN_NORM,
};
