//! The bodies of `POST /v1/chat/completions` and `POST /v1/completions` as
//! clients send them, as serde types. Only types are checked here; bounds and
//! combinations are [`crate::request`]'s, and which fields exist at all is
//! [`crate::field_policy`]'s (it runs first, so these structs need not refuse
//! unknown fields themselves).
//!
//! A body is read into two types: [`SharedFields`], which both endpoints take,
//! and [`ChatFields`] or [`CompletionFields`]. `null` is the same as absent
//! everywhere, as in OpenAI's API.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value};

/// The fields chat and completions share.
#[derive(Debug, Default, Deserialize)]
pub struct SharedFields {
    /// Whatever it names, the one served model answers (llama-server's way);
    /// read only to refuse a value that is not a string.
    pub model: Option<String>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub seed: Option<i64>,
    /// llama-server's `repeat_last_n`: tokens the penalties look back over
    /// (-1: the whole context, 0: none).
    pub repeat_last_n: Option<i64>,
    pub stop: Option<Stop>,
    pub stop_token_ids: Option<Vec<u32>>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// Token id (as a string key) to bias.
    pub logit_bias: Option<BTreeMap<String, f64>>,
    pub n: Option<i64>,
    pub ignore_eos: Option<bool>,
    pub response_format: Option<ResponseFormat>,
    /// llama-server's JSON schema.
    pub json_schema: Option<Schema>,
    /// llama-server's grammar (GBNF or Lark).
    pub grammar: Option<String>,
    /// vLLM's names for the same constraints.
    pub guided_json: Option<Schema>,
    pub guided_regex: Option<String>,
    pub guided_grammar: Option<String>,
    pub guided_choice: Option<Vec<String>>,
}

impl SharedFields {
    /// The sampling fields, for the one validator.
    pub fn sampling_fields(&self) -> crate::sampling::SamplingFields {
        crate::sampling::SamplingFields {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            repetition_penalty: self.repetition_penalty,
            logit_bias: self.logit_bias.clone(),
            seed: self.seed,
            penalty_last_n: self.repeat_last_n,
        }
    }
}

/// `stop`: one string or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "expected a string or an array of strings")]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// OpenAI's `response_format`.
#[derive(Debug, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    expecting = "an object with a type: text, json_object or json_schema"
)]
pub enum ResponseFormat {
    Text,
    /// Any JSON object; llama-server also takes a `schema` here.
    JsonObject {
        schema: Option<Schema>,
    },
    JsonSchema {
        json_schema: Option<JsonSchemaFormat>,
    },
}

/// `response_format.json_schema`.
#[derive(Debug, Deserialize)]
pub struct JsonSchemaFormat {
    pub name: Option<String>,
    pub description: Option<String>,
    pub schema: Option<Schema>,
    pub strict: Option<bool>,
}

/// A JSON schema: an object, `true`, or (vLLM) a string holding one.
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "expected a JSON schema object")]
pub enum Schema {
    Object(Map<String, Value>),
    AnyValue(bool),
    Text(String),
}

/// The fields only chat takes.
#[derive(Debug, Deserialize)]
pub struct ChatFields {
    pub messages: Option<Vec<Message>>,
    pub max_completion_tokens: Option<i64>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<i64>,
    pub tools: Option<Vec<ToolDef>>,
    pub tool_choice: Option<ToolChoiceIn>,
    pub parallel_tool_calls: Option<bool>,
    /// Variables for the chat template (`{"enable_thinking": false}`).
    pub chat_template_kwargs: Option<Map<String, Value>>,
    pub reasoning_effort: Option<ReasoningEffort>,
    /// vLLM's: the last message is the assistant's, and the answer continues it.
    pub continue_final_message: Option<bool>,
    /// vLLM's: whether the prompt opens the assistant's turn (only `false`
    /// with `continue_final_message`).
    pub add_generation_prompt: Option<bool>,
}

/// The fields only completions takes.
#[derive(Debug, Deserialize)]
pub struct CompletionFields {
    pub prompt: Option<Prompt>,
    /// The legacy `logprobs`: how many alternatives per token.
    pub logprobs: Option<i64>,
    /// The text after the completion: fill-in-the-middle.
    pub suffix: Option<String>,
    /// Answer the prompt before the completion (with `logprobs`, scored).
    pub echo: Option<bool>,
    /// vLLM's prompt scoring: each prompt token's log-probability with this
    /// many alternatives.
    pub prompt_logprobs: Option<i64>,
}

/// A completions prompt: text, texts, token ids, or lists of token ids.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a string, an array of strings, an array of token ids or an array of arrays of token ids"
)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    Minimal,
    Low,
    Medium,
    High,
}

impl ReasoningEffort {
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }
}

/// One message of the conversation, by role (`developer` is OpenAI's newer
/// name for `system`). Fields OpenAI's SDKs echo back from an earlier answer
/// (`refusal`, `annotations`, `audio`, `function_call`, `reasoning_content`)
/// are accepted and mean nothing for the prompt; any other field is refused.
#[derive(Debug, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase", deny_unknown_fields)]
pub enum Message {
    System {
        content: Content,
        name: Option<String>,
    },
    Developer {
        content: Content,
        name: Option<String>,
    },
    User {
        content: Content,
        name: Option<String>,
    },
    Assistant {
        content: Option<Content>,
        name: Option<String>,
        tool_calls: Option<Vec<ToolCallIn>>,
        refusal: Option<IgnoredAny>,
        annotations: Option<IgnoredAny>,
        audio: Option<IgnoredAny>,
        function_call: Option<IgnoredAny>,
        reasoning_content: Option<IgnoredAny>,
    },
    Tool {
        content: Content,
        tool_call_id: String,
    },
}

/// Message content: a string, or a list of parts.
#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "expected a string or an array of content parts")]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// A content part: text; images, audio and files are named so the refusal can
/// say which part is not supported.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text {
        text: String,
    },
    #[serde(other)]
    NotText,
}

/// A call in an assistant message of the history.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallIn {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub function: FunctionCallIn,
    pub index: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionCallIn {
    pub name: String,
    /// JSON text, as OpenAI sends it; an object is taken too.
    pub arguments: Arguments,
}

#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a JSON string (or an object) of arguments"
)]
pub enum Arguments {
    Json(String),
    Object(Map<String, Value>),
}

/// A tool on offer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDef {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: Option<FunctionDef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionDef {
    pub name: String,
    pub description: Option<String>,
    /// The arguments' JSON schema.
    pub parameters: Option<Map<String, Value>>,
    /// OpenAI's strict schemas: the call is always constrained to the schema
    /// here when the choice forces a call.
    pub strict: Option<bool>,
}

/// `tool_choice`: `none`, `auto`, `required`, or a named function.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}"
)]
pub enum ToolChoiceIn {
    Mode(String),
    Named(NamedChoice),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedChoice {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: NamedFunction,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedFunction {
    pub name: String,
}
