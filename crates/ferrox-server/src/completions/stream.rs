//! The SSE stream of chat and completions: every choice's engine events, merged
//! as they come, become OpenAI chunks.
//!
//! Invariants: a chat choice's first chunk carries `role`; with tools on offer,
//! text that may start a call is held back until it is known not to (then
//! calls go out as id/name and argument pieces); a thinking model's thinking
//! goes out as `reasoning_content`; after an error event nothing more is sent,
//! not even `[DONE]`, so no client mistakes a cut-off for a complete answer
//! (S18); the request deadline ends the stream with a `request_timeout` event.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use ferrox_engine::{Event, FinishReason, RequestStream, TokenLogprob, Usage};
use ferrox_text::tools::ToolFormat;
use futures_util::stream::{self, Stream, StreamExt};

use super::chunks::Chunks;
use super::{Kind, add_usage, now};
use crate::answer::merged;
use crate::answer::{LoggedToken, Pieces, Shape, Splitter, call_ids};
use crate::error::ApiError;
use crate::limits::{deadline, request_timeout};
use crate::request_log::{RequestLog, SharedLog};
use crate::state::AppState;

/// One choice's place in the stream.
struct ChoiceStream {
    index: usize,
    /// Whether its first chunk (the one with `role`) went out.
    announced: bool,
    /// The answer taken apart: thinking split off, calls held back (chat only).
    split: Splitter,
    /// The tool-call format, when tools are on offer (chat only).
    tools: Option<ToolFormat>,
    /// A prompt to echo before the first token (completions' `echo`).
    echo: Option<Echo>,
}

/// How the streamed choices are shown: their shape (thinking, tools) and,
/// for each, a prompt to echo.
pub(super) struct Shown {
    pub shape: Shape,
    pub echoes: Vec<Option<Echo>>,
}

/// A prompt echoed at the head of a streamed choice.
pub(super) struct Echo {
    pub ids: Vec<u32>,
    /// Its tokens' scores are shown (`echo` with `logprobs`).
    pub scored: bool,
    /// The scores, once the engine sent them.
    pub scores: Option<Vec<TokenLogprob>>,
}

impl ChoiceStream {
    fn new(index: usize, kind: Kind, shape: Shape, echo: Option<Echo>) -> ChoiceStream {
        let shape = Shape {
            tools: shape.tools.filter(|_| kind == Kind::Chat),
            ..shape
        };
        ChoiceStream {
            index,
            announced: kind == Kind::Text,
            split: Splitter::new(shape),
            tools: shape.tools,
            echo,
        }
    }

    /// The echoed prompt's chunk, once, before anything else of the answer.
    fn echo_first(&mut self, st: &AppState, out: &Chunks) -> Option<String> {
        let e = self.echo.take()?;
        let scores = e.scores.as_deref().filter(|_| e.scored);
        Some(out.echoed(st, self.index, &e.ids, scores))
    }

    /// Whether the next chunk is the first (and so carries `role`).
    fn first(&mut self) -> bool {
        !std::mem::replace(&mut self.announced, true)
    }

    /// The chunks of an admitted request: the role, at once.
    fn admitted(&mut self, st: &AppState, out: &Chunks) -> Vec<String> {
        if self.first() {
            vec![out.content(st, self.index, String::new(), true, None)]
        } else {
            Vec::new()
        }
    }

    /// The chunks of one token.
    fn token(
        &mut self,
        st: &AppState,
        out: &Chunks,
        id: u32,
        text: String,
        logprob: Option<TokenLogprob>,
    ) -> Vec<String> {
        let mut chunks: Vec<String> = self.echo_first(st, out).into_iter().collect();
        let mut first = self.first();
        let Pieces { reasoning, text } = self.split.push(&text);
        if !reasoning.is_empty() {
            chunks.push(out.reasoning(self.index, reasoning, first));
            first = false;
        }
        if first || !text.is_empty() || logprob.is_some() {
            let token = logprob.map(|logprob| LoggedToken {
                id,
                logprob,
                offset: 0,
            });
            chunks.push(out.content(st, self.index, text, first, token));
        }
        chunks
    }

    /// The chunks of the end: the rest of the text, any tool calls, and the
    /// finish reason (none for a cancelled request, whose client is gone).
    fn finished(
        &mut self,
        st: &AppState,
        out: &Chunks,
        reason: FinishReason,
        text: String,
    ) -> Vec<String> {
        let mut chunks: Vec<String> = self.echo_first(st, out).into_iter().collect();
        let mut first = self.first();
        let mut ids = self
            .tools
            .map(call_ids)
            .unwrap_or_else(|| Box::new(String::new));
        let (Pieces { reasoning, text }, calls) = self.split.finish(&text, &mut ids);
        if !reasoning.is_empty() {
            chunks.push(out.reasoning(self.index, reasoning, first));
            first = false;
        }
        if !text.is_empty() {
            chunks.push(out.content(st, self.index, text, first, None));
        }
        chunks.extend(out.tool_calls(self.index, &calls));
        if reason != FinishReason::Cancelled {
            let finish = if calls.is_empty() {
                reason.as_str()
            } else {
                "tool_calls"
            };
            chunks.push(out.finish(self.index, finish));
        }
        chunks
    }
}

/// How a stream reports usage: whether at all (`stream_options.include_usage`),
/// and the choices per prompt (a prompt counts once).
pub(super) struct UsageOptions {
    pub include: bool,
    pub choices: usize,
}

/// The whole response's state: every choice, the usage so far, whether it failed.
struct ResponseStream {
    st: Arc<AppState>,
    out: Chunks,
    choices: Vec<ChoiceStream>,
    usage: UsageOptions,
    done: usize,
    total: Usage,
    failed: Arc<AtomicBool>,
    log: SharedLog,
}

impl ResponseStream {
    fn on_event(&mut self, i: usize, e: Event) -> Vec<String> {
        self.log.on_event(i, &e);
        let (st, out, c) = (&self.st, &self.out, &mut self.choices[i]);
        match e {
            Event::Admitted => c.admitted(st, out),
            Event::PromptLogprobs(scores) => {
                if let Some(e) = &mut c.echo {
                    e.scores = Some(scores);
                }
                Vec::new()
            }
            Event::Embedding(_) => Vec::new(),
            Event::Token { id, text, logprob } => c.token(st, out, id, text, logprob),
            Event::Finished {
                reason,
                usage,
                text,
            } => {
                let mut chunks = c.finished(st, out, reason, text);
                add_usage(
                    &mut self.total,
                    &usage,
                    i.is_multiple_of(self.usage.choices.max(1)),
                );
                self.done += 1;
                if self.done == self.choices.len() && self.usage.include {
                    chunks.push(self.out.usage(&self.total));
                }
                chunks
            }
            Event::Failed(f) => {
                self.failed.store(true, Ordering::Release);
                vec![ApiError::from_failure(&f).body()]
            }
        }
    }
}

/// How a stream ends: `[DONE]` after a complete answer; nothing more after an
/// error event; a `request_timeout` error event when the deadline cut it.
fn stream_tail(
    failed: &AtomicBool,
    timed_out: &AtomicBool,
    limit: Option<Duration>,
    log: &SharedLog,
) -> Option<Result<SseEvent, Infallible>> {
    if failed.load(Ordering::Acquire) {
        return None;
    }
    let data = match limit {
        Some(l) if timed_out.load(Ordering::Acquire) => {
            log.timed_out();
            request_timeout(l).body()
        }
        _ => "[DONE]".to_string(),
    };
    Some(Ok(SseEvent::default().data(data)))
}

/// The SSE response of `streams`.
pub(super) fn sse(
    st: Arc<AppState>,
    kind: Kind,
    id: String,
    streams: Vec<RequestStream>,
    usage: UsageOptions,
    log: RequestLog,
    shown: Shown,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let Shown { shape, echoes } = shown;
    let failed = Arc::new(AtomicBool::new(false));
    let timed_out = Arc::new(AtomicBool::new(false));
    let limit = st.server.limits.request_timeout;
    let log = log.shared();
    let mut response = ResponseStream {
        out: Chunks {
            kind,
            id,
            model: st.model_id.clone(),
            created: now(),
        },
        choices: echoes
            .into_iter()
            .enumerate()
            .map(|(i, echo)| ChoiceStream::new(i, kind, shape, echo))
            .collect(),
        st,
        usage,
        done: 0,
        total: Usage::default(),
        failed: Arc::clone(&failed),
        log: log.clone(),
    };
    let failed_in = Arc::clone(&failed);
    let events = merged(streams)
        .take_until(deadline(limit, Arc::clone(&timed_out)))
        .take_while(move |_| std::future::ready(!failed_in.load(Ordering::Acquire)))
        .flat_map(move |(i, e)| {
            let chunks = response.on_event(i, e);
            stream::iter(
                chunks
                    .into_iter()
                    .map(|data| Ok(SseEvent::default().data(data))),
            )
        })
        .chain(
            stream::once(async move { stream_tail(&failed, &timed_out, limit, &log) })
                .filter_map(std::future::ready),
        );
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_millis(500)))
}
