//! The Messages request as clients send it, validated into [`Valid`]: the field
//! policy of the module header, the conversation with its system prompt and
//! prefill, and Anthropic's sampling bounds.

use ferrox_engine::GenerationParams;
use ferrox_sampling::sampler::SamplingParams;
use ferrox_text::chat::{ChatMessage, TemplateVars};
use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::error::ApiError;
use crate::generation::{Generation, Prompt};
use crate::invalid::Invalid;
use crate::sampling::SamplingFields;
use crate::tool_request::{ToolChoice, ToolRequest};
use ferrox_text::tools::{Tool, ToolCall};
use serde_json::Value;

/// A Messages request as the client sends it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MessagesRequest {
    /// Required by the API; whatever it names, the one served model answers.
    #[expect(dead_code, reason = "required, checked for its type only")]
    model: String,
    /// Required by `/v1/messages`; `count_tokens` takes none.
    #[serde(default)]
    max_tokens: Option<i64>,
    messages: Vec<InputMessage>,
    #[serde(default)]
    system: Option<Content>,
    #[serde(default)]
    stop_sequences: Vec<String>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    tools: Vec<ToolIn>,
    #[serde(default)]
    tool_choice: Option<ToolChoiceIn>,
    #[serde(default)]
    thinking: Option<ThinkingIn>,
}

/// `thinking`: whether a thinking model's thinking is shown, as `thinking`
/// blocks. `budget_tokens` is checked but not enforced: `max_tokens` bounds
/// the thinking and the answer together.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
enum ThinkingIn {
    Enabled { budget_tokens: i64 },
    Adaptive,
    Disabled,
}

/// A tool the client offers: a function with an input schema. Anthropic's
/// server tools (web search, code execution, ...) name another `type`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolIn {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    input_schema: Option<Value>,
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    cache_control: Option<IgnoredAny>,
}

/// What the model may or must do with the tools.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
enum ToolChoiceIn {
    Auto {
        #[serde(default)]
        disable_parallel_tool_use: bool,
    },
    Any {
        #[serde(default)]
        disable_parallel_tool_use: bool,
    },
    Tool {
        name: String,
        #[serde(default)]
        disable_parallel_tool_use: bool,
    },
    None,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InputMessage {
    role: Role,
    content: Content,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    User,
    Assistant,
}

/// Text content: a string, or a list of blocks.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
        /// Prompt caching hints: the prefix cache is automatic here.
        #[serde(default)]
        #[allow(dead_code)]
        cache_control: Option<IgnoredAny>,
    },
    /// An assistant's call to a tool.
    ToolUse {
        id: String,
        name: String,
        input: Value,
        #[serde(default)]
        #[allow(dead_code)]
        cache_control: Option<IgnoredAny>,
    },
    /// A user's result of a call.
    ToolResult {
        tool_use_id: String,
        #[serde(default)]
        content: Option<Content>,
        #[serde(default)]
        is_error: bool,
        #[serde(default)]
        #[allow(dead_code)]
        cache_control: Option<IgnoredAny>,
    },
    /// Earlier thinking of the assistant's: chat templates drop it from the
    /// history, so it is read and left out.
    Thinking {
        #[allow(dead_code)]
        thinking: String,
        #[serde(default)]
        #[allow(dead_code)]
        signature: Option<IgnoredAny>,
    },
    RedactedThinking {
        #[allow(dead_code)]
        data: String,
    },
    /// Images and documents: refused.
    #[serde(other)]
    Other,
}

impl Content {
    /// The text of the content, blocks joined; `field` names it in errors.
    fn text(&self, field: &str) -> Result<String, ApiError> {
        match self {
            Content::Text(t) => Ok(t.clone()),
            Content::Blocks(blocks) => blocks
                .iter()
                .filter(|b| {
                    !matches!(
                        b,
                        Block::ToolUse { .. }
                            | Block::ToolResult { .. }
                            | Block::Thinking { .. }
                            | Block::RedactedThinking { .. }
                    )
                })
                .map(|b| match b {
                    Block::Text { text, .. } => Ok(text.as_str()),
                    _ => Err(ApiError::from(Invalid::Unsupported {
                        field: field.to_string(),
                        what: "only text and tool blocks are supported here (no images or documents)",
                    })),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|parts| parts.concat()),
        }
    }
}

impl Content {
    /// The tool calls of an assistant message.
    fn tool_uses(&self) -> Vec<ToolCall> {
        let Content::Blocks(blocks) = self else {
            return Vec::new();
        };
        blocks
            .iter()
            .filter_map(|b| match b {
                Block::ToolUse {
                    id, name, input, ..
                } => Some(ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: input.clone(),
                }),
                _ => None,
            })
            .collect()
    }

    /// The tool results of a user message: the call id and the result's text
    /// (an error result says so).
    fn tool_results(&self, field: &str) -> Result<Vec<(String, String)>, ApiError> {
        let Content::Blocks(blocks) = self else {
            return Ok(Vec::new());
        };
        blocks
            .iter()
            .filter_map(|b| match b {
                Block::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                    ..
                } => Some((tool_use_id, content, is_error)),
                _ => None,
            })
            .map(|(id, content, is_error)| {
                let text = match content {
                    Some(c) => c.text(field)?,
                    None => String::new(),
                };
                let text = if *is_error {
                    format!("error: {text}")
                } else {
                    text
                };
                Ok((id.clone(), text))
            })
            .collect()
    }
}

/// `tools` and `tool_choice` as the chat completions machinery takes them.
fn tool_request(req: &MessagesRequest) -> Result<Option<ToolRequest>, ApiError> {
    let mut tools = Vec::with_capacity(req.tools.len());
    for (i, t) in req.tools.iter().enumerate() {
        let field = format!("tools.{i}");
        if let Some(kind) = t.kind.as_ref().filter(|k| *k != "custom") {
            return Err(Invalid::ServerTool {
                field,
                kind: kind.clone(),
            }
            .into());
        }
        let Some(schema @ Value::Object(_)) = &t.input_schema else {
            return Err(Invalid::Unsupported {
                field,
                what: "input_schema must be a JSON schema object",
            }
            .into());
        };
        tools.push(Tool {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters: schema.clone(),
        });
    }
    let (choice, single) = match &req.tool_choice {
        None => (ToolChoice::Auto, false),
        Some(ToolChoiceIn::None) => return Ok(None),
        Some(ToolChoiceIn::Auto {
            disable_parallel_tool_use,
        }) => (ToolChoice::Auto, *disable_parallel_tool_use),
        Some(ToolChoiceIn::Any {
            disable_parallel_tool_use,
        }) => (ToolChoice::Required, *disable_parallel_tool_use),
        Some(ToolChoiceIn::Tool {
            name,
            disable_parallel_tool_use,
        }) => (ToolChoice::Named(name.clone()), *disable_parallel_tool_use),
    };
    ToolRequest::new(tools, choice, !single)
}

/// A validated request: the conversation, an assistant prefill, the parameters.
pub(super) struct Valid {
    pub(super) messages: Vec<ChatMessage>,
    pub(super) prefill: Option<String>,
    pub(super) params: GenerationParams,
    pub(super) stream: bool,
    pub(super) tools: Option<ToolRequest>,
    /// Whether the answer shows a thinking model's thinking (`thinking`
    /// enabled or adaptive).
    pub(super) thinking: bool,
}

impl Valid {
    /// What the request asks the engine for: the conversation, continued from
    /// the prefill when the last message is the assistant's, rendered with
    /// `vars`.
    pub(super) fn generation(self, vars: TemplateVars) -> Generation {
        Generation {
            prompt: Prompt::Chat {
                messages: self.messages,
                vars,
                prefill: self.prefill,
            },
            tools: self.tools,
            grammar: None,
            max_tokens: Some(self.params.max_tokens),
            params: self.params,
            context: None,
            choices: 1,
        }
    }
}

/// A `/v1/messages` body, validated.
pub(super) fn parse(body: &[u8]) -> Result<Valid, ApiError> {
    let req = read(&crate::field_policy::ANTHROPIC_MESSAGES, body)?;
    let max_tokens = match req.max_tokens {
        None => {
            return Err(Invalid::Missing {
                field: "max_tokens",
            }
            .into());
        }
        Some(n) if n < 1 => {
            return Err(Invalid::OutOfRange {
                field: "max_tokens",
                bound: "at least 1".into(),
                got: n.to_string(),
            }
            .into());
        }
        Some(n) => n as usize,
    };
    valid(req, max_tokens)
}

/// A `/v1/messages/count_tokens` body (the conversation and tools, no
/// generation fields), validated as the prompt of a one-token answer.
pub(super) fn parse_count(body: &[u8]) -> Result<Valid, ApiError> {
    valid(read(&crate::field_policy::ANTHROPIC_COUNT_TOKENS, body)?, 1)
}

/// `body` through `policy` into the typed request.
fn read(policy: &crate::field_policy::Policy, body: &[u8]) -> Result<MessagesRequest, ApiError> {
    crate::json_body::check_json(body)?;
    let unreadable = |e: serde_json::Error| Invalid::Body {
        path: None,
        detail: e.to_string(),
    };
    let body: Value = serde_json::from_slice(body).map_err(unreadable)?;
    let fields = policy.apply(body)?;
    Ok(serde_json::from_value(Value::Object(fields)).map_err(unreadable)?)
}

fn valid(req: MessagesRequest, max_tokens: usize) -> Result<Valid, ApiError> {
    let (messages, prefill) = conversation(&req)?;
    let thinking = match req.thinking {
        None | Some(ThinkingIn::Disabled) => false,
        Some(ThinkingIn::Adaptive) => true,
        Some(ThinkingIn::Enabled { budget_tokens }) if budget_tokens < 1 => {
            return Err(Invalid::OutOfRange {
                field: "thinking.budget_tokens",
                bound: "at least 1".into(),
                got: budget_tokens.to_string(),
            }
            .into());
        }
        Some(ThinkingIn::Enabled { .. }) => true,
    };
    let tools = tool_request(&req)?;
    if tools.is_some() && prefill.is_some() {
        return Err(Invalid::Conflict {
            field: "messages",
            why: "an assistant prefill cannot be combined with tools",
        }
        .into());
    }
    Ok(Valid {
        tools,
        params: GenerationParams {
            max_tokens,
            sampling: sampling(&req)?,
            stop: req.stop_sequences.clone(),
            stop_token_ids: Vec::new(),
            logprobs: None,
            prompt_logprobs: None,
            embed: None,
            ignore_eos: false,
            grammar: None,
        },
        messages,
        prefill,
        stream: req.stream,
        thinking,
    })
}

/// Anthropic's sampling: temperature 0..=1 (default 1), `top_p` and `top_k` off
/// unless given, no min-p.
fn sampling(req: &MessagesRequest) -> Result<SamplingParams, Invalid> {
    let fields = SamplingFields {
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        ..SamplingFields::default()
    };
    fields.validate(&crate::sampling::ANTHROPIC)
}

/// The chat messages (system first) and the assistant prefill, if the last
/// message is the assistant's.
fn conversation(req: &MessagesRequest) -> Result<(Vec<ChatMessage>, Option<String>), ApiError> {
    if req.messages.is_empty() {
        return Err(Invalid::Empty {
            field: "messages",
            item: "message",
        }
        .into());
    }
    let mut out = Vec::with_capacity(req.messages.len() + 1);
    if let Some(system) = &req.system {
        let text = system.text("system")?;
        if !text.is_empty() {
            out.push(ChatMessage::new("system", &text));
        }
    }
    for (i, m) in req.messages.iter().enumerate() {
        let field = format!("messages.{i}.content");
        let text = m.content.text(&field)?;
        match m.role {
            Role::User => {
                for (id, result) in m.content.tool_results(&field)? {
                    let mut r = ChatMessage::new("tool", &result);
                    r.tool_call_id = Some(id);
                    out.push(r);
                }
                if !text.is_empty() || m.content.tool_results(&field)?.is_empty() {
                    out.push(ChatMessage::new("user", &text));
                }
            }
            Role::Assistant => {
                let mut a = ChatMessage::new("assistant", &text);
                a.tool_calls = m.content.tool_uses();
                out.push(a);
            }
        }
    }
    let prefill = match out.last() {
        Some(m) if m.role == "assistant" && m.tool_calls.is_empty() => out.pop().map(|m| m.content),
        _ => None,
    };
    Ok((out, prefill))
}
