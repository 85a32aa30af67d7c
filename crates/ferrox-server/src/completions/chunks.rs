//! The OpenAI response types filled in from engine events: log-probabilities,
//! tool calls, whole choices, and the stream chunks of one response.

use std::collections::BTreeMap;

use ferrox_engine::{FinishReason, TokenLogprob, Usage};
use ferrox_text::tools::ToolCall;

use super::Kind;
use crate::answer::{Answer, LoggedToken};
use crate::openai::response::{
    ChatChoice, ChatCompletionChunk, ChatLogprobs, ChatObject, ChunkChoice, CompletionUsage, Delta,
    FunctionDelta, FunctionKind, FunctionOut, Header, RankedLogprob, Role, TextChoice,
    TextCompletion, TextLogprobs, TextObject, TokenLogprobOut, ToolCallDelta, ToolCallOut,
    TopLogprob,
};
use crate::request::PromptShown;
use crate::state::AppState;

/// Chat's `logprobs.content`.
pub(super) fn chat_logprobs(st: &AppState, tokens: &[LoggedToken]) -> ChatLogprobs {
    let entry = |t: &LoggedToken| {
        let (token, bytes) = st.token_piece(t.id);
        let top_logprobs = t
            .logprob
            .top
            .iter()
            .map(|&(i, logprob)| {
                let (token, bytes) = st.token_piece(i);
                TopLogprob {
                    token,
                    logprob,
                    bytes,
                }
            })
            .collect();
        TokenLogprobOut {
            token,
            logprob: t.logprob.logprob,
            bytes,
            top_logprobs,
        }
    };
    ChatLogprobs {
        content: tokens.iter().map(entry).collect(),
    }
}

/// The legacy completions `logprobs`.
pub(super) fn text_logprobs(st: &AppState, tokens: &[LoggedToken]) -> TextLogprobs {
    let mut out = TextLogprobs::default();
    add_logprobs(st, &mut out, tokens, 0);
    out
}

/// Appends `tokens`, their text offsets moved on by `shift`.
fn add_logprobs(st: &AppState, out: &mut TextLogprobs, tokens: &[LoggedToken], shift: usize) {
    for t in tokens {
        out.tokens.push(st.token_piece(t.id).0);
        out.token_logprobs.push(Some(t.logprob.logprob));
        out.top_logprobs.push(Some(alternatives(st, &t.logprob)));
        out.text_offset.push(shift + t.offset);
    }
}

/// A token's alternatives, text to log-probability.
fn alternatives(st: &AppState, l: &TokenLogprob) -> serde_json::Map<String, serde_json::Value> {
    l.top
        .iter()
        .map(|&(i, l)| (st.token_piece(i).0, l.into()))
        .collect()
}

/// The echoed prompt `ids` (with `scores`, of its tokens after the first, when
/// they are shown): its text, and its tokens as the legacy `logprobs` lists.
fn echoed_prompt(
    st: &AppState,
    ids: &[u32],
    scores: Option<&[TokenLogprob]>,
) -> (String, Option<TextLogprobs>) {
    let mut text = String::new();
    let mut lists = TextLogprobs::default();
    for (k, &id) in ids.iter().enumerate() {
        let piece = st.token_piece(id).0;
        lists.text_offset.push(text.len());
        text.push_str(&piece);
        lists.tokens.push(piece);
        let score = k.checked_sub(1).and_then(|k| scores?.get(k));
        lists.token_logprobs.push(score.map(|s| s.logprob));
        lists.top_logprobs.push(score.map(|s| alternatives(st, s)));
    }
    (text, scores.map(|_| lists))
}

/// vLLM's `prompt_logprobs`: `null` for the first token, then each token's id
/// and its alternatives' ids with their log-probabilities and ranks.
fn listed_prompt(
    st: &AppState,
    ids: &[u32],
    scores: &[TokenLogprob],
) -> Vec<Option<BTreeMap<String, RankedLogprob>>> {
    let entry = |id: u32, logprob: f32, rank: usize| {
        let decoded_token = st.token_piece(id).0;
        (
            id.to_string(),
            RankedLogprob {
                logprob,
                rank,
                decoded_token,
            },
        )
    };
    std::iter::once(None)
        .chain(ids.iter().skip(1).zip(scores).map(|(&id, s)| {
            let mut m: BTreeMap<String, RankedLogprob> = s
                .top
                .iter()
                .enumerate()
                .map(|(r, &(i, l))| entry(i, l, r + 1))
                .collect();
            let (k, v) = entry(id, s.logprob, s.rank);
            m.insert(k, v);
            Some(m)
        }))
        .collect()
}

/// OpenAI's `tool_calls`: the arguments as JSON text.
pub(super) fn tool_calls_out(calls: &[ToolCall]) -> Vec<ToolCallOut> {
    calls
        .iter()
        .map(|c| ToolCallOut {
            id: c.id.clone(),
            kind: FunctionKind::Function,
            function: FunctionOut {
                name: c.name.clone(),
                arguments: c.arguments.to_string(),
            },
        })
        .collect()
}

/// OpenAI's finish reason of an answer: `tool_calls` when it called.
fn finish_reason(a: &Answer) -> Option<&'static str> {
    match a.calls.is_empty() {
        true => a.finish.map(FinishReason::as_str),
        false => Some("tool_calls"),
    }
}

pub(super) fn chat_choice(st: &AppState, index: usize, a: Answer) -> ChatChoice {
    let finish_reason = finish_reason(&a);
    let content = if a.text.is_empty() && !a.calls.is_empty() {
        None
    } else {
        Some(a.text)
    };
    ChatChoice {
        index,
        message: crate::openai::response::AssistantMessage {
            role: Role::Assistant,
            content,
            reasoning_content: a.reasoning,
            tool_calls: tool_calls_out(&a.calls),
        },
        finish_reason,
        logprobs: a.logprobs.map(|l| chat_logprobs(st, &l)),
    }
}

/// A completions choice; with `prompt` (its ids), the prompt as it is shown.
pub(super) fn text_choice(
    st: &AppState,
    index: usize,
    a: Answer,
    prompt: Option<(&[u32], PromptShown)>,
) -> TextChoice {
    let finish_reason = finish_reason(&a);
    let scores = a.prompt_logprobs.as_deref();
    let prompt_logprobs = prompt
        .filter(|(_, shown)| shown.listed)
        .zip(scores)
        .map(|((ids, _), s)| listed_prompt(st, ids, s));
    let (text, logprobs) = match prompt.filter(|(_, shown)| shown.echo) {
        None => (a.text, a.logprobs.map(|l| text_logprobs(st, &l))),
        Some((ids, shown)) => {
            let (mut text, lists) = echoed_prompt(st, ids, scores.filter(|_| shown.scored));
            let shift = text.len();
            text.push_str(&a.text);
            let logprobs = lists.map(|mut lists| {
                let tokens = a.logprobs.as_deref().unwrap_or_default();
                add_logprobs(st, &mut lists, tokens, shift);
                lists
            });
            (text, logprobs)
        }
    };
    TextChoice {
        index,
        finish_reason,
        text,
        logprobs,
        prompt_logprobs,
    }
}

/// The chunks of one streamed response, as SSE data lines.
pub(super) struct Chunks {
    pub kind: Kind,
    pub id: String,
    pub model: String,
    pub created: u64,
}

impl Chunks {
    fn chat(
        &self,
        index: usize,
        delta: Delta,
        finish: Option<&'static str>,
        logprobs: Option<ChatLogprobs>,
    ) -> String {
        json(&ChatCompletionChunk {
            header: self.chat_header(),
            choices: vec![ChunkChoice {
                index,
                delta,
                finish_reason: finish,
                logprobs,
            }],
            usage: None,
        })
    }

    fn text(
        &self,
        index: usize,
        text: String,
        finish: Option<&'static str>,
        logprobs: Option<TextLogprobs>,
    ) -> String {
        json(&TextCompletion {
            header: self.text_header(),
            choices: vec![TextChoice {
                index,
                text,
                finish_reason: finish,
                logprobs,
                prompt_logprobs: None,
            }],
            usage: None,
        })
    }

    fn chat_header(&self) -> Header<'_, ChatObject> {
        Header {
            id: &self.id,
            object: ChatObject::Chunk,
            created: self.created,
            model: &self.model,
        }
    }

    fn text_header(&self) -> Header<'_, TextObject> {
        Header {
            id: &self.id,
            object: TextObject::TextCompletion,
            created: self.created,
            model: &self.model,
        }
    }

    /// Answer text (`role` on a chat stream's first chunk), with its token's
    /// log-probability when asked for.
    pub fn content(
        &self,
        st: &AppState,
        index: usize,
        text: String,
        role: bool,
        token: Option<LoggedToken>,
    ) -> String {
        let tokens: Option<Vec<LoggedToken>> = token.map(|t| vec![t]);
        match self.kind {
            Kind::Chat => {
                let delta = Delta {
                    role: role.then_some(Role::Assistant),
                    content: Some(text),
                    ..Delta::default()
                };
                self.chat(index, delta, None, tokens.map(|t| chat_logprobs(st, &t)))
            }
            Kind::Text => self.text(index, text, None, tokens.map(|t| text_logprobs(st, &t))),
        }
    }

    /// A streamed completion's echoed prompt (`ids`, with the `scores` of its
    /// tokens after the first when they are shown), before its first token,
    /// as vLLM streams it.
    pub fn echoed(
        &self,
        st: &AppState,
        index: usize,
        ids: &[u32],
        scores: Option<&[TokenLogprob]>,
    ) -> String {
        let (text, lists) = echoed_prompt(st, ids, scores);
        self.text(index, text, None, lists)
    }

    /// Thinking (`delta.reasoning_content`, as vLLM and llama-server stream it).
    pub fn reasoning(&self, index: usize, text: String, role: bool) -> String {
        let delta = Delta {
            role: role.then_some(Role::Assistant),
            reasoning_content: Some(text),
            ..Delta::default()
        };
        self.chat(index, delta, None, None)
    }

    /// The chunks of `calls`, as OpenAI streams them: the id and name first,
    /// then the arguments in pieces.
    pub fn tool_calls(&self, index: usize, calls: &[ToolCall]) -> Vec<String> {
        let chunk = |call: ToolCallDelta| {
            let delta = Delta {
                tool_calls: vec![call],
                ..Delta::default()
            };
            self.chat(index, delta, None, None)
        };
        let mut out = Vec::new();
        for (k, c) in calls.iter().enumerate() {
            out.push(chunk(ToolCallDelta {
                index: k,
                id: Some(c.id.clone()),
                kind: Some(FunctionKind::Function),
                function: FunctionDelta {
                    name: Some(c.name.clone()),
                    arguments: String::new(),
                },
            }));
            for piece in c.argument_pieces() {
                out.push(chunk(ToolCallDelta {
                    index: k,
                    id: None,
                    kind: None,
                    function: FunctionDelta {
                        name: None,
                        arguments: piece,
                    },
                }));
            }
        }
        out
    }

    /// The last chunk of a choice.
    pub fn finish(&self, index: usize, reason: &'static str) -> String {
        match self.kind {
            Kind::Chat => self.chat(index, Delta::default(), Some(reason), None),
            Kind::Text => self.text(index, String::new(), Some(reason), None),
        }
    }

    /// The closing chunk of `stream_options.include_usage`: no choices, the usage.
    pub fn usage(&self, u: &Usage) -> String {
        let usage = Some(CompletionUsage::from(u));
        match self.kind {
            Kind::Chat => json(&ChatCompletionChunk {
                header: self.chat_header(),
                choices: Vec::new(),
                usage,
            }),
            Kind::Text => json(&TextCompletion {
                header: self.text_header(),
                choices: Vec::new(),
                usage,
            }),
        }
    }
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("response types serialize")
}
