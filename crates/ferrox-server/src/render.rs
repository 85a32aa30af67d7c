//! vLLM's render endpoints: a request's prompt as the server would run it,
//! without running it. Routers tokenize with them (vllm-router, llm-d's token
//! producer) to score replicas by prefix.
//!
//! * `POST /v1/chat/completions/render` answers one vLLM `GenerateRequest`:
//!   `{request_id, token_ids, features, sampling_params, model, stream,
//!   cache_salt, priority}`, plus `prompt`, the text of `token_ids`.
//! * `POST /v1/completions/render` answers a list of them, one per prompt.
//!
//! Each reads its body as the generating route does (the same parser and the
//! same preparation), so a body one refuses the other refuses too, with the
//! same error.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use serde::Serialize;

use crate::error::ApiError;
use crate::generation::{self, Generation, Prepared};
use crate::json_body::json_body;
use crate::request::{parse_chat, parse_completion};
use crate::request_log::unique_id;
use crate::state::AppState;

/// The sampling a rendered request would run with, in vLLM's names.
#[derive(Serialize)]
pub struct RenderedSampling {
    /// `null`: what the context leaves, capped at `--default-max-tokens`.
    pub max_tokens: Option<usize>,
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: usize,
    pub min_p: f32,
    pub repetition_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub logprobs: Option<usize>,
}

/// One prompt, rendered.
#[derive(Serialize)]
pub struct Rendered {
    pub request_id: String,
    pub token_ids: Vec<u32>,
    /// The text of `token_ids`, special tokens shown.
    pub prompt: String,
    /// Multimodal features: ferrox serves text only.
    pub features: Option<()>,
    pub sampling_params: RenderedSampling,
    pub model: String,
    pub stream: bool,
    pub cache_salt: Option<String>,
    pub priority: i64,
}

fn rendered(st: &AppState, prepared: Prepared, prefix: &str, stream: bool) -> Vec<Rendered> {
    let p = prepared.params();
    let s = &p.sampling;
    let sampling = || RenderedSampling {
        max_tokens: prepared.max_tokens(),
        temperature: s.temperature,
        top_p: s.top_p,
        top_k: s.top_k,
        min_p: s.min_p,
        repetition_penalty: s.repetition_penalty,
        presence_penalty: s.presence_penalty,
        frequency_penalty: s.frequency_penalty,
        seed: s.seed.or(st.server.default_seed),
        stop: p.stop.clone(),
        stop_token_ids: p.stop_token_ids.clone(),
        logprobs: p.logprobs,
    };
    prepared
        .prompts
        .iter()
        .enumerate()
        .map(|(i, ids)| Rendered {
            request_id: unique_id(prefix, i as u64),
            prompt: st.tokenizer.decode(ids, true),
            token_ids: ids.clone(),
            features: None,
            sampling_params: sampling(),
            model: st.model_id.clone(),
            stream,
            cache_salt: None,
            priority: 0,
        })
        .collect()
}

/// `POST /v1/chat/completions/render`.
pub async fn chat(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Rendered>, ApiError> {
    let req = parse_chat(&json_body(body)?)?;
    let stream = req.stream;
    let prepared = generation::prepare(&st, Generation::from(req)).await?;
    let mut one = rendered(&st, prepared, "chatcmpl-", stream);
    Ok(Json(one.swap_remove(0)))
}

/// `POST /v1/completions/render`.
pub async fn text(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Vec<Rendered>>, ApiError> {
    let req = parse_completion(&json_body(body)?)?;
    let stream = req.stream;
    let prepared = generation::prepare(&st, Generation::from(req)).await?;
    Ok(Json(rendered(&st, prepared, "cmpl-", stream)))
}
