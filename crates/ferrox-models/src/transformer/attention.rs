//! The attention block of [`Transformer`], in each layer's own head shape: the
//! projections and norms, RoPE and the KV write (skipped by a shared-KV layer,
//! which reads the KV of the layer it shares), and causal attention over the
//! sequence's pages.

mod heads;
mod tasks;

use std::sync::{Mutex, PoisonError};

use ferrox_core::ops::exp::exp;
use ferrox_core::ops::norm::{rms_norm, rms_norm_each, rms_normalize_each};
use ferrox_core::ops::rope;
use ferrox_core::pool::Parallel;

use self::heads::Shape;
use self::tasks::tasks;
use super::{Angles, Batch, Scratch, Transformer, add_residual, split_gates};
use crate::hparams::LayerAttention;
use crate::kv_store::{KvStore, LayerSlot};
use crate::weights::{AttentionWeights, KvProjection, LayerWeights};

impl Transformer {
    /// One layer's attention block: `x += attention(x)`, writing the batch's KV
    /// unless the layer reads another's.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention(
        &self,
        li: usize,
        lw: &LayerWeights,
        a: &AttentionWeights,
        x: &mut [f32],
        batch: &Batch<'_>,
        angles: (&Angles, Option<&Angles>),
        cache: &mut KvStore,
        s: &mut Scratch,
    ) {
        let hp = &self.hp;
        let g = hp.attention[li];
        let (d, n) = (hp.n_embd, batch.len());
        s.h.copy_from_slice(x);
        s.h.chunks_exact_mut(d)
            .for_each(|r| rms_norm(r, &lw.attn_norm, hp.rms_eps));
        self.project_qkv(a, &g, n, s);
        let window = match cache.layout().layers[li] {
            LayerSlot::Window(_, w) => Some(w),
            LayerSlot::Full(_) | LayerSlot::Recurrent(_) => None,
        };
        // Window layers may turn by their own RoPE (Gemma 3's and 4's local layers).
        let angles = match (window, angles.1) {
            (Some(_), Some(local)) => local,
            _ => angles.0,
        };
        self.rope_and_store(li, &g, a.kv.is_some(), batch, angles, cache, s);
        self.attend(&g, window, a.sinks.as_deref(), batch, cache, s);
        let att = &mut s.att[..n * hp.n_heads * g.head_dim_v];
        if self.spec.gated_attention {
            att.iter_mut()
                .zip(&s.gate)
                .for_each(|(o, &g)| *o /= 1.0 + exp(-g));
        }
        let input = self.input(att, n, hp.n_heads * g.head_dim_v, &[&a.o], &mut s.quantized);
        self.project(&input, &mut [(&a.o, &mut s.o)]);
        add_residual(x, &mut s.o, lw.attn_post_norm.as_deref(), d, hp.rms_eps);
    }

    /// The queries (and gates), keys and values of the normed rows `s.h`, with
    /// their norms: `s.q`, `s.k`, `s.v` (keys and values only for a layer that
    /// has its own).
    fn project_qkv(&self, a: &AttentionWeights, g: &LayerAttention, n: usize, s: &mut Scratch) {
        let hp = &self.hp;
        let d = hp.n_embd;
        let (qd, kd, vd) = (
            n * hp.n_heads * g.head_dim_k,
            n * g.n_kv_heads * g.head_dim_k,
            n * g.n_kv_heads * g.head_dim_v,
        );
        let gated = self.spec.gated_attention;
        let q_out = if gated {
            &mut s.qg[..2 * qd]
        } else {
            &mut s.q[..qd]
        };
        let (k, v) = (&mut s.k[..kd], &mut s.v[..vd]);
        match &a.kv {
            Some(KvProjection { k: wk, v: wv, .. }) => {
                let mut consumers = vec![&a.q, wk];
                consumers.extend(wv.as_ref());
                let input = self.input(&s.h, n, d, &consumers, &mut s.quantized);
                let mut jobs = vec![(&a.q, q_out), (wk, &mut *k)];
                if let Some(wv) = wv {
                    jobs.push((wv, &mut *v));
                }
                self.project(&input, &mut jobs);
                if wv.is_none() {
                    // The values are the keys as projected (Gemma 4).
                    v.copy_from_slice(k);
                }
            }
            None => {
                let input = self.input(&s.h, n, d, &[&a.q], &mut s.quantized);
                self.project(&input, &mut [(&a.q, q_out)]);
            }
        }
        if gated {
            split_gates(
                &s.qg[..2 * qd],
                g.head_dim_k,
                &mut s.q[..qd],
                &mut s.gate[..qd],
            );
        }
        if let Some(qn) = &a.q_norm {
            rms_norm_each(&mut s.q[..qd], g.head_dim_k, qn, hp.rms_eps);
        }
        if let Some(kv) = &a.kv {
            if let Some(kn) = &kv.k_norm {
                rms_norm_each(&mut s.k[..kd], g.head_dim_k, kn, hp.rms_eps);
            }
            if self.spec.value_norm {
                rms_normalize_each(&mut s.v[..vd], g.head_dim_v, hp.rms_eps);
            }
        }
    }

    /// Turns every token's queries, and when the layer keeps its own KV its
    /// keys, and writes its keys and values.
    #[allow(clippy::too_many_arguments)]
    fn rope_and_store(
        &self,
        li: usize,
        g: &LayerAttention,
        own_kv: bool,
        batch: &Batch<'_>,
        angles: &Angles,
        cache: &mut KvStore,
        s: &mut Scratch,
    ) {
        let hp = &self.hp;
        let (qd, kd, vd) = (
            hp.n_heads * g.head_dim_k,
            g.n_kv_heads * g.head_dim_k,
            g.n_kv_heads * g.head_dim_v,
        );
        let style = self.spec.rope_style;
        for (t, slot) in batch.slots.iter().enumerate() {
            let (c, sn) = angles.of(t);
            let q = &mut s.q[t * qd..(t + 1) * qd];
            rope::apply(q, g.head_dim_k, g.rope_dim, style, c, sn);
            if !own_kv {
                continue;
            }
            let k = &mut s.k[t * kd..(t + 1) * kd];
            rope::apply(k, g.head_dim_k, g.rope_dim, style, c, sn);
            let v = &s.v[t * vd..(t + 1) * vd];
            cache.write(batch.spans[slot.span].pages, li, slot.pos, k, v);
        }
    }

    /// Causal attention of every token over its sequence's KV (its layer's, or
    /// the layer's it shares): `s.att`. A head's `sinks` logit, when the model
    /// has them, joins its softmax without a value.
    fn attend(
        &self,
        g: &LayerAttention,
        window: Option<usize>,
        sinks: Option<&[f32]>,
        batch: &Batch<'_>,
        cache: &KvStore,
        s: &mut Scratch,
    ) {
        let hp = &self.hp;
        let shape = Shape {
            nkv: g.n_kv_heads,
            group: hp.n_heads / g.n_kv_heads,
            dk: g.head_dim_k,
            dv: g.head_dim_v,
            layer: g.kv_layer,
            window,
            scale: hp.attn_scale,
            cap: hp.attn_softcap,
            sinks,
            rotated: cache.rotated(),
        };
        // A task per group of a span's consecutive tokens and KV head (or a
        // piece of one): each page of the head's keys and values is read (and
        // widened) once for all the task's query heads; every head keeps its
        // own order and its own keys (SPEC S3).
        let threads = self.spin.threads();
        let tasks = tasks(batch, window, shape.nkv, shape.group, threads);
        let sizes: Vec<usize> = tasks.iter().map(|t| t.output_len(shape.dv)).collect();
        s.att_parts.resize(sizes.iter().sum(), 0.0);
        let mut parts = Vec::with_capacity(tasks.len());
        let mut rest = &mut s.att_parts[..];
        for &len in &sizes {
            let (part, tail) = rest.split_at_mut(len);
            parts.push(Mutex::new(part));
            rest = tail;
        }
        let q = &s.q[..batch.len() * hp.n_heads * shape.dk];
        // Each task locks its own part, once (never contended).
        self.spin.for_each(tasks.len(), &|i| {
            let mut out = parts[i].lock().unwrap_or_else(PoisonError::into_inner);
            shape.attend(batch, &tasks[i], q, cache, &mut out);
        });
        let att = &mut s.att[..batch.len() * hp.n_heads * shape.dv];
        shape.place(&tasks, &s.att_parts, hp.n_heads, att);
    }
}
