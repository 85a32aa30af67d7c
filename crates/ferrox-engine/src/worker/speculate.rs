//! Speculation in the worker's step ([`crate::speculation`]): a decode row
//! runs its pending token and a draft, and the rows' logits are sampled in
//! turn as plain decoding samples them.

use ferrox_models::decoder::Rows;

use super::{Active, Phase, Row, Worker};
use crate::speculation::{Speculation, next_budget, rest_after};
use crate::stats::EngineStats;

impl Active {
    /// The tokens a decode row runs: `pending`, then what `speculation`
    /// drafts after it ([`crate::speculation::draft`]) within the request's
    /// draft budget and the positions it was promised (its prompt and
    /// `max_tokens`).
    pub(super) fn decode_run(&self, pending: u32, speculation: Option<&Speculation>) -> Vec<u32> {
        let Some(s) = speculation else {
            return vec![pending];
        };
        let promised = self.prompt_len + self.output.limit();
        // The row writes positions tokens.len() ..= tokens.len() + draft.
        let room = promised
            .saturating_sub(self.tokens.len() + 1)
            .min(self.draft_budget);
        let mut run = vec![pending];
        run.extend(crate::speculation::draft(&self.tokens, pending, s, room));
        run
    }
}

impl Worker {
    /// Speculation for this step: the engine's, while at most its
    /// `max_batch` requests decode.
    pub(super) fn speculation_now(&self) -> Option<Speculation> {
        let decoding = self
            .running
            .values()
            .filter(|a| matches!(a.phase, Phase::Decoding { .. }))
            .count();
        self.config.speculation.filter(|s| decoding <= s.max_batch)
    }

    /// A drafted decode row is run: its pending token is in the KV, and each
    /// row is sampled in turn as plain decoding would sample it; a draft
    /// token is kept while it equals the token sampled before it, and the
    /// first sampled token that is not kept is the new pending one. On a
    /// hybrid model a refused draft takes the recurrent state back to the one
    /// kept after the pending token; the kept draft tokens run again next.
    pub(super) fn verify(&mut self, i: usize, r: &Row, logits: &Rows) {
        let Some(a) = self.running.get_mut(&r.id) else {
            return;
        };
        let Phase::Decoding { pending } = a.phase else {
            unreachable!("drafts are planned for decoding requests");
        };
        let draft = r.draft();
        a.tokens.push(pending);
        a.drafted += draft.len();
        EngineStats::add(&self.stats.drafted_tokens, draft.len() as u64);
        let mut kept = 0;
        for (j, row) in logits.rows_of(i) {
            self.on_logits(r.id, row);
            let Some(a) = self.running.get_mut(&r.id) else {
                break;
            };
            match (a.phase, draft.get(j - r.replay)) {
                (Phase::Decoding { pending }, Some(&d)) if pending == d => {
                    a.tokens.push(d);
                    a.accepted += 1;
                    kept += 1;
                }
                _ => break,
            }
        }
        EngineStats::add(&self.stats.accepted_tokens, kept);
        if let Some(a) = self.running.get_mut(&r.id) {
            if let Some(s) = &self.config.speculation {
                a.draft_budget = next_budget(a.draft_budget, draft.len(), kept as usize, s);
                a.refused = if kept == 0 { a.refused + 1 } else { 0 };
                if self.draft.is_some() {
                    a.rest = rest_after(a.refused, s);
                }
            }
            self.ledger.advance(r.id, &a.tokens);
            a.replay = 0;
            if (kept as usize) < draft.len() && self.ledger.take_back_state(r.id) {
                a.replay = kept as usize;
            }
            if a.replay == 0
                && let Some(c) = self.ledger.checkpoint(r.id, a.tokens.len(), true)
            {
                self.store.copy_state(c.from, c.to);
            }
            if let Some(d) = &mut self.draft {
                d.cut_back(r.id, a.tokens.len());
            }
        }
    }
}
