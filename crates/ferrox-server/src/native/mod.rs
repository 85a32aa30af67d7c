//! llama-server's own routes over the generation core: `POST /completion`
//! (also `/completions`) and `POST /infill` (JSON, or SSE with
//! `"stream": true`), and `GET /slots` (read-only). Their fields are the
//! OpenAI completions fields plus the `/completion` and `/infill` tables of
//! [`crate::field_policy`]; errors have the OpenAI shape, as llama-server's
//! do.
//!
//! Invariants: as on every route, refusals happen before anything is queued,
//! and dropping the response cancels the requests; a failure after a stream
//! began is an `{"error"}` event, the last.

mod reply;
mod request;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream::{self, StreamExt};
use serde::Deserialize;

use crate::answer::merged;
use crate::error::ApiError;
use crate::generation::{self, Generation};
use crate::json_body::json_body;
use crate::limits::{deadline, request_timeout, within_request_timeout};
use crate::props::{Asked, Params, Settings};
use crate::request_log::{RequestLog, Route, not_a_refusal, unique_id};
use crate::state::AppState;
use reply::{Answer, Request};
use request::{Kind, Native};

/// llama-server's native routes.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/completion", post(completion))
        .route("/completions", post(completion))
        .route("/infill", post(infill))
        .route("/slots", get(slots))
}

async fn completion(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    answer(st, Kind::Completion, body).await
}

async fn infill(State(st): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    answer(st, Kind::Infill, body).await
}

async fn answer(st: Arc<AppState>, kind: Kind, body: Result<Bytes, BytesRejection>) -> Response {
    let answer = handle(Arc::clone(&st), kind, body).await;
    st.respond(answer, IntoResponse::into_response)
}

async fn handle(
    st: Arc<AppState>,
    kind: Kind,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    st.accepting()?;
    let v = json_body(body)?;
    let Native {
        valid,
        return_tokens,
        n_probs,
    } = request::parse(&st, kind, &v)?;
    let asked = Asked {
        n_predict: valid.max_tokens,
        stop: valid.params.stop.clone(),
        ignore_eos: valid.params.ignore_eos,
        stream: valid.stream,
        n_probs,
    };
    let settings = Params::of(&valid.params.sampling, &asked, st.server.default_max_tokens);
    let prepared = generation::prepare(&st, Generation::from(valid)).await?;
    let answers: Vec<Answer> = prepared
        .request_prompts()
        .enumerate()
        .map(|(i, p)| Answer::new(&st, i, p))
        .collect();
    let prompt_text = RequestLog::prompt_text(&st, &prepared.prompts);
    let started = Instant::now();
    let submitted = prepared.submit(&st)?;
    let route = match kind {
        Kind::Completion => Route::Completion,
        Kind::Infill => Route::Infill,
    };
    let id = unique_id("cmpl-", submitted.streams[0].id());
    let log = RequestLog::new(
        &st,
        route,
        &id,
        asked.stream,
        started,
        &submitted.prompt_lens,
        prompt_text,
    );
    let req = Request {
        settings,
        stops: asked.stop,
        return_tokens,
        n_probs,
        started,
    };
    let run = Run {
        st,
        req,
        answers,
        log,
    };
    if asked.stream {
        return Ok(run.sse(submitted.streams));
    }
    Ok(run.whole(submitted.streams).await)
}

/// A request under way: its answers and log.
struct Run {
    st: Arc<AppState>,
    req: Request,
    answers: Vec<Answer>,
    log: RequestLog,
}

impl Run {
    /// Every answer whole: one object, or a list for several prompts.
    async fn whole(mut self, streams: Vec<ferrox_engine::RequestStream>) -> Response {
        let (st, req, answers, log) = (&self.st, &self.req, &mut self.answers, &mut self.log);
        let gathered = within_request_timeout(st.server.limits.request_timeout, async {
            let mut events = merged(streams);
            while let Some((i, e)) = events.next().await {
                log.on_event(i, &e);
                answers[i].on_event(st, req, e, false)?;
            }
            Ok::<_, ApiError>(())
        })
        .await;
        let done = match gathered {
            Ok(r) => r,
            Err(limit) => {
                log.timed_out();
                Err(request_timeout(limit))
            }
        };
        let rendered = done.and_then(|()| {
            let mut all = answers
                .iter()
                .map(|a| {
                    a.whole(st, req, false)
                        .map(|w| serde_json::to_value(w).expect("an answer serializes"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(match all.len() {
                1 => all.remove(0),
                _ => serde_json::Value::Array(all),
            })
        });
        match rendered {
            Ok(v) => axum::Json(v).into_response(),
            Err(e) => not_a_refusal(e.into_response()),
        }
    }

    /// The answers as SSE chunks, merged as they come.
    fn sse(self, streams: Vec<ferrox_engine::RequestStream>) -> Response {
        let Run {
            st,
            req,
            mut answers,
            log,
        } = self;
        let limit = st.server.limits.request_timeout;
        let timed_out = Arc::new(AtomicBool::new(false));
        let failed = Arc::new(AtomicBool::new(false));
        let failed_in = Arc::clone(&failed);
        let log = log.shared();
        let log_tail = log.clone();
        let events = merged(streams)
            .take_until(deadline(limit, Arc::clone(&timed_out)))
            .take_while(move |_| std::future::ready(!failed_in.load(Ordering::Acquire)))
            .flat_map(move |(i, e)| {
                log.on_event(i, &e);
                let chunks = answers[i].on_event(&st, &req, e, true).unwrap_or_else(|e| {
                    failed.store(true, Ordering::Release);
                    vec![e.body()]
                });
                stream::iter(chunks.into_iter().map(|c| SseEvent::default().data(c)))
            });
        let tail = stream::once(async move {
            match limit {
                Some(l) if timed_out.load(Ordering::Acquire) => {
                    log_tail.timed_out();
                    Some(SseEvent::default().data(request_timeout(l).body()))
                }
                _ => None,
            }
        })
        .filter_map(std::future::ready);
        let body = events.chain(tail).map(Ok::<_, Infallible>);
        Sse::new(body)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(5)))
            .into_response()
    }
}

/// `/slots`' query.
#[derive(Deserialize)]
struct SlotsQuery {
    #[serde(default)]
    fail_on_no_slot: Option<u8>,
}

/// `GET /slots`: one entry per sequence the engine decodes at once, the first
/// `running` of them busy (the engine keeps no fixed request-to-slot map).
async fn slots(State(st): State<Arc<AppState>>, Query(q): Query<SlotsQuery>) -> Response {
    let running = st.engine.stats().running as usize;
    let total = st.facts.total_slots;
    if q.fail_on_no_slot == Some(1) && running >= total {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "no_slot_available",
            "no slot available",
        )
        .into_response();
    }
    let slots: Vec<Settings> = (0..total)
        .map(|i| Settings::slot(&st, i, i < running))
        .collect();
    axum::Json(slots).into_response()
}
