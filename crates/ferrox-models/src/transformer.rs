//! The decoder-only transformer of every supported architecture, on f32
//! activations, in named stages: `embed`, then per layer `attention` and `mlp`,
//! then `head`, which is optional (`hidden` stops before it). What differs
//! between architectures is read from their [`ArchSpec`] and from the weights
//! the file has (llama.cpp's graphs for them):
//!
//! * embed: rows of `token_embd`, scaled by `sqrt(n_embd)` for Gemma;
//! * attention (`attention.rs`), in the layer's own head shape (Gemma 4's
//!   window and full layers differ): `h = rmsnorm(x) * attn_norm`; `q, k, v = h
//!   Wq (+bq), h Wk (+bk), h Wv (+bv)` (Gemma 4 without `attn_v`: `v = h Wk`);
//!   per-head QK-norm (Qwen3, Gemma 3 and 4), values RMS-normed (Gemma 4); RoPE
//!   (adjacent pairs for llama, NeoX halves for the others; window layers may
//!   have their own base and dims); causal attention scaled by `attn_scale`,
//!   soft-capped (Gemma 2), over the last `window` positions on window layers,
//!   with a per-head sink logit in the softmax (gpt-oss); a shared-KV layer
//!   (Gemma 4) computes only `q` and attends to an earlier layer's KV; `o = attn
//!   Wo (+bo)`, post-norm (Gemma); `x += o`;
//! * mlp (`ffn.rs`): `h = rmsnorm(x) * ffn_norm`; `f = (act(h Wgate) * h Wup)
//!   Wdown`, act = SiLU, tanh-GELU or gpt-oss's clamped SwiGLU; post-norm
//!   (Gemma); `x += f`. A mixture of experts (Qwen3-MoE, gpt-oss) routes each
//!   token by `h Wrouter (+b)` (f32, [`crate::moe`]) and sums its chosen
//!   experts' `f` (with their biases), weighted, in rank order; the rows of a
//!   batch are grouped by expert, so each chosen expert's matrices are read
//!   once per step. Gemma 4 26B-A4B runs its experts beside a dense `f`;
//! * per-layer inputs and output scale (`per_layer.rs`, Gemma 4): `x +=
//!   rmsnorm((gelu(x Wgate) * input) Wproj) * post_norm`, then `x *= scale`;
//! * head: `rmsnorm(x) * output_norm` times the output matrix (tied to the
//!   embeddings when the file has none), soft-capped (Gemma 2).
//!
//! Invariants: every per-token computation is independent of the other tokens in
//! the call (matmul and attention reduce in fixed orders, SPEC S3), and attention
//! reads KV in runs that end at page boundaries only, so a position's numbers do
//! not depend on which pages (shared or private) hold its history.

use std::sync::{Arc, OnceLock};

use ferrox_core::ops::activation;
use ferrox_core::ops::matmul::matmul;
use ferrox_core::ops::norm::rms_norm;
use ferrox_core::ops::rope::RopeFreqs;
use ferrox_core::packed::{PackedMatrix, QuantizedRows, packed_matmul, packed_matmul_many};
use ferrox_core::pool::SpinPool;
use ferrox_gguf::GgufFile;

mod attention;
mod draft_head;
mod ffn;
mod key_offsets;
mod per_layer;
mod recurrent;

pub use draft_head::MtpHead;

use crate::activation_path::ActivationPath;
use crate::arch::ArchSpec;
use crate::decoder::{Decoder, DraftHead, Output, Rows, Span, Want};
use crate::error::ModelError;
use crate::hparams::{AttentionKind, HyperParams};
use crate::kv_store::{KeyOffsets, KvElement, KvStore};
use crate::weights::{LayerWeights, Linear, Mixer, Weights};

/// A loaded model, ready to run.
pub struct Transformer {
    file: Arc<GgufFile>,
    hp: HyperParams,
    spec: ArchSpec,
    weights: Weights,
    /// The threads of the pass's regions (the products and their inputs'
    /// quantization, attention, the gated activation, the delta-net's heads)
    /// and of the load's repacking: its workers stay awake between regions.
    spin: Arc<SpinPool>,
    path: ActivationPath,
    /// RoPE of full-attention layers, and of window layers when they differ.
    rope_global: RopeFreqs,
    rope_local: Option<RopeFreqs>,
    /// Every token's hidden state after the output norm is returned, not only
    /// those of spans that want [`Want::Hidden`] (the input of a draft head).
    all_hidden: bool,
    /// Made by the first 8- or 4-bit cache ([`Transformer::key_offsets`]).
    key_offsets: OnceLock<KeyOffsets>,
}

/// An input of the matrix products: `n` rows of f32, and their quantized form on
/// the integer path (made once, shared by every product of the same input).
struct Input<'a> {
    x: &'a [f32],
    n: usize,
    q: Option<&'a QuantizedRows>,
}

impl std::fmt::Debug for Transformer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transformer")
            .field("hp", &self.hp)
            .finish_non_exhaustive()
    }
}

/// A token of the batch: its span, its index in the span, its position.
#[derive(Clone, Copy)]
struct Slot {
    span: usize,
    index: usize,
    pos: usize,
}

/// The tokens of one forward call, flattened span by span.
struct Batch<'a> {
    spans: &'a [Span<'a>],
    slots: Vec<Slot>,
    tokens: Vec<u32>,
}

impl<'a> Batch<'a> {
    fn new(spans: &'a [Span<'a>]) -> Batch<'a> {
        let slots = spans
            .iter()
            .enumerate()
            .flat_map(|(si, s)| {
                (0..s.tokens.len()).map(move |i| Slot {
                    span: si,
                    index: i,
                    pos: s.start + i,
                })
            })
            .collect();
        let tokens = spans
            .iter()
            .flat_map(|s| s.tokens.iter().copied())
            .collect();
        Batch {
            spans,
            slots,
            tokens,
        }
    }

    fn len(&self) -> usize {
        self.slots.len()
    }

    /// Tokens whose logits the spans want.
    fn wanted(&self) -> Vec<usize> {
        (0..self.len())
            .filter(|&t| {
                let s = self.slots[t];
                let span = &self.spans[s.span];
                match span.want {
                    Want::Nothing | Want::Hidden => false,
                    Want::All => true,
                    Want::Verify { from, .. } => s.index >= from,
                    Want::Last => s.index + 1 == span.tokens.len(),
                }
            })
            .collect()
    }

    /// Tokens whose hidden states the spans want (`all`: every token's).
    fn wanted_hidden(&self, all: bool) -> Vec<usize> {
        (0..self.len())
            .filter(|&t| all || self.spans[self.slots[t].span].want == Want::Hidden)
            .collect()
    }

    /// The `(span, index)` of each of `tokens`.
    fn keys(&self, tokens: &[usize]) -> Vec<(usize, usize)> {
        tokens
            .iter()
            .map(|&t| (self.slots[t].span, self.slots[t].index))
            .collect()
    }
}

/// RoPE cosines and sines of every token of a batch: `[n][pairs]` each.
struct Angles {
    cos: Vec<f32>,
    sin: Vec<f32>,
    half: usize,
}

impl Angles {
    fn new(freqs: &RopeFreqs, batch: &Batch<'_>) -> Angles {
        let half = freqs.pairs();
        let n = batch.len();
        let (mut cos, mut sin) = (vec![0.0f32; n * half], vec![0.0f32; n * half]);
        for (t, s) in batch.slots.iter().enumerate() {
            freqs.angles(
                s.pos,
                &mut cos[t * half..(t + 1) * half],
                &mut sin[t * half..(t + 1) * half],
            );
        }
        Angles { cos, sin, half }
    }

    fn of(&self, t: usize) -> (&[f32], &[f32]) {
        let r = t * self.half..(t + 1) * self.half;
        (&self.cos[r.clone()], &self.sin[r])
    }
}

/// Working buffers of one forward call, sized for its tokens.
struct Scratch {
    h: Vec<f32>,
    /// Queries and their gates, head by head (gated attention only).
    qg: Vec<f32>,
    /// The output gates: `[n][n_heads * head_dim_k]` (gated attention only).
    gate: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    o: Vec<f32>,
    g: Vec<f32>,
    u: Vec<f32>,
    quantized: QuantizedRows,
    /// The attention tasks' outputs, task by task, before they are placed.
    att_parts: Vec<f32>,
}

impl Scratch {
    fn new(hp: &HyperParams, n: usize) -> Scratch {
        // Sized for the widest layer; each layer uses the front of each buffer.
        let widest = |f: fn(&crate::hparams::LayerAttention) -> usize| {
            hp.attention.iter().map(f).max().unwrap_or(0)
        };
        let nh = hp.n_heads;
        let (q, k, v) = (
            nh * widest(|a| a.head_dim_k),
            widest(|a| a.n_kv_heads * a.head_dim_k),
            widest(|a| a.n_kv_heads * a.head_dim_v),
        );
        let att = nh * widest(|a| a.head_dim_v);
        // The dense feed-forward's inside; an expert layer makes its own, per
        // expert (Gemma 4's has a dense path beside its experts).
        let experts_only =
            hp.moe.is_some() && hp.spec().experts != crate::arch::Experts::BesideDense;
        let ff = if experts_only { 0 } else { hp.n_ff };
        let gated = if hp.spec().gated_attention { n * q } else { 0 };
        Scratch {
            h: vec![0.0; n * hp.n_embd],
            qg: vec![0.0; 2 * gated],
            gate: vec![0.0; gated],
            q: vec![0.0; n * q],
            k: vec![0.0; n * k],
            v: vec![0.0; n * v],
            att: vec![0.0; n * att],
            o: vec![0.0; n * hp.n_embd],
            g: vec![0.0; n * ff],
            u: vec![0.0; n * ff],
            quantized: QuantizedRows::default(),
            att_parts: Vec::new(),
        }
    }
}

/// The RoPE of full-attention layers, and of window layers when their base or
/// rotated dims differ, for sequences of at most `context` positions. Window
/// layers never turn by the file's factor tensors (Gemma 4's `rope_freqs`
/// belong to its full layers).
fn ropes(hp: &HyperParams, weights: &Weights, context: usize) -> (RopeFreqs, Option<RopeFreqs>) {
    let factors = weights
        .rope_factors
        .for_context(context, hp.rope_orig_context);
    let rope = |dim: usize, base: f32, factors: Option<&[f32]>| {
        RopeFreqs::new(dim, base, hp.rope_scaling, factors, hp.rope_attn_factor)
    };
    let local_dim = hp
        .layers
        .iter()
        .zip(&hp.attention)
        .find(|(k, _)| matches!(k, AttentionKind::SlidingWindow { .. }))
        .map_or(hp.rope_dim, |(_, a)| a.rope_dim);
    let local = (hp.rope_freq_base_local != hp.rope_freq_base || local_dim != hp.rope_dim)
        .then(|| rope(local_dim, hp.rope_freq_base_local, None));
    (rope(hp.rope_dim, hp.rope_freq_base, factors), local)
}

/// Splits a gated query projection (per head: `dim` query values, then `dim`
/// gate values) into the queries and the gates.
fn split_gates(qg: &[f32], dim: usize, q: &mut [f32], gate: &mut [f32]) {
    for ((pair, q), g) in qg
        .chunks_exact(2 * dim)
        .zip(q.chunks_exact_mut(dim))
        .zip(gate.chunks_exact_mut(dim))
    {
        q.copy_from_slice(&pair[..dim]);
        g.copy_from_slice(&pair[dim..]);
    }
}

/// Adds `bias` to every `bias.len()`-wide row of `out`.
fn add_bias(out: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias {
        out.chunks_exact_mut(b.len())
            .for_each(|r| r.iter_mut().zip(b).for_each(|(x, y)| *x += y));
    }
}

/// `cap * tanh(x / cap)` on every value, when there is a cap.
fn softcap(values: &mut [f32], cap: Option<f32>) {
    if let Some(c) = cap {
        activation::softcap(values, c);
    }
}

/// `x += rmsnorm(o) * norm` (or `x += o` without a norm).
fn add_residual(x: &mut [f32], o: &mut [f32], norm: Option<&[f32]>, d: usize, eps: f32) {
    if let Some(w) = norm {
        o.chunks_exact_mut(d).for_each(|r| rms_norm(r, w, eps));
    }
    x.iter_mut().zip(o.iter()).for_each(|(a, b)| *a += b);
}

impl Transformer {
    /// Loads the model in `file`, running on `threads` threads, on the default
    /// (integer-activation) path.
    pub fn new(file: GgufFile, threads: usize) -> Result<Transformer, ModelError> {
        Self::with_path(file, threads, ActivationPath::default())
    }

    /// Loads the model in `file` for the given activation path.
    pub fn with_path(
        file: GgufFile,
        threads: usize,
        path: ActivationPath,
    ) -> Result<Transformer, ModelError> {
        let hp = HyperParams::from_metadata(&file.header().metadata)?;
        if hp.spec().encoder {
            return Err(ModelError::WrongKind {
                architecture: hp.architecture.gguf_name(),
                kind: crate::model::NOT_A_GENERATOR,
            });
        }
        Self::with_hyper_params(file, hp, threads, path)
    }

    /// Loads the model in `file` with hyper-parameters `hp` in place of the
    /// file's own (a reading of the file that differs from ferrox's, such as
    /// llama.cpp's RoPE). The loader checks them against the file's tensors.
    pub fn with_hyper_params(
        file: GgufFile,
        hp: HyperParams,
        threads: usize,
        path: ActivationPath,
    ) -> Result<Transformer, ModelError> {
        let mut weights = Weights::load(&file, &hp)?;
        let spin = SpinPool::new(threads.max(1), "ferrox-region")
            .map_err(|e| ModelError::Threads(e.to_string()))?;
        if path == ActivationPath::Int16 {
            // A packed matrix's bytes in the map are not read again (a tied
            // head's rows only for the few tokens looked up): their pages leave
            // the resident set batch by batch as they are packed, so the mapped
            // file is never resident beside its repacked copy, not even one
            // matrix of it (Gemma 3's 171 MB head).
            let mut pack = |l: &mut Linear| {
                let start = l.weight.byte_range().start;
                l.packed = PackedMatrix::pack_releasing(&l.weight.matrix(&file), &spin, |rows| {
                    file.release(start + rows.start..start + rows.end)
                })
                .map(Arc::new);
            };
            for layer in &mut weights.layers {
                layer.linears_mut().into_iter().for_each(&mut pack);
            }
            pack(&mut weights.output);
        }
        let (rope_global, rope_local) = ropes(&hp, &weights, hp.context_length);
        Ok(Transformer {
            spec: hp.spec(),
            file: Arc::new(file),
            hp,
            weights,
            spin: Arc::new(spin),
            path,
            rope_global,
            rope_local,
            all_hidden: false,
            key_offsets: OnceLock::new(),
        })
    }

    /// Serves sequences of at most `context` positions (the model's whole context
    /// unless set): this picks LongRoPE's factor set, as llama.cpp does by its
    /// context per sequence. Panics past the model's context.
    pub fn limit_context(&mut self, context: usize) {
        assert!(
            context <= self.hp.context_length,
            "within the model's context"
        );
        (self.rope_global, self.rope_local) = ropes(&self.hp, &self.weights, context);
    }

    /// Bytes of the repacked weight copies (0 on the f32 path).
    pub fn packed_bytes(&self) -> usize {
        self.weights
            .layers
            .iter()
            .flat_map(LayerWeights::linears)
            .chain([&self.weights.output])
            .filter_map(|l| l.packed.as_ref())
            .map(|p| p.byte_len())
            .sum()
    }

    /// Bytes of weights one decode step of one sequence reads: every matrix as
    /// the running path stores it (repacked, or as in the file), a routed
    /// expert's at the share of the experts a token is routed to, the head
    /// included; the token's embedding row, activations and KV aside.
    pub fn decode_weight_bytes(&self) -> f64 {
        self.weight_bytes(|l| {
            l.packed
                .as_ref()
                .map_or(l.weight.byte_range().len(), |p| p.byte_len())
        })
    }

    /// [`Transformer::decode_weight_bytes`] with every matrix as the file
    /// stores it: what a peer reading the file's own layout reads.
    pub fn decode_file_bytes(&self) -> f64 {
        self.weight_bytes(|l| l.weight.byte_range().len())
    }

    fn weight_bytes(&self, bytes: impl Fn(&Linear) -> usize) -> f64 {
        let share = self
            .hp
            .moe
            .as_ref()
            .map_or(1.0, |m| m.n_used as f64 / m.n_experts as f64);
        let mut total = bytes(&self.weights.output) as f64;
        for layer in &self.weights.layers {
            let all: usize = layer.linears().into_iter().map(&bytes).sum();
            let experts: usize = layer
                .experts()
                .iter()
                .flat_map(|f| [&f.gate, &f.up, &f.down])
                .map(&bytes)
                .sum();
            let router = layer.router().map_or(0, &bytes);
            total += (all - experts + router) as f64 + share * experts as f64;
        }
        total
    }

    /// The activation path this model runs.
    pub fn activation_path(&self) -> ActivationPath {
        self.path
    }

    /// The file the model was loaded from.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// Quantizes `x` into `buf` when the integer path runs and one of the
    /// `consumers` (the maps that take this input) is packed, and returns the input.
    fn input<'a>(
        &self,
        x: &'a [f32],
        n: usize,
        cols: usize,
        consumers: &[&Linear],
        buf: &'a mut QuantizedRows,
    ) -> Input<'a> {
        let q = (self.path == ActivationPath::Int16
            && cols.is_multiple_of(ferrox_core::packed::BLOCK)
            && consumers.iter().any(|l| l.packed.is_some()))
        .then(|| {
            buf.quantize_on(x, n, cols, &*self.spin);
            let packed = consumers.iter().filter_map(|l| l.packed.as_ref());
            if packed.clone().any(|p| p.format.needs_half_sums()) {
                buf.add_half_sums();
            }
            &*buf
        });
        Input { x, n, q }
    }

    /// `out = input * W (+ b)` for several maps of the same input, in one parallel
    /// region when all are packed.
    fn project(&self, input: &Input<'_>, jobs: &mut [(&Linear, &mut [f32])]) {
        match input.q {
            Some(q) if jobs.iter().all(|j| j.0.packed.is_some()) => {
                let mut packed: Vec<(&PackedMatrix, &mut [f32])> = jobs
                    .iter_mut()
                    .filter_map(|(l, out)| l.packed.as_deref().map(|p| (p, &mut **out)))
                    .collect();
                packed_matmul_many(&mut packed, q, &*self.spin);
            }
            _ => {
                for (l, out) in jobs.iter_mut() {
                    match (&l.packed, input.q) {
                        (Some(p), Some(q)) => packed_matmul(p, q, out, &*self.spin),
                        _ => matmul(
                            &l.weight.matrix(&self.file),
                            input.x,
                            input.n,
                            out,
                            &*self.spin,
                        ),
                    }
                }
            }
        }
        for (l, out) in jobs.iter_mut() {
            add_bias(out, l.bias.as_deref());
        }
    }

    fn check(&self, store: &KvStore, spans: &[Span<'_>]) -> Result<(), ModelError> {
        for (i, s) in spans.iter().enumerate() {
            if let Some(&bad) = s.tokens.iter().find(|&&t| t as usize >= self.hp.vocab_size) {
                return Err(ModelError::Forward(format!(
                    "span {i}: token {bad} is outside the vocabulary of {}",
                    self.hp.vocab_size
                )));
            }
            let end = s.start + s.tokens.len();
            if let Err(e) = store.check_state(s.pages, s.start) {
                return Err(ModelError::Forward(format!("span {i}: {e}")));
            }
            if s.pages.state.is_some() && spans[..i].iter().any(|o| o.pages.state == s.pages.state)
            {
                return Err(ModelError::Forward(format!(
                    "span {i}: another span of this call runs on the same recurrent state"
                )));
            }
            if let Want::Verify { from, keep } = s.want
                && (from >= s.tokens.len() || (keep.is_some() && keep == s.pages.state))
            {
                return Err(ModelError::Forward(format!(
                    "span {i}: logits from token {from} of {}, the state kept in slot {keep:?} (its own is {:?})",
                    s.tokens.len(),
                    s.pages.state
                )));
            }
            if let Err(p) = store.check_covers(s.pages, s.start, end) {
                return Err(ModelError::Forward(format!(
                    "span {i}: position {p} of positions {}..{end} has no KV page",
                    s.start
                )));
            }
        }
        Ok(())
    }

    /// The embedding rows of the batch's tokens: `[n][n_embd]`.
    fn embed(&self, batch: &Batch<'_>) -> Vec<f32> {
        let d = self.hp.n_embd;
        let embd = self.weights.token_embd.matrix(&self.file);
        let scale = self.spec.scale_embeddings.then(|| (d as f32).sqrt());
        let mut x = vec![0.0f32; batch.len() * d];
        for (row, &t) in x.chunks_exact_mut(d).zip(&batch.tokens) {
            embd.dequantize_row(t as usize, row);
            if let Some(s) = scale {
                row.iter_mut().for_each(|v| *v *= s);
            }
        }
        x
    }

    /// The hidden states after the last layer of the layers' input `x`:
    /// `[tokens][n_embd]`, token by token in span order, before the output norm.
    fn hidden(
        &self,
        cache: &mut KvStore,
        batch: &Batch<'_>,
        mut x: Vec<f32>,
        scratch: &mut Scratch,
    ) -> Vec<f32> {
        let per_layer = self.per_layer_inputs(&x, batch, &mut scratch.quantized);
        let global = Angles::new(&self.rope_global, batch);
        let local = self.rope_local.as_ref().map(|f| Angles::new(f, batch));
        for (li, lw) in self.weights.layers.iter().enumerate() {
            match &lw.mixer {
                Mixer::Attention(a) => {
                    let angles = (&global, local.as_ref());
                    self.attention(li, lw, a, &mut x, batch, angles, cache, scratch);
                }
                Mixer::DeltaNet(dn) => {
                    self.delta_net(li, lw, dn, &mut x, (batch, &mut *cache), scratch);
                }
            }
            self.mlp(li, lw, &mut x, batch.len(), scratch);
            self.per_layer(li, lw, per_layer.as_deref(), &mut x, &mut scratch.quantized);
        }
        x
    }

    /// The `wanted` tokens' rows of the hidden states `x`, output-normed:
    /// `[wanted][n_embd]`.
    fn output_normed(&self, x: &[f32], wanted: &[usize]) -> Vec<f32> {
        let d = self.hp.n_embd;
        let mut rows = vec![0.0f32; wanted.len() * d];
        for (r, &t) in rows.chunks_exact_mut(d).zip(wanted) {
            r.copy_from_slice(&x[t * d..(t + 1) * d]);
            rms_norm(r, &self.weights.output_norm, self.hp.rms_eps);
        }
        rows
    }

    /// Logits of the `wanted` tokens of the hidden states `x`: `[wanted][vocab]`.
    fn head(&self, x: &[f32], wanted: &[usize], quantized: &mut QuantizedRows) -> Vec<f32> {
        let hp = &self.hp;
        let d = hp.n_embd;
        let rows = self.output_normed(x, wanted);
        let mut logits = vec![0.0f32; wanted.len() * hp.vocab_size];
        let output = &self.weights.output;
        let input = self.input(&rows, wanted.len(), d, &[output], quantized);
        self.project(&input, &mut [(output, &mut logits)]);
        softcap(&mut logits, hp.final_softcap);
        logits
    }

    /// Runs every span from its tokens' embeddings.
    fn round(&self, cache: &mut KvStore, spans: &[Span<'_>]) -> Output {
        let batch = Batch::new(spans);
        let x = self.embed(&batch);
        self.round_from(cache, &batch, x)
    }

    /// Runs every span of `batch` from the layers' input `x`. Returns the
    /// logits and hidden states they want, in slot order (span by span, token
    /// by token).
    fn round_from(&self, cache: &mut KvStore, batch: &Batch<'_>, x: Vec<f32>) -> Output {
        let spans = batch.spans;
        let mut out = Output {
            logits: Rows {
                width: self.hp.vocab_size,
                ..Rows::default()
            },
            hidden: Rows {
                width: self.hp.n_embd,
                ..Rows::default()
            },
        };
        if batch.len() == 0 {
            return out;
        }
        let mut scratch = Scratch::new(&self.hp, batch.len());
        for s in spans.iter().filter(|s| s.start == 0) {
            cache.reset_state(s.pages);
        }
        let x = self.hidden(cache, batch, x, &mut scratch);
        for s in spans {
            cache.state_reached(s.pages, s.start + s.tokens.len());
            if let Want::Verify {
                from,
                keep: Some(slot),
            } = s.want
                && cache.layout().n_recurrent > 0
            {
                cache.state_copied(slot, s.start + from + 1);
            }
        }
        let wanted = batch.wanted();
        if !wanted.is_empty() {
            out.logits.index = batch.keys(&wanted);
            out.logits.data = self.head(&x, &wanted, &mut scratch.quantized);
        }
        let hidden = batch.wanted_hidden(self.all_hidden);
        if !hidden.is_empty() {
            out.hidden.index = batch.keys(&hidden);
            out.hidden.data = self.output_normed(&x, &hidden);
        }
        out
    }
}

impl Decoder for Transformer {
    fn forward(&self, store: &mut KvStore, spans: &[Span<'_>]) -> Result<Output, ModelError> {
        self.check(store, spans)?;
        Ok(self.round(store, spans))
    }

    fn hyper_params(&self) -> &HyperParams {
        &self.hp
    }

    fn limit_context(&mut self, context: usize) {
        Transformer::limit_context(self, context);
    }

    fn kv_store(&self, element: KvElement, page_size: usize) -> Result<KvStore, ModelError> {
        let store = KvStore::new(self.kv_layout().with_element(element), page_size);
        match store.rotated() {
            true => Ok(store.with_key_offsets(self.key_offsets()?.clone())),
            false => Ok(store),
        }
    }

    fn draft_head(&mut self) -> Result<Option<Box<dyn DraftHead>>, ModelError> {
        let head = MtpHead::new(self)?;
        self.all_hidden |= head.is_some();
        Ok(head.map(|h| Box::new(h) as Box<dyn DraftHead>))
    }
}
