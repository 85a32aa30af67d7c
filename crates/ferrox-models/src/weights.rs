//! The tensors of a transformer, found by their GGUF names as the architecture's
//! table ([`ArchSpec`]) says, and checked against the hyper-parameters once, at
//! load.
//!
//! Invariants: every matrix's shape is checked here (`[cols = in, rows = out]` in
//! ggml order), so the forward pass never meets a mismatched weight; fused
//! matrices (Phi-3's `attn_qkv` and gate-up `ffn_up`) are split into row ranges of
//! the same bytes, so the forward pass sees one shape of layer; norm vectors and
//! biases are small and kept as f32; matrices stay quantized in the mmap and are
//! reached through [`TensorRef`] offsets. Every tensor of the file must be used:
//! one that is not means the file holds something ferrox would ignore, and it is
//! refused by name rather than run wrong.

use std::collections::BTreeSet;

use ferrox_core::DType;
use ferrox_core::kernels::reference;
use ferrox_core::ops::matmul::Matrix;
use ferrox_core::packed::PackedMatrix;
use ferrox_gguf::GgufFile;

use crate::arch::{ArchSpec, RopeFactors};

mod ffn;
use crate::error::ModelError;
use crate::hparams::{AttentionKind, DeltaNetParams, HyperParams};

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
/// the model once loaded) and an optional bias.
#[derive(Debug)]
pub struct Linear {
    pub weight: TensorRef,
    pub packed: Option<PackedMatrix>,
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
#[derive(Debug, Default)]
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

/// Finds tensors by name and remembers which were used.
struct Loader<'a> {
    file: &'a GgufFile,
    used: BTreeSet<String>,
}

impl Loader<'_> {
    fn has(&self, name: &str) -> bool {
        self.file.header().tensor_info(name).is_some()
    }

    fn matrix(&mut self, name: &str, cols: usize, rows: usize) -> Result<TensorRef, ModelError> {
        let t = self.file.tensor(name)?;
        let shape = t.shape();
        if shape.len() != 2 || shape[0] as usize != cols || shape[1] as usize != rows {
            return Err(wrong(
                name,
                format!("shape {shape:?}, expected [{cols}, {rows}]"),
            ));
        }
        self.used.insert(name.to_string());
        Ok(TensorRef {
            dtype: t.dtype(),
            rows,
            cols,
            offset: t.info.file_offset,
            len: t.data.len(),
        })
    }

    fn vector(&mut self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        let t = self.file.tensor(name)?;
        if t.info.n_elements() != len as u64 {
            return Err(wrong(
                name,
                format!("shape {:?}, expected [{len}]", t.shape()),
            ));
        }
        let mut v = vec![0.0; len];
        reference::dequantize(t.dtype(), t.data, &mut v).map_err(|e| wrong(name, e.to_string()))?;
        self.used.insert(name.to_string());
        Ok(v)
    }

    fn optional_vector(&mut self, name: &str, len: usize) -> Result<Option<Vec<f32>>, ModelError> {
        if self.has(name) {
            self.vector(name, len).map(Some)
        } else {
            Ok(None)
        }
    }

    /// `vector` when `present`, else `None` (the tensor must then be absent).
    fn vector_if(
        &mut self,
        present: bool,
        name: &str,
        len: usize,
    ) -> Result<Option<Vec<f32>>, ModelError> {
        if present {
            self.vector(name, len).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The `n` matrices `[cols] -> [rows]` of a 3-D expert tensor `[cols, rows, n]`
    /// (each expert's rows follow the previous expert's), each with its row of
    /// the 2-D bias `[rows, n]` when `biased` (gpt-oss).
    fn experts(
        &mut self,
        name: &str,
        cols: usize,
        rows: usize,
        n: usize,
        biased: bool,
    ) -> Result<Vec<Linear>, ModelError> {
        let weight = format!("{name}.weight");
        let t = self.file.tensor(&weight)?;
        let shape = t.shape();
        if shape != [cols as u64, rows as u64, n as u64] {
            return Err(wrong(
                name,
                format!("shape {shape:?}, expected [{cols}, {rows}, {n}]"),
            ));
        }
        self.used.insert(weight);
        let bias = self.vector_if(biased, &format!("{name}.bias"), rows * n)?;
        let all = TensorRef {
            dtype: t.dtype(),
            rows: rows * n,
            cols,
            offset: t.info.file_offset,
            len: t.data.len(),
        };
        Ok((0..n)
            .map(|e| {
                let b = bias.as_ref().map(|b| b[e * rows..(e + 1) * rows].to_vec());
                Linear::new(all.rows(e * rows, rows), b)
            })
            .collect())
    }

    /// A linear map `name` with its optional `.bias`.
    fn linear(&mut self, name: &str, cols: usize, rows: usize) -> Result<Linear, ModelError> {
        let w = self.matrix(&format!("{name}.weight"), cols, rows)?;
        let b = self.optional_vector(&format!("{name}.bias"), rows)?;
        Ok(Linear::new(w, b))
    }

    /// A fused linear map split into parts of `rows[i]` output rows each.
    fn split<const N: usize>(
        &mut self,
        name: &str,
        cols: usize,
        rows: [usize; N],
    ) -> Result<[Linear; N], ModelError> {
        let fused = self.linear(name, cols, rows.iter().sum())?;
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

    /// Every tensor of the file was used, or the first that was not is named.
    fn all_used(&self, hp: &HyperParams) -> Result<(), ModelError> {
        match self
            .file
            .header()
            .tensors
            .iter()
            .map(|t| t.name.as_str())
            .filter(|n| !is_draft_tensor(n, hp))
            .find(|n| !self.used.contains(*n))
        {
            None => Ok(()),
            Some(name) => Err(ModelError::UnusedTensor {
                name: name.to_string(),
                architecture: hp.architecture.gguf_name(),
            }),
        }
    }
}

/// Whether `name` belongs to a multi-token-prediction block after the trunk
/// (`blk.N.` with `N >= n_layers` when the file has draft blocks): a draft head
/// the main pass does not run, so it is not a tensor ferrox would ignore.
fn is_draft_tensor(name: &str, hp: &HyperParams) -> bool {
    hp.n_draft_layers > 0
        && name
            .strip_prefix("blk.")
            .and_then(|rest| rest.split('.').next())
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| n >= hp.n_layers && n < hp.n_layers + hp.n_draft_layers)
}

impl Weights {
    /// Finds and checks every tensor the architecture needs, and refuses any
    /// tensor it does not.
    pub fn load(file: &GgufFile, hp: &HyperParams) -> Result<Weights, ModelError> {
        let spec = hp.spec();
        let mut l = Loader {
            file,
            used: BTreeSet::new(),
        };
        let layers = (0..hp.n_layers)
            .map(|i| layer(&mut l, hp, &spec, i))
            .collect::<Result<Vec<_>, _>>()?;
        let d = hp.n_embd;
        let token_embd = l.matrix("token_embd.weight", d, hp.vocab_size)?;
        let output = if spec.own_output && l.has("output.weight") {
            l.linear("output", d, hp.vocab_size)?
        } else {
            Linear::new(token_embd, None)
        };
        let rope_factors = rope_factors(&mut l, hp, &spec)?;
        let per_layer_inputs = match hp.n_embd_per_layer {
            0 => None,
            epl => Some(PerLayerInputs {
                token_embd: l.matrix(
                    "per_layer_token_embd.weight",
                    epl * hp.n_layers,
                    hp.vocab_size,
                )?,
                model_proj: l.linear("per_layer_model_proj", d, epl * hp.n_layers)?,
                proj_norm: l.vector("per_layer_proj_norm.weight", epl)?,
            }),
        };
        let weights = Weights {
            token_embd,
            layers,
            output_norm: l.vector("output_norm.weight", d)?,
            output,
            rope_factors,
            per_layer_inputs,
        };
        l.all_used(hp)?;
        Ok(weights)
    }
}

/// The weights of layer `i`.
fn layer(
    l: &mut Loader<'_>,
    hp: &HyperParams,
    spec: &ArchSpec,
    i: usize,
) -> Result<LayerWeights, ModelError> {
    let d = hp.n_embd;
    let n = |s: &str| format!("blk.{i}.{s}");
    let w = |s: &str| n(&format!("{s}.weight"));
    let mixer = match (hp.layers[i], hp.delta_net) {
        (AttentionKind::Recurrent, Some(dn)) => {
            Mixer::DeltaNet(Box::new(delta_net_weights(l, hp, &dn, i)?))
        }
        _ => Mixer::Attention(Box::new(attention_weights(l, hp, spec, i)?)),
    };
    let ffn = ffn::ffn_weights(l, hp, spec, i)?;
    Ok(LayerWeights {
        attn_norm: l.vector(&w("attn_norm"), d)?,
        mixer,
        attn_post_norm: l.vector_if(spec.sandwich_norms, &w("post_attention_norm"), d)?,
        ffn_norm: l.vector(&w(spec.ffn_norm), d)?,
        ffn,
        ffn_post_norm: l.vector_if(spec.sandwich_norms, &w("post_ffw_norm"), d)?,
        per_layer: per_layer_block(l, hp, i)?,
        output_scale: match spec.layer_output_scale {
            true => l
                .optional_vector(&w("layer_output_scale"), 1)?
                .map(|s| s[0]),
            false => None,
        },
    })
}

/// Layer `i`'s use of its per-layer token input, when the model has them.
fn per_layer_block(
    l: &mut Loader<'_>,
    hp: &HyperParams,
    i: usize,
) -> Result<Option<PerLayerBlock>, ModelError> {
    let (d, epl) = (hp.n_embd, hp.n_embd_per_layer);
    if epl == 0 {
        return Ok(None);
    }
    let n = |s: &str| format!("blk.{i}.{s}");
    Ok(Some(PerLayerBlock {
        gate: l.linear(&n("inp_gate"), d, epl)?,
        proj: l.linear(&n("proj"), epl, d)?,
        post_norm: l.vector(&n("post_norm.weight"), d)?,
    }))
}

/// Layer `i`'s attention, in its own head shape.
fn attention_weights(
    l: &mut Loader<'_>,
    hp: &HyperParams,
    spec: &ArchSpec,
    i: usize,
) -> Result<AttentionWeights, ModelError> {
    let d = hp.n_embd;
    let g = hp.attention[i];
    let gates = if spec.gated_attention { 2 } else { 1 };
    let (q_dim, k_dim, v_dim) = (
        gates * hp.n_heads * g.head_dim_k,
        g.n_kv_heads * g.head_dim_k,
        g.n_kv_heads * g.head_dim_v,
    );
    let n = |s: &str| format!("blk.{i}.{s}");
    let w = |s: &str| n(&format!("{s}.weight"));
    let (q, kv) = if l.has(&n("attn_qkv.weight")) {
        let [q, k, v] = l.split(&n("attn_qkv"), d, [q_dim, k_dim, v_dim])?;
        let k_norm = l.vector_if(spec.qk_norm, &w("attn_k_norm"), g.head_dim_k)?;
        (
            q,
            Some(KvProjection {
                k,
                v: Some(v),
                k_norm,
            }),
        )
    } else {
        let q = l.linear(&n("attn_q"), d, q_dim)?;
        (q, kv_projection(l, hp, spec, i)?)
    };
    Ok(AttentionWeights {
        q,
        kv,
        q_norm: l.vector_if(spec.qk_norm, &w("attn_q_norm"), g.head_dim_k)?,
        o: l.linear(&n("attn_output"), hp.n_heads * g.head_dim_v, d)?,
        sinks: l.vector_if(spec.attention_sinks, &w("attn_sinks"), hp.n_heads)?,
    })
}

/// Layer `i`'s key and value projections. A shared-KV layer has none it uses:
/// the converter may still write them (llama.cpp loads and ignores them), so
/// they are checked and passed over.
fn kv_projection(
    l: &mut Loader<'_>,
    hp: &HyperParams,
    spec: &ArchSpec,
    i: usize,
) -> Result<Option<KvProjection>, ModelError> {
    let d = hp.n_embd;
    let g = hp.attention[i];
    let (k_dim, v_dim) = (g.n_kv_heads * g.head_dim_k, g.n_kv_heads * g.head_dim_v);
    let n = |s: &str| format!("blk.{i}.{s}");
    let w = |s: &str| n(&format!("{s}.weight"));
    let values_are_keys = spec.keys_as_values && !l.has(&w("attn_v"));
    if values_are_keys && k_dim != v_dim {
        return Err(wrong(
            &w("attn_v"),
            format!("missing, and keys of {k_dim} cannot stand for values of {v_dim}"),
        ));
    }
    let shared = g.kv_layer != i;
    if shared && !l.has(&w("attn_k")) {
        return Ok(None);
    }
    let k = l.linear(&n("attn_k"), d, k_dim)?;
    let v = match values_are_keys {
        true => None,
        false => Some(l.linear(&n("attn_v"), d, v_dim)?),
    };
    let k_norm = match shared {
        true => l.optional_vector(&w("attn_k_norm"), g.head_dim_k)?,
        false => l.vector_if(spec.qk_norm, &w("attn_k_norm"), g.head_dim_k)?,
    };
    Ok((!shared).then_some(KvProjection { k, v, k_norm }))
}

/// Layer `i`'s gated delta-net.
fn delta_net_weights(
    l: &mut Loader<'_>,
    hp: &HyperParams,
    dn: &DeltaNetParams,
    i: usize,
) -> Result<DeltaNetWeights, ModelError> {
    let d = hp.n_embd;
    let (c, v, h, taps) = (
        dn.conv_channels(),
        dn.value_dim(),
        dn.n_v_heads,
        dn.conv_kernel,
    );
    let n = |s: &str| format!("blk.{i}.{s}");
    Ok(DeltaNetWeights {
        qkv: l.linear(&n("attn_qkv"), d, c)?,
        gate: l.linear(&n("attn_gate"), d, v)?,
        beta: l.linear(&n("ssm_beta"), d, h)?,
        alpha: l.linear(&n("ssm_alpha"), d, h)?,
        conv: l.vector(&n("ssm_conv1d.weight"), c * taps)?,
        dt_bias: l.vector(&n("ssm_dt.bias"), h)?,
        a: l.vector(&n("ssm_a"), h)?,
        norm: l.vector(&n("ssm_norm.weight"), dn.head_dim)?,
        out: l.linear(&n("ssm_out"), v, d)?,
    })
}

/// The per-pair RoPE factor tensors the architecture reads, if the file has them.
fn rope_factors(
    l: &mut Loader<'_>,
    hp: &HyperParams,
    spec: &ArchSpec,
) -> Result<RopeFactorSets, ModelError> {
    let pairs = hp.rope_dim / 2;
    Ok(match spec.rope_factors {
        RopeFactors::None => RopeFactorSets::default(),
        RopeFactors::Freqs => RopeFactorSets {
            freqs: l.optional_vector("rope_freqs.weight", pairs)?,
            ..Default::default()
        },
        RopeFactors::LongShort => RopeFactorSets {
            freqs: None,
            long: l.optional_vector("rope_factors_long.weight", pairs)?,
            short: l.optional_vector("rope_factors_short.weight", pairs)?,
        },
    })
}
