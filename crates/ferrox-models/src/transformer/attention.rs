//! The attention block of [`Transformer`], in each layer's own head shape: the
//! projections and norms, RoPE and the KV write (skipped by a shared-KV layer,
//! which reads the KV of the layer it shares), and causal attention over the
//! sequence's pages.

use ferrox_core::ops::exp::{exp, exp_shifted};
use ferrox_core::ops::norm::{rms_norm, rms_norm_each, rms_normalize_each};
use ferrox_core::ops::rope;
use ferrox_core::ops::vector::{self, scaled_dots_heads, weighted_sum_heads};
use rayon::prelude::*;

use super::{Angles, Batch, Scratch, Transformer, add_residual, softcap, split_gates};
use crate::hparams::LayerAttention;
use crate::kv_store::{KvStore, LayerSlot, rotate, rotate_back};
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
        let (nh, nkv, dk, dv) = (hp.n_heads, g.n_kv_heads, g.head_dim_k, g.head_dim_v);
        let (qd, group, li) = (nh * dk, nh / nkv, g.kv_layer);
        let (scale, cap) = (hp.attn_scale, hp.attn_softcap);
        let q = &s.q;
        let att = &mut s.att[..batch.len() * nh * dv];
        // One task per token and KV head: its query heads read each key and value
        // once; every head keeps its own order (SPEC S3).
        // An 8- or 4-bit cache holds its vectors rotated (dot products kept):
        // queries are rotated to meet them, and the weighted sums of values
        // rotated back.
        let rotated = cache.rotated();
        widen_spans(g, window, batch, cache, &mut s.widened);
        let widened = &s.widened;
        att.par_chunks_mut(group * dv).enumerate().for_each_init(
            || (Vec::new(), vec![0.0f32; group], Vec::new()),
            |(scores, sink_terms, turned), (i, out)| {
                let (t, kvh) = (i / nkv, i % nkv);
                let slot = batch.slots[t];
                let seq = batch.spans[slot.span].pages;
                let lo = first_key(window, slot.pos);
                let n_keys = slot.pos + 1 - lo;
                let mut qs = &q[t * qd + kvh * group * dk..t * qd + (kvh + 1) * group * dk];
                if rotated {
                    turned.clear();
                    turned.extend_from_slice(qs);
                    turned.chunks_exact_mut(dk).for_each(rotate);
                    qs = turned;
                }
                scores.clear();
                scores.resize(group * n_keys, 0.0);
                let wide = widened.of(slot.span, kvh);
                if let Some(w) = wide {
                    let keys = &w.keys[(lo - w.first) * dk..(slot.pos + 1 - w.first) * dk];
                    scaled_dots_heads(qs, dk, keys, scale, scores, n_keys, 0);
                } else {
                    let mut j = 0;
                    cache.for_each_key_run(seq, li, kvh, lo, slot.pos + 1, |_, keys| {
                        scaled_dots_heads(qs, dk, keys, scale, scores, n_keys, j);
                        j += keys.len() / dk;
                    });
                }
                softcap(scores, cap);
                for (g, sc) in scores.chunks_exact_mut(n_keys).enumerate() {
                    let sink = sinks.map(|s| s[kvh * group + g]);
                    let max = sink.map_or(vector::max(sc), |s| vector::max(sc).max(s));
                    exp_shifted(sc, max);
                    sink_terms[g] = sink.map_or(0.0, |s| exp(s - max));
                }
                out.fill(0.0);
                if let Some(w) = wide {
                    let values = &w.values[(lo - w.first) * dv..(slot.pos + 1 - w.first) * dv];
                    weighted_sum_heads(out, dv, scores, n_keys, 0, n_keys, values);
                } else {
                    let mut j = 0;
                    cache.for_each_value_run(seq, li, kvh, lo, slot.pos + 1, |_, values| {
                        let m = values.len() / dv;
                        weighted_sum_heads(out, dv, scores, n_keys, j, m, values);
                        j += m;
                    });
                }
                for (g, o) in out.chunks_exact_mut(dv).enumerate() {
                    let total = vector::sum(&scores[g * n_keys..(g + 1) * n_keys]) + sink_terms[g];
                    let inv = 1.0 / total;
                    o.iter_mut().for_each(|x| *x *= inv);
                    if rotated {
                        rotate_back(o);
                    }
                }
            },
        );
    }
}

/// The first position a token at `pos` attends to: 0, or the start of its
/// window.
fn first_key(window: Option<usize>, pos: usize) -> usize {
    window.map_or(0, |w| (pos + 1).saturating_sub(w))
}

/// One KV head's keys and values of a span, widened to f32: positions
/// `first..`, `head_dim` values each.
#[derive(Default)]
struct Widened {
    first: usize,
    keys: Vec<f32>,
    values: Vec<f32>,
}

/// The spans of a step whose KV [`widen_spans`] widened (`[span] -> [kv
/// head]`, empty for a span it did not), kept in the step's scratch: each
/// layer widens into the memory the layer before used.
#[derive(Default)]
pub(super) struct WidenedSpans(Vec<Vec<Widened>>);

impl WidenedSpans {
    /// Span `span`'s widened KV of kv head `kvh`, if it was widened.
    fn of(&self, span: usize, kvh: usize) -> Option<&Widened> {
        self.0.get(span).and_then(|heads| heads.get(kvh))
    }
}

/// Bytes of f32 one span's widened keys and values may take (all its KV
/// heads, one layer); a longer span is read run by run as before, so that a
/// prefill deep in a long context adds no more than this beside the cache.
const WIDEN_BYTES: usize = 64 << 20;

/// Widens into `into` the keys and values of the spans with several tokens in
/// this step, once per KV head, where the cache stores another type than f32
/// and the copy fits in [`WIDEN_BYTES`]. Read run by run, each token of a
/// prefill widened every key before it again (the whole sequence's, for each
/// token). The same values, read in the same order: the same bits (SPEC S3).
fn widen_spans(
    g: &LayerAttention,
    window: Option<usize>,
    batch: &Batch<'_>,
    cache: &KvStore,
    into: &mut WidenedSpans,
) {
    let mut reach: Vec<Option<(usize, usize, usize)>> = vec![None; batch.spans.len()];
    if cache.layout().element != crate::kv_store::KvElement::F32 {
        for slot in &batch.slots {
            let lo = first_key(window, slot.pos);
            let r = reach[slot.span].get_or_insert((lo, slot.pos + 1, 0));
            *r = (r.0.min(lo), r.1.max(slot.pos + 1), r.2 + 1);
        }
    }
    into.0.resize_with(batch.spans.len(), Vec::new);
    for (si, (r, heads)) in reach.into_iter().zip(&mut into.0).enumerate() {
        let per_position = g.n_kv_heads * (g.head_dim_k + g.head_dim_v) * 4;
        let Some((from, to, _)) =
            r.filter(|r| r.2 > 1 && (r.1 - r.0) * per_position <= WIDEN_BYTES)
        else {
            heads.clear();
            continue;
        };
        let pages = batch.spans[si].pages;
        heads.resize_with(g.n_kv_heads, Widened::default);
        heads.par_iter_mut().enumerate().for_each(|(kvh, w)| {
            w.first = from;
            w.keys.resize((to - from) * g.head_dim_k, 0.0);
            w.values.resize((to - from) * g.head_dim_v, 0.0);
            cache.widen_into(pages, g.kv_layer, kvh, from, &mut w.keys, &mut w.values);
        });
    }
}
