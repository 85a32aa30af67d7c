//! What each architecture is: one module per architecture holds its table
//! ([`ArchSpec`]: what the forward pass switches on — activation, RoPE
//! pairing, soft-caps, window pattern, experts) and its tensor manifest
//! ([`Manifest`]: every tensor name and shape its files have). Adding an
//! architecture is a module, a variant here, and whatever is truly new.
//!
//! Facts follow llama.cpp's model definitions (`src/models/*.cpp`) for the same
//! GGUF keys and tensor names.

use ferrox_core::ops::activation::Gate;
use ferrox_core::ops::rope::RopeStyle;
use ferrox_text::chat::BuiltinTemplate;

use crate::error::ModelError;

mod bert;
mod gemma2;
mod gemma3;
mod gemma4;
mod gpt_oss;
mod llama;
mod nomic_bert;
mod parts;
mod phi3;
mod qwen2;
mod qwen3;
mod qwen35;
mod qwen3moe;
pub mod tensors;

pub use tensors::Manifest;

/// A model architecture ferrox can run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// Llama family: Llama 2/3.x, SmolLM, Mistral (written as `llama`).
    Llama,
    /// Qwen2 / Qwen2.5: llama layout with QKV biases, NeoX RoPE.
    Qwen2,
    /// Qwen3 (dense): per-head QK-norm, no biases.
    Qwen3,
    /// Qwen3-MoE (30B-A3B, 235B-A22B): Qwen3's attention, a routed
    /// mixture-of-experts feed-forward.
    Qwen3Moe,
    /// Phi-3 / 3.5 / 4: fused QKV and gate-up, LongRoPE factors.
    Phi3,
    /// Gemma 2: sandwich norms, GeGLU, soft-capped attention and logits,
    /// alternating sliding windows.
    Gemma2,
    /// Gemma 3: Gemma 2's layout with QK-norm, five window layers in six and a
    /// separate RoPE base for them.
    Gemma3,
    /// gpt-oss (20B, 120B): attention with biases and per-head sinks,
    /// alternating 128-token windows, YaRN, and routed experts with biases and
    /// a clamped SwiGLU, gated by a softmax over the chosen experts' logits.
    #[serde(rename = "gpt-oss")]
    GptOss,
    /// Qwen3.5 (dense): three gated delta-net (linear attention) layers in
    /// four, each with a fixed-size recurrent state per sequence, then a full
    /// attention layer with an output gate, QK-norm and partial NeoX RoPE.
    Qwen35,
    /// Gemma 4 (E2B, E4B, 31B): Gemma 3's layout with window layers listed one
    /// by one and shaped apart (their own head width, KV heads, rotated dims and
    /// RoPE base), unscaled attention over RMS-normed values, full layers whose
    /// values may be their keys and whose RoPE turns a quarter of each head, the
    /// last layers reading earlier layers' KV, per-layer token inputs and a
    /// per-layer output scale.
    Gemma4,
    /// BERT (bge, all-MiniLM, e5, bge-reranker): a bidirectional encoder of
    /// embeddings (and, with a classification head, relevance scores).
    Bert,
    /// nomic-bert (nomic-embed-text v1, v1.5): BERT with rotary positions, a
    /// fused QKV and a SwiGLU feed-forward.
    #[serde(rename = "nomic-bert")]
    NomicBert,
}

/// Where the sliding-window layers are, when the file does not list them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WindowRule {
    /// Every layer attends to every earlier position (a window key in the file
    /// is not honoured, as llama.cpp does not honour it for this architecture).
    None,
    /// One full layer in every `pattern`, the last of each group, when the file
    /// has a window; `default_window` when the architecture always has one.
    Pattern {
        pattern: usize,
        default_window: Option<usize>,
    },
}

/// The RoPE base of window layers.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum LocalRopeBase {
    /// The global base (a `rope.freq_base_swa` key is not honoured).
    Global,
    /// `rope.freq_base_swa`, else `default` (`None`: the global base).
    Key { default: Option<f32> },
}

/// How attention scores are scaled.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AttentionScale {
    /// `1 / sqrt(head_dim)`.
    HeadDim,
    /// Gemma: `1 / sqrt(n_embd / n_heads)` for the 27B shape (this many
    /// layers), else `1 / sqrt(head_dim)`.
    GemmaBig { layers: usize },
    /// Unscaled (Gemma 4: its queries and keys are RMS-normed).
    One,
}

/// The described table of one architecture.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ArchSpec {
    pub rope_style: RopeStyle,
    pub gate: Gate,
    /// Embeddings multiplied by `sqrt(n_embd)`.
    pub scale_embeddings: bool,
    /// RoPE base when the file gives none.
    pub default_rope_base: f32,
    /// Whether window layers read their own RoPE base (`rope.freq_base_swa`),
    /// and what it is when the file gives none (`None`: the global base).
    pub local_rope_base: LocalRopeBase,
    pub windows: WindowRule,
    pub attention_scale: AttentionScale,
    /// Soft-cap of attention scores (`attention.` ... `attn_logit_softcapping`).
    pub attn_softcap: Softcap,
    /// Soft-cap of the output logits (`final_logit_softcapping`).
    pub final_softcap: Softcap,
    /// YaRN's correction range is rounded out to whole dimensions (HF's
    /// `truncate`, true unless a config says otherwise; ggml always rounds).
    /// gpt-oss's config says `truncate: false`, and no GGUF key carries it, so
    /// it is a fact of the architecture.
    pub yarn_truncate: bool,
    /// Whether the feed-forward is a mixture of experts, and how it routes.
    pub experts: Experts,
    /// Some layers are gated delta-net layers (`ssm_*` tensors) instead of
    /// attention, per `attention.recurrent_layers` or `full_attention_interval`.
    pub recurrent_layers: bool,
    /// The query projection also yields a per-head output gate (`attn_q` is
    /// twice as wide: each head's query, then its gate), and attention's output
    /// is multiplied by `sigmoid(gate)` (Qwen3.5).
    pub gated_attention: bool,
    /// Values are RMS-normed per head, without a weight (Gemma 4).
    pub value_norm: bool,
    /// Window layers have a head shape of their own: head widths and rotated
    /// dims from the `*_swa` keys (Gemma 4).
    pub window_shapes: bool,
    /// The last `attention.shared_kv_layers` layers read the KV of the last
    /// earlier layer of their kind and keep none (Gemma 4).
    pub shared_kv: bool,
    /// `embedding_length_per_layer_input` adds per-layer token inputs
    /// (`per_layer_*`, `inp_gate`, `proj`, `post_norm`; Gemma 4 E2B / E4B).
    pub per_layer_inputs: bool,
    /// The chat format of a file of this architecture without a template.
    pub builtin_chat: Option<BuiltinTemplate>,
    /// A bidirectional encoder (`crate::encoder`): it embeds, it does not
    /// generate.
    pub encoder: bool,
}

/// The feed-forward: one dense block, or routed experts (llama.cpp's
/// `build_moe_ffn`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Experts {
    /// `ffn_gate` / `ffn_up` / `ffn_down` (an `expert_count` key is refused).
    Dense,
    /// `ffn_gate_inp` routes each token to `expert_used_count` of
    /// `expert_count` experts (`ffn_{gate,up,down}_exps`): softmax over every
    /// expert, the top ones by probability, their probabilities renormalized to
    /// sum to 1 when `normalize`, then scaled by `expert_weights_scale` if the
    /// file gives one.
    SoftmaxTopK { normalize: bool },
    /// As `SoftmaxTopK`, with a router bias, but the experts are chosen by
    /// their logits and weighted by a softmax over the chosen ones only
    /// (llama.cpp's `SOFTMAX_WEIGHT` gating, gpt-oss); each expert matrix may
    /// carry a bias.
    TopKSoftmax,
    /// A dense feed-forward, and, when the file has `expert_count`, routed
    /// experts beside it (Gemma 4 26B-A4B): each path between its own norms,
    /// the router on the unweighted-normed input scaled by `ffn_gate_inp.scale`,
    /// softmax then top-k, renormalized, each expert's output scaled by
    /// `ffn_down_exps.scale`.
    BesideDense,
}

/// Whether values are soft-capped, `cap * tanh(x / cap)`.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Softcap {
    /// Never (a key in the file is not honoured, as llama.cpp does not).
    Never,
    /// As the key says; `default` when the file has no key; 0 means none.
    Key { default: Option<f32> },
}

impl Architecture {
    /// Every supported decoder (generating) architecture.
    pub const ALL: [Architecture; 10] = [
        Architecture::Llama,
        Architecture::Qwen2,
        Architecture::Qwen3,
        Architecture::Qwen3Moe,
        Architecture::Phi3,
        Architecture::Gemma2,
        Architecture::Gemma3,
        Architecture::GptOss,
        Architecture::Qwen35,
        Architecture::Gemma4,
    ];

    /// Every supported encoder architecture.
    pub const ENCODERS: [Architecture; 2] = [Architecture::Bert, Architecture::NomicBert];

    /// The `general.architecture` string.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
            Architecture::Qwen3Moe => "qwen3moe",
            Architecture::Phi3 => "phi3",
            Architecture::Gemma2 => "gemma2",
            Architecture::Gemma3 => "gemma3",
            Architecture::GptOss => "gpt-oss",
            Architecture::Qwen35 => "qwen35",
            Architecture::Gemma4 => "gemma4",
            Architecture::Bert => "bert",
            Architecture::NomicBert => "nomic-bert",
        }
    }

    /// Parses `general.architecture`; an error lists what is supported.
    pub fn from_gguf_name(name: &str) -> Result<Architecture, ModelError> {
        let all = || Architecture::ALL.into_iter().chain(Architecture::ENCODERS);
        all()
            .find(|a| a.gguf_name() == name)
            .ok_or_else(|| ModelError::UnsupportedArchitecture {
                found: name.to_string(),
                supported: all().map(|a| a.gguf_name()).collect::<Vec<_>>().join(", "),
            })
    }

    /// The architecture's table.
    pub fn spec(self) -> ArchSpec {
        match self {
            Architecture::Llama => llama::SPEC,
            Architecture::Qwen2 => qwen2::SPEC,
            Architecture::Qwen3 => qwen3::SPEC,
            Architecture::Qwen3Moe => qwen3moe::SPEC,
            Architecture::Phi3 => phi3::SPEC,
            Architecture::Gemma2 => gemma2::SPEC,
            Architecture::Gemma3 => gemma3::SPEC,
            Architecture::GptOss => gpt_oss::SPEC,
            Architecture::Qwen35 => qwen35::SPEC,
            Architecture::Gemma4 => gemma4::SPEC,
            Architecture::Bert => bert::SPEC,
            Architecture::NomicBert => nomic_bert::SPEC,
        }
    }

    /// The architecture's tensors.
    pub fn tensors(self) -> Manifest {
        match self {
            Architecture::Llama => llama::TENSORS,
            Architecture::Qwen2 => qwen2::TENSORS,
            Architecture::Qwen3 => qwen3::TENSORS,
            Architecture::Qwen3Moe => qwen3moe::TENSORS,
            Architecture::Phi3 => phi3::TENSORS,
            Architecture::Gemma2 => gemma2::TENSORS,
            Architecture::Gemma3 => gemma3::TENSORS,
            Architecture::GptOss => gpt_oss::TENSORS,
            Architecture::Qwen35 => qwen35::TENSORS,
            Architecture::Gemma4 => gemma4::TENSORS,
            Architecture::Bert => bert::TENSORS,
            Architecture::NomicBert => nomic_bert::TENSORS,
        }
    }
}
