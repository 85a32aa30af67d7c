//! The gated delta-net layer of [`Transformer`] (Qwen3.5): projections for the
//! batch, then each span's recurrence on its own state ([`crate::delta_net`]).

use ferrox_core::ops::norm::rms_norm;

use super::{Batch, Scratch, Transformer, add_residual};
use crate::decoder::Want;
use crate::delta_net::{self, Projections};
use crate::kv_store::{KvStore, LayerSlot};
use crate::weights::{DeltaNetWeights, LayerWeights};

impl Transformer {
    /// One gated delta-net layer: `x += delta_net(x)`, advancing each span's
    /// recurrent state ([`crate::delta_net`]).
    pub(super) fn delta_net(
        &self,
        li: usize,
        lw: &LayerWeights,
        dn: &DeltaNetWeights,
        x: &mut [f32],
        (batch, cache): (&Batch<'_>, &mut KvStore),
        s: &mut Scratch,
    ) {
        let hp = &self.hp;
        let p = hp.delta_net.expect("a delta-net layer has its sizes");
        let (d, n) = (hp.n_embd, batch.len());
        let (c, v, heads) = (p.conv_channels(), p.value_dim(), p.n_v_heads);
        let LayerSlot::Recurrent(index) = cache.layout().layers[li] else {
            unreachable!("layer {li} is recurrent");
        };
        s.h.copy_from_slice(x);
        s.h.chunks_exact_mut(d)
            .for_each(|r| rms_norm(r, &lw.attn_norm, hp.rms_eps));
        let (mut mixed, mut z) = (vec![0.0f32; n * c], vec![0.0f32; n * v]);
        let (mut beta, mut alpha) = (vec![0.0f32; n * heads], vec![0.0f32; n * heads]);
        let maps = [&dn.qkv, &dn.gate, &dn.beta, &dn.alpha];
        let input = self.input(&s.h, n, d, &maps, &mut s.quantized);
        self.project(
            &input,
            &mut [
                (&dn.qkv, &mut mixed),
                (&dn.gate, &mut z),
                (&dn.beta, &mut beta),
                (&dn.alpha, &mut alpha),
            ],
        );
        let mut out = vec![0.0f32; n * v];
        let mut t0 = 0;
        for span in batch.spans {
            let (m, t1) = (span.tokens.len(), t0 + span.tokens.len());
            let x = Projections {
                mixed: &mixed[t0 * c..t1 * c],
                z: &z[t0 * v..t1 * v],
                beta: &beta[t0 * heads..t1 * heads],
                alpha: &alpha[t0 * heads..t1 * heads],
            };
            let o = &mut out[t0 * v..t1 * v];
            let run = |cache: &mut KvStore, x: &Projections<'_>, o: &mut [f32]| {
                let state = cache.state_mut(span.pages, index);
                delta_net::run(&p, dn, hp.rms_eps, state, x, o, &*self.spin);
            };
            match span.want {
                // The state after token `from` is kept: the span runs in two
                // parts, which gives the same bits (the recurrence is per token).
                Want::Verify {
                    from,
                    keep: Some(slot),
                } => {
                    let (head, tail) = x.split_at(&p, from + 1);
                    let (o_head, o_tail) = o.split_at_mut((from + 1) * v);
                    run(cache, &head, o_head);
                    cache.copy_layer_state(span.pages, index, slot);
                    run(cache, &tail, o_tail);
                }
                _ => run(cache, &x, o),
            }
            t0 += m;
        }
        let input = self.input(&out, n, v, &[&dn.out], &mut s.quantized);
        self.project(&input, &mut [(&dn.out, &mut s.o)]);
        add_residual(x, &mut s.o, lw.attn_post_norm.as_deref(), d, hp.rms_eps);
    }
}
