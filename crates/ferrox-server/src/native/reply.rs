//! The answers of `/completion` and `/infill` in llama-server's shape: one
//! object per prompt (a list for several) with the text, why it stopped,
//! the counts, the timings, the sampling it ran with and, on request, the
//! token ids and each token's top log-probabilities; streamed, a chunk per
//! token and the whole object (with empty `content`) at the end.

use std::time::Instant;

use ferrox_engine::{Event, FinishReason, TokenLogprob, Usage};
use serde::Serialize;

use crate::error::ApiError;
use crate::props::Params;
use crate::state::AppState;

/// One token's log-probability with the alternatives (`completion_probabilities`).
#[derive(Serialize, Clone)]
struct Prob {
    id: u32,
    token: String,
    logprob: f32,
    bytes: Vec<u8>,
    top_logprobs: Vec<Alternative>,
}

#[derive(Serialize, Clone)]
struct Alternative {
    id: u32,
    token: String,
    logprob: f32,
    bytes: Vec<u8>,
}

#[derive(Serialize)]
struct Timings {
    cache_n: usize,
    prompt_n: usize,
    prompt_ms: f64,
    prompt_per_token_ms: f64,
    prompt_per_second: f64,
    predicted_n: usize,
    predicted_ms: f64,
    predicted_per_token_ms: f64,
    predicted_per_second: f64,
}

/// A streamed token.
#[derive(Serialize)]
struct Chunk {
    index: usize,
    content: String,
    tokens: Vec<u32>,
    stop: bool,
    id_slot: i64,
    tokens_predicted: usize,
    tokens_evaluated: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    completion_probabilities: Option<Vec<Prob>>,
}

/// A whole answer (and a stream's last chunk).
#[derive(Serialize)]
pub(super) struct Whole<'a> {
    index: usize,
    content: String,
    tokens: Vec<u32>,
    id_slot: i64,
    stop: bool,
    model: &'a str,
    tokens_predicted: usize,
    tokens_evaluated: usize,
    generation_settings: &'a Params,
    prompt: &'a str,
    has_new_line: bool,
    truncated: bool,
    stop_type: &'static str,
    stopping_word: String,
    tokens_cached: usize,
    timings: Timings,
    #[serde(skip_serializing_if = "Option::is_none")]
    completion_probabilities: Option<Vec<Prob>>,
}

/// What every answer of a request shares.
pub(super) struct Request {
    pub settings: Params,
    pub stops: Vec<String>,
    pub return_tokens: bool,
    pub n_probs: usize,
    pub started: Instant,
}

/// One prompt's answer in the making.
pub(super) struct Answer {
    index: usize,
    prompt: String,
    prompt_tokens: usize,
    text: String,
    tokens: Vec<u32>,
    probs: Vec<Prob>,
    first_token: Option<Instant>,
    end: Option<(FinishReason, Usage)>,
}

impl Answer {
    pub fn new(st: &AppState, index: usize, prompt: &[u32]) -> Answer {
        Answer {
            index,
            prompt: st.tokenizer.decode(prompt, true),
            prompt_tokens: prompt.len(),
            text: String::new(),
            tokens: Vec::new(),
            probs: Vec::new(),
            first_token: None,
            end: None,
        }
    }

    /// Takes in one event; for a stream, the chunks it gives (a failure is the
    /// error).
    pub fn on_event(
        &mut self,
        st: &AppState,
        req: &Request,
        e: Event,
        stream: bool,
    ) -> Result<Vec<String>, ApiError> {
        match e {
            Event::Admitted | Event::PromptLogprobs(_) | Event::Embedding(_) => Ok(Vec::new()),
            Event::Token { id, text, logprob } => {
                self.first_token.get_or_insert_with(Instant::now);
                self.tokens.push(id);
                self.text.push_str(&text);
                let prob = logprob
                    .filter(|_| req.n_probs > 0)
                    .map(|l| prob(st, id, &l));
                if let Some(p) = &prob {
                    self.probs.push(p.clone());
                }
                if !stream {
                    return Ok(Vec::new());
                }
                let chunk = Chunk {
                    index: self.index,
                    content: text,
                    tokens: vec![id],
                    stop: false,
                    id_slot: 0,
                    tokens_predicted: self.tokens.len(),
                    tokens_evaluated: self.prompt_tokens,
                    completion_probabilities: prob.map(|p| vec![p]),
                };
                Ok(vec![json(&chunk)])
            }
            Event::Finished {
                reason,
                usage,
                text,
            } => {
                let mut out = Vec::new();
                if stream && !text.is_empty() {
                    out.push(json(&Chunk {
                        index: self.index,
                        content: text.clone(),
                        tokens: Vec::new(),
                        stop: false,
                        id_slot: 0,
                        tokens_predicted: self.tokens.len(),
                        tokens_evaluated: self.prompt_tokens,
                        completion_probabilities: None,
                    }));
                }
                self.text.push_str(&text);
                self.end = Some((reason, usage));
                if stream && reason != FinishReason::Cancelled {
                    out.push(json(&self.whole(st, req, true)?));
                }
                Ok(out)
            }
            Event::Failed(f) => Err(ApiError::from_failure(&f)),
        }
    }

    /// The whole answer; a stream's last chunk has no text of its own.
    pub fn whole<'a>(
        &'a self,
        st: &'a AppState,
        req: &'a Request,
        last_chunk: bool,
    ) -> Result<Whole<'a>, ApiError> {
        let Some((reason, usage)) = self.end else {
            return Err(ApiError::internal("the request ended without an answer"));
        };
        let (stop_type, stopping_word) = match reason {
            FinishReason::Length => ("limit", String::new()),
            FinishReason::StopString(i) => ("word", req.stops.get(i).cloned().unwrap_or_default()),
            FinishReason::Stop | FinishReason::Cancelled => ("eos", String::new()),
        };
        Ok(Whole {
            index: self.index,
            content: if last_chunk {
                String::new()
            } else {
                self.text.clone()
            },
            tokens: if req.return_tokens && !last_chunk {
                self.tokens.clone()
            } else {
                Vec::new()
            },
            id_slot: 0,
            stop: true,
            model: &st.model_id,
            tokens_predicted: usage.completion_tokens,
            tokens_evaluated: usage.prompt_tokens,
            generation_settings: &req.settings,
            prompt: &self.prompt,
            has_new_line: self.text.contains('\n'),
            truncated: false,
            stop_type,
            stopping_word,
            tokens_cached: usage.cached_tokens,
            timings: self.timings(req, &usage),
            completion_probabilities: (req.n_probs > 0 && !last_chunk).then(|| self.probs.clone()),
        })
    }

    fn timings(&self, req: &Request, usage: &Usage) -> Timings {
        let end = Instant::now();
        let first = self.first_token.unwrap_or(end);
        let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1e3;
        let (prompt_ms, predicted_ms) = (ms(req.started, first), ms(first, end));
        let prompt_n = usage.prompt_tokens - usage.cached_tokens.min(usage.prompt_tokens);
        let per = |ms: f64, n: usize| if n == 0 { 0.0 } else { ms / n as f64 };
        let rate = |ms: f64, n: usize| if ms <= 0.0 { 0.0 } else { n as f64 * 1e3 / ms };
        Timings {
            cache_n: usage.cached_tokens,
            prompt_n,
            prompt_ms,
            prompt_per_token_ms: per(prompt_ms, prompt_n),
            prompt_per_second: rate(prompt_ms, prompt_n),
            predicted_n: usage.completion_tokens,
            predicted_ms,
            predicted_per_token_ms: per(predicted_ms, usage.completion_tokens),
            predicted_per_second: rate(predicted_ms, usage.completion_tokens),
        }
    }
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("an answer serializes")
}

fn prob(st: &AppState, id: u32, l: &TokenLogprob) -> Prob {
    let (token, bytes) = st.token_piece(id);
    Prob {
        id,
        token,
        logprob: l.logprob,
        bytes,
        top_logprobs: l
            .top
            .iter()
            .map(|&(id, logprob)| {
                let (token, bytes) = st.token_piece(id);
                Alternative {
                    id,
                    token,
                    logprob,
                    bytes,
                }
            })
            .collect(),
    }
}
