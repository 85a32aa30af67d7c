//! `POST /v1/chat/completions` and `POST /v1/completions`: JSON bodies and SSE
//! streams in the OpenAI shapes.
//!
//! Invariants: refusals happen before anything is queued (the engine's submit);
//! dropping the response (the client went away, streaming or not) drops the
//! request streams, which cancels them (SPEC S13); a failure after streaming began
//! ends the stream with an error event, never a silent cut (S18).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use ferrox_engine::{Event, FinishReason, RequestStream, TokenLogprob, Usage};
use ferrox_models::reasoning::{self, AnswerPhase, ReasoningStream};
use ferrox_models::tools::{ToolCall, ToolFormat, ToolStream};
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::json_body::json_body;
use crate::request::{PromptInput, ValidRequest, parse_chat, parse_completion};
use crate::request_log::{RequestLog, Route, SharedLog, not_a_refusal, unique_id};
use crate::state::{AppState, Phase};
use crate::tool_request::ToolChoice;

/// Which endpoint.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Kind {
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

/// The code of a request cancelled by `--request-timeout`.
pub const REQUEST_TIMEOUT: &str = "request_timeout";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Tokenizes each prompt of a request.
fn prompts(st: &AppState, req: &ValidRequest) -> Result<Vec<Vec<u32>>, ApiError> {
    let tools = req.tools.as_ref().map_or(&[][..], |t| &t.tools[..]);
    Ok(match &req.prompt {
        PromptInput::Chat(msgs) => vec![
            st.model_chat_ids_with_tools(msgs, tools, &req.template_vars)
                .map_err(|e| ApiError::invalid(Some("messages"), e.to_string()))?,
        ],
        PromptInput::Text(texts) => texts
            .iter()
            .map(|t| st.tokenizer.encode(t, true, true))
            .collect(),
        PromptInput::Tokens(ids) => ids.clone(),
    })
}

/// Tokenizes the prompts and compiles the output grammar on a blocking thread:
/// template rendering, tokenization and grammar compilation are CPU work that must
/// not hold the async runtime's threads.
async fn prepare(
    st: &Arc<AppState>,
    mut req: ValidRequest,
) -> Result<(ValidRequest, Vec<Vec<u32>>), ApiError> {
    let st = Arc::clone(st);
    tokio::task::spawn_blocking(move || {
        st.check_template_vars(&req.template_vars)?;
        let prompts = prompts(&st, &req)?;
        let forced = req.tools.as_ref().filter(|t| t.choice != ToolChoice::Auto);
        let spec = match forced {
            Some(t) => Some(st.tool_format().call_grammar(&t.callable(), t.parallel)),
            None => req.grammar.clone(),
        };
        if let Some(spec) = &spec {
            req.params.grammar = Some(Arc::new(st.compile_grammar(spec)?));
        }
        Ok((req, prompts))
    })
    .await
    .map_err(|e| ApiError::internal(format!("preparing the request failed: {e}")))?
}

/// Submits every prompt; on a refusal, the ones already submitted are dropped
/// (cancelled) and the refusal is answered.
fn submit_all(
    st: &AppState,
    req: &ValidRequest,
    prompts: Vec<Vec<u32>>,
) -> Result<(Vec<RequestStream>, Vec<usize>), ApiError> {
    let mut streams = Vec::with_capacity(prompts.len());
    let mut lens = Vec::with_capacity(prompts.len());
    for p in prompts {
        let mut params = req.params.clone();
        let limit = st.engine.ceiling().max_context as usize;
        // Without max_tokens: up to what the context leaves, capped so that a request
        // does not reserve a whole context of KV blocks (SPEC S7) by default.
        params.max_tokens = req.max_tokens.unwrap_or_else(|| {
            limit
                .saturating_sub(p.len().max(1))
                .clamp(1, st.default_max_tokens.max(1))
        });
        let n = p.len();
        match st.engine.submit(p, params) {
            Ok(s) => {
                streams.push(s);
                lens.push(n);
            }
            Err(e) => return Err(ApiError::from_submit(e, n)),
        }
    }
    Ok((streams, lens))
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
    let (req, prompts) = prepare(&st, req).await?;
    let shape = Shape {
        tools: req.tools.as_ref().map(|_| st.tool_format()),
        thinking: (kind == Kind::Chat)
            .then(|| st.thinking_start(&prompts[0]))
            .flatten(),
    };
    let prompt_text = RequestLog::prompt_text(&st, &prompts);
    let started = Instant::now();
    let (streams, lens) = submit_all(&st, &req, prompts)?;
    let id = unique_id(kind.id_prefix(), streams[0].id());
    let log = RequestLog::new(
        &st,
        kind.route(),
        &id,
        req.stream,
        started,
        &lens,
        prompt_text,
    );
    if req.stream {
        Ok(sse(st, kind, id, streams, req.include_usage, log, shape).into_response())
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
    let Some(limit) = st.limits.request_timeout else {
        return collect(&st, kind, id, streams, &mut log, shape).await;
    };
    let answer =
        tokio::time::timeout(limit, collect(&st, kind, id, streams, &mut log, shape)).await;
    answer.unwrap_or_else(|_| {
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

fn piece(st: &AppState, id: u32) -> (String, Vec<u8>) {
    let b = st.tokenizer.token_bytes(id, false).into_owned();
    (String::from_utf8_lossy(&b).into_owned(), b)
}

/// One token's entry in chat `logprobs.content`.
fn chat_logprob(st: &AppState, id: u32, lp: &TokenLogprob) -> Value {
    let (t, b) = piece(st, id);
    let top: Vec<Value> = lp
        .top
        .iter()
        .map(|&(i, l)| {
            let (t, b) = piece(st, i);
            json!({"token": t, "logprob": l, "bytes": b})
        })
        .collect();
    json!({"token": t, "logprob": lp.logprob, "bytes": b, "top_logprobs": top})
}

/// Legacy completions logprobs over `(id, logprob, text offset)` entries.
fn text_logprobs(st: &AppState, entries: &[(u32, TokenLogprob, usize)]) -> Value {
    let tokens: Vec<String> = entries.iter().map(|e| piece(st, e.0).0).collect();
    let lps: Vec<f32> = entries.iter().map(|e| e.1.logprob).collect();
    let tops: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut m = serde_json::Map::new();
            for &(i, l) in &e.1.top {
                m.insert(piece(st, i).0, json!(l));
            }
            Value::Object(m)
        })
        .collect();
    let offsets: Vec<usize> = entries.iter().map(|e| e.2).collect();
    json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

fn logprobs_value(st: &AppState, kind: Kind, entries: &[(u32, TokenLogprob, usize)]) -> Value {
    match kind {
        Kind::Chat => {
            json!({"content": entries.iter().map(|e| chat_logprob(st, e.0, &e.1)).collect::<Vec<_>>()})
        }
        Kind::Text => text_logprobs(st, entries),
    }
}

/// How a chat answer is taken apart: its thinking and its tool calls.
#[derive(Clone, Copy, Default)]
struct Shape {
    /// The tool-call format, when tools are on offer.
    tools: Option<ToolFormat>,
    /// Where the answer starts, for a model that thinks in `<think>` tags.
    thinking: Option<AnswerPhase>,
}

/// A chunk of thinking (`delta.reasoning_content`, as vLLM and llama-server
/// stream it).
fn reasoning_chunk(
    id: &str,
    model: &str,
    created: u64,
    index: usize,
    text: &str,
    role: bool,
) -> Value {
    let mut delta = json!({"reasoning_content": text});
    if role {
        delta["role"] = json!("assistant");
    }
    json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
           "choices": [{"index": index, "delta": delta, "finish_reason": null, "logprobs": null}]})
}

/// Fresh call ids in `format`'s style.
fn call_ids(format: ToolFormat) -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format.call_id(n)
    }
}

/// OpenAI's `tool_calls`: the arguments as JSON text.
fn tool_calls_value(calls: &[ToolCall]) -> Value {
    calls
        .iter()
        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments.to_string()}}))
        .collect()
}

/// The stream chunks of `calls`, as OpenAI streams them: the id and name first,
/// then the arguments in pieces.
fn tool_call_chunks(
    id: &str,
    model: &str,
    created: u64,
    index: usize,
    calls: &[ToolCall],
) -> Vec<Value> {
    let delta = |d: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
               "choices": [{"index": index, "delta": {"tool_calls": [d]}, "finish_reason": null, "logprobs": null}]})
    };
    let mut out = Vec::new();
    for (k, c) in calls.iter().enumerate() {
        out.push(delta(json!({"index": k, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}})));
        for piece in c.argument_pieces() {
            out.push(delta(json!({"index": k, "function": {"arguments": piece}})));
        }
    }
    out
}

fn add_usage(total: &mut Usage, u: &Usage) {
    total.prompt_tokens += u.prompt_tokens;
    total.completion_tokens += u.completion_tokens;
    total.cached_tokens += u.cached_tokens;
}

/// OpenAI's usage object, with the prompt tokens the prefix cache supplied.
fn usage_value(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

async fn collect(
    st: &AppState,
    kind: Kind,
    id: String,
    streams: Vec<RequestStream>,
    log: &mut RequestLog,
    shape: Shape,
) -> Response {
    let mut choices = Vec::new();
    let mut total = Usage::default();
    for (index, mut s) in streams.into_iter().enumerate() {
        let mut text = String::new();
        let mut finish = None;
        let mut lps: Vec<(u32, TokenLogprob, usize)> = Vec::new();
        let mut wants_logprobs = false;
        while let Some(e) = s.recv().await {
            log.on_event(index, &e);
            match e {
                Event::Admitted => {}
                Event::Token {
                    id,
                    text: t,
                    logprob,
                } => {
                    if let Some(lp) = logprob {
                        wants_logprobs = true;
                        lps.push((id, lp, text.len()));
                    }
                    text.push_str(&t);
                }
                Event::Finished {
                    reason,
                    usage,
                    text: t,
                } => {
                    text.push_str(&t);
                    add_usage(&mut total, &usage);
                    finish = Some(reason);
                }
                Event::Failed(f) => {
                    return not_a_refusal(ApiError::from_failure(&f).into_response());
                }
            }
        }
        let reason = finish.map(FinishReason::as_str);
        let logprobs = if wants_logprobs {
            logprobs_value(st, kind, &lps)
        } else {
            Value::Null
        };
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
        let reason = if calls.is_empty() {
            reason
        } else {
            Some("tool_calls")
        };
        choices.push(match kind {
            Kind::Chat => {
                let mut message = json!({"role": "assistant", "content": text});
                if !calls.is_empty() {
                    message["tool_calls"] = tool_calls_value(&calls);
                    if text.is_empty() {
                        message["content"] = Value::Null;
                    }
                }
                if let Some(r) = reasoning {
                    message["reasoning_content"] = json!(r);
                }
                json!({"index": index, "message": message, "finish_reason": reason, "logprobs": logprobs})
            }
            Kind::Text => json!({"index": index, "text": text, "finish_reason": reason, "logprobs": logprobs}),
        });
    }
    let usage = usage_value(&total);
    let object = if kind == Kind::Chat {
        "chat.completion"
    } else {
        "text_completion"
    };
    axum::Json(json!({"id": id, "object": object, "created": now(), "model": st.model_id, "choices": choices, "usage": usage})).into_response()
}

#[allow(clippy::too_many_arguments)]
fn chunk(
    kind: Kind,
    id: &str,
    model: &str,
    created: u64,
    index: usize,
    delta: Option<&str>,
    role: bool,
    finish: Option<&str>,
    logprobs: Value,
) -> Value {
    match kind {
        Kind::Chat => {
            let mut d = json!({});
            if role {
                d["role"] = json!("assistant");
            }
            if let Some(t) = delta {
                d["content"] = json!(t);
            }
            json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [{"index": index, "delta": d, "finish_reason": finish, "logprobs": logprobs}]})
        }
        Kind::Text => {
            json!({"id": id, "object": "text_completion", "created": created, "model": model,
                             "choices": [{"index": index, "text": delta.unwrap_or(""), "finish_reason": finish, "logprobs": logprobs}]})
        }
    }
}

/// 504 `request_timeout`: the request ran past the server's wall-clock limit.
pub(crate) fn request_timeout(limit: std::time::Duration) -> ApiError {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        "server_error",
        REQUEST_TIMEOUT,
        format!(
            "the request ran longer than the server's limit of {} s (--request-timeout / FERROX_REQUEST_TIMEOUT) and was cancelled",
            limit.as_secs_f64()
        ),
    )
}

/// How a stream ends: `[DONE]` after a complete answer; nothing more after an
/// error event; a `request_timeout` error event when the deadline cut it.
fn stream_tail(
    failed: &std::sync::atomic::AtomicBool,
    timed_out: &std::sync::atomic::AtomicBool,
    limit: Option<std::time::Duration>,
    log: &SharedLog,
) -> Option<Result<SseEvent, Infallible>> {
    use std::sync::atomic::Ordering::Acquire;
    if failed.load(Acquire) {
        return None;
    }
    let data = match limit {
        Some(l) if timed_out.load(Acquire) => {
            log.timed_out();
            request_timeout(l).body().to_string()
        }
        _ => "[DONE]".to_string(),
    };
    Some(Ok(SseEvent::default().data(data)))
}

fn sse(
    st: Arc<AppState>,
    kind: Kind,
    id: String,
    streams: Vec<RequestStream>,
    include_usage: bool,
    log: RequestLog,
    shape: Shape,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let created = now();
    let n = streams.len();
    let indexed = streams.into_iter().enumerate().map(|(i, s)| {
        stream::unfold(Some(s), move |s| async move {
            let mut s = s?;
            let e = s.recv().await?;
            Some(((i, e), Some(s)))
        })
        .boxed()
    });
    let merged = stream::select_all(indexed);
    let model = st.model_id.clone();
    let log = log.shared();
    let log_tail = log.clone();
    let mut announced = vec![false; n];
    // With tools, text that may be a call is held back until the end.
    let mut held: Vec<Option<ToolStream>> = (0..n)
        .map(|_| {
            shape
                .tools
                .filter(|_| kind == Kind::Chat)
                .map(ToolStream::new)
        })
        .collect();
    // A thinking model's thinking goes to `reasoning_content` deltas.
    let mut thinking: Vec<Option<ReasoningStream>> = (0..n)
        .map(|_| shape.thinking.map(ReasoningStream::new))
        .collect();
    let (mut done, mut total) = (0usize, Usage::default());
    // After an error event the stream ends: no more chunks and no `[DONE]`, so
    // no client mistakes a cut-off for a complete answer (S18).
    let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let failed_in = Arc::clone(&failed);
    let failed_done = Arc::clone(&failed);
    let timed_out = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (timed_out_set, limit) = (Arc::clone(&timed_out), st.limits.request_timeout);
    let deadline = async move {
        match limit {
            Some(l) => tokio::time::sleep(l).await,
            None => std::future::pending().await,
        }
        timed_out_set.store(true, std::sync::atomic::Ordering::Release);
    };
    let events = merged
        .take_until(deadline)
        .take_while(move |_| std::future::ready(!failed_in.load(std::sync::atomic::Ordering::Acquire)))
        .flat_map(move |(i, e)| {
            log.on_event(i, &e);
            let mut out: Vec<Value> = Vec::new();
            let first = kind == Kind::Chat && !announced[i];
            match e {
                Event::Admitted => {
                    if first {
                        announced[i] = true;
                        out.push(chunk(kind, &id, &model, created, i, Some(""), true, None, Value::Null));
                    }
                }
                Event::Token { id: tok, text, logprob } => {
                    announced[i] = true;
                    let text = match &mut thinking[i] {
                        Some(t) => {
                            let (r, c) = t.push(&text);
                            if !r.is_empty() {
                                out.push(reasoning_chunk(&id, &model, created, i, &r, first));
                            }
                            c
                        }
                        None => text,
                    };
                    let first = first && out.is_empty();
                    let text = match &mut held[i] {
                        Some(h) => h.push(&text),
                        None => text,
                    };
                    let lp = match &logprob {
                        Some(lp) => logprobs_value(&st, kind, &[(tok, lp.clone(), 0)]),
                        None => Value::Null,
                    };
                    if first || !text.is_empty() || logprob.is_some() {
                        out.push(chunk(kind, &id, &model, created, i, Some(&text), first, None, lp));
                    }
                }
                Event::Finished { reason, usage, text } => {
                    announced[i] = true;
                    let text = match thinking[i].take() {
                        Some(mut t) => {
                            let (r, c) = t.push(&text);
                            let (r2, c2) = t.finish();
                            if !(r.is_empty() && r2.is_empty()) {
                                out.push(reasoning_chunk(&id, &model, created, i, &(r + &r2), first));
                            }
                            c + &c2
                        }
                        None => text,
                    };
                    let first = first && out.is_empty();
                    let (text, calls) = match held[i].take() {
                        Some(h) => {
                            let mut ids = call_ids(h.format());
                            h.finish_with(&text, &mut ids)
                        }
                        None => (text, Vec::new()),
                    };
                    if !text.is_empty() {
                        out.push(chunk(kind, &id, &model, created, i, Some(&text), first, None, Value::Null));
                    }
                    out.extend(tool_call_chunks(&id, &model, created, i, &calls));
                    let finish = if calls.is_empty() { reason.as_str() } else { "tool_calls" };
                    if reason != FinishReason::Cancelled {
                        out.push(chunk(kind, &id, &model, created, i, None, false, Some(finish), Value::Null));
                    }
                    add_usage(&mut total, &usage);
                    done += 1;
                    if done == n && include_usage {
                        let u = usage_value(&total);
                        let object = if kind == Kind::Chat { "chat.completion.chunk" } else { "text_completion" };
                        out.push(json!({"id": id, "object": object, "created": created, "model": model, "choices": [], "usage": u}));
                    }
                }
                Event::Failed(f) => {
                    failed.store(true, std::sync::atomic::Ordering::Release);
                    out.push(ApiError::from_failure(&f).body());
                }
            }
            stream::iter(out.into_iter().map(|v| Ok(SseEvent::default().data(v.to_string()))))
        })
        .chain(
            stream::once(async move { stream_tail(&failed_done, &timed_out, limit, &log_tail) })
                .filter_map(std::future::ready),
        );
    Sse::new(events).keep_alive(KeepAlive::new().interval(std::time::Duration::from_millis(500)))
}
