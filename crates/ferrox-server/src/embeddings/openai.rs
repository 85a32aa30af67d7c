//! OpenAI's `POST /v1/embeddings`: `input` in any of its four forms,
//! `encoding_format` float or base64 (little-endian f32, as the `openai` SDK
//! asks by default and decodes), `dimensions` (the vector's first values,
//! renormalized), and `usage`; llama-server's `embd_normalize` too.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Value, json};

use super::{EmbedRequest, Inputs, embed, normalize_code, parse, pooled};
use crate::error::ApiError;
use crate::field_policy::EMBEDDINGS;
use crate::request_log::Route;
use crate::state::AppState;

#[derive(serde::Deserialize)]
struct Body {
    input: Inputs,
    #[serde(default)]
    encoding_format: Format,
    dimensions: Option<usize>,
    embd_normalize: Option<i64>,
    /// Chosen before the route (one model), or by the front (several).
    #[serde(rename = "model")]
    _model: Option<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize, Default, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Format {
    #[default]
    Float,
    Base64,
}

pub(super) async fn embeddings(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let answer = handle(&st, body).await;
    st.respond(answer, IntoResponse::into_response)
}

async fn handle(
    st: &Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let b: Body = parse(st, &EMBEDDINGS, body)?;
    pooled(st)?;
    let request = EmbedRequest {
        inputs: b.input.tokenize(st, "input")?,
        normalize: normalize_code(b.embd_normalize, st.embedding.normalize)?,
        dimensions: b.dimensions,
        field: "input",
        route: Route::Embeddings,
    };
    let done = embed(st, request).await?;
    let data: Vec<Value> = done
        .vectors
        .into_iter()
        .enumerate()
        .map(|(index, mut rows)| {
            let v = rows.pop().unwrap_or_default();
            let embedding = match b.encoding_format {
                Format::Float => json!(v),
                Format::Base64 => json!(base64_f32(&v)),
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let n = done.prompt_tokens;
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": st.model_id,
        "usage": {"prompt_tokens": n, "total_tokens": n},
    }))
    .into_response())
}

/// `v` as little-endian f32 bytes in standard base64.
fn base64_f32(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
