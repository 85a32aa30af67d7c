//! The tensors of a transformer, found by their GGUF names and checked against
//! the hyper-parameters once, at load.
//!
//! Invariants: every matrix's shape is checked here (`[cols = in, rows = out]` in
//! ggml order), so the forward pass never meets a mismatched weight; norm vectors
//! are small and kept as f32; matrices stay quantized in the mmap and are reached
//! through [`TensorRef`] offsets (no self-reference into the file).

use ferrox_core::DType;
use ferrox_core::kernels::reference;
use ferrox_core::ops::matmul::Matrix;
use ferrox_gguf::GgufFile;

use crate::error::ModelError;
use crate::hparams::{Architecture, HyperParams};

/// Where a weight matrix lies in the file.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef {
    pub dtype: DType,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    offset: usize,
    len: usize,
}

impl TensorRef {
    /// The matrix over `file`'s bytes.
    pub fn matrix<'a>(&self, file: &'a GgufFile) -> Matrix<'a> {
        Matrix::new(
            self.dtype,
            self.rows,
            self.cols,
            &file.bytes()[self.offset..self.offset + self.len],
        )
        .expect("checked at load")
    }
}

/// The weights of one layer.
#[derive(Clone, Debug)]
pub struct LayerWeights {
    pub attn_norm: Vec<f32>,              // [n_embd]
    pub wq: TensorRef,                    // [n_embd] -> [n_heads * head_dim_k]
    pub wk: TensorRef,                    // [n_embd] -> [n_kv_heads * head_dim_k]
    pub wv: TensorRef,                    // [n_embd] -> [n_kv_heads * head_dim_v]
    pub bq: Option<Vec<f32>>,             // [n_heads * head_dim_k]
    pub bk: Option<Vec<f32>>,             // [n_kv_heads * head_dim_k]
    pub bv: Option<Vec<f32>>,             // [n_kv_heads * head_dim_v]
    pub q_norm: Option<Vec<f32>>,         // [head_dim_k]
    pub k_norm: Option<Vec<f32>>,         // [head_dim_k]
    pub wo: TensorRef,                    // [n_heads * head_dim_v] -> [n_embd]
    pub attn_post_norm: Option<Vec<f32>>, // [n_embd]
    pub ffn_norm: Vec<f32>,               // [n_embd]
    pub w_gate: TensorRef,                // [n_embd] -> [n_ff]
    pub w_up: TensorRef,                  // [n_embd] -> [n_ff]
    pub w_down: TensorRef,                // [n_ff] -> [n_embd]
    pub ffn_post_norm: Option<Vec<f32>>,  // [n_embd]
}

/// Every weight of the model.
#[derive(Clone, Debug)]
pub struct Weights {
    pub token_embd: TensorRef, // [n_embd] x vocab rows
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>, // [n_embd]
    /// The output projection: `output.weight`, or the embeddings when tied.
    pub output: TensorRef, // [n_embd] -> [vocab]
}

fn wrong(name: &str, reason: String) -> ModelError {
    ModelError::InvalidHyperParameter {
        key: name.to_string(),
        reason,
    }
}

fn matrix(file: &GgufFile, name: &str, cols: usize, rows: usize) -> Result<TensorRef, ModelError> {
    let t = file.tensor(name)?;
    let shape = t.shape();
    if shape.len() != 2 || shape[0] as usize != cols || shape[1] as usize != rows {
        return Err(wrong(
            name,
            format!("shape {shape:?}, expected [{cols}, {rows}]"),
        ));
    }
    Ok(TensorRef {
        dtype: t.dtype(),
        rows,
        cols,
        offset: t.info.file_offset,
        len: t.data.len(),
    })
}

fn vector(file: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
    let t = file.tensor(name)?;
    if t.info.n_elements() != len as u64 {
        return Err(wrong(
            name,
            format!("shape {:?}, expected [{len}]", t.shape()),
        ));
    }
    let mut v = vec![0.0; len];
    reference::dequantize(t.dtype(), t.data, &mut v).map_err(|e| wrong(name, e.to_string()))?;
    Ok(v)
}

fn optional_vector(
    file: &GgufFile,
    name: &str,
    len: usize,
) -> Result<Option<Vec<f32>>, ModelError> {
    match file.header().tensor_info(name) {
        None => Ok(None),
        Some(_) => vector(file, name, len).map(Some),
    }
}

impl Weights {
    /// Finds and checks every tensor the architecture needs.
    pub fn load(file: &GgufFile, hp: &HyperParams) -> Result<Weights, ModelError> {
        let (d, ff) = (hp.n_embd, hp.n_ff);
        let (q_dim, k_dim, v_dim) = (
            hp.n_heads * hp.head_dim_k,
            hp.n_kv_heads * hp.head_dim_k,
            hp.n_kv_heads * hp.head_dim_v,
        );
        let gemma = hp.architecture == Architecture::Gemma3;
        let mut layers = Vec::with_capacity(hp.n_layers);
        for i in 0..hp.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            let b = |s: &str| format!("blk.{i}.{s}.bias");
            layers.push(LayerWeights {
                attn_norm: vector(file, &n("attn_norm"), d)?,
                wq: matrix(file, &n("attn_q"), d, q_dim)?,
                wk: matrix(file, &n("attn_k"), d, k_dim)?,
                wv: matrix(file, &n("attn_v"), d, v_dim)?,
                bq: optional_vector(file, &b("attn_q"), q_dim)?,
                bk: optional_vector(file, &b("attn_k"), k_dim)?,
                bv: optional_vector(file, &b("attn_v"), v_dim)?,
                q_norm: if gemma {
                    Some(vector(file, &n("attn_q_norm"), hp.head_dim_k)?)
                } else {
                    None
                },
                k_norm: if gemma {
                    Some(vector(file, &n("attn_k_norm"), hp.head_dim_k)?)
                } else {
                    None
                },
                wo: matrix(file, &n("attn_output"), hp.n_heads * hp.head_dim_v, d)?,
                attn_post_norm: if gemma {
                    Some(vector(file, &n("post_attention_norm"), d)?)
                } else {
                    None
                },
                ffn_norm: vector(file, &n("ffn_norm"), d)?,
                w_gate: matrix(file, &n("ffn_gate"), d, ff)?,
                w_up: matrix(file, &n("ffn_up"), d, ff)?,
                w_down: matrix(file, &n("ffn_down"), ff, d)?,
                ffn_post_norm: if gemma {
                    Some(vector(file, &n("post_ffw_norm"), d)?)
                } else {
                    None
                },
            });
        }
        if file.header().tensor_info("rope_freqs.weight").is_some() {
            return Err(wrong("rope_freqs.weight", "per-dimension RoPE frequency factors (Llama 3.1-style scaling) are not supported yet".into()));
        }
        let token_embd = matrix(file, "token_embd.weight", d, hp.vocab_size)?;
        let output = match file.header().tensor_info("output.weight") {
            Some(_) => matrix(file, "output.weight", d, hp.vocab_size)?,
            None => token_embd,
        };
        Ok(Weights {
            token_embd,
            layers,
            output_norm: vector(file, "output_norm.weight", d)?,
            output,
        })
    }
}
