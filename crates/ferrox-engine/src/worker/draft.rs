//! What drafts ([`Drafter`]: a draft model, or the model's own head in
//! [`super::mtp`]), and drafting with a second, smaller model
//! (`--draft-model`): before the step, the draft model runs each decoding
//! request's new tokens and then its own
//! greedy guesses, one batched pass per drafted token, until a guess is less
//! likely than `draft_p_min` under the draft; the step verifies the
//! drafts as it verifies prompt-lookup ones ([`super::speculate`]), so the
//! output is the output without speculation, token for token.
//!
//! The draft keeps its own KV: pages from its own pool, never shared, given
//! back when the request ends. After verification a request's draft KV is cut
//! back to the tokens that were kept; the positions past it are written again
//! before they are read. A draft with recurrent layers (Qwen3.5) keeps its
//! state after each step's first pass (the request's new tokens) in a spare
//! slot, as the target keeps its own ([`Want::Verify`]); when guesses are
//! refused, the spare becomes the live state and the kept guesses are run
//! again with the next step's new tokens.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrox_models::decoder::{Decoder, Rows, Span, Want};
use ferrox_models::kv_store::{KvStore, PageTable};
use ferrox_text::Tokenizer;

use super::mtp::MtpState;
use super::rows::Row;
use super::{Active, Phase};
use crate::pages::PagePool;
use crate::request::RequestId;
use crate::speculation::Speculation;
use crate::worker::StartError;

/// What drafts, as [`crate::worker::start_with_draft`] takes it.
pub enum Drafter {
    /// A second, smaller model with the target's vocabulary (`--draft-model`).
    Model {
        decoder: Box<dyn Decoder>,
        tokenizer: Arc<Tokenizer>,
    },
    /// The target's own multi-token-prediction head (`--spec mtp`).
    Mtp,
}

/// The worker's drafter.
pub(super) enum Draft {
    Model(DraftState),
    Mtp(MtpState),
}

impl Draft {
    /// The drafter of an engine for `target` (its tokenizer `tokenizer`).
    pub(super) fn new(
        d: Drafter,
        target: &mut dyn Decoder,
        tokenizer: &Tokenizer,
        block_size: usize,
    ) -> Result<Draft, StartError> {
        match d {
            Drafter::Model {
                decoder,
                tokenizer: t,
            } => DraftState::new(decoder, &t, tokenizer, block_size).map(Draft::Model),
            Drafter::Mtp => match target.draft_head() {
                Ok(Some(head)) => {
                    let width = target.hyper_params().n_embd;
                    Ok(Draft::Mtp(MtpState::new(head, width, block_size)))
                }
                Ok(None) => Err(StartError::NoDraftHead),
                Err(e) => Err(StartError::DraftHead(e.to_string())),
            },
        }
    }

    /// Drafts for the decoding requests ([`DraftState::drafts`],
    /// [`MtpState::drafts`]).
    pub(super) fn drafts(
        &mut self,
        running: &BTreeMap<RequestId, Active>,
        s: &Speculation,
    ) -> BTreeMap<RequestId, Vec<u32>> {
        match self {
            Draft::Model(d) => d.drafts(running, s),
            Draft::Mtp(m) => m.drafts(running, s),
        }
    }

    /// The target ran `rows`: a head takes their hidden rows.
    pub(super) fn observe(
        &mut self,
        running: &BTreeMap<RequestId, Active>,
        rows: &[Row],
        hidden: &Rows,
    ) {
        if let Draft::Mtp(m) = self {
            m.observe(running, rows, hidden);
        }
    }

    /// Request `id` kept its first `kept` tokens.
    pub(super) fn cut_back(&mut self, id: RequestId, kept: usize) {
        match self {
            Draft::Model(d) => d.cut_back(id, kept),
            Draft::Mtp(m) => m.cut_back(id, kept),
        }
    }

    /// Request `id` ended.
    pub(super) fn forget(&mut self, id: RequestId) {
        match self {
            Draft::Model(d) => d.forget(id),
            Draft::Mtp(m) => m.forget(id),
        }
    }
}

/// The first token id whose piece differs between two vocabularies (the
/// shorter one's length if one is a prefix of the other); `None` when equal.
fn first_difference(a: &Tokenizer, b: &Tokenizer) -> Option<u32> {
    let (a, b) = (a.vocab(), b.vocab());
    let n = a.len().min(b.len()) as u32;
    (0..n)
        .find(|&i| a.piece(i) != b.piece(i))
        .or((a.len() != b.len()).then_some(n))
}

/// One request's draft KV: its pages, how many positions hold its tokens,
/// and with recurrent layers its spare state slot and the position of the
/// state kept there this step.
#[derive(Default)]
struct DraftSeq {
    table: PageTable,
    written: usize,
    spare: Option<u32>,
    kept_at: Option<usize>,
}

/// The draft model in the worker.
pub(super) struct DraftState {
    decoder: Box<dyn Decoder>,
    store: KvStore,
    pool: PagePool,
    seqs: BTreeMap<RequestId, DraftSeq>,
}

/// What one request asks of a drafting pass.
struct Want1 {
    id: RequestId,
    /// Tokens to run: the ones the draft has not seen, then its last guess.
    feed: Vec<u32>,
    /// Guesses still wanted.
    left: usize,
}

impl DraftState {
    /// The draft model `decoder` (its tokenizer `tokenizer`) of an engine
    /// whose tokenizer is `target`, checked: the same vocabulary.
    fn new(
        decoder: Box<dyn Decoder>,
        tokenizer: &Tokenizer,
        target: &Tokenizer,
        block_size: usize,
    ) -> Result<DraftState, StartError> {
        if let Some(at) = first_difference(target, tokenizer) {
            return Err(StartError::DraftVocabulary {
                target: target.vocab().len(),
                draft: tokenizer.vocab().len(),
                at,
            });
        }
        let layout = decoder.kv_layout();
        Ok(DraftState {
            store: KvStore::new(layout, block_size),
            decoder,
            pool: PagePool::new(None),
            seqs: BTreeMap::new(),
        })
    }

    /// Greedy drafts for every decoding request, each within its draft budget
    /// and the positions it was promised; none if the draft model fails.
    fn drafts(
        &mut self,
        running: &BTreeMap<RequestId, Active>,
        s: &Speculation,
    ) -> BTreeMap<RequestId, Vec<u32>> {
        let mut wants: Vec<Want1> = running
            .iter()
            .filter_map(|(&id, a)| {
                let Phase::Decoding { pending } = a.phase else {
                    return None;
                };
                if a.rest > 0 {
                    return None;
                }
                let promised = a.prompt_len + a.output.limit();
                let left = a
                    .draft_budget
                    .min(promised.saturating_sub(a.tokens.len() + 1));
                let seen = self.seqs.get(&id).map_or(0, |q| q.written);
                let mut feed = a.tokens[seen.min(a.tokens.len())..].to_vec();
                feed.push(pending);
                (left > 0).then_some(Want1 { id, feed, left })
            })
            .collect();
        let mut out: BTreeMap<RequestId, Vec<u32>> = BTreeMap::new();
        let mut first = true;
        while !wants.is_empty() {
            let Some(guesses) = self.pass(&wants, first) else {
                return BTreeMap::new();
            };
            first = false;
            for (w, (g, p)) in wants.iter_mut().zip(guesses) {
                // An unlikely guess ends the request's draft; it is kept only
                // as the first (one guess a step is always tried).
                let drafted = out.entry(w.id).or_default();
                let likely = p >= s.draft_p_min;
                if likely || drafted.is_empty() {
                    drafted.push(g);
                }
                w.left = if likely { w.left - 1 } else { 0 };
                w.feed = vec![g];
            }
            wants.retain(|w| w.left > 0);
        }
        out
    }

    /// One batched pass: each request's feed run, its next token guessed
    /// (greedy), with the guess's probability under the draft. The `first`
    /// pass of a step keeps a recurrent state after the feed.
    fn pass(&mut self, wants: &[Want1], first: bool) -> Option<Vec<(u32, f32)>> {
        let ps = self.store.page_size();
        let recurrent = self.store.layout().n_recurrent > 0;
        for w in wants {
            let q = self.seqs.entry(w.id).or_default();
            if recurrent && q.table.state.is_none() {
                q.table.state = Some(self.pool.take().expect("an unbounded pool").id);
                q.spare = Some(self.pool.take().expect("an unbounded pool").id);
            }
            if first {
                q.kept_at = q.spare.map(|_| q.written + w.feed.len());
            }
            let end = q.written + w.feed.len();
            while q.table.full.len() * ps < end {
                let id = self.pool.take().expect("an unbounded pool").id;
                q.table.full.push(id);
                // A window layer keeps every page here: the same ids, never slid.
                if self.store.layout().window().is_some() {
                    q.table.window.push(id);
                }
            }
        }
        let spans: Vec<Span<'_>> = wants
            .iter()
            .map(|w| {
                let q = &self.seqs[&w.id];
                let want = match q.spare {
                    Some(keep) if first => Want::Verify {
                        from: w.feed.len() - 1,
                        keep: Some(keep),
                    },
                    _ => Want::Last,
                };
                Span {
                    pages: &q.table,
                    start: q.written,
                    tokens: &w.feed,
                    want,
                }
            })
            .collect();
        let out = self.decoder.forward(&mut self.store, &spans).ok()?;
        let mut guesses = Vec::with_capacity(wants.len());
        for (i, w) in wants.iter().enumerate() {
            let row = out.logits.last_of(i)?;
            guesses.push(most_likely(row));
            self.seqs.get_mut(&w.id).expect("entered above").written += w.feed.len();
        }
        Some(guesses)
    }

    /// Request `id` kept its first `kept` tokens: the draft's KV past them is
    /// stale, and a recurrent state past them goes back to the one kept.
    fn cut_back(&mut self, id: RequestId, kept: usize) {
        let Some(q) = self.seqs.get_mut(&id) else {
            return;
        };
        match (q.kept_at, &mut q.spare) {
            (Some(at), Some(spare)) if q.written > kept => {
                debug_assert!(at <= kept, "the step's new tokens are kept");
                let live = q.table.state.as_mut().expect("a recurrent draft's slot");
                std::mem::swap(live, spare);
                q.written = at;
            }
            _ => q.written = q.written.min(kept),
        }
        q.kept_at = None;
    }

    /// Request `id` ended: its pages and state slots go back.
    fn forget(&mut self, id: RequestId) {
        if let Some(q) = self.seqs.remove(&id) {
            for p in q.table.full.into_iter().chain(q.table.state).chain(q.spare) {
                self.pool.release(p);
            }
        }
    }
}

/// The most likely token of a logits row (the first of equals) and its
/// probability.
pub(super) fn most_likely(row: &[f32]) -> (u32, f32) {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    let top = row[best];
    let sum: f32 = row.iter().map(|&x| (x - top).exp()).sum();
    (best as u32, 1.0 / sum)
}
