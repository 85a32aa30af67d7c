//! Architecture and hyper-parameters read from GGUF metadata.
//!
//! Invariants: a `HyperParams` value is consistent (heads divide evenly, every
//! count positive), so code downstream never re-checks it. Keys follow llama.cpp's
//! `{arch}.{name}` convention; defaults are llama.cpp's where the file may omit a
//! key (head dim = embedding / heads, KV heads = heads, Gemma 3's window pattern
//! of one global layer in six and local RoPE base of 10000).

use ferrox_gguf::Metadata;

use crate::error::ModelError;

/// A model architecture ferrox can run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// Llama family: Llama 2/3, SmolLM, Mistral (written as `llama`).
    Llama,
    /// Qwen2 / Qwen2.5: llama layout with QKV biases.
    Qwen2,
    /// Gemma 3: scaled embeddings, QK-norm, sandwich norms, GeGLU, sliding windows.
    Gemma3,
}

impl Architecture {
    /// Every supported architecture, by its GGUF name.
    pub const ALL: [Architecture; 3] = [
        Architecture::Llama,
        Architecture::Qwen2,
        Architecture::Gemma3,
    ];

    /// The `general.architecture` string.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
            Architecture::Gemma3 => "gemma3",
        }
    }

    /// Parses `general.architecture`; an error lists what is supported.
    pub fn from_gguf_name(name: &str) -> Result<Architecture, ModelError> {
        Architecture::ALL
            .into_iter()
            .find(|a| a.gguf_name() == name)
            .ok_or_else(|| ModelError::UnsupportedArchitecture {
                found: name.to_string(),
                supported: Architecture::ALL.map(|a| a.gguf_name()).join(", "),
            })
    }
}

/// How one layer attends.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKind {
    /// Every earlier position.
    Full,
    /// The last `window` positions (the current one included).
    SlidingWindow { window: usize },
}

/// The hyper-parameters of a model.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct HyperParams {
    pub architecture: Architecture,
    pub name: Option<String>,
    pub n_layers: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// Per-head dimension of queries and keys.
    pub head_dim_k: usize,
    /// Per-head dimension of values.
    pub head_dim_v: usize,
    pub context_length: usize,
    pub vocab_size: usize,
    pub rms_eps: f32,
    pub rope_freq_base: f32,
    /// RoPE base of sliding-window layers (Gemma 3), else equal to `rope_freq_base`.
    pub rope_freq_base_local: f32,
    /// Dimensions rotated by RoPE per head.
    pub rope_dim: usize,
    /// Attention kind of each layer: `[n_layers]`.
    pub layers: Vec<AttentionKind>,
}

fn invalid(key: &str, reason: impl Into<String>) -> ModelError {
    ModelError::InvalidHyperParameter {
        key: key.to_string(),
        reason: reason.into(),
    }
}

fn positive(m: &Metadata, key: &str) -> Result<usize, ModelError> {
    match m.count(key)? {
        0 => Err(invalid(key, "must be positive")),
        n => Ok(n),
    }
}

impl HyperParams {
    /// Reads and checks the hyper-parameters of the model described by `m`.
    pub fn from_metadata(m: &Metadata) -> Result<HyperParams, ModelError> {
        let architecture = Architecture::from_gguf_name(m.str("general.architecture")?)?;
        let a = architecture.gguf_name();
        let key = |name: &str| format!("{a}.{name}");
        let n_layers = positive(m, &key("block_count"))?;
        let n_embd = positive(m, &key("embedding_length"))?;
        let n_ff = positive(m, &key("feed_forward_length"))?;
        let n_heads = positive(m, &key("attention.head_count"))?;
        let n_kv_heads = match m.count_opt(&key("attention.head_count_kv"))? {
            None => n_heads,
            Some(0) => return Err(invalid(&key("attention.head_count_kv"), "must be positive")),
            Some(n) => n,
        };
        if n_heads % n_kv_heads != 0 {
            return Err(invalid(
                &key("attention.head_count_kv"),
                format!("{n_kv_heads} does not divide {n_heads} heads"),
            ));
        }
        let head_dim_k = match m.count_opt(&key("attention.key_length"))? {
            Some(d) => d,
            None if n_embd % n_heads == 0 => n_embd / n_heads,
            None => {
                return Err(invalid(
                    &key("attention.head_count"),
                    format!("{n_heads} does not divide {n_embd}"),
                ));
            }
        };
        let head_dim_v = m
            .count_opt(&key("attention.value_length"))?
            .unwrap_or(head_dim_k);
        let rope_dim = m
            .count_opt(&key("rope.dimension_count"))?
            .unwrap_or(head_dim_k);
        if head_dim_k == 0 || head_dim_v == 0 || rope_dim > head_dim_k || rope_dim % 2 != 0 {
            return Err(invalid(
                &key("rope.dimension_count"),
                format!("{rope_dim} rotated of a {head_dim_k}-wide head"),
            ));
        }
        if let Some(kind) = m.string_opt(&key("rope.scaling.type"))?
            && kind != "none"
        {
            return Err(invalid(
                &key("rope.scaling.type"),
                format!(
                    "RoPE scaling {kind:?} is not supported yet; ferrox runs unscaled RoPE only"
                ),
            ));
        }
        let context_length = positive(m, &key("context_length"))?;
        let vocab_size = match m.count_opt(&key("vocab_size"))? {
            Some(n) => n,
            None => m.string_array("tokenizer.ggml.tokens")?.len(),
        };
        let rms_eps = m
            .float_opt(&key("attention.layer_norm_rms_epsilon"))?
            .unwrap_or(1e-5) as f32;
        let default_base = if architecture == Architecture::Gemma3 {
            1_000_000.0
        } else {
            10_000.0
        };
        let rope_freq_base = m.float_opt(&key("rope.freq_base"))?.unwrap_or(default_base) as f32;
        let (layers, rope_freq_base_local) = match architecture {
            Architecture::Gemma3 => {
                let window = positive(m, &key("attention.sliding_window"))?;
                // One full-attention layer in every `pattern`, the last of each group.
                let pattern = m
                    .count_opt(&key("attention.sliding_window_pattern"))?
                    .unwrap_or(6)
                    .max(1);
                let layers = (0..n_layers)
                    .map(|i| {
                        if (i + 1) % pattern == 0 {
                            AttentionKind::Full
                        } else {
                            AttentionKind::SlidingWindow { window }
                        }
                    })
                    .collect();
                (layers, 10_000.0)
            }
            _ => (vec![AttentionKind::Full; n_layers], rope_freq_base),
        };
        Ok(HyperParams {
            architecture,
            name: m.string_opt("general.name")?,
            n_layers,
            n_embd,
            n_ff,
            n_heads,
            n_kv_heads,
            head_dim_k,
            head_dim_v,
            context_length,
            vocab_size,
            rms_eps,
            rope_freq_base,
            rope_freq_base_local,
            rope_dim,
            layers,
        })
    }

    /// The sliding window, if any layer has one.
    pub fn sliding_window(&self) -> Option<usize> {
        self.layers.iter().find_map(|k| match k {
            AttentionKind::SlidingWindow { window } => Some(*window),
            AttentionKind::Full => None,
        })
    }
}
