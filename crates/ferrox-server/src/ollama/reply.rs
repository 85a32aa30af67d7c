//! The answer in Ollama's shape: one JSON object per line while it streams
//! (`done: false`), then the last line with `done: true`, why it ended and
//! its timings in nanoseconds; unstreamed, the same fields in one object.
//! `/api/chat` puts the text in `message`, `/api/generate` in `response`
//! (with `context`, the token ids to continue from).

use std::time::Instant;

use ferrox_engine::{Event, FinishReason, TokenLogprob, Usage};
use ferrox_text::tools::{ToolCall, ToolFormat};
use serde::Serialize;
use serde_json::Value;

use crate::answer::{Pieces, Shape, Splitter};
use crate::error::ApiError;
use crate::state::AppState;

/// Which route answers.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) enum Kind {
    Chat,
    Generate,
}

/// One line (or the whole unstreamed answer).
#[derive(Serialize)]
pub(super) struct Line<'a> {
    model: &'a str,
    created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<MessageOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<String>,
    /// `/api/generate`'s thinking (chat's is in `message`).
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<String>,
    done: bool,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    end: Option<End>,
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<Vec<LogprobOut>>,
}

#[derive(Serialize)]
struct MessageOut {
    role: &'static str,
    content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<CallOut>,
}

#[derive(Serialize)]
struct CallOut {
    function: FunctionOut,
}

#[derive(Serialize)]
struct FunctionOut {
    index: usize,
    name: String,
    arguments: Value,
}

/// The last line's fields.
#[derive(Serialize, Clone, Copy)]
struct End {
    done_reason: &'static str,
    total_duration: u64,
    load_duration: u64,
    prompt_eval_count: usize,
    prompt_eval_duration: u64,
    eval_count: usize,
    eval_duration: u64,
}

#[derive(Serialize, Clone)]
pub(super) struct LogprobOut {
    token: String,
    logprob: f32,
    bytes: Vec<u8>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    top_logprobs: Vec<TopOut>,
}

#[derive(Serialize, Clone)]
struct TopOut {
    token: String,
    logprob: f32,
    bytes: Vec<u8>,
}

/// Ollama's reason: a stop string or token is `stop`.
fn done_reason(r: FinishReason) -> &'static str {
    match r {
        FinishReason::Length => "length",
        _ => "stop",
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

fn nanos(from: Instant, to: Instant) -> u64 {
    to.saturating_duration_since(from).as_nanos() as u64
}

/// What one engine event adds to the answer.
pub(super) enum Step {
    /// Text (and thinking) to show, with the token's log-probability.
    Piece(Pieces, Option<LogprobOut>),
    /// The end: the text still held, the calls, why, the usage.
    End {
        pieces: Pieces,
        calls: Vec<ToolCall>,
        reason: FinishReason,
        usage: Usage,
    },
    Failed(ApiError),
}

/// One answer in the making: the text taken apart as it comes, the token ids
/// (for `context`), and when the prompt and the answer were computed.
pub(super) struct Turn {
    pub kind: Kind,
    split: Splitter,
    tools: Option<ToolFormat>,
    /// The prompt's ids, then the answer's (`/api/generate`'s `context`).
    ids: Option<Vec<u32>>,
    started: Instant,
    first_token: Option<Instant>,
    calls_issued: u64,
}

impl Turn {
    pub fn new(kind: Kind, shape: Shape, prompt: Option<Vec<u32>>, started: Instant) -> Turn {
        Turn {
            kind,
            split: Splitter::new(shape),
            tools: shape.tools,
            ids: prompt,
            started,
            first_token: None,
            calls_issued: 0,
        }
    }

    pub fn step(&mut self, st: &AppState, e: Event) -> Option<Step> {
        match e {
            Event::Admitted | Event::PromptLogprobs(_) | Event::Embedding(_) => None,
            Event::Token { id, text, logprob } => {
                self.first_token.get_or_insert_with(Instant::now);
                if let Some(ids) = &mut self.ids {
                    ids.push(id);
                }
                let logprob = logprob.map(|l| logprob_out(st, id, &l));
                Some(Step::Piece(self.split.push(&text), logprob))
            }
            Event::Finished {
                reason,
                usage,
                text,
            } => {
                let (format, issued) = (self.tools, &mut self.calls_issued);
                let mut ids = move || {
                    *issued += 1;
                    format.map_or_else(String::new, |f| f.call_id(*issued))
                };
                let (pieces, calls) = self.split.finish(&text, &mut ids);
                Some(Step::End {
                    pieces,
                    calls,
                    reason,
                    usage,
                })
            }
            Event::Failed(f) => Some(Step::Failed(ApiError::from_failure(&f))),
        }
    }

    /// A line of text and thinking (`done: false`).
    pub fn piece<'a>(
        &self,
        model: &'a str,
        p: Pieces,
        calls: &[ToolCall],
        logprobs: Option<Vec<LogprobOut>>,
    ) -> Line<'a> {
        let thinking = (!p.reasoning.is_empty()).then_some(p.reasoning);
        let mut line = Line {
            model,
            created_at: now(),
            message: None,
            response: None,
            thinking: None,
            done: false,
            end: None,
            context: None,
            logprobs,
        };
        match self.kind {
            Kind::Chat => {
                line.message = Some(MessageOut {
                    role: "assistant",
                    content: p.text,
                    thinking,
                    tool_calls: calls_out(calls),
                })
            }
            Kind::Generate => {
                line.response = Some(p.text);
                line.thinking = thinking;
            }
        }
        line
    }

    /// The last line: why it ended, the counts and timings, the context.
    pub fn last<'a>(
        &mut self,
        model: &'a str,
        p: Pieces,
        reason: &'static str,
        usage: &Usage,
    ) -> Line<'a> {
        let end = Instant::now();
        let first = self.first_token.unwrap_or(end);
        let mut line = self.piece(model, p, &[], None);
        line.done = true;
        line.end = Some(End {
            done_reason: reason,
            total_duration: nanos(self.started, end),
            load_duration: 0,
            prompt_eval_count: usage.prompt_tokens,
            prompt_eval_duration: nanos(self.started, first),
            eval_count: usage.completion_tokens,
            eval_duration: nanos(first, end),
        });
        line.context = self.ids.take();
        line
    }

    /// The lines of one step, streamed; `None` once the answer has ended.
    pub fn lines(&mut self, model: &str, s: Step) -> Vec<String> {
        let json = |l: &Line| serde_json::to_string(l).expect("a line serializes") + "\n";
        match s {
            Step::Piece(p, logprob) => {
                let shows = !p.text.is_empty() || !p.reasoning.is_empty() || logprob.is_some();
                let logprobs = logprob.map(|l| vec![l]);
                if !shows {
                    return Vec::new();
                }
                vec![json(&self.piece(model, p, &[], logprobs))]
            }
            Step::End {
                pieces,
                calls,
                reason,
                usage,
            } => {
                let mut out = Vec::new();
                if !pieces.text.is_empty() || !pieces.reasoning.is_empty() || !calls.is_empty() {
                    out.push(json(&self.piece(model, pieces, &calls, None)));
                }
                if reason != FinishReason::Cancelled {
                    out.push(json(&self.last(
                        model,
                        Pieces::default(),
                        done_reason(reason),
                        &usage,
                    )));
                }
                out
            }
            Step::Failed(e) => vec![error_line(&e)],
        }
    }
}

/// A failure after the stream began: `{"error": "..."}`, the stream's last
/// line (Ollama's clients raise it).
pub(super) fn error_line(e: &ApiError) -> String {
    serde_json::json!({ "error": e.message.as_ref() }).to_string() + "\n"
}

/// The whole unstreamed answer, folded from its steps.
#[derive(Default)]
pub(super) struct Whole {
    text: String,
    reasoning: String,
    calls: Vec<ToolCall>,
    logprobs: Option<Vec<LogprobOut>>,
    end: Option<(FinishReason, Usage)>,
}

impl Whole {
    /// Adds a step; a failure is the answer's error.
    pub fn add(&mut self, s: Step) -> Result<(), ApiError> {
        match s {
            Step::Piece(p, logprob) => {
                self.text.push_str(&p.text);
                self.reasoning.push_str(&p.reasoning);
                if let Some(l) = logprob {
                    self.logprobs.get_or_insert_with(Vec::new).push(l);
                }
            }
            Step::End {
                pieces,
                calls,
                reason,
                usage,
            } => {
                self.text.push_str(&pieces.text);
                self.reasoning.push_str(&pieces.reasoning);
                self.calls = calls;
                self.end = Some((reason, usage));
            }
            Step::Failed(e) => return Err(e),
        }
        Ok(())
    }

    /// The answer as one object.
    pub fn render<'a>(self, turn: &mut Turn, model: &'a str) -> Result<Line<'a>, ApiError> {
        let Some((reason, usage)) = self.end else {
            return Err(ApiError::internal("the request ended without an answer"));
        };
        let pieces = Pieces {
            reasoning: self.reasoning,
            text: self.text,
        };
        let mut line = turn.last(model, pieces, done_reason(reason), &usage);
        if let Some(m) = &mut line.message {
            m.tool_calls = calls_out(&self.calls);
        }
        line.logprobs = self.logprobs;
        Ok(line)
    }
}

/// The answer to a request without a prompt: the model is loaded.
pub(super) fn loaded(model: &str, kind: Kind) -> Line<'_> {
    let turn = Turn::new(kind, Shape::default(), None, Instant::now());
    let mut line = turn.piece(model, Pieces::default(), &[], None);
    line.done = true;
    line.end = Some(End {
        done_reason: "load",
        total_duration: 0,
        load_duration: 0,
        prompt_eval_count: 0,
        prompt_eval_duration: 0,
        eval_count: 0,
        eval_duration: 0,
    });
    line
}

fn calls_out(calls: &[ToolCall]) -> Vec<CallOut> {
    calls
        .iter()
        .enumerate()
        .map(|(index, c)| CallOut {
            function: FunctionOut {
                index,
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            },
        })
        .collect()
}

fn logprob_out(st: &AppState, id: u32, l: &TokenLogprob) -> LogprobOut {
    let (token, bytes) = st.token_piece(id);
    LogprobOut {
        token,
        logprob: l.logprob,
        bytes,
        top_logprobs: l
            .top
            .iter()
            .map(|&(i, logprob)| {
                let (token, bytes) = st.token_piece(i);
                TopOut {
                    token,
                    logprob,
                    bytes,
                }
            })
            .collect(),
    }
}
