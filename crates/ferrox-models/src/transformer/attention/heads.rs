//! One attention task's arithmetic, and the fold of a row's chunks.
//!
//! A row (one token's query head) attends over its keys in
//! [`KEY_CHUNK`]-aligned chunks. Each chunk's scores are shifted by the
//! chunk's own maximum `m` and exponentiated; the chunk keeps their sum `l`
//! and its weighted sum of values `o`. The row's output is then
//! `sum(e^(m - M) o) / (sum(e^(m - M) l) + e^(sink - M))` over its chunks in
//! order, `M` the largest `m` (or the sink's logit): the softmax, its terms
//! grouped by chunk. A task with all of a row's keys folds its chunks as it
//! goes; pieces of a row's keys write each chunk's record, and
//! [`Shape::place`] folds them in the same order with the same operations,
//! so a row gives the same bits either way.

use std::cell::RefCell;
use std::ops::Range;

use ferrox_core::ops::exp::{exp, exp_shifted};
use ferrox_core::ops::vector::{self, scaled_dots_heads, weighted_sum_heads};

use super::tasks::{KEY_CHUNK, Task, first_key};
use crate::kv_store::{KvStore, rotate, rotate_back};
use crate::transformer::{Batch, softcap};

/// The f32s of a chunk's record before its values: `m` and `l`.
pub(super) const RECORD_HEAD: usize = 2;

/// What one layer's attention computes with: its head shape, the layer whose
/// KV it reads, its window, scale, soft cap and sinks.
pub(super) struct Shape<'a> {
    pub nkv: usize,
    /// Query heads per KV head.
    pub group: usize,
    pub dk: usize,
    pub dv: usize,
    pub layer: usize,
    pub window: Option<usize>,
    pub scale: f32,
    pub cap: Option<f32>,
    pub sinks: Option<&'a [f32]>,
    /// Whether the cache holds its vectors rotated (8- and 4-bit caches).
    pub rotated: bool,
}

/// A task's working buffers.
#[derive(Default)]
struct Work {
    queries: Vec<f32>,
    scores: Vec<f32>,
    /// Each row's chunks' `(m, l)`, row-major.
    stats: Vec<(f32, f32)>,
    /// One chunk's weighted sums, `[token][head][dv]`.
    chunk: Vec<f32>,
    /// Each row's folded `l` (a whole task).
    totals: Vec<f32>,
    /// Each row's `M` (a whole task).
    bigs: Vec<f32>,
}

thread_local! {
    /// Each thread's [`Work`], kept across tasks and layers.
    static WORK: RefCell<Work> = RefCell::new(Work::default());
}

impl Shape<'_> {
    /// The first query head of `task` among all heads.
    fn head0(&self, task: &Task) -> usize {
        task.kvh * self.group + task.heads.start
    }

    /// The keys the token at `pos` reaches inside `keys` (empty when none).
    fn own(&self, pos: usize, keys: &Range<usize>) -> Range<usize> {
        let end = (pos + 1).min(keys.end);
        first_key(self.window, pos).max(keys.start).min(end)..end
    }

    /// Attention of `task`'s rows over its keys: when whole, each row's output
    /// (`out` `[token][head][dv]`); else each row's chunks' records (`out`
    /// `[row][chunk]`, each `m`, `l`, then `dv` values).
    pub fn attend(
        &self,
        batch: &Batch<'_>,
        task: &Task,
        q: &[f32],
        cache: &KvStore,
        out: &mut [f32],
    ) {
        WORK.with_borrow_mut(|w| self.attend_with(batch, task, q, cache, w, out))
    }

    fn attend_with(
        &self,
        batch: &Batch<'_>,
        task: &Task,
        q: &[f32],
        cache: &KvStore,
        w: &mut Work,
        out: &mut [f32],
    ) {
        let (dk, dv, kvh) = (self.dk, self.dv, task.kvh);
        let (group, head0) = (task.heads.len(), self.head0(task));
        let slots = &batch.slots[task.tokens.clone()];
        let pages = batch.spans[slots[0].span].pages;
        let qd = q.len() / batch.len();
        let keys = task.keys.clone();
        let stride = keys.len();
        w.queries.clear();
        for t in task.tokens.clone() {
            let at = t * qd + head0 * dk;
            w.queries.extend_from_slice(&q[at..at + group * dk]);
        }
        if self.rotated {
            w.queries.chunks_exact_mut(dk).for_each(rotate);
        }
        w.scores.resize(task.rows() * stride, 0.0);
        cache.for_each_key_run(pages, self.layer, kvh, keys.start, keys.end, |p, k| {
            let at = p - keys.start;
            scaled_dots_heads(&w.queries, dk, k, self.scale, &mut w.scores, stride, at);
        });
        let chunks = task.chunks();
        let nc = chunks.len();
        w.stats.clear();
        for (i, row) in w.scores.chunks_exact_mut(stride).enumerate() {
            let own = self.own(slots[i / group].pos, &keys);
            self.chunk_stats(row, &keys, &own, &chunks, &mut w.stats);
        }
        if task.whole {
            out.fill(0.0);
            w.totals.clear();
            w.totals.resize(task.rows(), 0.0);
            w.bigs.clear();
            let rows = w.stats.chunks_exact(nc).enumerate();
            w.bigs
                .extend(rows.map(|(r, st)| self.largest(st, head0 + r % group)));
        }
        // The chunks' weighted sums of values, in one pass over the pages (each
        // page's read asked for while the one before is summed), each chunk
        // folded into its rows (whole) or written as their records once its
        // last value is in.
        let Work {
            scores,
            stats,
            chunk,
            totals,
            bigs,
            ..
        } = w;
        let close = |ci: usize, chunk: &[f32], out: &mut [f32], totals: &mut [f32]| {
            for (r, o) in chunk.chunks_exact(dv).enumerate() {
                let (m, l) = stats[r * nc + ci];
                if task.whole {
                    fold(
                        &mut out[r * dv..(r + 1) * dv],
                        &mut totals[r],
                        (m, l, o),
                        bigs[r],
                    );
                } else {
                    let at = (r * nc + ci) * (RECORD_HEAD + dv);
                    let record = &mut out[at..at + RECORD_HEAD + dv];
                    record[0] = m;
                    record[1] = l;
                    record[RECORD_HEAD..].copy_from_slice(o);
                }
            }
        };
        chunk.clear();
        chunk.resize(task.rows() * dv, 0.0);
        let mut current = chunks.start;
        cache.for_each_value_run(pages, self.layer, kvh, keys.start, keys.end, |p, values| {
            let end = p + values.len() / dv;
            let mut from = p;
            while from < end {
                let c = from / KEY_CHUNK;
                if c != current {
                    close(current - chunks.start, chunk, out, totals);
                    chunk.fill(0.0);
                    current = c;
                }
                let run = from..end.min((c + 1) * KEY_CHUNK);
                for (i, (acc, weights)) in chunk
                    .chunks_exact_mut(group * dv)
                    .zip(scores.chunks_exact(group * stride))
                    .enumerate()
                {
                    let own = self.own(slots[i].pos, &keys);
                    let (a, b) = (own.start.max(run.start), own.end.min(run.end));
                    if a < b {
                        let rows = &values[(a - p) * dv..(b - p) * dv];
                        let at = a - keys.start;
                        weighted_sum_heads(acc, dv, weights, stride, at, b - a, rows);
                    }
                }
                from = run.end;
            }
        });
        close(current - chunks.start, chunk, out, totals);
        if task.whole {
            for (r, o) in out.chunks_exact_mut(dv).enumerate() {
                self.finish(o, w.totals[r], w.bigs[r], head0 + r % group);
            }
        }
    }

    /// One row's chunks, `(m, l)` each into `stats` (`m` minus infinity for a
    /// chunk the row does not reach): its scores `row` (over `keys`) inside
    /// its own keys `own`, soft-capped, shifted by the chunk's maximum and
    /// exponentiated in place.
    fn chunk_stats(
        &self,
        row: &mut [f32],
        keys: &Range<usize>,
        own: &Range<usize>,
        chunks: &Range<usize>,
        stats: &mut Vec<(f32, f32)>,
    ) {
        for c in chunks.clone() {
            let (a, b) = (
                own.start.max(c * KEY_CHUNK),
                own.end.min((c + 1) * KEY_CHUNK),
            );
            if a >= b {
                stats.push((f32::NEG_INFINITY, 0.0));
                continue;
            }
            let sc = &mut row[a - keys.start..b - keys.start];
            softcap(sc, self.cap);
            let m = vector::max(sc);
            exp_shifted(sc, m);
            stats.push((m, vector::sum(sc)));
        }
    }

    /// `M`: a row's largest chunk maximum, or its head's sink logit.
    fn largest(&self, stats: &[(f32, f32)], head: usize) -> f32 {
        let m = stats.iter().fold(f32::NEG_INFINITY, |a, s| a.max(s.0));
        self.sinks.map_or(m, |s| m.max(s[head]))
    }

    /// A row's folded values `o` divided by its folded sums `l` and its sink's
    /// term, turned back where the cache is rotated.
    fn finish(&self, o: &mut [f32], l: f32, big: f32, head: usize) {
        let total = l + self.sinks.map_or(0.0, |s| exp(s[head] - big));
        let inv = 1.0 / total;
        o.iter_mut().for_each(|x| *x *= inv);
        if self.rotated {
            rotate_back(o);
        }
    }

    /// Places every task's rows in `att` (`[token][head][dv]` of all heads),
    /// folding the records of a row's pieces in order.
    pub fn place(&self, tasks: &[Task], parts: &[f32], n_heads: usize, att: &mut [f32]) {
        let dv = self.dv;
        let mut at = 0;
        let mut t = 0;
        while t < tasks.len() {
            let task = &tasks[t];
            let group = task.heads.len();
            let head0 = self.head0(task);
            if task.whole {
                let done = &parts[at..at + task.output_len(dv)];
                for (i, tok) in task.tokens.clone().enumerate() {
                    let to = (tok * n_heads + head0) * dv;
                    att[to..to + group * dv]
                        .copy_from_slice(&done[i * group * dv..(i + 1) * group * dv]);
                }
                at += done.len();
                t += 1;
                continue;
            }
            // The family: this piece and the next ones of the same rows.
            let family = tasks[t..].iter().take_while(|o| o.same_rows(task)).count();
            let pieces: Vec<(&[f32], usize)> = tasks[t..t + family]
                .iter()
                .map(|p| {
                    let len = p.output_len(dv);
                    let piece = (&parts[at..at + len], p.chunks().len());
                    at += len;
                    piece
                })
                .collect();
            self.fold_pieces(task, &pieces, n_heads, att);
            t += family;
        }
    }

    /// Folds the records of one family's `pieces` (each its part of the
    /// output and its chunk count, in key order) into `task`'s rows of `att`.
    fn fold_pieces(
        &self,
        task: &Task,
        pieces: &[(&[f32], usize)],
        n_heads: usize,
        att: &mut [f32],
    ) {
        let (dv, group, head0) = (self.dv, task.heads.len(), self.head0(task));
        let record = RECORD_HEAD + dv;
        let mut stats = Vec::new();
        for (i, tok) in task.tokens.clone().enumerate() {
            for h in 0..group {
                let r = i * group + h;
                let records = || {
                    pieces.iter().flat_map(move |&(p, nc)| {
                        p[r * nc * record..(r + 1) * nc * record].chunks_exact(record)
                    })
                };
                stats.clear();
                stats.extend(records().map(|c| (c[0], c[1])));
                let big = self.largest(&stats, head0 + h);
                let to = (tok * n_heads + head0 + h) * dv;
                let o = &mut att[to..to + dv];
                o.fill(0.0);
                let mut l = 0.0;
                for c in records() {
                    fold(o, &mut l, (c[0], c[1], &c[RECORD_HEAD..]), big);
                }
                self.finish(o, l, big, head0 + h);
            }
        }
    }
}

/// Adds a chunk's values and sum, `(m, l, o)`, to a row's, scaled by
/// `e^(m - big)` (1 for the chunk whose maximum is the row's). A chunk the row
/// does not reach adds nothing.
fn fold(acc: &mut [f32], total: &mut f32, (m, l, o): (f32, f32, &[f32]), big: f32) {
    if m == f32::NEG_INFINITY {
        return;
    }
    let scale = if m == big { 1.0 } else { exp(m - big) };
    acc.iter_mut().zip(o).for_each(|(a, &x)| *a += scale * x);
    *total += scale * l;
}
