//! The answers of chat and completions as serde types: whole bodies
//! ([`ChatCompletion`], [`TextCompletion`]), stream chunks
//! ([`ChatCompletionChunk`], [`TextCompletion`] again, as OpenAI streams it),
//! and their parts. Field order is OpenAI's; `null` fields OpenAI sends
//! (`finish_reason`, `logprobs`) are sent, optional ones are left out.

use std::collections::BTreeMap;

use serde::Serialize;

/// The `object` of a chat answer.
#[derive(Clone, Copy, Debug, Serialize)]
pub enum ChatObject {
    #[serde(rename = "chat.completion")]
    Completion,
    #[serde(rename = "chat.completion.chunk")]
    Chunk,
}

/// The `object` of a completions answer and of its chunks.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub enum TextObject {
    #[default]
    #[serde(rename = "text_completion")]
    TextCompletion,
}

/// The fields every answer and chunk starts with.
#[derive(Clone, Debug, Serialize)]
pub struct Header<'a, O> {
    pub id: &'a str,
    pub object: O,
    pub created: u64,
    pub model: &'a str,
}

/// `POST /v1/chat/completions` without streaming.
#[derive(Debug, Serialize)]
pub struct ChatCompletion<'a> {
    #[serde(flatten)]
    pub header: Header<'a, ChatObject>,
    pub choices: Vec<ChatChoice>,
    pub usage: CompletionUsage,
}

#[derive(Debug, Serialize)]
pub struct ChatChoice {
    pub index: usize,
    pub message: AssistantMessage,
    pub finish_reason: Option<&'static str>,
    pub logprobs: Option<ChatLogprobs>,
}

/// The answer: `content` is `null` when the answer is only tool calls.
#[derive(Debug, Serialize)]
pub struct AssistantMessage {
    pub role: Role,
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallOut>,
}

#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Assistant,
}

#[derive(Debug, Serialize)]
pub struct ToolCallOut {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: FunctionKind,
    pub function: FunctionOut,
}

#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FunctionKind {
    Function,
}

#[derive(Debug, Serialize)]
pub struct FunctionOut {
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

/// Chat's `logprobs`.
#[derive(Debug, Default, Serialize)]
pub struct ChatLogprobs {
    pub content: Vec<TokenLogprobOut>,
}

/// One token's log-probability, with its alternatives.
#[derive(Debug, Serialize)]
pub struct TokenLogprobOut {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Debug, Serialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// A chat stream chunk; the last one of a stream with `include_usage` has no
/// choices and the usage.
#[derive(Debug, Serialize)]
pub struct ChatCompletionChunk<'a> {
    #[serde(flatten)]
    pub header: Header<'a, ChatObject>,
    pub choices: Vec<ChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<CompletionUsage>,
}

#[derive(Debug, Serialize)]
pub struct ChunkChoice {
    pub index: usize,
    pub delta: Delta,
    pub finish_reason: Option<&'static str>,
    pub logprobs: Option<ChatLogprobs>,
}

/// What a chunk adds to the answer.
#[derive(Debug, Default, Serialize)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallDelta>,
}

/// A piece of a tool call: its first delta has the id, type and name, later
/// ones pieces of the arguments.
#[derive(Debug, Serialize)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<FunctionKind>,
    pub function: FunctionDelta,
}

#[derive(Debug, Serialize)]
pub struct FunctionDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub arguments: String,
}

/// `POST /v1/completions`, whole or as a stream chunk (OpenAI streams the same
/// object).
#[derive(Debug, Serialize)]
pub struct TextCompletion<'a> {
    #[serde(flatten)]
    pub header: Header<'a, TextObject>,
    pub choices: Vec<TextChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<CompletionUsage>,
}

#[derive(Debug, Serialize)]
pub struct TextChoice {
    pub index: usize,
    pub text: String,
    pub finish_reason: Option<&'static str>,
    pub logprobs: Option<TextLogprobs>,
    /// vLLM's `prompt_logprobs`: per prompt token (`null` for the first), its
    /// id and the alternatives' ids, each with its log-probability.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<Vec<Option<BTreeMap<String, RankedLogprob>>>>,
}

/// One entry of vLLM's `prompt_logprobs`.
#[derive(Debug, Serialize)]
pub struct RankedLogprob {
    pub logprob: f32,
    pub rank: usize,
    pub decoded_token: String,
}

/// The legacy completions `logprobs`: parallel lists (an echoed prompt's
/// first token has no log-probability: `null`).
#[derive(Debug, Default, Serialize)]
pub struct TextLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<Option<f32>>,
    /// Each token's alternatives, text to log-probability.
    pub top_logprobs: Vec<Option<serde_json::Map<String, serde_json::Value>>>,
    pub text_offset: Vec<usize>,
}

/// OpenAI's usage, with the prompt tokens the prefix cache supplied.
#[derive(Clone, Debug, Serialize)]
pub struct CompletionUsage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

#[derive(Clone, Debug, Serialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

impl From<&ferrox_engine::Usage> for CompletionUsage {
    fn from(u: &ferrox_engine::Usage) -> CompletionUsage {
        CompletionUsage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.prompt_tokens + u.completion_tokens,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: u.cached_tokens,
            },
        }
    }
}
