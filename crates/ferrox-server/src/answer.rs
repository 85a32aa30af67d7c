//! The one typed answer every API renders. [`collect`] gathers each engine
//! request's events of a [`crate::generation::Submitted`] generation into an
//! [`Answer`]: its text, reasoning split off, tool calls parsed, finish, usage
//! and log-probabilities. OpenAI's choices and Anthropic's message are
//! renderings of it; streams render the same events as they come.
//!
//! Invariants: a failure, or `--request-timeout` passing, is the error of the
//! whole answer, and the streams are dropped with it, which cancels their
//! requests.

use ferrox_engine::{Event, FinishReason, RequestStream, TokenLogprob, Usage};
use ferrox_text::reasoning::{self, ReasoningStream, Thinking};
use ferrox_text::tools::{ToolCall, ToolFormat, ToolStream};
use futures_util::stream::{self, Stream, StreamExt};

use crate::error::ApiError;
use crate::limits::{request_timeout, within_request_timeout};
use crate::request_log::RequestLog;
use crate::state::AppState;

/// How an answer is taken apart: its thinking and its tool calls.
#[derive(Clone, Copy, Default)]
pub struct Shape {
    /// The tool-call format, when tools are on offer.
    pub tools: Option<ToolFormat>,
    /// How the answer's thinking is split off, for a model that thinks.
    pub thinking: Option<Thinking>,
}

/// A generated token with its log-probability and where its text starts in the
/// answer.
pub struct LoggedToken {
    pub id: u32,
    pub logprob: TokenLogprob,
    pub offset: usize,
}

/// One engine request's answer, taken apart.
pub struct Answer {
    /// The text, without its thinking and its calls.
    pub text: String,
    pub reasoning: Option<String>,
    pub calls: Vec<ToolCall>,
    /// Why it ended (`None`: the stream ended without a finish).
    pub finish: Option<FinishReason>,
    pub usage: Usage,
    /// The tokens' log-probabilities, when the request asked for them.
    pub logprobs: Option<Vec<LoggedToken>>,
    /// The prompt's tokens after the first, scored, when the request asked.
    pub prompt_logprobs: Option<Vec<TokenLogprob>>,
}

/// One request's events as they came: its text, finish, usage and logged
/// tokens.
struct Gathered {
    text: String,
    finish: Option<FinishReason>,
    usage: Usage,
    logprobs: Option<Vec<LoggedToken>>,
    prompt_logprobs: Option<Vec<TokenLogprob>>,
}

/// Each answer of `streams` under `--request-timeout`; new call ids come
/// from `ids`. A failure or the timeout is the error.
pub async fn collect(
    st: &AppState,
    streams: Vec<RequestStream>,
    log: &mut RequestLog,
    shape: Shape,
    ids: &mut (dyn FnMut() -> String + Send),
) -> Result<Vec<Answer>, ApiError> {
    let timed = within_request_timeout(st.server.limits.request_timeout, async {
        let mut answers = Vec::with_capacity(streams.len());
        for (index, mut s) in streams.into_iter().enumerate() {
            let g = gather(index, &mut s, log).await?;
            answers.push(take_apart(shape, g, ids));
        }
        Ok(answers)
    })
    .await;
    timed.unwrap_or_else(|limit| {
        log.timed_out();
        Err(request_timeout(limit))
    })
}

/// One request's events gathered; a failure is the error answered.
async fn gather(
    index: usize,
    s: &mut RequestStream,
    log: &mut RequestLog,
) -> Result<Gathered, ApiError> {
    let mut g = Gathered {
        text: String::new(),
        finish: None,
        usage: Usage::default(),
        logprobs: None,
        prompt_logprobs: None,
    };
    while let Some(e) = s.recv().await {
        log.on_event(index, &e);
        match e {
            Event::Admitted | Event::Embedding(_) => {}
            Event::PromptLogprobs(p) => g.prompt_logprobs = Some(p),
            Event::Token { id, text, logprob } => {
                if let Some(logprob) = logprob {
                    g.logprobs.get_or_insert_with(Vec::new).push(LoggedToken {
                        id,
                        logprob,
                        offset: g.text.len(),
                    });
                }
                g.text.push_str(&text);
            }
            Event::Finished {
                reason,
                usage,
                text,
            } => {
                g.text.push_str(&text);
                g.usage = usage;
                g.finish = Some(reason);
            }
            Event::Failed(f) => return Err(ApiError::from_failure(&f)),
        }
    }
    Ok(g)
}

/// The answer taken apart by `shape`: thinking split off, tool calls parsed.
fn take_apart(shape: Shape, g: Gathered, ids: &mut dyn FnMut() -> String) -> Answer {
    let (reasoning, text) = match shape.thinking {
        Some(start) => reasoning::split(&g.text, start),
        None => (None, g.text),
    };
    let (text, calls) = match shape.tools {
        Some(format) => match format.parse(&text, ids) {
            (_, calls) if calls.is_empty() => (text, calls),
            parsed => parsed,
        },
        None => (text, Vec::new()),
    };
    Answer {
        text,
        reasoning,
        calls,
        finish: g.finish,
        usage: g.usage,
        logprobs: g.logprobs,
        prompt_logprobs: g.prompt_logprobs,
    }
}

/// What a piece of a streamed answer shows: thinking, and answer text.
#[derive(Default, Debug, PartialEq)]
pub struct Pieces {
    pub reasoning: String,
    pub text: String,
}

/// A streamed answer taken apart as it comes, by its [`Shape`]: thinking split
/// off, and text that may be a tool call held back until the end.
pub struct Splitter {
    thinking: Option<ReasoningStream>,
    held: Option<ToolStream>,
}

impl Splitter {
    pub fn new(shape: Shape) -> Splitter {
        Splitter {
            thinking: shape.thinking.map(ReasoningStream::new),
            held: shape.tools.map(ToolStream::new),
        }
    }

    /// The thinking and the text `piece` lets show now.
    pub fn push(&mut self, piece: &str) -> Pieces {
        let (reasoning, text) = match &mut self.thinking {
            Some(t) => t.push(piece),
            None => (String::new(), piece.to_string()),
        };
        let text = match &mut self.held {
            Some(h) => h.push(&text),
            None => text,
        };
        Pieces { reasoning, text }
    }

    /// The answer's `last` piece and its end: everything still to show, and
    /// the calls (new ids from `ids`).
    pub fn finish(
        &mut self,
        last: &str,
        ids: &mut dyn FnMut() -> String,
    ) -> (Pieces, Vec<ToolCall>) {
        let (reasoning, text) = match self.thinking.take() {
            Some(mut t) => {
                let (mut r, mut c) = t.push(last);
                let (r2, c2) = t.finish();
                r.push_str(&r2);
                c.push_str(&c2);
                (r, c)
            }
            None => (String::new(), last.to_string()),
        };
        let (text, calls) = match self.held.take() {
            Some(h) => h.finish_with(&text, ids),
            None => (text, Vec::new()),
        };
        (Pieces { reasoning, text }, calls)
    }
}

/// Every stream's events, tagged with its index, as they come.
pub fn merged(streams: Vec<RequestStream>) -> impl Stream<Item = (usize, Event)> {
    stream::select_all(streams.into_iter().enumerate().map(|(i, s)| {
        stream::unfold(Some(s), move |s| async move {
            let mut s = s?;
            let e = s.recv().await?;
            Some(((i, e), Some(s)))
        })
        .boxed()
    }))
}

/// Fresh call ids in `format`'s style.
pub fn call_ids(format: ToolFormat) -> Box<dyn FnMut() -> String + Send> {
    let mut n = 0;
    Box::new(move || {
        n += 1;
        format.call_id(n)
    })
}
