//! llama-server's `POST /embedding`: `content` (or `input`) in any of the
//! four forms, `embd_normalize`; the answer is a list of `{index,
//! embedding}` whose `embedding` is a list of rows: one pooled vector, or
//! every token's with `--pooling none`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{EmbedRequest, Inputs, embed, normalize_code, parse};
use crate::error::ApiError;
use crate::field_policy::NATIVE_EMBEDDING;
use crate::request_log::Route;
use crate::state::AppState;
use ferrox_models::pooling::Pooling;

#[derive(serde::Deserialize)]
struct Body {
    content: Inputs,
    embd_normalize: Option<i64>,
    #[serde(rename = "model")]
    _model: Option<serde::de::IgnoredAny>,
}

pub(super) async fn embedding(
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
    let b: Body = parse(st, &NATIVE_EMBEDDING, body)?;
    if st.embedding.pooling == Pooling::Rank {
        return Err(ApiError::invalid(
            None,
            "this server scores relevance (--pooling rank): use /rerank",
        ));
    }
    let request = EmbedRequest {
        inputs: b.content.tokenize(st, "content")?,
        normalize: normalize_code(b.embd_normalize, st.embedding.normalize)?,
        dimensions: None,
        field: "content",
        route: Route::Embedding,
    };
    let done = embed(st, request).await?;
    let answer: Vec<_> = done
        .vectors
        .into_iter()
        .enumerate()
        .map(|(index, embedding)| json!({"index": index, "embedding": embedding}))
        .collect();
    Ok(Json(answer).into_response())
}
