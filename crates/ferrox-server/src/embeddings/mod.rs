//! Embeddings over the engine: OpenAI's `POST /v1/embeddings`,
//! llama-server's `POST /embedding` (also `/embeddings`, as llama-server
//! routes it: its `content` shape, per-token rows with pooling none),
//! `/v1/rerank` (a reranker's scores), and the core Ollama's `/api/embed`
//! uses too. Each input is its own engine
//! request with `max_tokens` 0, batched with the rest; the engine pools its
//! hidden states ([`ferrox_models::pooling`]) and this module normalizes and
//! truncates them.
//!
//! Invariants: as on every route, refusals happen before anything is queued
//! (an empty input, an input over the context, a pooling the model cannot
//! do), and dropping the response cancels the requests.

mod native;
mod openai;
mod rerank;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::routing::post;
use ferrox_engine::ceiling::CeilingKind;
use ferrox_engine::{Event, GenerationParams, Usage};
use ferrox_models::HyperParams;
use ferrox_models::pooling::{Normalize, Pooling};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;

use crate::error::ApiError;
use crate::field_policy::Policy;
use crate::invalid::Invalid;
use crate::json_body::json_body;
use crate::limits::{request_timeout, within_request_timeout};
use crate::prompt_forms::prompts;
use crate::request::{policed, typed};
use crate::request_log::{RequestLog, Route, unique_id};
use crate::state::AppState;

/// The routes, on the served model's router.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/embeddings", post(openai::embeddings))
        .route("/embedding", post(native::embedding))
        .route("/embeddings", post(native::embedding))
        .route("/v1/rerank", post(rerank::rerank))
        .route("/rerank", post(rerank::rerank))
        .route("/reranking", post(rerank::rerank))
        .route("/v1/reranking", post(rerank::rerank))
}

/// How a server embeds: its pooling (`--pooling`, else the file's
/// `pooling_type`, else mean) and its default normalization
/// (`--embd-normalize`, Euclidean by default as llama-server's).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmbeddingSettings {
    pub pooling: Pooling,
    pub normalize: Normalize,
    /// Values per vector (the model's width).
    pub width: usize,
}

/// A pooling the model cannot do, refused when the server starts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "--pooling rank needs a model with a classification head (a reranker); this model has none"
)]
pub struct NoRankHead;

impl EmbeddingSettings {
    /// The settings of a model whose file says `file` and which can (or
    /// cannot) score with a classification head, under the flags' choices.
    pub fn choose(
        flag: Option<Pooling>,
        normalize: Normalize,
        model: &HyperParams,
        has_rank_head: bool,
    ) -> Result<EmbeddingSettings, NoRankHead> {
        let pooling = flag.or(model.pooling).unwrap_or(Pooling::Mean);
        if pooling == Pooling::Rank && !has_rank_head {
            return Err(NoRankHead);
        }
        Ok(EmbeddingSettings {
            pooling,
            normalize,
            width: model.n_embd,
        })
    }
}

/// The body of a request to an embedding route, after the route's field
/// policy, typed; refused while the server drains.
fn parse<T: serde::de::DeserializeOwned>(
    st: &AppState,
    policy: &Policy,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    st.accepting()?;
    typed(&policed(policy, &json_body(body)?)?)
}

/// The inputs an embedding request takes: OpenAI's four forms (a string,
/// strings, token ids, lists of token ids) and llama-server's
/// ([`crate::prompt_forms`]: ids mixed with text, prompt objects, content
/// parts), read when the request is tokenized.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(transparent)]
pub struct Inputs(serde_json::Value);

impl Inputs {
    /// Whether the input is one string.
    pub fn is_text(&self) -> bool {
        self.0.is_string()
    }

    /// Each input's token ids (text with the model's BOS and EOS as its
    /// metadata asks, special tokens parsed, as llama-server tokenizes it);
    /// `field` names the inputs in errors. An empty list, or an input with no
    /// tokens, is refused.
    pub fn tokenize(self, st: &AppState, field: &'static str) -> Result<Vec<Vec<u32>>, ApiError> {
        if self.0.is_null() {
            return Err(Invalid::Missing { field }.into());
        }
        let ids = prompts(&st.tokenizer, &self.0, field)?.into_vec();
        if ids.is_empty() {
            return Err(Invalid::Empty {
                field,
                item: "input",
            }
            .into());
        }
        if let Some(i) = ids.iter().position(Vec::is_empty) {
            return Err(ApiError::invalid(
                Some(field),
                format!("{field}[{i}] is empty: there is nothing to embed"),
            ));
        }
        let vocab = st.tokenizer.vocab_size();
        if ids.iter().flatten().any(|&t| t as usize >= vocab) {
            return Err(Invalid::NotAToken { field, vocab }.into());
        }
        Ok(ids)
    }
}

/// What one embedding request asks.
pub struct EmbedRequest {
    /// Each input's token ids.
    pub inputs: Vec<Vec<u32>>,
    pub normalize: Normalize,
    /// Keep the first this many values of each vector (before normalizing).
    pub dimensions: Option<usize>,
    /// The field that holds the inputs, for errors.
    pub field: &'static str,
    pub route: Route,
}

/// The embeddings of every input, in order: one row each, or one per token
/// with pooling `none`.
pub struct Embedded {
    pub vectors: Vec<Vec<Vec<f32>>>,
    /// Tokens of every input together.
    pub prompt_tokens: usize,
}

/// The server's pooling, if an API that returns one vector per input can
/// use it (pooling `none` gives one per token).
pub fn pooled(st: &AppState) -> Result<Pooling, ApiError> {
    match st.embedding.pooling {
        Pooling::None => Err(ApiError::invalid(
            None,
            "this server pools nothing (--pooling none): its embeddings are per token, which \
             only /embedding returns; start it with --pooling mean, cls or last",
        )),
        Pooling::Rank => Err(ApiError::invalid(
            None,
            "this server scores relevance (--pooling rank): use /v1/rerank",
        )),
        p => Ok(p),
    }
}

/// Submits every input and gathers the embeddings.
pub async fn embed(st: &Arc<AppState>, r: EmbedRequest) -> Result<Embedded, ApiError> {
    let started = Instant::now();
    let width = st.embedding.width;
    if let Some(d) = r.dimensions
        && (d == 0 || d > width)
    {
        return Err(Invalid::OutOfRange {
            field: "dimensions",
            bound: format!("between 1 and the model's width {width}").into(),
            got: d.to_string(),
        }
        .into());
    }
    let mut streams = Vec::with_capacity(r.inputs.len());
    let lens: Vec<usize> = r.inputs.iter().map(Vec::len).collect();
    for (i, ids) in r.inputs.into_iter().enumerate() {
        let params = GenerationParams {
            embed: Some(st.embedding.pooling),
            ..GenerationParams::greedy(0)
        };
        let n = ids.len();
        let s = st.engine.submit(ids, params).map_err(|e| {
            let mut err = ApiError::from_submit(e, n);
            if let Some(kv) = &err.kv {
                if err.code == CeilingKind::ContextLength.code() {
                    err.message = format!(
                        "{}[{i}] is too large to embed: {n} tokens, but the context holds {}",
                        r.field, kv.n_ctx
                    )
                    .into();
                }
                err.param = Some(r.field.into());
            }
            err
        })?;
        streams.push(s);
    }
    let id = unique_id("embd-", streams.first().map_or(0, |s| s.id()));
    let mut log = RequestLog::new(st, r.route, &id, false, started, &lens, None);
    let gathered = within_request_timeout(st.server.limits.request_timeout, async {
        let mut vectors = Vec::with_capacity(streams.len());
        let mut usage = Usage::default();
        for (i, s) in streams.iter_mut().enumerate() {
            let mut rows = None;
            while let Some(e) = s.recv().await {
                log.on_event(i, &e);
                match e {
                    Event::Embedding(v) => rows = Some(v),
                    Event::Finished { usage: u, .. } => usage.prompt_tokens += u.prompt_tokens,
                    Event::Failed(f) => return Err(ApiError::from_failure(&f)),
                    Event::Admitted | Event::PromptLogprobs(_) | Event::Token { .. } => {}
                }
            }
            let rows = rows.ok_or_else(|| ApiError::internal("the engine sent no embedding"))?;
            vectors.push(finish_rows(
                rows,
                r.dimensions,
                r.normalize,
                st.embedding.pooling,
            ));
        }
        Ok(Embedded {
            vectors,
            prompt_tokens: usage.prompt_tokens,
        })
    })
    .await;
    match gathered {
        Ok(done) => done,
        Err(limit) => {
            log.timed_out();
            Err(request_timeout(limit))
        }
    }
}

/// Truncates and normalizes pooled rows (per-token rows are left as they
/// are, as llama-server leaves them).
fn finish_rows(
    mut rows: Vec<Vec<f32>>,
    dimensions: Option<usize>,
    normalize: Normalize,
    pooling: Pooling,
) -> Vec<Vec<f32>> {
    if pooling == Pooling::None {
        return rows;
    }
    for row in &mut rows {
        if let Some(d) = dimensions {
            row.truncate(d);
        }
        normalize.apply(row);
    }
    rows
}

/// `embd_normalize`, checked: llama.cpp's codes, -1 to any p-norm.
pub fn normalize_code(code: Option<i64>, default: Normalize) -> Result<Normalize, ApiError> {
    match code {
        None => Ok(default),
        Some(c) => Normalize::from_code(c).ok_or_else(|| {
            Invalid::OutOfRange {
                field: "embd_normalize",
                bound: "-1 (none), 0 (max-abs int16), 1 (taxicab), 2 (Euclidean) or a p > 2".into(),
                got: c.to_string(),
            }
            .into()
        }),
    }
}
