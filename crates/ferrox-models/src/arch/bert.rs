//! BERT (bge, all-MiniLM, e5, bge-reranker): a bidirectional encoder with
//! absolute position embeddings and token types, post-norm layers of layer
//! norms with biases, a GELU feed-forward with biases, and, in a reranker, a
//! classification head (`cls`, `cls.output`). It computes embeddings, never
//! the next token (`crate::encoder`, llama.cpp's `src/models/bert.cpp`).

use ferrox_core::ops::activation::Gate;

use super::tensors::{Dim::*, Manifest, Part, Presence::Optional, Role, names as n, req};
use super::{ArchSpec, llama};

pub const SPEC: ArchSpec = ArchSpec {
    gate: Gate::GeluTanh,
    encoder: true,
    ..llama::SPEC
};

const EMBEDDINGS: &[Part] = &[
    req(n::TOKEN_EMBD, Role::Embedding, &[Embd, Vocab]),
    req(n::TOKEN_TYPES, Role::Embedding, &[Embd, TokenTypes]).presence(Optional),
    req(n::POSITION_EMBD, Role::Embedding, &[Embd, Positions]),
    req(n::TOKEN_EMBD_NORM, Role::Gain, &[Embd]),
    req(n::TOKEN_EMBD_NORM_BIAS, Role::Bias, &[Embd]),
];

const LAYER: &[Part] = &[
    req(n::ATTN_Q, Role::Linear, &[Embd, QOut]),
    req(n::ATTN_K, Role::Linear, &[Embd, KOut]),
    req(n::ATTN_V, Role::Linear, &[Embd, VOut]),
    req(n::ATTN_OUTPUT, Role::Linear, &[AttnOut, Embd]),
    req(n::ATTN_OUTPUT_NORM, Role::Gain, &[Embd]),
    req(n::ATTN_OUTPUT_NORM_BIAS, Role::Bias, &[Embd]),
    req(n::FFN_UP, Role::Linear, &[Embd, Ff]),
    req(n::FFN_DOWN, Role::Linear, &[Ff, Embd]),
    req(n::LAYER_OUTPUT_NORM, Role::Gain, &[Embd]),
    req(n::LAYER_OUTPUT_NORM_BIAS, Role::Bias, &[Embd]),
];

/// A reranker's classification head.
const CLASSIFIER: &[Part] = &[
    req(n::CLS, Role::Linear, &[Embd, Embd]).presence(Optional),
    req(n::CLS_OUT, Role::Linear, &[Embd, ClsOut]).presence(Optional),
];

pub const TENSORS: Manifest = Manifest {
    before_layers: &[EMBEDDINGS],
    layer: &[LAYER],
    recurrent_layer: &[],
    after_layers: &[CLASSIFIER],
    draft_layer: &[],
    ffn_norm: n::ATTN_OUTPUT_NORM,
};
