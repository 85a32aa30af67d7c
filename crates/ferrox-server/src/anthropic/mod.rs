//! `POST /v1/messages`: Anthropic's Messages API over the same engine, template
//! and sampler as the OpenAI routes. Bodies are parsed into typed structs at the
//! edge; responses and stream events are typed too.
//!
//! Its fields are the `/v1/messages` table of [`crate::field_policy`]:
//! `messages` take text as a string or `text` blocks, `tool_use` and
//! `tool_result` blocks; `tools` are custom tools with an `input_schema` (server
//! tools are refused by name); `tool_choice` is `auto`, `any`, `tool` or `none`,
//! with `disable_parallel_tool_use`; sampling is checked by
//! [`crate::sampling`] within Anthropic's bounds (the sampling fields are gone
//! from the newest SDKs' signatures, which send them through `extra_body`).
//!
//! A last message from the assistant is a prefill: the answer continues it. Calls
//! come back as `tool_use` blocks with `stop_reason: "tool_use"`; a stream sends
//! each after the text block, its input as `input_json_delta` pieces.
//! Streams follow Anthropic's event sequence (`message_start`,
//! `content_block_start`, `ping`, `content_block_delta`..., `content_block_stop`,
//! `message_delta`, `message_stop`); a failure after the start is an `error`
//! event, after which the stream ends. Errors have Anthropic's shape
//! (`{"type": "error", "error": {"type", "message"}}`); a full queue is 529
//! `overloaded_error` with `Retry-After`.

mod request;
#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use ferrox_engine::{Event, FinishReason, RequestStream, Usage};
use ferrox_text::chat::TemplateVars;
use ferrox_text::tools::{ToolCall, ToolFormat};
use futures_util::stream::{self, Stream, StreamExt};
use serde::Serialize;
use serde_json::Value;

use crate::answer::{Pieces, Shape, Splitter};
use crate::error::ApiError;
use crate::generation;
use crate::limits::request_timeout;
use crate::request_log::{RequestLog, Route, not_a_refusal, unique_id};
use crate::state::AppState;
use request::parse;

/// An error answered in Anthropic's shape.
pub struct AnthropicError(pub ApiError);

#[derive(Serialize)]
struct ErrorEnvelope<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: ErrorBody<'a>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: &'a str,
}

/// Anthropic's "overloaded" status.
fn overloaded() -> StatusCode {
    StatusCode::from_u16(529).expect("a valid status")
}

impl AnthropicError {
    /// The status Anthropic's clients expect: a service that cannot take the
    /// request now is 529.
    fn status(&self) -> StatusCode {
        match self.0.status {
            StatusCode::SERVICE_UNAVAILABLE => overloaded(),
            s => s,
        }
    }

    /// Anthropic's error type for the status.
    fn kind(&self) -> &'static str {
        match self.status().as_u16() {
            400 | 422 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            408 | 504 => "timeout_error",
            529 => "overloaded_error",
            _ => "api_error",
        }
    }

    fn body(&self) -> String {
        serde_json::to_string(&ErrorEnvelope {
            kind: "error",
            error: ErrorBody {
                kind: self.kind(),
                message: &self.0.message,
            },
        })
        .expect("serializable")
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let mut r = (
            self.status(),
            [(header::CONTENT_TYPE, "application/json")],
            self.body(),
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

/// A content block of the answer.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentBlock {
    /// A local model's thinking carries an empty signature: there is nothing
    /// to sign it with (llama-server does the same).
    Thinking {
        thinking: String,
        signature: String,
    },
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

impl ContentBlock {
    fn thinking(thinking: String) -> ContentBlock {
        ContentBlock::Thinking {
            thinking,
            signature: String::new(),
        }
    }

    fn tool_use(c: ToolCall) -> ContentBlock {
        ContentBlock::ToolUse {
            id: c.id,
            name: c.name,
            input: c.arguments,
        }
    }
}

/// Fresh tool-use ids: Anthropic's `toolu_` style, or the 9 characters
/// Mistral's template requires.
fn tool_use_ids(format: ToolFormat) -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        let id = format.call_id(n);
        match format {
            ToolFormat::Mistral => id,
            _ => format!("toolu_{}", id.trim_start_matches("call_")),
        }
    }
}

/// The answer's blocks: its thinking (when shown), its text, then its calls.
fn answer_blocks(
    thinking: Option<String>,
    text: String,
    calls: Vec<ToolCall>,
) -> Vec<ContentBlock> {
    let mut blocks = Vec::with_capacity(calls.len() + 2);
    blocks.extend(thinking.map(ContentBlock::thinking));
    if !text.is_empty() || calls.is_empty() {
        blocks.push(ContentBlock::Text { text });
    }
    blocks.extend(calls.into_iter().map(ContentBlock::tool_use));
    blocks
}

#[derive(Serialize, Clone, Copy, Default)]
struct UsageOut {
    input_tokens: usize,
    output_tokens: usize,
    cache_creation_input_tokens: usize,
    cache_read_input_tokens: usize,
}

impl From<&Usage> for UsageOut {
    /// Anthropic counts cache reads apart from the other input tokens.
    fn from(u: &Usage) -> UsageOut {
        UsageOut {
            input_tokens: u.prompt_tokens - u.cached_tokens.min(u.prompt_tokens),
            output_tokens: u.completion_tokens,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: u.cached_tokens,
        }
    }
}

/// A whole message (the response, and the one `message_start` carries).
#[derive(Serialize)]
struct Message<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: Vec<ContentBlock>,
    stop_reason: Option<&'static str>,
    stop_sequence: Option<&'a str>,
    usage: UsageOut,
}

/// Anthropic's stop reason and the stop sequence that matched, if one did.
fn stop_reason(reason: FinishReason, stops: &[String]) -> (&'static str, Option<&str>) {
    match reason {
        FinishReason::Length => ("max_tokens", None),
        FinishReason::StopString(i) => ("stop_sequence", stops.get(i).map(String::as_str)),
        FinishReason::Stop | FinishReason::Cancelled => ("end_turn", None),
    }
}

/// What a `content_block_delta` adds.
#[derive(Serialize)]
#[serde(tag = "type")]
enum Delta<'a> {
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: &'a str },
    #[serde(rename = "signature_delta")]
    Signature { signature: &'a str },
    #[serde(rename = "text_delta")]
    Text { text: &'a str },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: &'a str },
}

#[derive(Serialize)]
struct MessageDeltaBody<'a> {
    stop_reason: &'static str,
    stop_sequence: Option<&'a str>,
}

/// One event of a stream; its `type` is also the SSE event name.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StreamEvent<'a> {
    MessageStart {
        message: Message<'a>,
    },
    ContentBlockStart {
        index: usize,
        content_block: ContentBlock,
    },
    Ping,
    ContentBlockDelta {
        index: usize,
        delta: Delta<'a>,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: MessageDeltaBody<'a>,
        usage: UsageOut,
    },
    MessageStop,
}

impl StreamEvent<'_> {
    fn name(&self) -> &'static str {
        match self {
            StreamEvent::MessageStart { .. } => "message_start",
            StreamEvent::ContentBlockStart { .. } => "content_block_start",
            StreamEvent::Ping => "ping",
            StreamEvent::ContentBlockDelta { .. } => "content_block_delta",
            StreamEvent::ContentBlockStop { .. } => "content_block_stop",
            StreamEvent::MessageDelta { .. } => "message_delta",
            StreamEvent::MessageStop => "message_stop",
        }
    }

    fn sse(&self) -> SseEvent {
        SseEvent::default()
            .event(self.name())
            .data(serde_json::to_string(self).expect("serializable"))
    }
}

fn error_event(e: ApiError) -> SseEvent {
    SseEvent::default()
        .event("error")
        .data(AnthropicError(e).body())
}

/// `POST /v1/messages`.
pub async fn messages(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let answer = handle(Arc::clone(&st), body).await;
    st.respond(answer, |e| AnthropicError(e).into_response())
}

/// `POST /v1/messages/count_tokens`: the tokens the conversation, with its
/// system prompt and tools, takes as a prompt (`{"input_tokens": N}`).
pub async fn count_tokens(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let counted = async {
        let bytes = body.map_err(|e| crate::invalid::Invalid::Unreadable {
            detail: e.to_string(),
        })?;
        let valid = request::parse_count(&bytes)?;
        let vars = thinking_vars(&st, valid.thinking);
        let prepared = generation::prepare(&st, valid.generation(vars)).await?;
        Ok::<_, ApiError>(prepared.prompts[0].len())
    };
    let answer = counted
        .await
        .map(|n| axum::Json(serde_json::json!({ "input_tokens": n })).into_response());
    st.respond(answer, |e| AnthropicError(e).into_response())
}

async fn handle(
    st: Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    st.accepting()?;
    let bytes = body.map_err(|e| crate::invalid::Invalid::Unreadable {
        detail: e.to_string(),
    })?;
    let req = parse(&bytes)?;
    let tools = req.tools.as_ref().map(|_| st.tool_format());
    let (streaming, stops) = (req.stream, req.params.stop.clone());
    let show_thinking = req.thinking;
    let vars = thinking_vars(&st, show_thinking);
    let prepared = generation::prepare(&st, req.generation(vars)).await?;
    let thinking = st.thinking_start(&prepared.prompts[0]);
    let prompt_text = RequestLog::prompt_text(&st, &prepared.prompts);
    let started = Instant::now();
    let mut submitted = prepared.submit(&st)?;
    let (stream, n) = (submitted.streams.remove(0), submitted.prompt_lens[0]);
    let id = unique_id("msg_", stream.id());
    let log = RequestLog::new(
        &st,
        Route::Messages,
        &id,
        streaming,
        started,
        &[n],
        prompt_text,
    );
    let answer = Answer {
        id,
        stops,
        shape: Shape { tools, thinking },
        show_thinking: show_thinking && thinking.is_some(),
    };
    if streaming {
        return Ok(sse(st, answer, stream, n, log).into_response());
    }
    Ok(collect(st, answer, stream, log).await)
}

/// What the response needs to know of its request.
struct Answer {
    id: String,
    stops: Vec<String>,
    /// How the answer is taken apart: a thinking model's thinking is always
    /// split off; tool calls, when tools are on offer.
    shape: Shape,
    /// Whether the thinking is shown (`thinking` blocks) or left out.
    show_thinking: bool,
}

/// The template variables of a request's `thinking`: a model that thinks
/// is told not to (`enable_thinking: false`, where its template reads it)
/// unless the request shows its thinking.
fn thinking_vars(st: &AppState, shown: bool) -> TemplateVars {
    let mut vars = TemplateVars::new();
    if !shown {
        st.thinking_off(&mut vars);
    }
    vars
}

/// The whole answer as one message.
async fn collect(
    st: Arc<AppState>,
    answer: Answer,
    stream: RequestStream,
    mut log: RequestLog,
) -> Response {
    let shape = answer.shape;
    let mut ids: Box<dyn FnMut() -> String + Send> = match shape.tools {
        Some(f) => Box::new(tool_use_ids(f)),
        None => Box::new(String::new),
    };
    let whole = crate::answer::collect(&st, vec![stream], &mut log, shape, &mut ids).await;
    let reply = match whole.map(|mut a| a.remove(0)) {
        Ok(reply) => reply,
        Err(e) => return not_a_refusal(AnthropicError(e).into_response()),
    };
    let Some(reason) = reply.finish else {
        let e = ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "engine_failed",
            "the request ended without an answer",
        );
        return not_a_refusal(AnthropicError(e).into_response());
    };
    let (mut stop_reason, stop_sequence) = stop_reason(reason, &answer.stops);
    if !reply.calls.is_empty() {
        stop_reason = "tool_use";
    }
    axum::Json(Message {
        id: &answer.id,
        kind: "message",
        role: "assistant",
        model: &st.model_id,
        content: answer_blocks(
            reply
                .reasoning
                .filter(|r| answer.show_thinking && !r.is_empty()),
            reply.text,
            reply.calls,
        ),
        stop_reason: Some(stop_reason),
        stop_sequence,
        usage: UsageOut::from(&reply.usage),
    })
    .into_response()
}

/// The stream's opening events: the message, then (unless the thinking
/// may come first) the text block at index 0, and a ping.
fn opening(id: &str, model: &str, prompt_tokens: usize, blocks: &mut Blocks) -> Vec<SseEvent> {
    let start = StreamEvent::MessageStart {
        message: Message {
            id,
            kind: "message",
            role: "assistant",
            model,
            content: Vec::new(),
            stop_reason: None,
            stop_sequence: None,
            usage: UsageOut {
                input_tokens: prompt_tokens,
                ..UsageOut::default()
            },
        },
    };
    let mut out = vec![start.sse()];
    if !blocks.show_thinking {
        out.extend(blocks.open(Open::Text));
    }
    out.push(StreamEvent::Ping.sse());
    out
}

/// The kind of the block a stream has open.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
}

/// A stream's content blocks: at most one open, numbered as they open. A
/// thinking block closes with an (empty) `signature_delta`, as Anthropic's
/// clients expect.
struct Blocks {
    show_thinking: bool,
    open: Option<(Open, usize)>,
    next: usize,
}

impl Blocks {
    /// The events that leave a block of `kind` open (closing another).
    fn open(&mut self, kind: Open) -> Vec<SseEvent> {
        if self.open.is_some_and(|(k, _)| k == kind) {
            return Vec::new();
        }
        let mut out = self.close();
        let index = self.next;
        self.next += 1;
        self.open = Some((kind, index));
        let content_block = match kind {
            Open::Thinking => ContentBlock::thinking(String::new()),
            Open::Text => ContentBlock::Text {
                text: String::new(),
            },
        };
        out.push(
            StreamEvent::ContentBlockStart {
                index,
                content_block,
            }
            .sse(),
        );
        out
    }

    /// The events that close the open block, if one is.
    fn close(&mut self) -> Vec<SseEvent> {
        let Some((kind, index)) = self.open.take() else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(2);
        if kind == Open::Thinking {
            let delta = Delta::Signature { signature: "" };
            out.push(StreamEvent::ContentBlockDelta { index, delta }.sse());
        }
        out.push(StreamEvent::ContentBlockStop { index }.sse());
        out
    }

    /// The events of a piece of the answer: thinking (when shown), then text.
    fn show(&mut self, pieces: &Pieces) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for (kind, piece) in [
            (Open::Thinking, &pieces.reasoning),
            (Open::Text, &pieces.text),
        ] {
            if piece.is_empty() || (kind == Open::Thinking && !self.show_thinking) {
                continue;
            }
            out.extend(self.open(kind));
            let index = self.next - 1;
            let delta = match kind {
                Open::Thinking => Delta::Thinking { thinking: piece },
                Open::Text => Delta::Text { text: piece },
            };
            out.push(StreamEvent::ContentBlockDelta { index, delta }.sse());
        }
        out
    }
}

/// A stream's state: its blocks; with tools, text that may be a call is held
/// back and the calls become `tool_use` blocks at the end.
struct Streamer {
    stops: Vec<String>,
    split: Splitter,
    tools: Option<ToolFormat>,
    blocks: Blocks,
}

impl Streamer {
    /// The SSE events of one engine event.
    fn events(&mut self, e: Event) -> Vec<SseEvent> {
        match e {
            Event::Admitted | Event::PromptLogprobs(_) | Event::Embedding(_) => Vec::new(),
            Event::Token { text, .. } => {
                let pieces = self.split.push(&text);
                self.blocks.show(&pieces)
            }
            Event::Finished {
                reason,
                usage,
                text,
            } => self.finished(reason, &usage, text),
            Event::Failed(f) => vec![error_event(ApiError::from_failure(&f))],
        }
    }

    fn finished(&mut self, reason: FinishReason, usage: &Usage, text: String) -> Vec<SseEvent> {
        let mut ids: Box<dyn FnMut() -> String> = match self.tools {
            Some(f) => Box::new(tool_use_ids(f)),
            None => Box::new(String::new),
        };
        let (pieces, calls) = self.split.finish(&text, &mut ids);
        let (mut stop_reason, stop_sequence) = stop_reason(reason, &self.stops);
        let mut out = self.blocks.show(&pieces);
        if calls.is_empty() {
            // An answer has a text block, empty or not.
            out.extend(self.blocks.open(Open::Text));
        }
        out.extend(self.blocks.close());
        if !calls.is_empty() {
            stop_reason = "tool_use";
        }
        let first = self.blocks.next;
        for (k, c) in calls.into_iter().enumerate() {
            out.extend(tool_use_events(first + k, c));
        }
        out.extend([
            StreamEvent::MessageDelta {
                delta: MessageDeltaBody {
                    stop_reason,
                    stop_sequence,
                },
                usage: UsageOut::from(usage),
            }
            .sse(),
            StreamEvent::MessageStop.sse(),
        ]);
        out
    }
}

/// A `tool_use` block as a stream sends it: its start with an empty input, the
/// input's JSON in pieces, its stop.
fn tool_use_events(index: usize, c: ToolCall) -> Vec<SseEvent> {
    let pieces = c.argument_pieces();
    let mut out = vec![
        StreamEvent::ContentBlockStart {
            index,
            content_block: ContentBlock::ToolUse {
                id: c.id,
                name: c.name,
                input: serde_json::json!({}),
            },
        }
        .sse(),
    ];
    for partial in pieces {
        out.push(
            StreamEvent::ContentBlockDelta {
                index,
                delta: Delta::InputJson {
                    partial_json: &partial,
                },
            }
            .sse(),
        );
    }
    out.push(StreamEvent::ContentBlockStop { index }.sse());
    out
}

fn sse(
    st: Arc<AppState>,
    answer: Answer,
    stream: RequestStream,
    prompt_tokens: usize,
    log: RequestLog,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let mut blocks = Blocks {
        show_thinking: answer.show_thinking,
        open: None,
        next: 0,
    };
    let head = opening(&answer.id, &st.model_id, prompt_tokens, &mut blocks);
    let mut streamer = Streamer {
        stops: answer.stops,
        split: Splitter::new(answer.shape),
        tools: answer.shape.tools,
        blocks,
    };
    let limit = st.server.limits.request_timeout;
    let timed_out = Arc::new(AtomicBool::new(false));
    let timed_out_set = Arc::clone(&timed_out);
    let deadline = async move {
        match limit {
            Some(l) => tokio::time::sleep(l).await,
            None => std::future::pending().await,
        }
        timed_out_set.store(true, Ordering::Release);
    };
    let log = log.shared();
    let log_tail = log.clone();
    let body = stream::unfold(stream, |mut s| async move {
        let e = s.recv().await?;
        Some((e, s))
    })
    .take_until(deadline)
    .flat_map(move |e| {
        log.on_event(0, &e);
        stream::iter(streamer.events(e))
    });
    // A request cut by the deadline ends with a timeout error event.
    let tail = stream::once(async move {
        match limit {
            Some(l) if timed_out.load(Ordering::Acquire) => {
                log_tail.timed_out();
                Some(error_event(request_timeout(l)))
            }
            _ => None,
        }
    })
    .filter_map(std::future::ready);
    let all = stream::iter(head).chain(body).chain(tail).map(Ok);
    Sse::new(all).keep_alive(KeepAlive::new().interval(std::time::Duration::from_secs(5)))
}
