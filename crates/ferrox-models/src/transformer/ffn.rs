//! The feed-forward blocks of [`Transformer`]: dense gated, and a mixture of
//! experts grouped by expert.

use ferrox_core::ops::activation::gated;
use ferrox_core::ops::norm::rms_norm;
use ferrox_core::packed::QuantizedRows;
use rayon::prelude::*;

use super::{Scratch, Transformer, add_residual};
use crate::weights::{Ffn, GatedFfn, LayerWeights, Linear};

impl Transformer {
    /// One layer's feed-forward block: `x += mlp(x)`.
    pub(super) fn mlp(
        &self,
        li: usize,
        lw: &LayerWeights,
        x: &mut [f32],
        n: usize,
        s: &mut Scratch,
    ) {
        let hp = &self.hp;
        let d = hp.n_embd;
        s.h.copy_from_slice(x);
        s.h.chunks_exact_mut(d)
            .for_each(|r| rms_norm(r, &lw.ffn_norm, hp.rms_eps));
        match &lw.ffn {
            Ffn::Dense(f) => {
                let Scratch {
                    h,
                    g,
                    u,
                    o,
                    quantized,
                    ..
                } = s;
                let ff = hp.layer_ff[li];
                let (g, u) = (&mut g[..n * ff], &mut u[..n * ff]);
                self.gated_ffn(f, h, n, ff, (g, u, o), quantized);
            }
            Ffn::Experts { router, experts } => self.experts(router, experts, n, s),
        }
        add_residual(x, &mut s.o, lw.ffn_post_norm.as_deref(), d, hp.rms_eps);
    }

    /// `o = (act(h Wgate) * h Wup) Wdown` for `n` rows of `h`, `ff` wide inside;
    /// `g` and `u` are `[n][ff]` scratch.
    pub(super) fn gated_ffn(
        &self,
        f: &GatedFfn,
        h: &[f32],
        n: usize,
        ff: usize,
        (g, u, o): (&mut [f32], &mut [f32], &mut [f32]),
        quantized: &mut QuantizedRows,
    ) {
        let d = self.hp.n_embd;
        let input = self.input(h, n, d, &[&f.gate, &f.up], quantized);
        self.project(&input, &mut [(&f.gate, &mut *g), (&f.up, &mut *u)]);
        // Element-wise, so splitting it across threads changes no value.
        let act = self.spec.gate;
        g.par_chunks_mut(4096)
            .zip(u.par_chunks(4096))
            .for_each(|(gc, uc)| gated(gc, uc, act));
        let input = self.input(g, n, ff, &[&f.down], quantized);
        self.project(&input, &mut [(&f.down, o)]);
    }

    /// A mixture of experts over the normed rows `s.h`, into `s.o`: route every
    /// row, run each chosen expert once on all the rows that chose it, then sum
    /// each row's experts, weighted, in its rank order.
    pub(super) fn experts(&self, router: &Linear, experts: &[GatedFfn], n: usize, s: &mut Scratch) {
        let d = self.hp.n_embd;
        let moe = self.hp.moe.expect("an expert layer has MoE parameters");
        let mut logits = vec![0.0f32; n * moe.n_experts];
        let input = self.input(&s.h, n, d, &[router], &mut s.quantized);
        self.project(&input, &mut [(router, &mut logits)]);
        let routes = crate::moe::route(&logits, &moe);
        let k = routes.n_used;
        // [n][k][d]: each row's expert outputs by rank.
        let mut by_rank = vec![0.0f32; n * k * d];
        for (e, rows) in routes.by_expert(moe.n_experts).iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let m = rows.len();
            let mut h = Vec::with_capacity(m * d);
            for &(t, _) in rows {
                h.extend_from_slice(&s.h[t * d..(t + 1) * d]);
            }
            let ff = moe.n_ff_expert;
            let (mut g, mut u, mut o) = (vec![0.0; m * ff], vec![0.0; m * ff], vec![0.0; m * d]);
            self.gated_ffn(
                &experts[e],
                &h,
                m,
                ff,
                (&mut g, &mut u, &mut o),
                &mut s.quantized,
            );
            for (j, &(t, r)) in rows.iter().enumerate() {
                by_rank[(t * k + r) * d..(t * k + r + 1) * d]
                    .copy_from_slice(&o[j * d..(j + 1) * d]);
            }
        }
        for (t, out) in s.o.chunks_exact_mut(d).enumerate() {
            out.fill(0.0);
            for r in 0..k {
                let w = routes.weight(t, r);
                let y = &by_rank[(t * k + r) * d..(t * k + r + 1) * d];
                out.iter_mut().zip(y).for_each(|(o, &v)| *o += w * v);
            }
        }
    }
}
