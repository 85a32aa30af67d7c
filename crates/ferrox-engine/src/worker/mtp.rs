//! Drafting with the model's own multi-token-prediction head (`--spec mtp`,
//! llama-server's `draft-mtp`). The head guesses the token after next from a
//! token and the target's hidden state at the position before it; it keeps
//! its own KV (one attention layer, pages from its own pool).
//!
//! The target returns every token's hidden row. A prompt chunk's rows are
//! run through the head right after the chunk (its KV filled, one row kept);
//! a decode row's are kept until the next draft, which runs the tokens the
//! step kept and the new pending token beside them in its first pass, then
//! feeds each guess with the head's own hidden row. The head's KV past the
//! pending token holds guesses' entries, which the next draft's first pass
//! writes again with the target's rows. Verification is the step's, as for
//! every draft: the output is the output without speculation.
//!
//! A request that starts from cached prefix pages has no hidden rows for
//! them: its head starts at the first position the target runs (the first
//! token beside a zero row, as llama.cpp's head starts), its positions
//! counted from there. The guesses are then worse until it has seen more.

use std::collections::BTreeMap;

use ferrox_models::decoder::{DraftHead, Rows, Span, Want};
use ferrox_models::kv_store::{KvStore, PageTable};

use super::draft::most_likely;
use super::rows::Row;
use super::{Active, Phase};
use crate::pages::PagePool;
use crate::request::RequestId;
use crate::speculation::Speculation;

/// One request's head: its KV, and the target's hidden rows it has not
/// run yet.
struct HeadSeq {
    table: PageTable,
    /// The first position the head has seen (the head's position 0).
    base: usize,
    /// The head's KV holds positions `base..written` from the target's rows.
    written: usize,
    /// The target's hidden rows of positions `rows_from..`, `[rows][width]`.
    rows: Vec<f32>,
    rows_from: usize,
}

impl HeadSeq {
    fn starting_at(pos: usize) -> HeadSeq {
        HeadSeq {
            table: PageTable::default(),
            base: pos,
            written: pos,
            rows: Vec::new(),
            rows_from: pos,
        }
    }

    fn rows_end(&self, width: usize) -> usize {
        self.rows_from + self.rows.len() / width
    }

    /// The target's rows of positions `start..` (`[rows][width]`).
    fn add_rows(&mut self, start: usize, rows: &[f32], width: usize) {
        if start > self.rows_end(width) {
            // Positions the target never ran (a late prefix hit): the head
            // starts again from this row.
            let table = std::mem::take(&mut self.table);
            *self = HeadSeq::starting_at(start);
            self.table = table;
        } else if start < self.rows_from {
            // Tokens run again (a hybrid's refused draft): their rows come
            // again.
            self.rows.clear();
            self.rows_from = start;
        }
        self.truncate_rows(start, width);
        self.rows.extend_from_slice(rows);
    }

    /// Keeps the rows of positions before `end` only.
    fn truncate_rows(&mut self, end: usize, width: usize) {
        let keep = end.saturating_sub(self.rows_from) * width;
        self.rows.truncate(keep.min(self.rows.len()));
    }
}

/// The head in the worker.
pub(super) struct MtpState {
    head: Box<dyn DraftHead>,
    store: KvStore,
    pool: PagePool,
    width: usize,
    seqs: BTreeMap<RequestId, HeadSeq>,
}

/// One request's part of a head pass: tokens from position `start`, each
/// beside its hidden row.
struct Feed {
    id: RequestId,
    start: usize,
    tokens: Vec<u32>,
    hidden: Vec<f32>,
    want: Want,
}

impl MtpState {
    pub(super) fn new(head: Box<dyn DraftHead>, width: usize, block_size: usize) -> MtpState {
        MtpState {
            store: KvStore::new(head.kv_layout(), block_size),
            head,
            pool: PagePool::new(None),
            width,
            seqs: BTreeMap::new(),
        }
    }

    /// The target ran `rows` (this step's, in span order) with every token's
    /// hidden row in `hidden`: each generating request keeps its rows, and a
    /// prompt chunk is run through the head at once.
    pub(super) fn observe(
        &mut self,
        running: &BTreeMap<RequestId, Active>,
        rows: &[Row],
        hidden: &Rows,
    ) {
        let w = self.width;
        let mut chunks = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            if running.get(&r.id).is_none_or(|a| a.embedding.is_some()) {
                continue;
            }
            let q = self
                .seqs
                .entry(r.id)
                .or_insert_with(|| HeadSeq::starting_at(r.start));
            let values: Vec<f32> = hidden
                .rows_of(i)
                .flat_map(|(_, row)| row)
                .copied()
                .collect();
            q.add_rows(r.start, &values, w);
            if !r.decode {
                chunks.push(r.id);
            }
        }
        let feeds: Vec<Feed> = chunks
            .into_iter()
            .filter_map(|id| {
                let tokens = &running[&id].tokens;
                let q = self.seqs.get_mut(&id)?;
                let end = q.rows_end(w);
                (end > q.written).then(|| Feed {
                    id,
                    start: q.written,
                    tokens: tokens[q.written..end].to_vec(),
                    hidden: take_pairs(q, end - q.written, w),
                    want: Want::Nothing,
                })
            })
            .collect();
        if !feeds.is_empty() && self.pass(&feeds.iter().collect::<Vec<_>>()).is_none() {
            for f in &feeds {
                self.forget(f.id);
            }
        }
    }

    /// Greedy drafts for every decoding request, each within its draft budget
    /// and the positions it was promised; none if the head fails.
    pub(super) fn drafts(
        &mut self,
        running: &BTreeMap<RequestId, Active>,
        s: &Speculation,
    ) -> BTreeMap<RequestId, Vec<u32>> {
        let w = self.width;
        let mut feeds: Vec<(Feed, usize)> = Vec::new();
        for (&id, a) in running {
            let Phase::Decoding { pending } = a.phase else {
                continue;
            };
            if a.rest > 0 {
                continue;
            }
            let promised = a.prompt_len + a.output.limit();
            let left = a
                .draft_budget
                .min(promised.saturating_sub(a.tokens.len() + 1));
            let Some(q) = self.seqs.get_mut(&id) else {
                continue;
            };
            // Every token before the pending one has its row.
            if left == 0 || q.rows_end(w) != a.tokens.len() {
                continue;
            }
            let end = a.tokens.len();
            let mut tokens = a.tokens[q.written..end].to_vec();
            tokens.push(pending);
            let feed = Feed {
                id,
                start: q.written,
                hidden: take_pairs(q, tokens.len(), w),
                tokens,
                want: Want::Last,
            };
            feeds.push((feed, left));
        }
        let mut out: BTreeMap<RequestId, Vec<u32>> = BTreeMap::new();
        while !feeds.is_empty() {
            let batch: Vec<&Feed> = feeds.iter().map(|(f, _)| f).collect();
            let Some(result) = self.pass(&batch) else {
                return BTreeMap::new();
            };
            for ((f, left), (guess, p, row)) in feeds.iter_mut().zip(result) {
                // An unlikely guess ends the request's draft; it is kept only
                // as the first (one guess a step is always tried).
                let drafted = out.entry(f.id).or_default();
                let likely = p >= s.draft_p_min;
                if likely || drafted.is_empty() {
                    drafted.push(guess);
                }
                *left = if likely { *left - 1 } else { 0 };
                f.start += f.tokens.len();
                f.tokens = vec![guess];
                f.hidden = row;
            }
            feeds.retain(|(_, left)| *left > 0);
        }
        // The head's entries past each pending token are its guesses': the
        // next first pass writes them again beside the target's rows.
        for (id, a) in running {
            if let (Phase::Decoding { .. }, Some(q)) = (a.phase, self.seqs.get_mut(id)) {
                q.written = q.written.min(a.tokens.len() + 1);
            }
        }
        out
    }

    /// One head pass over `feeds`: the head's KV written from each feed's
    /// start, and for a feed that wants its last logits, its greedy guess
    /// with its probability and the head's hidden row there. `None` if the
    /// head fails.
    fn pass(&mut self, feeds: &[&Feed]) -> Option<Vec<(u32, f32, Vec<f32>)>> {
        let ps = self.store.page_size();
        for f in feeds {
            let q = self.seqs.get_mut(&f.id).expect("a fed request has a head");
            let end = f.start + f.tokens.len() - q.base;
            while q.table.full.len() * ps < end {
                q.table
                    .full
                    .push(self.pool.take().expect("an unbounded pool").id);
            }
        }
        let spans: Vec<Span<'_>> = feeds
            .iter()
            .map(|f| {
                let q = &self.seqs[&f.id];
                Span {
                    pages: &q.table,
                    start: f.start - q.base,
                    tokens: &f.tokens,
                    want: f.want,
                }
            })
            .collect();
        let hidden: Vec<f32> = feeds
            .iter()
            .flat_map(|f| f.hidden.iter().copied())
            .collect();
        let out = self.head.forward(&mut self.store, &spans, &hidden).ok()?;
        let mut guesses = Vec::new();
        for (i, f) in feeds.iter().enumerate() {
            let q = self.seqs.get_mut(&f.id).expect("fed");
            q.written = f.start + f.tokens.len();
            if f.want == Want::Last {
                let (g, p) = most_likely(out.logits.last_of(i)?);
                guesses.push((g, p, out.hidden.last_of(i)?.to_vec()));
            }
        }
        Some(guesses)
    }

    /// Request `id` kept its first `kept` tokens: the target's rows past them
    /// belong to refused guesses.
    pub(super) fn cut_back(&mut self, id: RequestId, kept: usize) {
        let w = self.width;
        if let Some(q) = self.seqs.get_mut(&id) {
            q.truncate_rows(kept, w);
        }
    }

    /// Request `id` ended: its pages go back.
    pub(super) fn forget(&mut self, id: RequestId) {
        if let Some(q) = self.seqs.remove(&id) {
            for p in q.table.full {
                self.pool.release(p);
            }
        }
    }
}

/// The hidden rows beside the head's next `count` tokens (positions
/// `q.written..`): the target's row of the position before each, a zero row
/// before the head's first position. Every row but the last token's is then
/// spent (that one pairs with the token after).
fn take_pairs(q: &mut HeadSeq, count: usize, width: usize) -> Vec<f32> {
    let mut pairs = Vec::with_capacity(count * width);
    for pos in q.written..q.written + count {
        match pos.checked_sub(1).filter(|_| pos > q.base) {
            Some(p) => {
                debug_assert!(p >= q.rows_from, "the row of position {p} is kept");
                let at = (p - q.rows_from) * width;
                pairs.extend_from_slice(&q.rows[at..at + width]);
            }
            None => pairs.resize(pairs.len() + width, 0.0),
        }
    }
    let last = q.written + count - 1;
    let spent = last.saturating_sub(q.rows_from).min(q.rows.len() / width);
    q.rows.drain(..spent * width);
    q.rows_from += spent;
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One-wide rows holding their position plus one (a zero row is none).
    fn rows(positions: std::ops::Range<usize>) -> Vec<f32> {
        positions.map(|p| p as f32 + 1.0).collect()
    }

    #[test]
    fn each_token_is_paired_with_the_row_of_the_position_before_it() {
        let mut q = HeadSeq::starting_at(0);
        // A prompt of five tokens: the first beside a zero row.
        q.add_rows(0, &rows(0..5), 1);
        assert_eq!(take_pairs(&mut q, 5, 1), [0.0, 1.0, 2.0, 3.0, 4.0]);
        q.written = 5;
        // The first draft: the pending token at 5 beside position 4's row.
        assert_eq!(take_pairs(&mut q, 1, 1), [5.0]);
        q.written = 6;
        // The step ran the pending token and three guesses (5..9); two
        // guesses were kept (tokens up to 7), so rows 5..8 stay.
        q.add_rows(5, &rows(5..9), 1);
        q.truncate_rows(8, 1);
        // The next draft runs the kept guesses (6, 7) and the new pending
        // token (8), beside rows 5, 6 and 7.
        assert_eq!(take_pairs(&mut q, 3, 1), [6.0, 7.0, 8.0]);
    }

    #[test]
    fn rows_run_again_replace_theirs_and_a_gap_starts_the_head_again() {
        let mut q = HeadSeq::starting_at(0);
        q.add_rows(0, &rows(0..4), 1);
        let _ = take_pairs(&mut q, 4, 1);
        q.written = 4;
        // A hybrid runs positions 2 and 3 again before its pending token.
        q.add_rows(2, &rows(2..5), 1);
        assert_eq!((q.rows_from, q.rows_end(1)), (2, 5));
        // Positions 5..9 were never run here (a late prefix hit): the head
        // starts at 9, its first token beside a zero row.
        q.add_rows(9, &rows(9..11), 1);
        assert_eq!((q.base, q.written, q.rows_from), (9, 9, 9));
        assert_eq!(take_pairs(&mut q, 2, 1), [0.0, 10.0]);
    }
}
