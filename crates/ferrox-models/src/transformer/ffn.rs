//! The feed-forward blocks of [`Transformer`]: dense gated, and a mixture of
//! experts grouped by expert.

use ferrox_core::ops::activation::gated;
use ferrox_core::ops::norm::{rms_norm, rms_normalize};
use ferrox_core::packed::{PackedMatrix, QuantizedRows, packed_matmul_each};
use ferrox_core::pool::for_each_chunk_mut;

use super::{Scratch, Transformer, add_bias, add_residual};
use crate::ActivationPath;
use crate::weights::{BesideDense, Ffn, GatedFfn, LayerWeights, Linear};

/// Values of `act(g) * u` per task.
const GATE_CHUNK: usize = 4096;

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
        self.gate_in_place(g, u);
        let input = self.input(g, n, ff, &[&f.down], quantized);
        self.project(&input, &mut [(&f.down, o)]);
    }

    /// `g = act(g) * u`, element-wise (so splitting it across threads changes
    /// no value).
    fn gate_in_place(&self, g: &mut [f32], u: &[f32]) {
        let act = self.spec.gate;
        for_each_chunk_mut(&*self.spin, g, GATE_CHUNK, |i, gc| {
            gated(gc, &u[i * GATE_CHUNK..][..gc.len()], act)
        });
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
        let by_expert = routes.by_expert(moe.n_experts);
        let chosen: Vec<Chosen<'_>> = by_expert
            .iter()
            .enumerate()
            .filter(|(_, rows)| !rows.is_empty())
            .map(|(expert, rows)| {
                let mut x = Vec::with_capacity(rows.len() * d);
                for &(t, _) in rows {
                    x.extend_from_slice(&h[t * d..(t + 1) * d]);
                }
                Chosen { expert, rows, x }
            })
            .collect();
        let ff = moe.n_ff_expert;
        let mut outs: Vec<Vec<f32>> = chosen.iter().map(|c| vec![0.0; c.rows.len() * d]).collect();
        let all_packed = chosen.iter().all(|c| {
            let f = &experts[c.expert];
            [&f.gate, &f.up, &f.down].iter().all(|l| l.packed.is_some())
        });
        if self.path == ActivationPath::Int16 && all_packed {
            let inputs: Vec<(&GatedFfn, &[f32])> = chosen
                .iter()
                .map(|c| (&experts[c.expert], c.x.as_slice()))
                .collect();
            self.experts_together(&inputs, ff, &mut outs);
        } else {
            for (c, o) in chosen.iter().zip(outs.iter_mut()) {
                let m = c.rows.len();
                let (mut g, mut u) = (vec![0.0; m * ff], vec![0.0; m * ff]);
                self.gated_ffn(
                    &experts[c.expert],
                    &c.x,
                    m,
                    ff,
                    (&mut g, &mut u, o),
                    quantized,
                );
            }
        }
        // Where each row's output of each rank lies: [n][k] -> (chosen, row).
        let mut at = vec![(0, 0); n * k];
        for (ci, (c, o)) in chosen.iter().zip(outs.iter_mut()).enumerate() {
            if let Some(s) = scales {
                o.iter_mut().for_each(|v| *v *= s[c.expert]);
            }
            for (j, &(t, r)) in c.rows.iter().enumerate() {
                at[t * k + r] = (ci, j);
            }
        }
        for (t, row) in out.chunks_exact_mut(d).enumerate() {
            row.fill(0.0);
            for r in 0..k {
                let w = routes.weight(t, r);
                let (ci, j) = at[t * k + r];
                let y = &outs[ci][j * d..(j + 1) * d];
                row.iter_mut().zip(y).for_each(|(o, &v)| *o += w * v);
            }
        }
    }

    /// [`Transformer::gated_ffn`] of several packed experts, each on its own
    /// rows (`inputs`: the expert and its `[m][n_embd]` rows), into `outs`
    /// (`[m][n_embd]` each): every gate and up product in one parallel region,
    /// every down product in a second (a decode step of 8 experts made 16).
    /// Each product is the one `gated_ffn` computes.
    fn experts_together(&self, inputs: &[(&GatedFfn, &[f32])], ff: usize, outs: &mut [Vec<f32>]) {
        let d = self.hp.n_embd;
        let rows = |x: &[f32], cols: usize| x.len() / cols;
        // Each expert's rows quantized as `Transformer::input` does for its maps.
        let quantize = |x: &[f32], cols: usize, maps: &[&Linear]| {
            let mut q = QuantizedRows::default();
            self.input(x, rows(x, cols), cols, maps, &mut q);
            q
        };
        let first: Vec<QuantizedRows> = inputs
            .iter()
            .map(|(f, x)| quantize(x, d, &[&f.gate, &f.up]))
            .collect();
        let mut gates: Vec<Vec<f32>> = inputs
            .iter()
            .map(|(_, x)| vec![0.0; rows(x, d) * ff])
            .collect();
        let mut ups = gates.clone();
        let mut jobs: Vec<(&PackedMatrix, &QuantizedRows, &mut [f32])> = Vec::new();
        for ((((f, _), q), g), u) in inputs.iter().zip(&first).zip(&mut gates).zip(&mut ups) {
            jobs.push((packed_of(&f.gate), q, g));
            jobs.push((packed_of(&f.up), q, u));
        }
        packed_matmul_each(&mut jobs, &*self.spin);
        let second: Vec<QuantizedRows> = inputs
            .iter()
            .zip(gates.iter_mut().zip(&mut ups))
            .map(|((f, _), (g, u))| {
                add_bias(g, f.gate.bias.as_deref());
                add_bias(u, f.up.bias.as_deref());
                self.gate_in_place(g, u);
                quantize(g, ff, &[&f.down])
            })
            .collect();
        let mut jobs: Vec<(&PackedMatrix, &QuantizedRows, &mut [f32])> = inputs
            .iter()
            .zip(&second)
            .zip(outs.iter_mut())
            .map(|(((f, _), q), o)| (packed_of(&f.down), q, o.as_mut_slice()))
            .collect();
        packed_matmul_each(&mut jobs, &*self.spin);
        for ((f, _), o) in inputs.iter().zip(outs.iter_mut()) {
            add_bias(o, f.down.bias.as_deref());
        }
    }
}

/// The packed form of an expert's map, which the caller checked is there.
fn packed_of(l: &Linear) -> &PackedMatrix {
    l.packed.as_ref().expect("every expert is packed")
}

/// A chosen expert: the `(token, rank)` rows routed to it and their inputs,
/// `[rows][n_embd]`.
struct Chosen<'a> {
    expert: usize,
    rows: &'a [(usize, usize)],
    x: Vec<f32>,
}
