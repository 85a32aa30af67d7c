//! A bidirectional encoder (BERT, nomic-bert), on f32 activations with the
//! fused float product (`ferrox_core::ops::matmul_fused`: each element one
//! chain of fused multiply-adds), in
//! llama.cpp's graph (`src/models/bert.cpp`):
//!
//! * embed: `x = token_embd[t] + token_types[0] (+ position_embd[pos])`, then
//!   a layer norm (`token_embd_norm`);
//! * per layer, post-norm: `x = LN(x + Wo attn(Wq x, Wk x, Wv x))`, attention
//!   over every token of the sequence (both ways), scaled by `1/sqrt(head)`,
//!   queries and keys rotated (NeoX pairs) when the model has no position
//!   embeddings (nomic-bert), a (sequence, head) block at a time on the same
//!   fused product (the `attention` module); `x = LN(x + Wdown gelu(Wup x))`, every map
//!   with its bias (added, and GELU taken, as the product stores each
//!   element), or `x = LN(x + Wdown (silu(Wgate x) * Wup x))` (nomic-bert);
//! * out: every token's `x` (an encoder has no output norm and no head);
//!   [`Encoder::classify`] runs a reranker's head on the pooled first token:
//!   `out(tanh(dense(x)))`.
//!
//! Invariants: a sequence runs whole, in one span starting at position 0 (a
//! token attends to the ones after it, so a sequence cannot be split); it
//! keeps no KV. Every per-token product and norm is independent of the other
//! tokens in the call, and attention reads only its own sequence (SPEC S3).

use ferrox_core::ops::activation::{Gate, gated};
use ferrox_core::ops::matmul_fused::{Epilogue, matmul_fused};
use ferrox_core::ops::norm::layer_norm;
use ferrox_core::ops::rope::{self, RopeFreqs, RopeStyle};
use ferrox_gguf::GgufFile;

use crate::decoder::{Decoder, Output, Rows, Span, Want};
use crate::error::ModelError;
use crate::hparams::HyperParams;
use crate::kv_store::KvStore;
use crate::weights::Linear;
use crate::weights::encoder::{EncoderWeights, LayerNorm};

mod attention;

/// A loaded encoder.
pub struct Encoder {
    file: GgufFile,
    hp: HyperParams,
    weights: EncoderWeights,
    /// Rotary positions, for a model without position embeddings.
    rope: Option<RopeFreqs>,
    pool: rayon::ThreadPool,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("hp", &self.hp)
            .finish_non_exhaustive()
    }
}

impl Encoder {
    /// Loads the encoder `file` describes, computing on `threads` threads.
    pub fn new(file: GgufFile, threads: usize) -> Result<Encoder, ModelError> {
        let hp = HyperParams::from_metadata(&file.header().metadata)?;
        if !hp.spec().encoder {
            return Err(ModelError::WrongKind {
                architecture: hp.architecture.gguf_name(),
                kind: "a generating decoder, not an encoder",
            });
        }
        let weights = EncoderWeights::load(&file, &hp)?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .build()
            .map_err(|e| ModelError::Forward(format!("thread pool: {e}")))?;
        let rope = weights.positions.is_none().then(|| {
            RopeFreqs::new(
                hp.rope_dim,
                hp.rope_freq_base,
                hp.rope_scaling,
                None,
                hp.rope_attn_factor,
            )
        });
        Ok(Encoder {
            file,
            hp,
            weights,
            rope,
            pool,
        })
    }

    /// The file the model was loaded from.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// Whether the file has a classification head (a reranker).
    pub fn has_classifier(&self) -> bool {
        self.weights.classifier.is_some()
    }

    /// `l`'s map of the `n` rows of `x`, with its bias.
    fn linear(&self, l: &Linear, x: &[f32], n: usize) -> Vec<f32> {
        let mut out = Vec::new();
        self.linear_into(l, x, n, &mut out, false);
        out
    }

    /// [`Encoder::linear`] into `out`, whose memory is reused (a fresh buffer
    /// per product cost page faults and zeroing: 7 % of an embedding load),
    /// then GELU if `gelu`. The bias and GELU are applied as each element is
    /// stored (a pass over the output each had cost 5-8 % of the samples).
    fn linear_into(&self, l: &Linear, x: &[f32], n: usize, out: &mut Vec<f32>, gelu: bool) {
        out.resize(n * l.weight.rows, 0.0);
        let epilogue = Epilogue {
            bias: l.bias.as_deref(),
            gelu,
        };
        matmul_fused(
            &l.weight.matrix(&self.file),
            x,
            n,
            out,
            epilogue,
            &self.pool,
        );
    }

    fn norm_rows(&self, x: &mut [f32], norm: &LayerNorm) {
        by_rows(x, self.hp.n_embd, |row| {
            layer_norm(row, &norm.weight, &norm.bias, self.hp.rms_eps)
        });
    }

    /// The residual step: `x[t] += y[t]`, then `x[t]` normed, token by token.
    fn add_and_norm(&self, x: &mut [f32], y: &[f32], norm: &LayerNorm) {
        use rayon::prelude::*;
        let d = self.hp.n_embd;
        x.par_chunks_mut(d)
            .zip(y.par_chunks(d))
            .with_min_len(ROWS_A_TASK)
            .for_each(|(row, add)| {
                row.iter_mut().zip(add).for_each(|(a, &b)| *a += b);
                layer_norm(row, &norm.weight, &norm.bias, self.hp.rms_eps);
            });
    }

    /// The embedding rows of the tokens of `spans`, normed: `[tokens][n_embd]`.
    fn embed(&self, spans: &[Span<'_>]) -> Vec<f32> {
        let d = self.hp.n_embd;
        let w = &self.weights;
        let tokens = w.token_embd.matrix(&self.file);
        let positions = w.positions.map(|p| p.matrix(&self.file));
        let mut x = Vec::new();
        let mut pos_row = vec![0.0f32; d];
        for s in spans {
            for (p, &t) in s.tokens.iter().enumerate() {
                let start = x.len();
                x.resize(start + d, 0.0);
                let row = &mut x[start..];
                tokens.dequantize_row(t as usize, row);
                if let Some(positions) = &positions {
                    positions.dequantize_row(p, &mut pos_row);
                    row.iter_mut().zip(&pos_row).for_each(|(v, &q)| *v += q);
                }
                if let Some(ty) = &w.token_type {
                    row.iter_mut().zip(ty).for_each(|(v, &q)| *v += q);
                }
            }
        }
        self.norm_rows(&mut x, &w.embd_norm);
        x
    }

    /// Every token's last-layer state: `[tokens][n_embd]`.
    fn hidden(&self, spans: &[Span<'_>]) -> Vec<f32> {
        let mut x = self.embed(spans);
        let n = x.len() / self.hp.n_embd;
        let lens: Vec<usize> = spans.iter().map(|s| s.tokens.len()).collect();
        let heads = attention::Heads {
            width: self.hp.n_embd,
            n_heads: self.hp.n_heads,
            head_dim: self.hp.head_dim_k,
        };
        // Each product's output and the attention's buffers, reused layer
        // after layer.
        let [
            mut q,
            mut k,
            mut v,
            mut att,
            mut o,
            mut up,
            mut gate,
            mut down,
        ] = Default::default();
        let mut scratch = attention::Scratch::default();
        for l in &self.weights.layers {
            self.linear_into(&l.q, &x, n, &mut q, false);
            self.linear_into(&l.k, &x, n, &mut k, false);
            self.linear_into(&l.v, &x, n, &mut v, false);
            self.rotate(&mut q, &mut k, spans);
            attention::attend(heads, &q, &k, &v, &lens, &mut scratch, &mut att);
            self.linear_into(&l.o, &att, n, &mut o, false);
            self.add_and_norm(&mut x, &o, &l.attn_norm);
            match &l.gate {
                Some(g) => {
                    self.linear_into(&l.up, &x, n, &mut up, false);
                    self.linear_into(g, &x, n, &mut gate, false);
                    gated(&mut gate, &up, Gate::Silu);
                    std::mem::swap(&mut up, &mut gate);
                }
                None => self.linear_into(&l.up, &x, n, &mut up, true),
            }
            self.linear_into(&l.down, &up, n, &mut down, false);
            self.add_and_norm(&mut x, &down, &l.out_norm);
        }
        x
    }

    /// Rotates every token's queries and keys by its position in its span
    /// (NeoX pairs), when the model has rotary positions.
    fn rotate(&self, q: &mut [f32], k: &mut [f32], spans: &[Span<'_>]) {
        let Some(freqs) = &self.rope else { return };
        let d = self.hp.n_embd;
        let (hd, rd) = (self.hp.head_dim_k, self.hp.rope_dim);
        let (mut cos, mut sin) = (vec![0.0f32; freqs.pairs()], vec![0.0f32; freqs.pairs()]);
        let positions = spans.iter().flat_map(|s| 0..s.tokens.len());
        for (t, p) in positions.enumerate() {
            freqs.angles(p, &mut cos, &mut sin);
            let row = t * d..(t + 1) * d;
            rope::apply(&mut q[row.clone()], hd, rd, RopeStyle::Neox, &cos, &sin);
            rope::apply(&mut k[row], hd, rd, RopeStyle::Neox, &cos, &sin);
        }
    }

    fn check(&self, spans: &[Span<'_>]) -> Result<(), ModelError> {
        for (i, s) in spans.iter().enumerate() {
            let fail = |why: String| Err(ModelError::Forward(format!("span {i}: {why}")));
            if s.start != 0 {
                return fail(format!(
                    "an encoder runs a sequence whole, from position 0 (this span starts at {})",
                    s.start
                ));
            }
            if s.tokens.len() > self.hp.context_length {
                return fail(format!(
                    "{} tokens: the encoder's positions end at {}",
                    s.tokens.len(),
                    self.hp.context_length
                ));
            }
            if !matches!(s.want, Want::Nothing | Want::Hidden) {
                return fail("an encoder has no output head: it gives hidden states only".into());
            }
            if let Some(&bad) = s.tokens.iter().find(|&&t| t as usize >= self.hp.vocab_size) {
                return fail(format!(
                    "token {bad} is outside the vocabulary of {}",
                    self.hp.vocab_size
                ));
            }
        }
        Ok(())
    }
}

/// Tokens a task of the elementwise steps takes at least: a 384-wide row is
/// 1.5 KB, so a task is tens of KB, past the cost of handing it out.
const ROWS_A_TASK: usize = 16;

/// `f` on each `width`-long row of `m`, the rows split over the pool's
/// threads (the caller runs inside it). Each row is computed as alone: the
/// same bits as a loop.
fn by_rows(m: &mut [f32], width: usize, f: impl Fn(&mut [f32]) + Sync) {
    use rayon::prelude::*;
    m.par_chunks_mut(width)
        .with_min_len(ROWS_A_TASK)
        .for_each(&f);
}

impl Decoder for Encoder {
    fn forward(&self, _store: &mut KvStore, spans: &[Span<'_>]) -> Result<Output, ModelError> {
        self.check(spans)?;
        let d = self.hp.n_embd;
        let mut out = Output {
            logits: Rows {
                width: self.hp.vocab_size,
                ..Rows::default()
            },
            hidden: Rows {
                width: d,
                ..Rows::default()
            },
        };
        if spans.iter().all(|s| s.tokens.is_empty()) {
            return Ok(out);
        }
        let x = self.pool.install(|| self.hidden(spans));
        let mut at = 0;
        for (si, s) in spans.iter().enumerate() {
            let n = s.tokens.len();
            if s.want == Want::Hidden {
                out.hidden.data.extend_from_slice(&x[at * d..(at + n) * d]);
                out.hidden.index.extend((0..n).map(|t| (si, t)));
            }
            at += n;
        }
        Ok(out)
    }

    fn hyper_params(&self) -> &HyperParams {
        &self.hp
    }

    fn is_encoder(&self) -> bool {
        true
    }

    fn classify(&self, pooled: &[f32]) -> Option<Vec<f32>> {
        let c = self.weights.classifier.as_ref()?;
        let mut x = pooled.to_vec();
        // On the encoder's pool, as every product's elementwise steps.
        self.pool.install(|| {
            if let Some(dense) = &c.dense {
                x = self.linear(dense, &x, 1);
                x.iter_mut().for_each(|v| *v = v.tanh());
            }
            Some(self.linear(&c.out, &x, 1))
        })
    }
}
