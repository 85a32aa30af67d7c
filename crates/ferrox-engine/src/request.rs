//! What a caller submits and what it gets back.

use std::sync::Arc;

use ferrox_models::pooling::Pooling;
use ferrox_sampling::grammar::Grammar;
use ferrox_sampling::sampler::SamplingParams;

use crate::output::FinishReason;

/// A request's stable id: handed out once at submission, never reused (SPEC S4).
pub type RequestId = u64;

/// How to generate.
#[derive(Clone, Debug)]
pub struct GenerationParams {
    /// Most completion tokens (at least 1; 0 when only the prompt is scored
    /// or embedded).
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Stop strings (SPEC S15).
    pub stop: Vec<String>,
    /// Extra stop tokens beside the model's end-of-generation set (SPEC S14).
    pub stop_token_ids: Vec<u32>,
    /// Report each token's log-probability and this many most likely alternatives.
    pub logprobs: Option<usize>,
    /// Score the prompt: each prompt token's log-probability given the tokens
    /// before it, with this many most likely alternatives
    /// ([`Event::PromptLogprobs`]). Such a prompt is run whole, never taken from
    /// the prefix cache (cached positions have no logits).
    pub prompt_logprobs: Option<usize>,
    /// Embed the prompt instead of generating: its hidden states pooled thus
    /// ([`Event::Embedding`]), with `max_tokens` 0. Unless the pooling reads
    /// the last token only, the prompt is run whole, never taken from the
    /// prefix cache (cached positions have no hidden states).
    pub embed: Option<Pooling>,
    /// Keep generating past the model's end-of-generation tokens (benchmarks).
    pub ignore_eos: bool,
    /// Constrain the output to this grammar (structured output); each request
    /// starts its own constraint from it.
    pub grammar: Option<Arc<Grammar>>,
}

impl GenerationParams {
    /// Greedy decoding of at most `max_tokens` tokens.
    pub fn greedy(max_tokens: usize) -> GenerationParams {
        GenerationParams {
            max_tokens,
            sampling: SamplingParams::greedy(),
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            logprobs: None,
            prompt_logprobs: None,
            embed: None,
            ignore_eos: false,
            grammar: None,
        }
    }
}

/// Token counts of a finished request.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens (0 for an empty prompt, SPEC S6).
    pub prompt_tokens: usize,
    /// Counted completion tokens (stop tokens excluded).
    pub completion_tokens: usize,
    /// Prompt tokens served from the prefix cache instead of being run.
    pub cached_tokens: usize,
    /// Tokens speculation drafted for the request, and those kept.
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
}

/// The log-probability of a generated token under the model (softmax of the raw
/// logits, natural log), with the most likely alternatives, best first.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub logprob: f32,
    /// The token's place by logit: 1 for the most likely (ties share the best
    /// place).
    pub rank: usize,
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprob {
    /// Log-probabilities of `token` and the `n` most likely tokens of `logits`.
    pub fn of(logits: &[f32], token: u32, n: usize) -> TokenLogprob {
        let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
        let lse = max
            + logits
                .iter()
                .map(|&v| (v as f64 - max).exp())
                .sum::<f64>()
                .ln();
        let lp = |v: f32| (v as f64 - lse) as f32;
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let by = |a: &u32, b: &u32| {
            logits[*b as usize]
                .total_cmp(&logits[*a as usize])
                .then(a.cmp(b))
        };
        let n = n.min(idx.len());
        if n > 0 && n < idx.len() {
            idx.select_nth_unstable_by(n - 1, by);
        }
        idx.truncate(n);
        idx.sort_by(by);
        let own = logits.get(token as usize).copied();
        TokenLogprob {
            logprob: own.map_or(f32::NEG_INFINITY, lp),
            rank: own.map_or(logits.len(), |v| {
                1 + logits.iter().filter(|&&l| l > v).count()
            }),
            top: idx
                .into_iter()
                .map(|i| (i, lp(logits[i as usize])))
                .collect(),
        }
    }
}

/// Events on a request's stream, in order: tokens, then exactly one terminal event.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The request left the queue and holds its KV (sent once, before any token).
    Admitted,
    /// The prompt's tokens scored (asked by [`GenerationParams::prompt_logprobs`]):
    /// one entry per prompt token after the first, which has no context. Sent
    /// once, when the prompt has run, before any token.
    PromptLogprobs(Vec<TokenLogprob>),
    /// The prompt's embedding (asked by [`GenerationParams::embed`]): one row,
    /// or one per prompt token when unpooled, unnormalized; with rank pooling,
    /// the classification head's scores of the pooled row. Sent once, when the
    /// prompt has run, just before the request finishes.
    Embedding(Vec<Vec<f32>>),
    /// A generated token and the text it released (may be empty while text is withheld).
    Token {
        id: u32,
        text: String,
        logprob: Option<TokenLogprob>,
    },
    /// The request ended; `text` is what was still withheld, if anything.
    Finished {
        reason: FinishReason,
        usage: Usage,
        text: String,
    },
    /// The request failed after it was accepted.
    Failed(Failure),
}

/// Why an accepted request failed (its terminal event, instead of `Finished`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The engine was shut down (the server's grace period ran out) before the
    /// request finished.
    #[error("the server shut down before the request finished; retry it")]
    Shutdown,
    /// The model's forward pass returned an error.
    #[error("the model failed: {0}")]
    Model(String),
    /// The KV ledger could not give a step its pages.
    #[error("KV pages: {0}")]
    Kv(String),
    /// The output grammar failed (the library's error).
    #[error("{0}")]
    Constraint(#[from] ferrox_sampling::grammar::ConstraintError),
    /// The engine's worker panicked or is gone; the engine serves nothing more.
    #[error("the engine stopped: {0}")]
    EngineDown(String),
}
