//! How a layer's attention is cut into tasks for the pool's threads: runs of a
//! span's consecutive tokens, each KV head, and, where that leaves the threads
//! too few tasks, parts of a KV head's query heads or pieces of its keys.
//!
//! Whatever the cut, a row's softmax is the same function of its own scores:
//! [`KEY_CHUNK`]-aligned chunks of its keys, each normalized by its own
//! maximum, folded in the chunks' order ([`super::heads`]). The cut decides
//! only which thread computes which chunk, so a row's output does not depend
//! on the batch or the thread count (SPEC S3).

use std::ops::Range;

use crate::transformer::Batch;

/// Keys a softmax chunk holds, aligned to positions `0, KEY_CHUNK, ...`.
pub(super) const KEY_CHUNK: usize = 256;

/// Most tokens of a span whose queries one attention task takes.
const MOST_GROUPED: usize = 16;

/// Most bytes of scores one task holds (`tokens * group * keys` f32s): a
/// prefill deep in a long context groups fewer tokens.
const SCORE_BYTES: usize = 4 << 20;

/// Tasks a step aims for per thread, so that uneven tasks even out.
const TASKS_PER_THREAD: usize = 4;

/// One attention task: the query heads `heads` (of the KV head's group) of
/// KV head `kvh`, for the consecutive tokens `tokens` of one span, over the
/// keys `keys`.
pub(super) struct Task {
    pub tokens: Range<usize>,
    pub kvh: usize,
    pub heads: Range<usize>,
    /// Every key the tokens reach (`whole`), or one piece of them: a run of
    /// whole chunks, clipped to the keys the tokens reach.
    pub keys: Range<usize>,
    /// Whether the task finishes its rows. A piece leaves each row's chunks
    /// to be folded with its family's other pieces.
    pub whole: bool,
}

impl Task {
    /// Its rows: tokens times query heads.
    pub fn rows(&self) -> usize {
        self.tokens.len() * self.heads.len()
    }

    /// The chunks its keys touch.
    pub fn chunks(&self) -> Range<usize> {
        chunks_of(&self.keys)
    }

    /// The f32s of its output: each row's `dv` values when whole, else each
    /// row's chunks' records ([`super::heads::RECORD_HEAD`] plus `dv`).
    pub fn output_len(&self, dv: usize) -> usize {
        match self.whole {
            true => self.rows() * dv,
            false => self.rows() * self.chunks().len() * (super::heads::RECORD_HEAD + dv),
        }
    }

    /// Whether `other` is another piece of the same rows.
    pub fn same_rows(&self, other: &Task) -> bool {
        self.tokens == other.tokens && self.kvh == other.kvh && self.heads == other.heads
    }
}

/// The chunks a run of keys touches.
pub(super) fn chunks_of(keys: &Range<usize>) -> Range<usize> {
    keys.start / KEY_CHUNK..keys.end.div_ceil(KEY_CHUNK)
}

/// The step's attention tasks: each token group's KV heads, each with its
/// whole group of query heads and all its keys, unless that gives the
/// threads too few tasks (one sequence's decode, say). Then a KV head's keys
/// are cut into pieces of whole chunks, or, when they are too few chunks for
/// the threads, its query heads into parts, each part reading the KV head's
/// pages again.
pub(super) fn tasks(
    batch: &Batch<'_>,
    window: Option<usize>,
    nkv: usize,
    group: usize,
    threads: usize,
) -> Vec<Task> {
    let groups: Vec<(Range<usize>, Range<usize>)> = token_groups(batch, nkv, group, threads)
        .into_iter()
        .map(|tokens| {
            let slots = &batch.slots[tokens.clone()];
            let keys = first_key(window, slots[0].pos)..slots[slots.len() - 1].pos + 1;
            (tokens, keys)
        })
        .collect();
    let chunk_tasks = nkv
        * groups
            .iter()
            .map(|(_, k)| chunks_of(k).len())
            .sum::<usize>();
    let parts = match chunk_tasks >= threads {
        true => 1,
        false => threads.div_ceil(groups.len() * nkv).clamp(1, group),
    };
    let families = groups.len() * nkv * parts;
    // One thread takes every task in turn: pieces would only add their folds.
    let wanted = match threads {
        1 => 1,
        _ => (TASKS_PER_THREAD * threads).div_ceil(families),
    };
    let mut tasks = Vec::new();
    for (tokens, keys) in &groups {
        let chunks = chunks_of(keys);
        let pieces = wanted.clamp(1, chunks.len());
        for kvh in 0..nkv {
            for i in 0..parts {
                let heads = i * group / parts..(i + 1) * group / parts;
                tasks.extend((0..pieces).map(|p| {
                    let c0 = chunks.start + p * chunks.len() / pieces;
                    let c1 = chunks.start + (p + 1) * chunks.len() / pieces;
                    Task {
                        tokens: tokens.clone(),
                        kvh,
                        heads: heads.clone(),
                        keys: keys.start.max(c0 * KEY_CHUNK)..keys.end.min(c1 * KEY_CHUNK),
                        whole: pieces == 1,
                    }
                }));
            }
        }
    }
    tasks
}

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
            .div_ceil(TASKS_PER_THREAD * threads.max(1))
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
pub(super) fn first_key(window: Option<usize>, pos: usize) -> usize {
    window.map_or(0, |w| (pos + 1).saturating_sub(w))
}
