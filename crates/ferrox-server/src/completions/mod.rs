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
use ferrox_engine::{RequestStream, Usage};

use crate::openai::response::{
    ChatCompletion, ChatObject, CompletionUsage, Header, TextCompletion, TextObject,
};

use crate::answer::{self, Shape, call_ids};
use crate::error::ApiError;
use crate::generation::{self, Generation};
use crate::json_body::json_body;
use crate::request::{PromptShown, parse_chat, parse_completion};
use crate::request_log::{RequestLog, Route, not_a_refusal, unique_id};
use crate::state::AppState;

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
    st.accepting()?;
    let v = json_body(body)?;
    let req = match kind {
        Kind::Chat => parse_chat(&v)?,
        Kind::Text => parse_completion(&v)?,
    };
    let (stream, include_usage, choices) = (req.stream, req.include_usage, req.choices);
    let shown = req.shown;
    let tools = req.tools.as_ref().map(|_| st.tool_format());
    let prepared = generation::prepare(&st, Generation::from(req)).await?;
    let shape = Shape {
        tools,
        thinking: (kind == Kind::Chat)
            .then(|| st.thinking_start(&prepared.prompts[0]))
            .flatten(),
    };
    let prompt_text = RequestLog::prompt_text(&st, &prepared.prompts);
    let prompt = shown.any().then(|| PromptView {
        ids: prepared.prompts.clone(),
        shown,
    });
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
        let usage = stream::UsageOptions {
            include: include_usage,
            choices,
        };
        let echoes = (0..streams.len())
            .map(|i| {
                let p = prompt.as_ref().filter(|p| p.shown.echo)?;
                Some(stream::Echo {
                    ids: p.ids[i / choices.max(1)].clone(),
                    scored: p.shown.scored,
                    scores: None,
                })
            })
            .collect();
        let shown = stream::Shown { shape, echoes };
        Ok(stream::sse(st, kind, id, streams, usage, log, shown).into_response())
    } else {
        let answer = Collected {
            kind,
            id,
            shape,
            choices,
            prompt,
        };
        Ok(collect(st, answer, streams, log).await)
    }
}

async fn answer(st: Arc<AppState>, kind: Kind, body: Result<Bytes, BytesRejection>) -> Response {
    let answer = handle(Arc::clone(&st), kind, body).await;
    st.respond(answer, IntoResponse::into_response)
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

/// Adds one answer's usage; a prompt answered `n` times counts once (its
/// first choice's), as OpenAI counts it.
fn add_usage(total: &mut Usage, u: &Usage, first_choice: bool) {
    if first_choice {
        total.prompt_tokens += u.prompt_tokens;
        total.cached_tokens += u.cached_tokens;
    }
    total.completion_tokens += u.completion_tokens;
}

/// The prompts a completions answer shows (`echo`, `prompt_logprobs`).
struct PromptView {
    /// Each prompt's ids (one per prompt, not per choice).
    ids: Vec<Vec<u32>>,
    shown: PromptShown,
}

/// How a whole (not streamed) answer is rendered.
struct Collected {
    kind: Kind,
    id: String,
    shape: Shape,
    /// Choices per prompt.
    choices: usize,
    prompt: Option<PromptView>,
}

/// The whole answer of every choice (`choices` per prompt), rendered as one
/// response.
async fn collect(
    st: Arc<AppState>,
    c: Collected,
    streams: Vec<RequestStream>,
    mut log: RequestLog,
) -> Response {
    let Collected {
        kind,
        id,
        shape,
        choices,
        prompt,
    } = c;
    let mut ids = shape
        .tools
        .map(call_ids)
        .unwrap_or_else(|| Box::new(String::new));
    let answers = match answer::collect(&st, streams, &mut log, shape, &mut ids).await {
        Ok(a) => a,
        Err(e) => return not_a_refusal(e.into_response()),
    };
    let mut total = Usage::default();
    for (i, a) in answers.iter().enumerate() {
        add_usage(&mut total, &a.usage, i.is_multiple_of(choices.max(1)));
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
                .map(|(i, a)| chunks::chat_choice(&st, i, a))
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
                .map(|(i, a)| {
                    let shown = prompt
                        .as_ref()
                        .map(|p| (p.ids[i / choices.max(1)].as_slice(), p.shown));
                    chunks::text_choice(&st, i, a, shown)
                })
                .collect(),
            usage: Some(usage),
        })
        .into_response(),
    }
}
