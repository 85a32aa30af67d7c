//! The seam between the engine and a model: forward a batch of token spans against
//! paged KV, get logits (or hidden states) for the rows asked for.
//!
//! Invariant (SPEC S3): a span's logits do not depend on the other spans in the
//! call, nor on how its sequence's tokens were split into spans before.

use crate::error::ModelError;
use crate::hparams::HyperParams;
use crate::kv_store::{KvElement, KvLayout, KvStore, PageTable};

/// Which logits a span wants back.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Want {
    /// None (a prefill chunk that is not a prompt's last).
    Nothing,
    /// The last token's (the next-token distribution).
    Last,
    /// Every token's (prompt log-probabilities).
    All,
    /// The logits of tokens `from..`: a decode row's pending token and its
    /// draft, after the tokens it runs again. A model with recurrent layers
    /// also copies the sequence's state after token `from` (the pending one,
    /// which is always kept) into slot `keep`, so that a refused draft can be
    /// taken back ([`crate::kv_store::KvStore::copy_state`]).
    Verify { from: usize, keep: Option<u32> },
    /// No logits, but every token's hidden state after the output norm
    /// ([`Output::hidden`]: what embeddings pool).
    Hidden,
}

/// A run of tokens of one sequence at consecutive positions.
#[derive(Clone, Copy, Debug)]
pub struct Span<'a> {
    /// The sequence's page tables: pages for every position up to
    /// `start + tokens.len()`, window pages for the window of each of its tokens.
    pub pages: &'a PageTable,
    /// Position of `tokens[0]`; every earlier position must already be written.
    pub start: usize,
    pub tokens: &'a [u32],
    pub want: Want,
}

/// What a forward call returns: the rows its spans asked for.
#[derive(Clone, Debug, Default)]
pub struct Output {
    /// Logits (`width` = the vocabulary) of the tokens of spans that want them.
    pub logits: Rows,
    /// Hidden states after the output norm (`width` = the model's width) of
    /// the tokens of spans that want [`Want::Hidden`].
    pub hidden: Rows,
}

/// Rows of values of some of a forward call's tokens.
#[derive(Clone, Debug, Default)]
pub struct Rows {
    /// Values per row.
    pub width: usize,
    /// `[rows][width]`
    pub data: Vec<f32>,
    /// `(span index, token index within the span)` of each row, in span then token order.
    pub index: Vec<(usize, usize)>,
}

impl Rows {
    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.width..(i + 1) * self.width]
    }

    /// The row of token `token` of span `span`, if it was asked for.
    pub fn of(&self, span: usize, token: usize) -> Option<&[f32]> {
        self.index
            .iter()
            .position(|&k| k == (span, token))
            .map(|i| self.row(i))
    }

    /// The rows of span `span` with each one's token index within the span, in
    /// token order (every token's, for a span that wants them all).
    pub fn rows_of(&self, span: usize) -> impl Iterator<Item = (usize, &[f32])> {
        self.index
            .iter()
            .enumerate()
            .filter(move |(_, k)| k.0 == span)
            .map(|(i, k)| (k.1, self.row(i)))
    }

    /// The last row of span `span`, if any was asked for.
    pub fn last_of(&self, span: usize) -> Option<&[f32]> {
        self.index
            .iter()
            .rposition(|k| k.0 == span)
            .map(|i| self.row(i))
    }
}

/// A model the engine can run.
pub trait Decoder: Send + Sync {
    /// Runs `spans` through the model, writing their KV into `store` at the pages
    /// their tables name.
    fn forward(&self, store: &mut KvStore, spans: &[Span<'_>]) -> Result<Output, ModelError>;

    /// The model's hyper-parameters.
    fn hyper_params(&self) -> &HyperParams;

    /// The KV storage the model needs.
    fn kv_layout(&self) -> KvLayout {
        KvLayout::new(self.hyper_params())
    }

    /// KV storage of `element` in pages of `page_size` positions. A model
    /// may give an 8- or 4-bit cache [`crate::kv_store::KeyOffsets`] (the
    /// transformer does: its mean keys).
    fn kv_store(&self, element: KvElement, page_size: usize) -> Result<KvStore, ModelError> {
        Ok(KvStore::new(
            self.kv_layout().with_element(element),
            page_size,
        ))
    }

    /// Logits per row.
    fn vocab_size(&self) -> usize {
        self.hyper_params().vocab_size
    }

    /// Serves sequences of at most `context` positions from now on (at most
    /// the model's context length). A model whose function depends on it
    /// adapts: LongRoPE's factor set, chosen as llama.cpp chooses it by its
    /// context per sequence. Nothing by default.
    fn limit_context(&mut self, context: usize) {
        let _ = context;
    }

    /// Whether the model is a bidirectional encoder: it embeds and does not
    /// generate, and each sequence must run whole, in one span from position
    /// 0, never from a cached prefix.
    fn is_encoder(&self) -> bool {
        false
    }

    /// The model's multi-token-prediction head (its first draft block), if
    /// the file has one. From this call on, every forward also returns every
    /// token's hidden state after the output norm ([`Output::hidden`]): the
    /// head's input.
    fn draft_head(&mut self) -> Result<Option<Box<dyn DraftHead>>, ModelError> {
        Ok(None)
    }

    /// A relevance score (or several labels' scores) from the model's
    /// classification head on a pooled hidden state, if it has such a head
    /// (rerankers).
    fn classify(&self, pooled: &[f32]) -> Option<Vec<f32>> {
        let _ = pooled;
        None
    }
}

/// A draft head that runs on its target's hidden states: a
/// multi-token-prediction block (Qwen3.5's `nextn`), which guesses the token
/// after next from a token and the hidden state before it. It keeps its own
/// KV, one attention layer.
pub trait DraftHead: Send {
    /// Runs `spans`, each token beside its row of `hidden` (`[tokens][n_embd]`
    /// in span order): the target's hidden state after the output norm at the
    /// position before the token's, or for a token the head guessed, the
    /// head's own hidden row of the step that guessed it. Returns the logits
    /// the spans want, and every token's hidden row (after the head's norm).
    fn forward(
        &self,
        store: &mut KvStore,
        spans: &[Span<'_>],
        hidden: &[f32],
    ) -> Result<Output, ModelError>;

    /// The KV storage the head needs.
    fn kv_layout(&self) -> KvLayout;
}
