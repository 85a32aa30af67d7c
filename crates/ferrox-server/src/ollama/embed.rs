//! Ollama's embedding routes: `POST /api/embed` (`input`, a string or
//! strings; vectors L2-normalized; `truncate`, on by default, cuts an input
//! to the context; `dimensions`) and the older `POST /api/embeddings`
//! (`prompt`; one vector, as the model gives it, unnormalized), both on the
//! core of [`crate::embeddings`].

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use ferrox_models::pooling::Normalize;
use serde_json::json;

use super::{OllamaError, body_json, request::policed};
use crate::embeddings::{EmbedRequest, Inputs, embed, pooled};
use crate::error::ApiError;
use crate::field_policy::OLLAMA_EMBED;
use crate::invalid::Invalid;
use crate::request::typed;
use crate::request_log::Route;
use crate::state::AppState;

#[derive(serde::Deserialize)]
struct Body {
    input: Inputs,
    /// Cut an input longer than the context to its start (Ollama's default)
    /// instead of refusing it.
    #[serde(default = "yes")]
    truncate: bool,
    dimensions: Option<usize>,
    #[serde(default)]
    options: Options,
    #[serde(rename = "model")]
    _model: Option<serde::de::IgnoredAny>,
}

/// The options an embedding reads (the sampler's mean nothing here).
#[derive(serde::Deserialize, Default)]
struct Options {
    num_ctx: Option<usize>,
    #[serde(flatten)]
    _rest: serde_json::Map<String, serde_json::Value>,
}

fn yes() -> bool {
    true
}

/// Which of the two routes.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Embed,
    Legacy,
}

/// `POST /api/embed`.
pub(super) async fn embed_route(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let answer = handle(&st, Kind::Embed, body).await;
    st.respond(answer, |e| OllamaError(e).into_response())
}

/// `POST /api/embeddings`.
pub(super) async fn embeddings_route(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let answer = handle(&st, Kind::Legacy, body).await;
    st.respond(answer, |e| OllamaError(e).into_response())
}

async fn handle(
    st: &Arc<AppState>,
    kind: Kind,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    st.accepting()?;
    let started = Instant::now();
    let b: Body = typed(&policed(&OLLAMA_EMBED, &body_json(body)?)?)?;
    pooled(st)?;
    if kind == Kind::Legacy && !b.input.is_text() {
        return Err(ApiError::invalid(
            Some("prompt"),
            "prompt must be one string on /api/embeddings (/api/embed takes several)",
        ));
    }
    let context = st.engine.ceiling().max_context as usize;
    let context = b.options.num_ctx.map_or(context, |n| n.clamp(1, context));
    let mut inputs = b.input.tokenize(st, "input")?;
    for (i, ids) in inputs.iter_mut().enumerate() {
        if ids.len() > context {
            if !b.truncate {
                return Err(Invalid::OutOfRange {
                    field: "input",
                    bound: format!("at most the context's {context} tokens (or truncate: true)")
                        .into(),
                    got: format!("input[{i}] of {} tokens", ids.len()),
                }
                .into());
            }
            ids.truncate(context);
        }
    }
    let request = EmbedRequest {
        inputs,
        normalize: match kind {
            Kind::Embed => Normalize::PNorm(2),
            Kind::Legacy => Normalize::Off,
        },
        dimensions: b.dimensions,
        field: "input",
        route: Route::OllamaEmbed,
    };
    let done = embed(st, request).await?;
    let mut vectors: Vec<Vec<f32>> = done
        .vectors
        .into_iter()
        .map(|mut rows| rows.pop().unwrap_or_default())
        .collect();
    if kind == Kind::Legacy {
        return Ok(Json(json!({"embedding": vectors.pop().unwrap_or_default()})).into_response());
    }
    let nanos = started.elapsed().as_nanos() as u64;
    Ok(Json(json!({
        "model": st.model_id,
        "embeddings": vectors,
        "total_duration": nanos,
        "load_duration": 0,
        "prompt_eval_count": done.prompt_tokens,
    }))
    .into_response())
}
