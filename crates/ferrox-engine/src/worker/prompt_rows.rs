//! What a prompt's own rows give before any token is sampled: a scored
//! prompt's log-probabilities and an embedded prompt's pooled hidden states,
//! gathered chunk by chunk and sent once the prompt has run.

use ferrox_models::decoder::Rows;
use ferrox_models::pooling::Pooling;

use super::{Row, Worker};
use crate::output::FinishReason;
use crate::request::{Event, GenerationParams, TokenLogprob};

/// Whether a request with `params` runs its prompt whole, never from the
/// prefix cache: its every position is scored or pooled.
pub(super) fn runs_whole(params: &GenerationParams) -> bool {
    params.prompt_logprobs.is_some() || params.embed.is_some_and(|p| !p.last_only())
}

/// A scored prompt's log-probabilities, gathered chunk by chunk.
pub(super) struct PromptScores {
    /// Alternatives per token.
    pub(super) top: usize,
    /// Tokens `1..` of the prompt scored so far.
    pub(super) scores: Vec<TokenLogprob>,
}

impl Worker {
    /// Scores the prompt tokens that span `i` (row `r`, a chunk of a scored
    /// prompt) predicts, and sends the scores once the prompt has run.
    pub(super) fn score_prompt(&mut self, i: usize, r: &Row, logits: &Rows) {
        let Some(a) = self.running.get_mut(&r.id) else {
            return;
        };
        if r.decode {
            return;
        }
        let last_chunk = a.samples_after(r);
        let Some(p) = a.prompt_scores.as_mut() else {
            return;
        };
        // Token j of the chunk predicts the prompt token after it.
        for (j, row) in logits.rows_of(i) {
            let next = r.start + j + 1;
            if next >= a.prompt_len {
                break;
            }
            p.scores.push(TokenLogprob::of(row, a.tokens[next], p.top));
        }
        if last_chunk {
            let scores = std::mem::take(&mut p.scores);
            let _ = a.reply.send(Event::PromptLogprobs(scores));
            if a.output.limit() == 0 {
                self.finish(r.id, FinishReason::Length);
            }
        }
    }

    /// Pools the hidden states of span `i` (row `r`, a chunk of an embedded
    /// prompt); once the prompt has run, sends the embedding and finishes the
    /// request. Returns whether `r` is an embedding's (which never samples).
    pub(super) fn pool_prompt(&mut self, i: usize, r: &Row, hidden: &Rows) -> bool {
        let Some(a) = self.running.get_mut(&r.id) else {
            return false;
        };
        let prompt_len = a.prompt_len;
        let Some(pool) = a.embedding.as_mut() else {
            return false;
        };
        for (j, row) in hidden.rows_of(i) {
            let position = r.start + j;
            pool.add(position, row, position + 1 == prompt_len);
        }
        if r.start + r.len == prompt_len {
            let pool = a.embedding.take().expect("pooled above");
            let rank = pool.pooling() == Pooling::Rank;
            let mut rows = pool.finish();
            if rank {
                // The classification head's scores of the pooled first token.
                rows = rows
                    .iter()
                    .map(|r| self.decoder.classify(r).unwrap_or_default())
                    .collect();
            }
            let _ = a.reply.send(Event::Embedding(rows));
            self.finish(r.id, FinishReason::Length);
        }
        true
    }
}
