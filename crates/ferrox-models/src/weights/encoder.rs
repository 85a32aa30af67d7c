//! An encoder's tensors (BERT), checked against its manifest like a
//! decoder's, then read by name.

use ferrox_gguf::GgufFile;

use super::{Linear, Loader, TensorRef};
use crate::arch::tensors::{self, full_name, names as n};
use crate::error::ModelError;
use crate::hparams::HyperParams;

/// A layer norm's weight and bias.
#[derive(Debug)]
pub struct LayerNorm {
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
}

/// One post-norm encoder layer.
#[derive(Debug)]
pub struct EncoderLayer {
    pub q: Linear,
    pub k: Linear,
    pub v: Linear,
    pub o: Linear,
    pub attn_norm: LayerNorm,
    pub up: Linear,
    /// A SwiGLU feed-forward's gate (nomic-bert); without it, GELU of `up`.
    pub gate: Option<Linear>,
    pub down: Linear,
    pub out_norm: LayerNorm,
}

/// A reranker's classification head: `out(tanh(dense(x)))`, each part as
/// the file has it.
#[derive(Debug)]
pub struct Classifier {
    pub dense: Option<Linear>,
    pub out: Linear,
}

/// Every tensor an encoder reads.
#[derive(Debug)]
pub struct EncoderWeights {
    pub token_embd: TensorRef,
    /// Row 0 of `token_types` (every token is of type 0, "sentence A"), if the
    /// file has token types.
    pub token_type: Option<Vec<f32>>,
    /// Absolute position embeddings (BERT; rotary models have none).
    pub positions: Option<TensorRef>,
    pub embd_norm: LayerNorm,
    pub layers: Vec<EncoderLayer>,
    /// The classification head, when the file has one (`cls.output`).
    pub classifier: Option<Classifier>,
}

impl EncoderWeights {
    /// Checks the file's tensors against the architecture's manifest, then
    /// reads them.
    pub fn load(file: &GgufFile, hp: &HyperParams) -> Result<EncoderWeights, ModelError> {
        let manifest = hp.architecture.tensors();
        tensors::check(&manifest.resolve(hp), &file.header().tensors, hp)?;
        let l = Loader { file, hp };
        let norm = |weight: &str, bias: &str| -> Result<LayerNorm, ModelError> {
            Ok(LayerNorm {
                weight: l.vector(weight)?,
                bias: l.vector(bias)?,
            })
        };
        let token_type = match l.has(n::TOKEN_TYPES) {
            true => {
                let t = l.matrix(n::TOKEN_TYPES)?;
                let mut row = vec![0.0; hp.n_embd];
                t.matrix(file).dequantize_row(0, &mut row);
                Some(row)
            }
            false => None,
        };
        let layers = (0..hp.n_layers)
            .map(|i| {
                let t = |name: &str| full_name(name, Some(i));
                let [q, k, v] = match l.has(&t(n::ATTN_QKV)) {
                    true => l.split(&t(n::ATTN_QKV), [hp.n_embd; 3])?,
                    false => [
                        l.linear(&t(n::ATTN_Q))?,
                        l.linear(&t(n::ATTN_K))?,
                        l.linear(&t(n::ATTN_V))?,
                    ],
                };
                // A gated feed-forward's maps carry no biases (llama.cpp
                // reads none for them).
                let gate = match l.has(&t(n::FFN_GATE)) {
                    true => Some(Linear::new(l.matrix(&t(n::FFN_GATE))?, None)),
                    false => None,
                };
                let unbiased = |name: &str| -> Result<Linear, ModelError> {
                    match gate.is_some() {
                        true => Ok(Linear::new(l.matrix(name)?, None)),
                        false => l.linear(name),
                    }
                };
                Ok(EncoderLayer {
                    q,
                    k,
                    v,
                    o: l.linear(&t(n::ATTN_OUTPUT))?,
                    attn_norm: norm(&t(n::ATTN_OUTPUT_NORM), &t(n::ATTN_OUTPUT_NORM_BIAS))?,
                    up: unbiased(&t(n::FFN_UP))?,
                    down: unbiased(&t(n::FFN_DOWN))?,
                    gate,
                    out_norm: norm(&t(n::LAYER_OUTPUT_NORM), &t(n::LAYER_OUTPUT_NORM_BIAS))?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let classifier = match l.has(n::CLS_OUT) {
            true => Some(Classifier {
                dense: match l.has(n::CLS) {
                    true => Some(l.linear(n::CLS)?),
                    false => None,
                },
                out: l.linear(n::CLS_OUT)?,
            }),
            false => None,
        };
        Ok(EncoderWeights {
            token_embd: l.matrix(n::TOKEN_EMBD)?,
            token_type,
            positions: match l.has(n::POSITION_EMBD) {
                true => Some(l.matrix(n::POSITION_EMBD)?),
                false => None,
            },
            embd_norm: norm(n::TOKEN_EMBD_NORM, n::TOKEN_EMBD_NORM_BIAS)?,
            layers,
            classifier,
        })
    }
}
