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
    pub positions: TensorRef,
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
                Ok(EncoderLayer {
                    q: l.linear(&t(n::ATTN_Q))?,
                    k: l.linear(&t(n::ATTN_K))?,
                    v: l.linear(&t(n::ATTN_V))?,
                    o: l.linear(&t(n::ATTN_OUTPUT))?,
                    attn_norm: norm(&t(n::ATTN_OUTPUT_NORM), &t(n::ATTN_OUTPUT_NORM_BIAS))?,
                    up: l.linear(&t(n::FFN_UP))?,
                    down: l.linear(&t(n::FFN_DOWN))?,
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
            positions: l.matrix(n::POSITION_EMBD)?,
            embd_norm: norm(n::TOKEN_EMBD_NORM, n::TOKEN_EMBD_NORM_BIAS)?,
            layers,
            classifier,
        })
    }
}
