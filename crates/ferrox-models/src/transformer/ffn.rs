//! The feed-forward blocks of [`Transformer`]: dense gated, and a mixture of
//! experts grouped by expert.

use ferrox_core::ops::activation::gated;
use ferrox_core::ops::norm::{rms_norm, rms_normalize};
use ferrox_core::packed::QuantizedRows;
use rayon::prelude::*;

use super::{Scratch, Transformer, add_residual};
use crate::weights::{BesideDense, Ffn, GatedFfn, LayerWeights, Linear};

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
            Ffn::Experts { router, experts } => {
                let Scratch {
                    h, o, quantized, ..
                } = s;
                let routes = self.route(router, h, n, quantized);
                self.run_experts(&routes, experts, None, h, o, quantized);
            }
            Ffn::BesideDense(b) => self.beside_dense(li, b, x, n, s),
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

    /// Gemma 4's two paths into `s.o`: the dense feed-forward on `s.h`, normed,
    /// plus the experts on `x` normed their own way, routed by `x` normed
    /// without a weight, scaled by `1/sqrt(n_embd)` and the router's scale.
    fn beside_dense(&self, li: usize, b: &BesideDense, x: &[f32], n: usize, s: &mut Scratch) {
        let hp = &self.hp;
        let (d, eps) = (hp.n_embd, hp.rms_eps);
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
        self.gated_ffn(&b.dense, h, n, ff, (g, u, o), quantized);
        o.chunks_exact_mut(d)
            .for_each(|r| rms_norm(r, &b.dense_post_norm, eps));
        let mut router_input = x.to_vec();
        let scale = 1.0 / (d as f32).sqrt();
        for r in router_input.chunks_exact_mut(d) {
            rms_normalize(r, eps);
            r.iter_mut()
                .zip(&b.router_scale)
                .for_each(|(v, &w)| *v = *v * scale * w);
        }
        let routes = self.route(&b.router, &router_input, n, quantized);
        let mut input = router_input;
        input.copy_from_slice(x);
        input
            .chunks_exact_mut(d)
            .for_each(|r| rms_norm(r, &b.experts_pre_norm, eps));
        let mut experts = vec![0.0f32; n * d];
        let scales = b.expert_scales.as_deref();
        self.run_experts(&routes, &b.experts, scales, &input, &mut experts, quantized);
        for (o, e) in o.chunks_exact_mut(d).zip(experts.chunks_exact_mut(d)) {
            rms_norm(e, &b.experts_post_norm, eps);
            o.iter_mut().zip(e.iter()).for_each(|(a, b)| *a += b);
        }
    }

    /// Each of the `n` rows of `input`'s experts and weights, by its router's
    /// logits (f32 path).
    fn route(
        &self,
        router: &Linear,
        input: &[f32],
        n: usize,
        quantized: &mut QuantizedRows,
    ) -> crate::moe::Routes {
        let moe = self.hp.moe.expect("an expert layer has MoE parameters");
        let mut logits = vec![0.0f32; n * moe.n_experts];
        let input = self.input(input, n, self.hp.n_embd, &[router], quantized);
        self.project(&input, &mut [(router, &mut logits)]);
        crate::moe::route(&logits, &moe)
    }

    /// The routed experts over the rows `h`, into `out`: each chosen expert
    /// runs once on all the rows that chose it (its output times its scale, if
    /// any), then each row sums its experts, weighted, in its rank order.
    fn run_experts(
        &self,
        routes: &crate::moe::Routes,
        experts: &[GatedFfn],
        scales: Option<&[f32]>,
        h: &[f32],
        out: &mut [f32],
        quantized: &mut QuantizedRows,
    ) {
        let d = self.hp.n_embd;
        let moe = self.hp.moe.expect("an expert layer has MoE parameters");
        let (n, k) = (routes.tokens(), routes.n_used);
        // [n][k][d]: each row's expert outputs by rank.
        let mut by_rank = vec![0.0f32; n * k * d];
        for (e, rows) in routes.by_expert(moe.n_experts).iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let m = rows.len();
            let mut x = Vec::with_capacity(m * d);
            for &(t, _) in rows {
                x.extend_from_slice(&h[t * d..(t + 1) * d]);
            }
            let ff = moe.n_ff_expert;
            let (mut g, mut u, mut o) = (vec![0.0; m * ff], vec![0.0; m * ff], vec![0.0; m * d]);
            self.gated_ffn(&experts[e], &x, m, ff, (&mut g, &mut u, &mut o), quantized);
            if let Some(s) = scales {
                o.iter_mut().for_each(|v| *v *= s[e]);
            }
            for (j, &(t, r)) in rows.iter().enumerate() {
                by_rank[(t * k + r) * d..(t * k + r + 1) * d]
                    .copy_from_slice(&o[j * d..(j + 1) * d]);
            }
        }
        for (t, row) in out.chunks_exact_mut(d).enumerate() {
            row.fill(0.0);
            for r in 0..k {
                let w = routes.weight(t, r);
                let y = &by_rank[(t * k + r) * d..(t * k + r + 1) * d];
                row.iter_mut().zip(y).for_each(|(o, &v)| *o += w * v);
            }
        }
    }
}
