//! What a caller submits and what it gets back.

use ferrox_models::sampler::SamplingParams;

use crate::output::FinishReason;

/// A request's stable id: handed out once at submission, never reused (SPEC S4).
pub type RequestId = u64;

/// How to generate.
#[derive(Clone, Debug)]
pub struct GenerationParams {
    /// Most completion tokens (at least 1).
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Stop strings (SPEC S15).
    pub stop: Vec<String>,
    /// Extra stop tokens beside the model's end-of-generation set (SPEC S14).
    pub stop_token_ids: Vec<u32>,
}

impl GenerationParams {
    /// Greedy decoding of at most `max_tokens` tokens.
    pub fn greedy(max_tokens: usize) -> GenerationParams {
        GenerationParams { max_tokens, sampling: SamplingParams::greedy(), stop: Vec::new(), stop_token_ids: Vec::new() }
    }
}

/// Token counts of a finished request.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens (0 for an empty prompt, SPEC S6).
    pub prompt_tokens: usize,
    /// Counted completion tokens (stop tokens excluded).
    pub completion_tokens: usize,
}

/// Events on a request's stream, in order: tokens, then exactly one terminal event.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The request left the queue and holds its KV (sent once, before any token).
    Admitted,
    /// A generated token and the text it released (may be empty while text is withheld).
    Token { id: u32, text: String },
    /// The request ended; `text` is what was still withheld, if anything.
    Finished { reason: FinishReason, usage: Usage, text: String },
    /// The request failed after it was accepted (the engine stopped, a model error).
    Failed { message: String },
}
