//! A multi-token-prediction head (Qwen3.5's `nextn` block, llama.cpp's
//! `graph_mtp`), run as a one-layer [`Transformer`] of its own that shares the
//! trunk's file, thread pool and (unless it has its own) embeddings, output
//! norm and head:
//!
//! * input: `x = eh_proj(concat(rmsnorm(embed(token)) * enorm, rmsnorm(h) *
//!   hnorm))`, `h` the target's hidden state after the output norm at the
//!   position before the token's (or the head's own, for a token it guessed);
//! * one full-attention block of the trunk's kind (gated queries, QK-norm, the
//!   trunk's RoPE), with its own KV, then the feed-forward;
//! * head: `rmsnorm(x) * shared_head_norm` (the trunk's output norm when the
//!   file has none), the hidden row fed back for the next guess, times the
//!   head matrix (the trunk's unless the file has `shared_head_head`).

use std::sync::Arc;

use ferrox_core::ops::norm::rms_norm;
use ferrox_core::packed::{PackedMatrix, QuantizedRows};

use super::{Batch, Transformer, ropes};
use crate::activation_path::ActivationPath;
use crate::decoder::{DraftHead, Output, Span};
use crate::error::ModelError;
use crate::kv_store::{KvLayout, KvStore};
use crate::weights::{DraftBlockWeights, Linear, Weights};

/// The head: its block as a model, and its input projection.
pub struct MtpHead {
    runner: Transformer,
    eh_proj: Linear,
    enorm: Vec<f32>,
    hnorm: Vec<f32>,
}

impl MtpHead {
    /// The first draft block of `trunk`'s file as a head; `None` when the
    /// file has none. Its matrices are packed as the trunk's are.
    pub fn new(trunk: &Transformer) -> Result<Option<MtpHead>, ModelError> {
        let Some(hp) = trunk.hp.draft_block(0) else {
            return Ok(None);
        };
        let file = &trunk.file;
        let mut d = DraftBlockWeights::load(file, &trunk.hp, 0)?;
        if trunk.path == ActivationPath::Int16 {
            let pack = |l: &mut Linear| {
                l.packed = PackedMatrix::pack(&l.weight.matrix(file), &*trunk.spin).map(Arc::new);
            };
            d.block.linears_mut().into_iter().for_each(pack);
            pack(&mut d.eh_proj);
            d.head.iter_mut().for_each(pack);
        }
        let w = &trunk.weights;
        let weights = Weights {
            token_embd: d.embed_tokens.unwrap_or(w.token_embd),
            layers: vec![d.block],
            output_norm: d.head_norm.unwrap_or_else(|| w.output_norm.clone()),
            output: d.head.unwrap_or_else(|| w.output.clone()),
            rope_factors: w.rope_factors.clone(),
            per_layer_inputs: None,
        };
        let (rope_global, rope_local) = ropes(&hp, &weights, hp.context_length);
        let runner = Transformer {
            file: Arc::clone(file),
            spec: hp.spec(),
            hp,
            weights,
            spin: Arc::clone(&trunk.spin),
            path: trunk.path,
            rope_global,
            rope_local,
            all_hidden: true,
            key_offsets: std::sync::OnceLock::new(),
        };
        Ok(Some(MtpHead {
            runner,
            eh_proj: d.eh_proj,
            enorm: d.enorm,
            hnorm: d.hnorm,
        }))
    }

    /// The block's input: each token's normed embedding beside its normed
    /// hidden row, projected (`[tokens][n_embd]`).
    fn input(&self, batch: &Batch<'_>, hidden: &[f32]) -> Vec<f32> {
        let r = &self.runner;
        let (d, n, eps) = (r.hp.n_embd, batch.len(), r.hp.rms_eps);
        let embedded = r.embed(batch);
        let mut both = vec![0.0f32; n * 2 * d];
        for ((pair, e), h) in both
            .chunks_exact_mut(2 * d)
            .zip(embedded.chunks_exact(d))
            .zip(hidden.chunks_exact(d))
        {
            let (pe, ph) = pair.split_at_mut(d);
            pe.copy_from_slice(e);
            rms_norm(pe, &self.enorm, eps);
            ph.copy_from_slice(h);
            rms_norm(ph, &self.hnorm, eps);
        }
        let mut quantized = QuantizedRows::default();
        let input = r.input(&both, n, 2 * d, &[&self.eh_proj], &mut quantized);
        let mut x = vec![0.0f32; n * d];
        r.project(&input, &mut [(&self.eh_proj, &mut x)]);
        x
    }
}

impl DraftHead for MtpHead {
    fn forward(
        &self,
        store: &mut KvStore,
        spans: &[Span<'_>],
        hidden: &[f32],
    ) -> Result<Output, ModelError> {
        let r = &self.runner;
        r.check(store, spans)?;
        let tokens: usize = spans.iter().map(|s| s.tokens.len()).sum();
        if hidden.len() != tokens * r.hp.n_embd {
            return Err(ModelError::Forward(format!(
                "{} hidden values for {tokens} tokens of width {}",
                hidden.len(),
                r.hp.n_embd
            )));
        }
        let batch = Batch::new(spans);
        let x = self.input(&batch, hidden);
        Ok(r.round_from(store, &batch, x))
    }

    fn kv_layout(&self) -> KvLayout {
        KvLayout::new(&self.runner.hp)
    }
}
