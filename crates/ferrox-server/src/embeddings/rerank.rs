//! `POST /v1/rerank` (also `/rerank`, `/reranking`, `/v1/reranking`), in
//! the Jina / Cohere shape llama-server answers: `query`, `documents`,
//! `top_n`, `return_documents`; `results[{index, relevance_score}]`, best
//! first. A body with `texts` in place of `documents` is in Hugging Face
//! TEI's shape, as llama-server reads it: the answer is the list
//! `[{index, score}]` (with `text` under `return_text`), and each score is
//! the sigmoid of the model's unless `raw_scores` (TEI's default). Each
//! document is its own engine request, the query and the
//! document joined as llama.cpp joins them ([`ferrox_text::Tokenizer::encode_pair`]),
//! scored by the model's classification head on the pooled first token
//! (`--pooling rank`, a reranker's own pooling).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use ferrox_models::pooling::{Normalize, Pooling};
use serde_json::{Value, json};

use super::{EmbedRequest, embed, parse};
use crate::error::ApiError;
use crate::field_policy::RERANK;
use crate::invalid::Invalid;
use crate::request_log::Route;
use crate::state::AppState;

#[derive(serde::Deserialize)]
struct Body {
    query: String,
    documents: Option<Vec<String>>,
    /// TEI's name for `documents`, which also picks TEI's answer.
    texts: Option<Vec<String>>,
    top_n: Option<usize>,
    #[serde(default)]
    return_documents: bool,
    #[serde(default)]
    return_text: bool,
    #[serde(default)]
    raw_scores: bool,
    #[serde(rename = "model")]
    _model: Option<serde::de::IgnoredAny>,
}

pub(super) async fn rerank(
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
    let b: Body = parse(st, &RERANK, body)?;
    if st.embedding.pooling != Pooling::Rank {
        return Err(ApiError::invalid(
            None,
            "this server does not rerank: serve a reranker (a model with a classification head, \
             which pools by rank)",
        ));
    }
    let tei = b.texts.is_some();
    let (documents, field) = match (b.documents, b.texts) {
        (Some(d), None) => (d, "documents"),
        (None, Some(t)) => (t, "texts"),
        (None, None) => return Err(Invalid::Missing { field: "documents" }.into()),
        (Some(_), Some(_)) => {
            return Err(Invalid::Conflict {
                field: "texts",
                why: "texts is TEI's name for documents: give one of the two",
            }
            .into());
        }
    };
    if documents.is_empty() {
        return Err(Invalid::Empty {
            field,
            item: "document",
        }
        .into());
    }
    let inputs = documents
        .iter()
        .map(|d| st.tokenizer.encode_pair(&b.query, d))
        .collect();
    let request = EmbedRequest {
        inputs,
        normalize: Normalize::Off,
        dimensions: None,
        field,
        route: Route::Rerank,
    };
    let done = embed(st, request).await?;
    let ranked = ranked(&done.vectors, b.top_n);
    if tei {
        let sigmoid = |x: f32| 1.0 / (1.0 + (-x).exp());
        let list: Vec<Value> = ranked
            .into_iter()
            .map(|(index, score)| {
                let score = if b.raw_scores { score } else { sigmoid(score) };
                let mut r = json!({"index": index, "score": score});
                if b.return_text {
                    r["text"] = json!(documents[index]);
                }
                r
            })
            .collect();
        return Ok(Json(list).into_response());
    }
    let results: Vec<Value> = ranked
        .into_iter()
        .map(|(index, score)| {
            let mut r = json!({"index": index, "relevance_score": score});
            if b.return_documents {
                r["document"] = json!({"text": documents[index]});
            }
            r
        })
        .collect();
    let n = done.prompt_tokens;
    Ok(Json(json!({
        "model": st.model_id,
        "object": "list",
        "usage": {"prompt_tokens": n, "total_tokens": n},
        "results": results,
    }))
    .into_response())
}

/// Each document's index and score, best first (ties keep the documents'
/// order), the first `top_n` of them.
fn ranked(vectors: &[Vec<Vec<f32>>], top_n: Option<usize>) -> Vec<(usize, f32)> {
    let mut results: Vec<(usize, f32)> = vectors
        .iter()
        .enumerate()
        .map(|(i, rows)| {
            (
                i,
                rows.first().and_then(|r| r.first()).copied().unwrap_or(0.0),
            )
        })
        .collect();
    results.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    results.truncate(top_n.unwrap_or(results.len()));
    results
}
