//! Ollama's API over the same generation core as the other APIs:
//! `POST /api/chat` and `POST /api/generate` (NDJSON streams by default,
//! `"stream": false` for one object), and the model routes `GET /api/tags`,
//! `POST /api/show`, `GET /api/ps`, `GET /api/version`, `POST /api/pull` and
//! `DELETE /api/delete` (`ollama/models.rs`), and the embedding routes
//! `POST /api/embed` and `/api/embeddings` (`ollama/embed.rs`).
//!
//! Bodies are read as Ollama reads them: JSON whatever the `Content-Type`
//! (its examples use `curl -d`). Their fields are the `/api/chat`,
//! `/api/generate` and `options` tables of [`crate::field_policy`]; `options`
//! map onto the sampler with Ollama's defaults ([`crate::sampling::OLLAMA`]).
//! Errors have Ollama's shape, `{"error": "..."}`, with the same statuses as
//! the OpenAI routes; a failure after a stream began is an `{"error"}` line,
//! the stream's last.
//!
//! Invariants: as on every route, refusals happen before anything is queued,
//! and dropping the response (the client went away) cancels the request.

mod embed;
mod models;
mod pull;
mod reply;
mod request;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use futures_util::stream::{self, StreamExt};
use serde_json::Value;

use crate::answer::Shape;
use crate::error::ApiError;
use crate::generation;
use crate::invalid::Invalid;
use crate::limits::{deadline, request_timeout, within_request_timeout};
use crate::request_log::{RequestLog, Route, not_a_refusal, unique_id};
use crate::state::AppState;
use reply::{Kind, Turn, Whole};

/// Ollama's routes.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/chat", post(chat))
        .route("/api/generate", post(generate))
        .route("/api/tags", get(models::tags))
        .route("/api/show", post(models::show))
        .route("/api/ps", get(models::ps))
        .route("/api/version", get(models::version))
        .route("/api/pull", post(pull::pull))
        .route("/api/delete", delete(models::delete))
        .route("/api/embed", post(embed::embed_route))
        .route("/api/embeddings", post(embed::embeddings_route))
}

/// Whether `path` is one of Ollama's routes (their errors have its shape, and
/// their bodies are JSON whatever the `Content-Type` says).
pub fn owns(path: &str) -> bool {
    path.starts_with("/api/")
}

/// An error in Ollama's shape: `{"error": "..."}`.
pub struct OllamaError(pub ApiError);

impl IntoResponse for OllamaError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.0.message.as_ref() }).to_string();
        let mut r = (
            self.0.status,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        if let Some(s) = self.0.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r.extensions_mut().insert(self.0.refusal());
        r
    }
}

/// The body as JSON (no `Content-Type` needed, duplicate keys refused).
fn body_json(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let bytes = body.map_err(|e| Invalid::Unreadable {
        detail: e.to_string(),
    })?;
    crate::json_body::check_json(&bytes)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        Invalid::NotJson {
            detail: e.to_string(),
        }
        .into()
    })
}

/// `POST /api/chat`.
async fn chat(State(st): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    answer(st, Kind::Chat, body).await
}

/// `POST /api/generate`.
async fn generate(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    answer(st, Kind::Generate, body).await
}

async fn answer(st: Arc<AppState>, kind: Kind, body: Result<Bytes, BytesRejection>) -> Response {
    let answer = handle(Arc::clone(&st), kind, body).await;
    st.respond(answer, |e| OllamaError(e).into_response())
}

async fn handle(
    st: Arc<AppState>,
    kind: Kind,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    st.accepting()?;
    let v = body_json(body)?;
    let req = match kind {
        Kind::Chat => request::parse_chat(&st, &v)?,
        Kind::Generate => request::parse_generate(&st, &v)?,
    };
    if req.load_only {
        return Ok(axum::Json(reply::loaded(&st.model_id, kind)).into_response());
    }
    let tools = req.generation.tools.as_ref().map(|_| st.tool_format());
    let prepared = generation::prepare(&st, req.generation).await?;
    let shape = Shape {
        tools,
        thinking: req
            .think
            .then(|| st.thinking_start(&prepared.prompts[0]))
            .flatten(),
    };
    let prompt_ids = req.context.then(|| prepared.prompts[0].clone());
    let prompt_text = RequestLog::prompt_text(&st, &prepared.prompts);
    let started = Instant::now();
    let mut submitted = prepared.submit(&st)?;
    let (stream, n) = (submitted.streams.remove(0), submitted.prompt_lens[0]);
    let route = match kind {
        Kind::Chat => Route::OllamaChat,
        Kind::Generate => Route::OllamaGenerate,
    };
    let id = unique_id("ollama-", stream.id());
    let log = RequestLog::new(&st, route, &id, req.stream, started, &[n], prompt_text);
    let turn = Turn::new(kind, shape, prompt_ids, started);
    if req.stream {
        return Ok(ndjson(st, turn, stream, log));
    }
    Ok(whole(st, turn, stream, log).await)
}

/// The answer as one object, under the request timeout.
async fn whole(
    st: Arc<AppState>,
    mut turn: Turn,
    mut stream: ferrox_engine::RequestStream,
    mut log: RequestLog,
) -> Response {
    let gathered = within_request_timeout(st.server.limits.request_timeout, async {
        let mut w = Whole::default();
        while let Some(e) = stream.recv().await {
            log.on_event(0, &e);
            if let Some(s) = turn.step(&st, e) {
                w.add(s)?;
            }
        }
        Ok::<_, ApiError>(w)
    })
    .await;
    let rendered = match gathered {
        Ok(Ok(w)) => w.render(&mut turn, &st.model_id),
        Ok(Err(e)) => Err(e),
        Err(limit) => {
            log.timed_out();
            Err(request_timeout(limit))
        }
    };
    match rendered {
        Ok(line) => axum::Json(line).into_response(),
        Err(e) => not_a_refusal(OllamaError(e).into_response()),
    }
}

/// The answer as NDJSON lines; the request deadline ends it with an error
/// line.
fn ndjson(
    st: Arc<AppState>,
    mut turn: Turn,
    stream: ferrox_engine::RequestStream,
    log: RequestLog,
) -> Response {
    let limit = st.server.limits.request_timeout;
    let timed_out = Arc::new(AtomicBool::new(false));
    let log = log.shared();
    let log_tail = log.clone();
    let lines = stream::unfold(stream, |mut s| async move {
        let e = s.recv().await?;
        Some((e, s))
    })
    .take_until(deadline(limit, Arc::clone(&timed_out)))
    .flat_map(move |e| {
        log.on_event(0, &e);
        let lines = turn
            .step(&st, e)
            .map(|s| turn.lines(&st.model_id, s))
            .unwrap_or_default();
        stream::iter(lines)
    });
    let tail = stream::once(async move {
        match limit {
            Some(l) if timed_out.load(Ordering::Acquire) => {
                log_tail.timed_out();
                Some(reply::error_line(&request_timeout(l)))
            }
            _ => None,
        }
    })
    .filter_map(std::future::ready);
    let body = lines.chain(tail).map(Ok::<_, Infallible>);
    let mut r = Body::from_stream(body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    r
}
