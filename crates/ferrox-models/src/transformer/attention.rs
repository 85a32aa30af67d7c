//! The attention block of [`Transformer`], in each layer's own head shape: the
//! projections and norms, RoPE and the KV write (skipped by a shared-KV layer,
//! which reads the KV of the layer it shares), and causal attention over the
//! sequence's pages.

use std::cell::RefCell;
use std::ops::Range;

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
        };
        // One task per group of a span's consecutive tokens and KV head: each
        // page of the head's keys and values is read (and widened) once for
        // all the group's query heads; every head keeps its own order and its
        // own keys (SPEC S3).
        let threads = self.pool.current_num_threads();
        let groups = token_groups(batch, shape.nkv, shape.group, threads);
        let tasks = tasks(&groups, shape.nkv, shape.group, threads);
        s.att_parts.resize(batch.len() * hp.n_heads * shape.dv, 0.0);
        let mut parts = Vec::with_capacity(tasks.len());
        let mut rest = &mut s.att_parts[..];
        for task in &tasks {
            let (part, tail) = rest.split_at_mut(task.tokens.len() * task.heads.len() * shape.dv);
            parts.push(part);
            rest = tail;
        }
        let q = &s.q[..batch.len() * hp.n_heads * shape.dk];
        tasks.par_iter().zip(parts).for_each(|(task, out)| {
            WORK.with_borrow_mut(|w| shape.attend_group(batch, task, q, cache, w, out))
        });
        // Each task's rows into the token-major output.
        let att = &mut s.att[..batch.len() * hp.n_heads * shape.dv];
        let mut done = &s.att_parts[..];
        for task in &tasks {
            let width = task.heads.len() * shape.dv;
            for t in task.tokens.clone() {
                let at = (t * hp.n_heads + task.kvh * shape.group + task.heads.start) * shape.dv;
                let (part, tail) = done.split_at(width);
                att[at..at + width].copy_from_slice(part);
                done = tail;
            }
        }
    }
}

/// One attention task: the query heads `heads` (of the KV head's group) of
/// KV head `kvh`, for the consecutive tokens `tokens` of one span.
struct Task {
    tokens: Range<usize>,
    kvh: usize,
    heads: Range<usize>,
}

/// The step's attention tasks: each token group's KV heads, each with its
/// whole group of query heads, unless that gives the threads too few tasks
/// (one sequence's decode on a model with one KV head, say): then each KV
/// head's query heads are split, each part reading the KV head's pages
/// again, so that every thread has work.
fn tasks(groups: &[Range<usize>], nkv: usize, group: usize, threads: usize) -> Vec<Task> {
    let parts = threads.div_ceil(groups.len() * nkv).clamp(1, group);
    let mut tasks = Vec::with_capacity(groups.len() * nkv * parts);
    for tokens in groups {
        for kvh in 0..nkv {
            tasks.extend((0..parts).map(|i| Task {
                tokens: tokens.clone(),
                kvh,
                heads: i * group / parts..(i + 1) * group / parts,
            }));
        }
    }
    tasks
}

/// What one layer's attention computes with: its head shape, the layer whose
/// KV it reads, its window, scale, soft cap and sinks.
struct Shape<'a> {
    nkv: usize,
    /// Query heads per KV head.
    group: usize,
    dk: usize,
    dv: usize,
    layer: usize,
    window: Option<usize>,
    scale: f32,
    cap: Option<f32>,
    sinks: Option<&'a [f32]>,
}

/// A task's working buffers: its queries, their scores and their sinks' terms.
#[derive(Default)]
struct Work {
    queries: Vec<f32>,
    scores: Vec<f32>,
    sink_terms: Vec<f32>,
}

thread_local! {
    /// Each thread's [`Work`], kept across tasks and layers.
    static WORK: RefCell<Work> = RefCell::new(Work::default());
}

impl Shape<'_> {
    /// Attention of `task`'s query heads: `out` `[token][head][dv]`. The
    /// scores of the group's keys, `first..end` over every token's reach, are
    /// computed page by page for all its queries; each token then takes its
    /// own keys.
    fn attend_group(
        &self,
        batch: &Batch<'_>,
        task: &Task,
        q: &[f32],
        cache: &KvStore,
        w: &mut Work,
        out: &mut [f32],
    ) {
        let (dk, dv, kvh) = (self.dk, self.dv, task.kvh);
        // The task's query heads, and the first of them among all heads.
        let (group, head0) = (task.heads.len(), kvh * self.group + task.heads.start);
        let slots = &batch.slots[task.tokens.clone()];
        let pages = batch.spans[slots[0].span].pages;
        let qd = q.len() / batch.len();
        let first = first_key(self.window, slots[0].pos);
        let end = slots[slots.len() - 1].pos + 1;
        let stride = end - first;
        // An 8- or 4-bit cache holds its vectors rotated (dot products kept):
        // queries are rotated to meet them, and the weighted sums of values
        // rotated back.
        let rotated = cache.rotated();
        w.queries.clear();
        for t in task.tokens.clone() {
            let at = t * qd + head0 * dk;
            w.queries.extend_from_slice(&q[at..at + group * dk]);
        }
        if rotated {
            w.queries.chunks_exact_mut(dk).for_each(rotate);
        }
        w.scores.resize(slots.len() * group * stride, 0.0);
        cache.for_each_key_run(pages, self.layer, kvh, first, end, |p, keys| {
            scaled_dots_heads(
                &w.queries,
                dk,
                keys,
                self.scale,
                &mut w.scores,
                stride,
                p - first,
            );
        });
        // Each query's own keys: `reach(i)` of the token at `slots[i]`.
        let reach =
            |i: usize| first_key(self.window, slots[i].pos) - first..slots[i].pos + 1 - first;
        w.sink_terms.resize(slots.len() * group, 0.0);
        for (i, (row, term)) in w
            .scores
            .chunks_exact_mut(stride)
            .zip(&mut w.sink_terms)
            .enumerate()
        {
            let sc = &mut row[reach(i / group)];
            softcap(sc, self.cap);
            let sink = self.sinks.map(|s| s[head0 + i % group]);
            let max = sink.map_or(vector::max(sc), |s| vector::max(sc).max(s));
            exp_shifted(sc, max);
            *term = sink.map_or(0.0, |s| exp(s - max));
        }
        out.fill(0.0);
        cache.for_each_value_run(pages, self.layer, kvh, first, end, |p, values| {
            let run = p - first..p - first + values.len() / dv;
            for (i, (acc, weights)) in out
                .chunks_exact_mut(group * dv)
                .zip(w.scores.chunks_exact(group * stride))
                .enumerate()
            {
                let own = reach(i);
                let (a, b) = (own.start.max(run.start), own.end.min(run.end));
                if a < b {
                    let rows = &values[(a - run.start) * dv..(b - run.start) * dv];
                    weighted_sum_heads(acc, dv, weights, stride, a, b - a, rows);
                }
            }
        });
        for (i, o) in out.chunks_exact_mut(dv).enumerate() {
            let row = &w.scores[i * stride..(i + 1) * stride];
            let total = vector::sum(&row[reach(i / group)]) + w.sink_terms[i];
            let inv = 1.0 / total;
            o.iter_mut().for_each(|x| *x *= inv);
            if rotated {
                rotate_back(o);
            }
        }
    }
}

/// Most tokens of a span whose queries one attention task takes.
const MOST_GROUPED: usize = 16;

/// Most bytes of scores one task holds (`tokens * group * keys` f32s): a
/// prefill deep in a long context groups fewer tokens.
const SCORE_BYTES: usize = 4 << 20;

/// The batch's tokens as runs of consecutive tokens of one span, each an
/// attention task per KV head: a span's tokens share each page they read,
/// in groups small enough that the step has about four tasks a thread and
/// that a task's scores fit in [`SCORE_BYTES`].
fn token_groups(batch: &Batch<'_>, nkv: usize, group: usize, threads: usize) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    for span in batch.spans {
        let len = span.tokens.len();
        let keys = span.start + len;
        let fits = SCORE_BYTES / (4 * group * keys).max(1);
        let size = (len * nkv)
            .div_ceil(4 * threads.max(1))
            .clamp(1, MOST_GROUPED.min(fits).max(1));
        let count = len.div_ceil(size);
        // `count` near-equal runs.
        groups.extend((0..count).map(|i| start + i * len / count..start + (i + 1) * len / count));
        start += len;
    }
    groups
}

/// The first position a token at `pos` attends to: 0, or the start of its
/// window.
fn first_key(window: Option<usize>, pos: usize) -> usize {
    window.map_or(0, |w| (pos + 1).saturating_sub(w))
}
