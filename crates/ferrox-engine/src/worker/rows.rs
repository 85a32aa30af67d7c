//! A step's rows and the spans the model runs for them.

use std::collections::BTreeMap;

use ferrox_models::decoder::{Span, Want};

use super::Active;
use crate::ledger::KvLedger;
use crate::request::RequestId;

/// One row of a step: a request and the tokens it runs.
pub(super) struct Row {
    pub(super) id: RequestId,
    pub(super) start: usize,
    pub(super) len: usize,
    pub(super) decode: bool,
    /// A decode row's tokens run again first (`Active::replay`).
    pub(super) replay: usize,
    /// A decode row's tokens: those it runs again, its pending one, then its
    /// draft ([`crate::speculation`]); empty for a prompt chunk.
    pub(super) run: Vec<u32>,
}

impl Row {
    /// A decode row's drafted tokens.
    pub(super) fn draft(&self) -> &[u32] {
        self.run.get(self.replay + 1..).unwrap_or_default()
    }
}

/// The span of `r`: its pending token (after the tokens it runs again, and
/// before its draft, each drafted row's logits wanted and on a hybrid model
/// the state after the pending token kept in the sequence's spare slot), or
/// its prompt chunk.
pub(super) fn span<'a>(
    running: &'a BTreeMap<RequestId, Active>,
    ledger: &'a KvLedger,
    r: &'a Row,
) -> Span<'a> {
    let a = &running[&r.id];
    let pages = ledger.table(r.id).expect("admitted");
    if r.decode {
        return Span {
            pages,
            start: r.start,
            tokens: &r.run,
            want: if r.draft().is_empty() {
                Want::Last
            } else {
                Want::Verify {
                    from: r.replay,
                    keep: ledger.spare_state(r.id),
                }
            },
        };
    }
    let end = r.start + r.len;
    Span {
        pages,
        start: r.start,
        tokens: &a.tokens[r.start..end],
        want: if a.embedding.is_some() {
            Want::Hidden
        } else if a.prompt_scores.is_some() {
            Want::All
        } else if end == a.prompt_len {
            Want::Last
        } else {
            Want::Nothing
        },
    }
}
