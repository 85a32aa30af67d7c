//! The tensors of a transformer, checked once, at load, against the
//! architecture's tensor manifest ([`Manifest`], by [`tensors::check`]), then
//! read by name.
//!
//! Invariants: every matrix's shape is checked against the manifest before
//! anything is read (`[cols = in, rows = out]` in ggml order), so the forward
//! pass never meets a mismatched weight; fused matrices (Phi-3's `attn_qkv` and
//! gate-up `ffn_up`) are split into row ranges of the same bytes, so the forward
//! pass sees one shape of layer; norm vectors and biases are small and kept as
//! f32; matrices stay quantized in the mmap and are reached through
//! [`TensorRef`] offsets. A tensor the manifest does not list means the file
//! holds something ferrox would ignore, and it is refused by name rather than
//! run wrong.

use std::sync::Arc;

use ferrox_core::DType;
use ferrox_core::kernels::reference;
use ferrox_core::ops::matmul::Matrix;
use ferrox_core::packed::PackedMatrix;
use ferrox_gguf::GgufFile;

use crate::arch::Manifest;
use crate::arch::tensors::{self, Dim, full_name, names as n};
use crate::error::ModelError;
use crate::hparams::{AttentionKind, HyperParams};

pub mod encoder;
mod ffn;

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
    /// A matrix of no rows, for tests of parts that do not read it.
    #[cfg(test)]
    pub(crate) fn unused() -> TensorRef {
        TensorRef {
            dtype: DType::F32,
            rows: 0,
            cols: 0,
            offset: 0,
            len: 0,
        }
    }

    /// The matrix over `file`'s bytes.
    pub fn matrix<'a>(&self, file: &'a GgufFile) -> Matrix<'a> {
        Matrix::new(
            self.dtype,
            self.rows,
            self.cols,
            &file.bytes()[self.byte_range()],
        )
        .expect("checked at load")
    }

    /// Where its bytes lie in the file.
    pub fn byte_range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.len
    }

    /// Rows `from..from + rows` of this matrix (rows are whole blocks).
    fn rows(&self, from: usize, rows: usize) -> TensorRef {
        assert!(from + rows <= self.rows, "row range inside the matrix");
        let row_bytes = self.len / self.rows;
        TensorRef {
            rows,
            offset: self.offset + from * row_bytes,
            len: rows * row_bytes,
            ..*self
        }
    }
}

/// A linear map: a weight matrix, its repacked form for the integer path (set by
/// the model once loaded; a clone shares it) and an optional bias.
#[derive(Clone, Debug)]
pub struct Linear {
    pub weight: TensorRef,
    pub packed: Option<Arc<PackedMatrix>>,
    /// `[rows]`
    pub bias: Option<Vec<f32>>,
}

impl Linear {
    fn new(weight: TensorRef, bias: Option<Vec<f32>>) -> Linear {
        Linear {
            weight,
            packed: None,
            bias,
        }
    }
}

/// The weights of one layer.
#[derive(Debug)]
pub struct LayerWeights {
    pub attn_norm: Vec<f32>, // [n_embd]
    pub mixer: Mixer,
    pub attn_post_norm: Option<Vec<f32>>, // [n_embd]
    pub ffn_norm: Vec<f32>,               // [n_embd]
    pub ffn: Ffn,
    pub ffn_post_norm: Option<Vec<f32>>, // [n_embd]
    /// The layer's per-layer token input block (Gemma 4 E2B/E4B).
    pub per_layer: Option<PerLayerBlock>,
    /// `layer_output_scale`: the layer's output is multiplied by it (Gemma 4).
    pub output_scale: Option<f32>,
}

/// A layer's use of its per-layer token input: `x += rmsnorm((gelu(x Wgate) *
/// input) Wproj) * post_norm`.
#[derive(Debug)]
pub struct PerLayerBlock {
    /// `inp_gate`: `[n_embd] -> [n_embd_per_layer]`.
    pub gate: Linear,
    /// `proj`: `[n_embd_per_layer] -> [n_embd]`.
    pub proj: Linear,
    /// `post_norm`: `[n_embd]`.
    pub post_norm: Vec<f32>,
}

/// The model-wide weights of per-layer token inputs (Gemma 4 E2B/E4B): each
/// token's input to layer `l` is `(rmsnorm(x0 Wmodel / sqrt(n_embd))[l] *
/// norm + embd[token][l] * sqrt(n_epl)) / sqrt(2)`, `x0` the scaled embedding.
#[derive(Debug)]
pub struct PerLayerInputs {
    /// `per_layer_token_embd`: `[n_epl * n_layers]` per vocabulary row.
    pub token_embd: TensorRef,
    /// `per_layer_model_proj`: `[n_embd] -> [n_epl * n_layers]`.
    pub model_proj: Linear,
    /// `per_layer_proj_norm`: `[n_epl]`.
    pub proj_norm: Vec<f32>,
}

/// What mixes positions in a layer: attention over the KV, or a gated
/// delta-net over its recurrent state.
#[derive(Debug)]
pub enum Mixer {
    Attention(Box<AttentionWeights>),
    DeltaNet(Box<DeltaNetWeights>),
}

/// An attention block's weights, in the layer's own head shape.
#[derive(Debug)]
pub struct AttentionWeights {
    /// `[n_embd] -> [n_heads * head_dim_k]`, or twice that with a gate per head
    /// (each head's query, then its gate) when the architecture gates attention.
    pub q: Linear,
    /// The layer's own keys and values; `None` for a shared-KV layer, which
    /// attends to an earlier layer's.
    pub kv: Option<KvProjection>,
    pub q_norm: Option<Vec<f32>>, // [head_dim_k]
    pub o: Linear,                // [n_heads * head_dim_v] -> [n_embd]
    /// Each head's sink logit (gpt-oss): `[n_heads]`.
    pub sinks: Option<Vec<f32>>,
}

/// The projections of a layer's keys and values.
#[derive(Debug)]
pub struct KvProjection {
    pub k: Linear, // [n_embd] -> [n_kv_heads * head_dim_k]
    /// `[n_embd] -> [n_kv_heads * head_dim_v]`; `None` when the values are the
    /// keys as projected, before their norm and RoPE (Gemma 4 without `attn_v`).
    pub v: Option<Linear>,
    pub k_norm: Option<Vec<f32>>, // [head_dim_k]
}

/// A gated delta-net layer's weights (llama.cpp's names; `C` = conv channels,
/// `V` = value width, `H` = value heads, `K` = conv taps).
#[derive(Debug)]
pub struct DeltaNetWeights {
    /// `attn_qkv`: `[n_embd] -> [C]`, queries, keys then values.
    pub qkv: Linear,
    /// `attn_gate`: `[n_embd] -> [V]`, the output gate `z`.
    pub gate: Linear,
    /// `ssm_beta`: `[n_embd] -> [H]`, the write strength before its sigmoid.
    pub beta: Linear,
    /// `ssm_alpha`: `[n_embd] -> [H]`, the decay's input.
    pub alpha: Linear,
    /// `ssm_conv1d`: `[C][K]`, each channel's taps, oldest first.
    pub conv: Vec<f32>,
    /// `ssm_dt.bias`: `[H]`.
    pub dt_bias: Vec<f32>,
    /// `ssm_a`: `[H]`, `-exp(A_log)`.
    pub a: Vec<f32>,
    /// `ssm_norm`: `[head_dim]`, the gated output norm.
    pub norm: Vec<f32>,
    /// `ssm_out`: `[V] -> [n_embd]`.
    pub out: Linear,
}

/// A gated feed-forward: `(act(h Wgate) * h Wup) Wdown`.
#[derive(Debug)]
pub struct GatedFfn {
    pub gate: Linear, // [n_embd] -> [n_ff]
    pub up: Linear,   // [n_embd] -> [n_ff]
    pub down: Linear, // [n_ff] -> [n_embd]
}

/// A layer's feed-forward: dense, routed experts, or both side by side.
#[derive(Debug)]
pub enum Ffn {
    Dense(Box<GatedFfn>),
    Experts {
        /// `ffn_gate_inp`: `[n_embd] -> [n_experts]`, kept on the f32 path (its
        /// top-k choice is discrete, so near-ties are decided on exact numbers).
        router: Linear,
        /// `[n_experts]`, each `[n_embd] -> [n_ff_expert] -> [n_embd]`.
        experts: Vec<GatedFfn>,
    },
    /// Gemma 4 26B-A4B: a dense feed-forward and routed experts on the same
    /// input, each between its own norms, summed.
    BesideDense(Box<BesideDense>),
}

/// The two feed-forward paths of a Gemma 4 mixture-of-experts layer.
#[derive(Debug)]
pub struct BesideDense {
    /// The dense path on the `ffn_norm`-normed input, then `post_ffw_norm_1`.
    pub dense: GatedFfn,
    pub dense_post_norm: Vec<f32>,
    /// `pre_ffw_norm_2`: the experts' input norm.
    pub experts_pre_norm: Vec<f32>,
    /// `ffn_gate_inp`: `[n_embd] -> [n_experts]`, f32 path, on the unweighted
    /// normed input times `router_scale / sqrt(n_embd)`.
    pub router: Linear,
    /// `ffn_gate_inp.scale`: `[n_embd]`.
    pub router_scale: Vec<f32>,
    pub experts: Vec<GatedFfn>,
    /// `ffn_down_exps.scale`: each expert's output multiplier, `[n_experts]`.
    pub expert_scales: Option<Vec<f32>>,
    /// `post_ffw_norm_2`: after the experts' weighted sum.
    pub experts_post_norm: Vec<f32>,
}

impl LayerWeights {
    /// The routed experts of the layer (none on a dense layer).
    pub fn experts(&self) -> &[GatedFfn] {
        match &self.ffn {
            Ffn::Dense(_) => &[],
            Ffn::Experts { experts, .. } => experts,
            Ffn::BesideDense(b) => &b.experts,
        }
    }

    /// The router of the layer's experts, if it has experts.
    pub fn router(&self) -> Option<&Linear> {
        match &self.ffn {
            Ffn::Dense(_) => None,
            Ffn::Experts { router, .. } => Some(router),
            Ffn::BesideDense(b) => Some(&b.router),
        }
    }

    /// Every linear map of the layer that runs on the integer path when packed,
    /// in the order the forward pass meets them (a router is not among them).
    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        let mut v = match &mut self.mixer {
            Mixer::Attention(a) => {
                let mut v = vec![&mut a.q];
                if let Some(kv) = &mut a.kv {
                    v.push(&mut kv.k);
                    v.extend(kv.v.as_mut());
                }
                v.push(&mut a.o);
                v
            }
            Mixer::DeltaNet(d) => vec![
                &mut d.qkv,
                &mut d.gate,
                &mut d.beta,
                &mut d.alpha,
                &mut d.out,
            ],
        };
        let (dense, experts) = match &mut self.ffn {
            Ffn::Dense(f) => (Some(&mut **f), &mut [][..]),
            Ffn::Experts { experts, .. } => (None, &mut experts[..]),
            Ffn::BesideDense(b) => (Some(&mut b.dense), &mut b.experts[..]),
        };
        for f in dense.into_iter().chain(experts) {
            v.extend([&mut f.gate, &mut f.up, &mut f.down]);
        }
        if let Some(p) = &mut self.per_layer {
            v.extend([&mut p.gate, &mut p.proj]);
        }
        v
    }

    /// [`Self::linears_mut`], shared.
    pub fn linears(&self) -> Vec<&Linear> {
        let mut v = match &self.mixer {
            Mixer::Attention(a) => {
                let mut v = vec![&a.q];
                if let Some(kv) = &a.kv {
                    v.push(&kv.k);
                    v.extend(kv.v.as_ref());
                }
                v.push(&a.o);
                v
            }
            Mixer::DeltaNet(d) => vec![&d.qkv, &d.gate, &d.beta, &d.alpha, &d.out],
        };
        let (dense, experts) = match &self.ffn {
            Ffn::Dense(f) => (Some(&**f), &[][..]),
            Ffn::Experts { experts, .. } => (None, &experts[..]),
            Ffn::BesideDense(b) => (Some(&b.dense), &b.experts[..]),
        };
        for f in dense.into_iter().chain(experts) {
            v.extend([&f.gate, &f.up, &f.down]);
        }
        if let Some(p) = &self.per_layer {
            v.extend([&p.gate, &p.proj]);
        }
        v
    }
}

/// Every weight of the model.
#[derive(Debug)]
pub struct Weights {
    pub token_embd: TensorRef, // [n_embd] x vocab rows
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>, // [n_embd]
    /// The output projection: `output.weight`, or the embeddings when tied.
    pub output: Linear, // [n_embd] -> [vocab]
    /// Per-pair RoPE frequency factors, `[rope_dim / 2]` each.
    pub rope_factors: RopeFactorSets,
    /// Per-layer token inputs (Gemma 4 E2B/E4B).
    pub per_layer_inputs: Option<PerLayerInputs>,
}

/// The per-pair RoPE factor tensors of a model.
#[derive(Clone, Debug, Default)]
pub struct RopeFactorSets {
    /// `rope_freqs` (Llama 3.1+): always applied.
    pub freqs: Option<Vec<f32>>,
    /// LongRoPE's `rope_factors_long` and `rope_factors_short`.
    pub long: Option<Vec<f32>>,
    pub short: Option<Vec<f32>>,
}

impl RopeFactorSets {
    /// The factors a model serving sequences of up to `context` positions turns
    /// by: LongRoPE's long set past the original context `orig`, else the short
    /// set (llama.cpp's choice by its context per sequence).
    pub fn for_context(&self, context: usize, orig: usize) -> Option<&[f32]> {
        self.freqs.as_deref().or(if context > orig {
            self.long.as_deref()
        } else {
            self.short.as_deref()
        })
    }
}

fn wrong(name: &str, reason: String) -> ModelError {
    ModelError::InvalidHyperParameter {
        key: name.to_string(),
        reason,
    }
}

/// Reads the tensors of a file already checked against its manifest, by name.
struct Loader<'a> {
    file: &'a GgufFile,
    hp: &'a HyperParams,
}

/// The `.bias` beside a `.weight`.
fn bias_name(weight: &str) -> String {
    format!("{}.bias", weight.strip_suffix(".weight").unwrap_or(weight))
}

impl Loader<'_> {
    fn has(&self, name: &str) -> bool {
        self.file.header().tensor_info(name).is_some()
    }

    /// A matrix `[cols, rows]`, or a stack of them `[cols, rows, n]` as one.
    fn matrix(&self, name: &str) -> Result<TensorRef, ModelError> {
        let t = self.file.tensor(name)?;
        let shape = t.shape();
        Ok(TensorRef {
            dtype: t.dtype(),
            rows: shape[1..].iter().product::<u64>() as usize,
            cols: shape[0] as usize,
            offset: t.info.file_offset,
            len: t.data.len(),
        })
    }

    fn vector(&self, name: &str) -> Result<Vec<f32>, ModelError> {
        let t = self.file.tensor(name)?;
        let mut v = vec![0.0; t.info.n_elements() as usize];
        reference::dequantize(t.dtype(), t.data, &mut v).map_err(|e| wrong(name, e.to_string()))?;
        Ok(v)
    }

    fn optional_vector(&self, name: &str) -> Result<Option<Vec<f32>>, ModelError> {
        match self.has(name) {
            true => self.vector(name).map(Some),
            false => Ok(None),
        }
    }

    /// The bias beside matrix `weight` of `rows` rows, if the file has one.
    fn bias(&self, weight: &str, rows: usize) -> Result<Option<Vec<f32>>, ModelError> {
        let name = bias_name(weight);
        let bias = self.optional_vector(&name)?;
        match bias {
            Some(b) if b.len() != rows => Err(ModelError::WrongShape {
                name,
                found: vec![b.len() as u64],
                expected: vec![rows],
            }),
            b => Ok(b),
        }
    }

    /// A linear map with its bias, if any.
    fn linear(&self, weight: &str) -> Result<Linear, ModelError> {
        let w = self.matrix(weight)?;
        Ok(Linear::new(w, self.bias(weight, w.rows)?))
    }

    /// Each expert's matrix of a 3-D expert tensor `[cols, rows, n]` (each
    /// expert's rows follow the previous expert's), each with its row of the
    /// 2-D bias `[rows, n]` when the file has one (gpt-oss).
    fn experts(&self, weight: &str) -> Result<Vec<Linear>, ModelError> {
        let all = self.matrix(weight)?;
        let n = self.file.tensor(weight)?.shape()[2] as usize;
        let rows = all.rows / n;
        let bias = self.bias(weight, all.rows)?;
        Ok((0..n)
            .map(|e| {
                let b = bias.as_ref().map(|b| b[e * rows..(e + 1) * rows].to_vec());
                Linear::new(all.rows(e * rows, rows), b)
            })
            .collect())
    }

    /// A fused linear map split into parts of `rows[i]` output rows each.
    fn split<const N: usize>(
        &self,
        weight: &str,
        rows: [usize; N],
    ) -> Result<[Linear; N], ModelError> {
        let fused = self.linear(weight)?;
        let mut from = 0;
        Ok(rows.map(|r| {
            let part = Linear::new(
                fused.weight.rows(from, r),
                fused.bias.as_ref().map(|b| b[from..from + r].to_vec()),
            );
            from += r;
            part
        }))
    }

    /// Dimension `d` of layer `i`'s tensors.
    fn dim(&self, d: Dim, i: usize) -> usize {
        tensors::dim(d, self.hp, Some(i))
    }
}

impl Weights {
    /// Checks the file's tensors against the architecture's manifest (each
    /// needed one present, in its shape, and none it does not list), then reads
    /// them.
    pub fn load(file: &GgufFile, hp: &HyperParams) -> Result<Weights, ModelError> {
        let manifest = hp.architecture.tensors();
        tensors::check(&manifest.resolve(hp), &file.header().tensors, hp)?;
        let l = Loader { file, hp };
        let layers = (0..hp.n_layers)
            .map(|i| layer(&l, &manifest, i))
            .collect::<Result<Vec<_>, _>>()?;
        let token_embd = l.matrix(n::TOKEN_EMBD)?;
        let output = match l.has(n::OUTPUT) {
            true => l.linear(n::OUTPUT)?,
            false => Linear::new(token_embd, None),
        };
        let per_layer_inputs = match hp.n_embd_per_layer {
            0 => None,
            _ => Some(PerLayerInputs {
                token_embd: l.matrix(n::PER_LAYER_TOKEN_EMBD)?,
                model_proj: l.linear(n::PER_LAYER_MODEL_PROJ)?,
                proj_norm: l.vector(n::PER_LAYER_PROJ_NORM)?,
            }),
        };
        Ok(Weights {
            token_embd,
            layers,
            output_norm: l.vector(n::OUTPUT_NORM)?,
            output,
            rope_factors: RopeFactorSets {
                freqs: l.optional_vector(n::ROPE_FREQS)?,
                long: l.optional_vector(n::ROPE_FACTORS_LONG)?,
                short: l.optional_vector(n::ROPE_FACTORS_SHORT)?,
            },
            per_layer_inputs,
        })
    }
}

/// A multi-token-prediction block's weights (llama.cpp's `nextn`): a
/// full-attention layer, the projection of its two inputs and their norms,
/// and what it may have of its own in place of the trunk's embeddings, output
/// norm and head.
#[derive(Debug)]
pub struct DraftBlockWeights {
    pub block: LayerWeights,
    /// `[2 n_embd] -> [n_embd]`: the normed token embedding, then the normed
    /// hidden state.
    pub eh_proj: Linear,
    pub enorm: Vec<f32>,
    pub hnorm: Vec<f32>,
    pub embed_tokens: Option<TensorRef>,
    pub head_norm: Option<Vec<f32>>,
    pub head: Option<Linear>,
}

impl DraftBlockWeights {
    /// Draft block `j` of `file` (after the `hp.n_layers` of the trunk),
    /// whose tensors [`Weights::load`] checked.
    pub fn load(file: &GgufFile, hp: &HyperParams, j: usize) -> Result<Self, ModelError> {
        assert!(j < hp.n_draft_layers, "a draft block of the file");
        let i = hp.n_layers + j;
        let l = Loader { file, hp };
        let t = |name: &str| full_name(name, Some(i));
        let optional_matrix = |name: &str| -> Result<Option<TensorRef>, ModelError> {
            match l.has(name) {
                true => l.matrix(name).map(Some),
                false => Ok(None),
            }
        };
        Ok(DraftBlockWeights {
            block: layer(&l, &hp.architecture.tensors(), i)?,
            eh_proj: l.linear(&t(n::NEXTN_EH_PROJ))?,
            enorm: l.vector(&t(n::NEXTN_ENORM))?,
            hnorm: l.vector(&t(n::NEXTN_HNORM))?,
            embed_tokens: optional_matrix(&t(n::NEXTN_EMBED_TOKENS))?,
            head_norm: l.optional_vector(&t(n::NEXTN_SHARED_HEAD_NORM))?,
            head: optional_matrix(&t(n::NEXTN_SHARED_HEAD_HEAD))?.map(|w| Linear::new(w, None)),
        })
    }
}

/// The weights of layer `i`.
fn layer(l: &Loader<'_>, manifest: &Manifest, i: usize) -> Result<LayerWeights, ModelError> {
    let t = |name: &str| full_name(name, Some(i));
    let hp = l.hp;
    // A draft block after the trunk is a full-attention layer.
    let kind = hp.layers.get(i).copied().unwrap_or(AttentionKind::Full);
    let mixer = match (kind, hp.delta_net) {
        (AttentionKind::Recurrent, Some(_)) => Mixer::DeltaNet(Box::new(delta_net_weights(l, i)?)),
        _ => Mixer::Attention(Box::new(attention_weights(l, i)?)),
    };
    // Gemma's sandwich norm after attention, unless the architecture calls the
    // feed-forward's norm by that name.
    let attn_post_norm = match manifest.ffn_norm == n::POST_ATTENTION_NORM {
        true => None,
        false => l.optional_vector(&t(n::POST_ATTENTION_NORM))?,
    };
    Ok(LayerWeights {
        attn_norm: l.vector(&t(n::ATTN_NORM))?,
        mixer,
        attn_post_norm,
        ffn_norm: l.vector(&t(manifest.ffn_norm))?,
        ffn: ffn::ffn_weights(l, i)?,
        ffn_post_norm: l.optional_vector(&t(n::POST_FFW_NORM))?,
        per_layer: per_layer_block(l, i)?,
        output_scale: l.optional_vector(&t(n::LAYER_OUTPUT_SCALE))?.map(|s| s[0]),
    })
}

/// Layer `i`'s use of its per-layer token input, when the model has them.
fn per_layer_block(l: &Loader<'_>, i: usize) -> Result<Option<PerLayerBlock>, ModelError> {
    if l.hp.n_embd_per_layer == 0 {
        return Ok(None);
    }
    let t = |name: &str| full_name(name, Some(i));
    Ok(Some(PerLayerBlock {
        gate: l.linear(&t(n::INP_GATE))?,
        proj: l.linear(&t(n::PROJ))?,
        post_norm: l.vector(&t(n::POST_NORM))?,
    }))
}

/// Layer `i`'s attention, in its own head shape: fused QKV (split by rows) or
/// the three apart.
fn attention_weights(l: &Loader<'_>, i: usize) -> Result<AttentionWeights, ModelError> {
    let t = |name: &str| full_name(name, Some(i));
    let (q, kv) = if l.has(&t(n::ATTN_QKV)) {
        let rows = [Dim::QOut, Dim::KOut, Dim::VOut].map(|d| l.dim(d, i));
        let [q, k, v] = l.split(&t(n::ATTN_QKV), rows)?;
        let k_norm = l.optional_vector(&t(n::ATTN_K_NORM))?;
        let kv = KvProjection {
            k,
            v: Some(v),
            k_norm,
        };
        (q, Some(kv))
    } else {
        (l.linear(&t(n::ATTN_Q))?, kv_projection(l, i)?)
    };
    Ok(AttentionWeights {
        q,
        kv,
        q_norm: l.optional_vector(&t(n::ATTN_Q_NORM))?,
        o: l.linear(&t(n::ATTN_OUTPUT))?,
        sinks: l.optional_vector(&t(n::ATTN_SINKS))?,
    })
}

/// Layer `i`'s key and value projections. A shared-KV layer has none it uses:
/// the converter may still write them (llama.cpp loads and ignores them), so
/// they are checked and passed over. Without `attn_v` (where the manifest
/// allows it) the values are the keys.
fn kv_projection(l: &Loader<'_>, i: usize) -> Result<Option<KvProjection>, ModelError> {
    let t = |name: &str| full_name(name, Some(i));
    let shared = l.hp.layer_attention(i).kv_layer != i;
    if shared && !l.has(&t(n::ATTN_K)) {
        return Ok(None);
    }
    let (k_dim, v_dim) = (l.dim(Dim::KOut, i), l.dim(Dim::VOut, i));
    let v = match l.has(&t(n::ATTN_V)) {
        true => Some(l.linear(&t(n::ATTN_V))?),
        false if k_dim != v_dim => {
            return Err(wrong(
                &t(n::ATTN_V),
                format!("missing, and keys of {k_dim} cannot stand for values of {v_dim}"),
            ));
        }
        false => None,
    };
    let kv = KvProjection {
        k: l.linear(&t(n::ATTN_K))?,
        v,
        k_norm: l.optional_vector(&t(n::ATTN_K_NORM))?,
    };
    Ok((!shared).then_some(kv))
}

/// Layer `i`'s gated delta-net.
fn delta_net_weights(l: &Loader<'_>, i: usize) -> Result<DeltaNetWeights, ModelError> {
    let t = |name: &str| full_name(name, Some(i));
    Ok(DeltaNetWeights {
        qkv: l.linear(&t(n::ATTN_QKV))?,
        gate: l.linear(&t(n::ATTN_GATE))?,
        beta: l.linear(&t(n::SSM_BETA))?,
        alpha: l.linear(&t(n::SSM_ALPHA))?,
        conv: l.vector(&t(n::SSM_CONV1D))?,
        dt_bias: l.vector(&t(n::SSM_DT_BIAS))?,
        a: l.vector(&t(n::SSM_A))?,
        norm: l.vector(&t(n::SSM_NORM))?,
        out: l.linear(&t(n::SSM_OUT))?,
    })
}
