//! Gemma 4's per-layer token inputs (E2B, E4B): a second embedding gives every
//! token a small input for each layer, mixed with a projection of its first
//! embedding, which each layer gates with its hidden state and adds back
//! (llama.cpp's `build_inp_per_layer`, `project_per_layer_inputs` and the
//! per-layer block of its Gemma 4 graph). Also the per-layer output scale.

use ferrox_core::ops::activation::gelu_tanh;
use ferrox_core::ops::norm::rms_norm;
use ferrox_core::packed::QuantizedRows;

use super::{Batch, Transformer, add_residual};
use crate::weights::{LayerWeights, PerLayerBlock};

impl Transformer {
    /// Every token's input to every layer, `[n][n_layers][n_epl]`, from the
    /// scaled embeddings `x0`: `(rmsnorm(x0 Wmodel / sqrt(n_embd)) * norm +
    /// embd[token] * sqrt(n_epl)) / sqrt(2)`; `None` without per-layer inputs.
    pub(super) fn per_layer_inputs(
        &self,
        x0: &[f32],
        batch: &Batch<'_>,
        quantized: &mut QuantizedRows,
    ) -> Option<Vec<f32>> {
        let p = self.weights.per_layer_inputs.as_ref()?;
        let hp = &self.hp;
        let (d, epl, n) = (hp.n_embd, hp.n_embd_per_layer, batch.len());
        let width = epl * hp.n_layers;
        let mut inputs = vec![0.0f32; n * width];
        let input = self.input(x0, n, d, &[&p.model_proj], quantized);
        self.project(&input, &mut [(&p.model_proj, &mut inputs)]);
        let (proj_scale, embd_scale) = (1.0 / (d as f32).sqrt(), (epl as f32).sqrt());
        let mix = 1.0 / 2f32.sqrt();
        let embd = p.token_embd.matrix(&self.file);
        let mut row = vec![0.0f32; width];
        for (out, &token) in inputs.chunks_exact_mut(width).zip(&batch.tokens) {
            out.iter_mut().for_each(|v| *v *= proj_scale);
            out.chunks_exact_mut(epl)
                .for_each(|c| rms_norm(c, &p.proj_norm, hp.rms_eps));
            embd.dequantize_row(token as usize, &mut row);
            for (o, &e) in out.iter_mut().zip(&row) {
                *o = (*o + e * embd_scale) * mix;
            }
        }
        Some(inputs)
    }

    /// Layer `li`'s per-layer block, `x += rmsnorm((gelu(x Wgate) * input)
    /// Wproj) * post_norm`, then its output scale, each when it has one.
    pub(super) fn per_layer(
        &self,
        li: usize,
        lw: &LayerWeights,
        inputs: Option<&[f32]>,
        x: &mut [f32],
        quantized: &mut QuantizedRows,
    ) {
        if let (Some(block), Some(inputs)) = (&lw.per_layer, inputs) {
            self.per_layer_block(li, block, inputs, x, quantized);
        }
        if let Some(scale) = lw.output_scale {
            x.iter_mut().for_each(|v| *v *= scale);
        }
    }

    fn per_layer_block(
        &self,
        li: usize,
        block: &PerLayerBlock,
        inputs: &[f32],
        x: &mut [f32],
        quantized: &mut QuantizedRows,
    ) {
        let hp = &self.hp;
        let (d, epl) = (hp.n_embd, hp.n_embd_per_layer);
        let n = x.len() / d;
        let width = epl * hp.n_layers;
        let mut g = vec![0.0f32; n * epl];
        let input = self.input(x, n, d, &[&block.gate], quantized);
        self.project(&input, &mut [(&block.gate, &mut g)]);
        for (t, gt) in g.chunks_exact_mut(epl).enumerate() {
            let own = &inputs[t * width + li * epl..t * width + (li + 1) * epl];
            gt.iter_mut()
                .zip(own)
                .for_each(|(v, &i)| *v = gelu_tanh(*v) * i);
        }
        let mut o = vec![0.0f32; n * d];
        let input = self.input(&g, n, epl, &[&block.proj], quantized);
        self.project(&input, &mut [(&block.proj, &mut o)]);
        add_residual(x, &mut o, Some(&block.post_norm), d, hp.rms_eps);
    }
}
