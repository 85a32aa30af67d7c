//! `POST /v1/chat/completions` and `POST /v1/completions`: JSON bodies and SSE
//! streams in the OpenAI shapes.
//!
//! Invariants: refusals happen before anything is queued (the engine's submit);
//! dropping the response (the client went away, streaming or not) drops the
//! request streams, which cancels them (SPEC S13); a failure after streaming began
//! ends the stream with an error event, never a silent cut (S18).

mod chunks;
mod stream;

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use ferrox_engine::{Event, FinishReason, RequestStream, Usage};
use ferrox_text::reasoning::{self, Thinking};
use ferrox_text::tools::ToolFormat;

use crate::openai::response::{
    ChatCompletion, ChatObject, CompletionUsage, Header, TextCompletion, TextObject,
};
use chunks::{Answer, LoggedToken};

use crate::error::ApiError;
use crate::generation::{self, Generation};
use crate::json_body::json_body;
use crate::limits::{request_timeout, within_request_timeout};
use crate::request::{parse_chat, parse_completion};
use crate::request_log::{RequestLog, Route, not_a_refusal, unique_id};
use crate::state::{AppState, Phase};

/// Which endpoint.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Chat,
    Text,
}

impl Kind {
    fn route(self) -> Route {
        match self {
            Kind::Chat => Route::ChatCompletions,
            Kind::Text => Route::Completions,
        }
    }

    fn id_prefix(self) -> &'static str {
        match self {
            Kind::Chat => "chatcmpl-",
            Kind::Text => "cmpl-",
        }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn handle(
    st: Arc<AppState>,
    kind: Kind,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    if st.phase.get() == Phase::Draining {
        return Err(ApiError::shutting_down(
            "the server is shutting down and takes no new requests; retry elsewhere or later",
        ));
    }
    let v = json_body(body)?;
    let req = match kind {
        Kind::Chat => parse_chat(&v)?,
        Kind::Text => parse_completion(&v)?,
    };
    if let Some(m) = &req.model
        && !st.serves(m)
    {
        return Err(ApiError::model_not_found(m, &st.model_id));
    }
    let (stream, include_usage) = (req.stream, req.include_usage);
    let tools = req.tools.as_ref().map(|_| st.tool_format());
    let prepared = generation::prepare(&st, Generation::from(req)).await?;
    let shape = Shape {
        tools,
        thinking: (kind == Kind::Chat)
            .then(|| st.thinking_start(&prepared.prompts[0]))
            .flatten(),
    };
    let prompt_text = RequestLog::prompt_text(&st, &prepared.prompts);
    let started = Instant::now();
    let submitted = prepared.submit(&st)?;
    let streams = submitted.streams;
    let id = unique_id(kind.id_prefix(), streams[0].id());
    let log = RequestLog::new(
        &st,
        kind.route(),
        &id,
        stream,
        started,
        &submitted.prompt_lens,
        prompt_text,
    );
    if stream {
        Ok(stream::sse(st, kind, id, streams, include_usage, log, shape).into_response())
    } else {
        Ok(collect_within(st, kind, id, streams, log, shape).await)
    }
}

/// [`collect`] under `--request-timeout`: on timeout the streams are dropped,
/// which cancels the requests, and the answer is a 504.
async fn collect_within(
    st: Arc<AppState>,
    kind: Kind,
    id: String,
    streams: Vec<RequestStream>,
    mut log: RequestLog,
    shape: Shape,
) -> Response {
    let answer = collect(&st, kind, id, streams, &mut log, shape);
    within_request_timeout(st.limits.request_timeout, answer)
        .await
        .unwrap_or_else(|limit| {
            log.timed_out();
            not_a_refusal(request_timeout(limit).into_response())
        })
}

async fn answer(st: Arc<AppState>, kind: Kind, body: Result<Bytes, BytesRejection>) -> Response {
    match handle(Arc::clone(&st), kind, body).await {
        Ok(r) => r,
        Err(e) => {
            st.metrics.refused(e.code);
            e.into_response()
        }
    }
}

/// `POST /v1/chat/completions`.
pub async fn chat(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    answer(st, Kind::Chat, body).await
}

/// `POST /v1/completions`.
pub async fn text(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    answer(st, Kind::Text, body).await
}

/// How a chat answer is taken apart: its thinking and its tool calls.
#[derive(Clone, Copy, Default)]
struct Shape {
    /// The tool-call format, when tools are on offer.
    tools: Option<ToolFormat>,
    /// How the answer's thinking is split off, for a model that thinks.
    thinking: Option<Thinking>,
}

/// Fresh call ids in `format`'s style.
fn call_ids(format: ToolFormat) -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format.call_id(n)
    }
}

fn add_usage(total: &mut Usage, u: &Usage) {
    total.prompt_tokens += u.prompt_tokens;
    total.completion_tokens += u.completion_tokens;
    total.cached_tokens += u.cached_tokens;
}

/// One choice's events gathered: the text, the finish reason, the
/// log-probabilities when asked for; a failure is the error answered.
async fn gather(
    index: usize,
    s: &mut RequestStream,
    log: &mut RequestLog,
    total: &mut Usage,
) -> Result<(String, Option<FinishReason>, Option<Vec<LoggedToken>>), ApiError> {
    let mut text = String::new();
    let mut finish = None;
    let mut logged: Option<Vec<LoggedToken>> = None;
    while let Some(e) = s.recv().await {
        log.on_event(index, &e);
        match e {
            Event::Admitted => {}
            Event::Token {
                id,
                text: t,
                logprob,
            } => {
                if let Some(logprob) = logprob {
                    logged.get_or_insert_with(Vec::new).push(LoggedToken {
                        id,
                        logprob,
                        offset: text.len(),
                    });
                }
                text.push_str(&t);
            }
            Event::Finished {
                reason,
                usage,
                text: t,
            } => {
                text.push_str(&t);
                add_usage(total, &usage);
                finish = Some(reason);
            }
            Event::Failed(f) => return Err(ApiError::from_failure(&f)),
        }
    }
    Ok((text, finish, logged))
}

/// The answer taken apart by `shape`: thinking split off, tool calls parsed.
fn take_apart(
    kind: Kind,
    shape: Shape,
    mut text: String,
    finish: Option<FinishReason>,
    logprobs: Option<Vec<LoggedToken>>,
) -> Answer {
    let reasoning = match shape.thinking {
        Some(start) => {
            let (r, content) = reasoning::split(&text, start);
            text = content;
            r
        }
        None => None,
    };
    let calls = match shape.tools {
        Some(format) if kind == Kind::Chat => {
            let (content, calls) = format.parse(&text, &mut call_ids(format));
            if !calls.is_empty() {
                text = content;
            }
            calls
        }
        _ => Vec::new(),
    };
    let finish = if calls.is_empty() {
        finish.map(FinishReason::as_str)
    } else {
        Some("tool_calls")
    };
    Answer {
        text,
        reasoning,
        calls,
        finish,
        logprobs,
    }
}

async fn collect(
    st: &AppState,
    kind: Kind,
    id: String,
    streams: Vec<RequestStream>,
    log: &mut RequestLog,
    shape: Shape,
) -> Response {
    let mut answers = Vec::with_capacity(streams.len());
    let mut total = Usage::default();
    for (index, mut s) in streams.into_iter().enumerate() {
        match gather(index, &mut s, log, &mut total).await {
            Ok((text, finish, logprobs)) => {
                answers.push(take_apart(kind, shape, text, finish, logprobs));
            }
            Err(e) => return not_a_refusal(e.into_response()),
        }
    }
    let usage = CompletionUsage::from(&total);
    let (model, created) = (st.model_id.as_str(), now());
    match kind {
        Kind::Chat => axum::Json(ChatCompletion {
            header: Header {
                id: &id,
                object: ChatObject::Completion,
                created,
                model,
            },
            choices: answers
                .into_iter()
                .enumerate()
                .map(|(i, a)| chunks::chat_choice(st, i, a))
                .collect(),
            usage,
        })
        .into_response(),
        Kind::Text => axum::Json(TextCompletion {
            header: Header {
                id: &id,
                object: TextObject::TextCompletion,
                created,
                model,
            },
            choices: answers
                .into_iter()
                .enumerate()
                .map(|(i, a)| chunks::text_choice(st, i, a))
                .collect(),
            usage: Some(usage),
        })
        .into_response(),
    }
}
