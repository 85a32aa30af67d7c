//! A `/v1/responses` body, validated into a [`Valid`] request: `input` as a
//! string or items (messages, earlier function calls and their outputs),
//! `instructions` as the system message, `tools` (functions) and
//! `tool_choice`, `text.format` on the structured-output machinery,
//! `reasoning.effort` for templates with that knob, and the sampling fields.

use ferrox_engine::GenerationParams;
use ferrox_sampling::grammar::GrammarSpec;
use ferrox_text::chat::{ChatMessage, TemplateVars};
use ferrox_text::tools::{Tool, ToolCall};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::field_policy::RESPONSES;
use crate::generation::{Generation, Prompt};
use crate::invalid::Invalid;
use crate::request::{policed, typed};
use crate::sampling::SamplingFields;
use crate::tool_request::{ToolChoice, ToolRequest};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    #[serde(default)]
    #[allow(dead_code)]
    model: Option<String>,
    input: Input,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    max_output_tokens: Option<i64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    top_k: Option<i64>,
    #[serde(default)]
    min_p: Option<f64>,
    #[serde(default)]
    seed: Option<i64>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    tools: Vec<ToolIn>,
    #[serde(default)]
    tool_choice: Option<ToolChoiceIn>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    text: Option<TextConfig>,
    #[serde(default)]
    reasoning: Option<ReasoningConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "expected a string or a list of input items")]
enum Input {
    Text(String),
    Items(Vec<Item>),
}

/// An input item: typed, or a bare `{role, content}` message.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a message, a function_call or a function_call_output item"
)]
enum Item {
    Typed(TypedItem),
    Message(MessageIn),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum TypedItem {
    Message(MessageIn),
    FunctionCall {
        call_id: String,
        name: String,
        arguments: String,
        #[serde(default)]
        #[allow(dead_code)]
        id: Option<IgnoredAny>,
        #[serde(default)]
        #[allow(dead_code)]
        status: Option<IgnoredAny>,
    },
    FunctionCallOutput {
        call_id: String,
        output: Content,
        #[serde(default)]
        #[allow(dead_code)]
        id: Option<IgnoredAny>,
        #[serde(default)]
        #[allow(dead_code)]
        status: Option<IgnoredAny>,
    },
    /// An earlier answer's reasoning: templates drop it from history.
    Reasoning {
        #[serde(flatten)]
        #[allow(dead_code)]
        rest: Map<String, Value>,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageIn {
    role: String,
    content: Content,
    #[serde(default)]
    #[allow(dead_code)]
    id: Option<IgnoredAny>,
    #[serde(default)]
    #[allow(dead_code)]
    status: Option<IgnoredAny>,
    #[serde(rename = "type", default)]
    #[allow(dead_code)]
    kind: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "expected a string or a list of content parts")]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part {
    InputText {
        text: String,
    },
    OutputText {
        text: String,
        #[serde(default)]
        #[allow(dead_code)]
        annotations: Option<IgnoredAny>,
        #[serde(default)]
        #[allow(dead_code)]
        logprobs: Option<IgnoredAny>,
    },
    /// Images, files, audio: refused by name.
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
struct ToolIn {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    #[serde(default)]
    #[allow(dead_code)]
    strict: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ToolChoiceIn {
    Mode(String),
    Function {
        #[serde(rename = "type")]
        kind: String,
        name: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TextConfig {
    #[serde(default)]
    format: Option<FormatIn>,
    /// How long the answer should be: the model decides here.
    #[serde(default)]
    #[allow(dead_code)]
    verbosity: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum FormatIn {
    Text,
    JsonObject,
    JsonSchema {
        #[serde(default)]
        #[allow(dead_code)]
        name: Option<String>,
        schema: Map<String, Value>,
        #[serde(default)]
        strict: Option<bool>,
        #[serde(default)]
        #[allow(dead_code)]
        description: Option<String>,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasoningConfig {
    #[serde(default)]
    effort: Option<String>,
    /// Summaries of the reasoning: the reasoning itself is returned instead.
    #[serde(default)]
    #[allow(dead_code)]
    summary: Option<IgnoredAny>,
    #[serde(default)]
    #[allow(dead_code)]
    generate_summary: Option<IgnoredAny>,
}

/// A request that passed validation.
pub(super) struct Valid {
    pub generation: Generation,
    pub stream: bool,
    /// What the response echoes of the request.
    pub echo: Echo,
}

/// The request's settings the response object repeats.
#[derive(Clone, Debug, Default)]
pub(super) struct Echo {
    pub instructions: Option<String>,
    pub max_output_tokens: Option<usize>,
    pub temperature: f32,
    pub top_p: f32,
    pub tools: Vec<Tool>,
    /// `auto`, `required`, `none`, or the forced function's name.
    pub tool_choice: ToolChoiceEcho,
    pub parallel_tool_calls: bool,
    pub text_format: Value,
}

#[derive(Clone, Debug, Default)]
pub(super) enum ToolChoiceEcho {
    #[default]
    Auto,
    None,
    Required,
    Function(String),
}

/// Validates a `/v1/responses` body.
pub(super) fn parse(body: &Value) -> Result<Valid, ApiError> {
    let b: Body = typed(&policed(&RESPONSES, body)?)?;
    let max_output_tokens = match b.max_output_tokens {
        Some(n) if n < 1 => {
            return Err(Invalid::OutOfRange {
                field: "max_output_tokens",
                bound: "at least 1".into(),
                got: n.to_string(),
            }
            .into());
        }
        n => n.map(|n| n as usize),
    };
    let sampling = SamplingFields {
        temperature: b.temperature,
        top_p: b.top_p,
        top_k: b.top_k,
        min_p: b.min_p,
        seed: b.seed,
        ..SamplingFields::default()
    }
    .validate(&crate::sampling::OPENAI)?;
    let mut messages: Vec<ChatMessage> = b
        .instructions
        .iter()
        .map(|i| ChatMessage::new("system", i))
        .collect();
    messages.extend(conversation(b.input)?);
    let tools = b
        .tools
        .into_iter()
        .enumerate()
        .map(|(i, t)| tool(i, t))
        .collect::<Result<Vec<_>, _>>()?;
    let (choice, choice_echo) = tool_choice(b.tool_choice)?;
    let parallel = b.parallel_tool_calls.unwrap_or(true);
    let offered = match choice {
        Some(c) => ToolRequest::new(tools.clone(), c, parallel)?,
        None => None,
    };
    let (grammar, text_format) = format(b.text.and_then(|t| t.format))?;
    if offered.is_some() && grammar.is_some() {
        return Err(Invalid::Conflict {
            field: "text.format",
            why: "give tools or a text.format, not both",
        }
        .into());
    }
    let mut vars = TemplateVars::new();
    if let Some(effort) = b.reasoning.and_then(|r| r.effort) {
        vars.insert("reasoning_effort".into(), Value::String(effort));
    }
    let echo = Echo {
        instructions: b.instructions,
        max_output_tokens,
        temperature: sampling.temperature,
        top_p: sampling.top_p,
        tools,
        tool_choice: choice_echo,
        parallel_tool_calls: parallel,
        text_format,
    };
    Ok(Valid {
        generation: Generation {
            prompt: Prompt::Chat {
                messages,
                vars,
                prefill: None,
            },
            tools: offered,
            grammar,
            params: GenerationParams {
                max_tokens: 0,
                sampling,
                stop: Vec::new(),
                stop_token_ids: Vec::new(),
                logprobs: None,
                prompt_logprobs: None,
                embed: None,
                ignore_eos: false,
                grammar: None,
            },
            max_tokens: max_output_tokens,
            context: None,
            choices: 1,
        },
        stream: b.stream.unwrap_or(false),
        echo,
    })
}

fn content_text(field: &str, c: Content) -> Result<String, ApiError> {
    match c {
        Content::Text(t) => Ok(t),
        Content::Parts(parts) => parts
            .into_iter()
            .map(|p| match p {
                Part::InputText { text } | Part::OutputText { text, .. } => Ok(text),
                Part::Other => Err(ApiError::from(Invalid::Unsupported {
                    field: field.to_string(),
                    what: "only text parts are supported (no images, files or audio)",
                })),
            })
            .collect(),
    }
}

/// The input as the chat template's messages: a function call joins the
/// assistant message before it (or starts one), its output is a `tool`
/// message.
fn conversation(input: Input) -> Result<Vec<ChatMessage>, ApiError> {
    let items = match input {
        Input::Text(t) => return Ok(vec![ChatMessage::new("user", &t)]),
        Input::Items(items) => items,
    };
    let mut out: Vec<ChatMessage> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let field = format!("input[{i}].content");
        match item {
            Item::Message(m) | Item::Typed(TypedItem::Message(m)) => {
                let role = match m.role.as_str() {
                    "developer" => "system",
                    r @ ("system" | "user" | "assistant") => r,
                    other => {
                        return Err(Invalid::OutOfRange {
                            field: "role",
                            bound: "user, assistant, system or developer".into(),
                            got: format!("input[{i}].role {other:?}"),
                        }
                        .into());
                    }
                };
                out.push(ChatMessage::new(role, &content_text(&field, m.content)?));
            }
            Item::Typed(TypedItem::FunctionCall {
                call_id,
                name,
                arguments,
                ..
            }) => {
                let arguments = serde_json::from_str(&arguments).map_err(|e| Invalid::Body {
                    path: Some(format!("input[{i}].arguments")),
                    detail: format!("not JSON: {e}"),
                })?;
                let call = ToolCall {
                    id: call_id,
                    name,
                    arguments,
                };
                match out.last_mut() {
                    Some(m) if m.role == "assistant" => m.tool_calls.push(call),
                    _ => {
                        let mut m = ChatMessage::new("assistant", "");
                        m.tool_calls.push(call);
                        out.push(m);
                    }
                }
            }
            Item::Typed(TypedItem::FunctionCallOutput {
                call_id, output, ..
            }) => {
                let mut m = ChatMessage::new("tool", &content_text(&field, output)?);
                m.tool_call_id = Some(call_id);
                out.push(m);
            }
            Item::Typed(TypedItem::Reasoning { .. }) => {}
        }
    }
    if out.is_empty() {
        return Err(Invalid::Empty {
            field: "input",
            item: "item",
        }
        .into());
    }
    Ok(out)
}

fn tool(i: usize, t: ToolIn) -> Result<Tool, ApiError> {
    let field = format!("tools[{i}]");
    if t.kind != "function" {
        return Err(Invalid::Unsupported {
            field,
            what: "only function tools are supported (no built-in tools such as web or file search)",
        }
        .into());
    }
    let name = t.name.filter(|n| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    });
    let Some(name) = name else {
        return Err(Invalid::Unsupported {
            field,
            what: "name must be a name of letters, digits, _ and -",
        }
        .into());
    };
    Ok(Tool {
        name,
        description: t.description,
        parameters: t.parameters.map_or_else(
            || serde_json::json!({"type": "object", "properties": {}}),
            Value::Object,
        ),
    })
}

/// The choice (`None`: `none`, no tools offered) and how the response repeats
/// it.
fn tool_choice(c: Option<ToolChoiceIn>) -> Result<(Option<ToolChoice>, ToolChoiceEcho), ApiError> {
    Ok(match c {
        None => (Some(ToolChoice::Auto), ToolChoiceEcho::Auto),
        Some(ToolChoiceIn::Mode(m)) => match m.as_str() {
            "auto" => (Some(ToolChoice::Auto), ToolChoiceEcho::Auto),
            "required" => (Some(ToolChoice::Required), ToolChoiceEcho::Required),
            "none" => (None, ToolChoiceEcho::None),
            other => {
                return Err(Invalid::OutOfRange {
                    field: "tool_choice",
                    bound: "none, auto, required or a function".into(),
                    got: format!("{other:?}"),
                }
                .into());
            }
        },
        Some(ToolChoiceIn::Function { kind, name }) if kind == "function" => (
            Some(ToolChoice::Named(name.clone())),
            ToolChoiceEcho::Function(name),
        ),
        Some(ToolChoiceIn::Function { kind, .. }) => {
            return Err(Invalid::OutOfRange {
                field: "tool_choice",
                bound: "of type \"function\"".into(),
                got: format!("{kind:?}"),
            }
            .into());
        }
    })
}

/// `text.format`: the grammar, and the format as the response repeats it.
fn format(f: Option<FormatIn>) -> Result<(Option<GrammarSpec>, Value), ApiError> {
    Ok(match f {
        None | Some(FormatIn::Text) => (None, serde_json::json!({"type": "text"})),
        Some(FormatIn::JsonObject) => (
            Some(GrammarSpec::JsonObject),
            serde_json::json!({"type": "json_object"}),
        ),
        Some(FormatIn::JsonSchema {
            name,
            schema,
            strict,
            ..
        }) => {
            let echo = serde_json::json!({"type": "json_schema", "name": name, "schema": schema, "strict": strict});
            (
                Some(GrammarSpec::JsonSchema {
                    schema: Value::Object(schema),
                    strict: strict.unwrap_or(false),
                }),
                echo,
            )
        }
    })
}
