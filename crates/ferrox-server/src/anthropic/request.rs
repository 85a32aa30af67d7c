//! The Messages request as clients send it, validated into [`Valid`]: the field
//! policy of the module header, the conversation with its system prompt and
//! prefill, and Anthropic's sampling bounds.

use ferrox_engine::GenerationParams;
use ferrox_models::chat::ChatMessage;
use ferrox_models::sampler::SamplingParams;
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::ApiError;

/// A Messages request as the client sends it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MessagesRequest {
    model: String,
    max_tokens: i64,
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
    /// Accepted; nothing here uses it.
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<IgnoredAny>,
    /// Accepted; nothing here varies by them (one tier, one speed, one place,
    /// an automatic prefix cache).
    #[serde(default)]
    #[allow(dead_code)]
    service_tier: Option<IgnoredAny>,
    #[serde(default)]
    #[allow(dead_code)]
    speed: Option<IgnoredAny>,
    #[serde(default)]
    #[allow(dead_code)]
    inference_geo: Option<IgnoredAny>,
    #[serde(default)]
    #[allow(dead_code)]
    cache_control: Option<IgnoredAny>,
    #[serde(default)]
    #[allow(dead_code)]
    diagnostics: Option<IgnoredAny>,
    #[serde(default)]
    #[allow(dead_code)]
    user_profile_id: Option<IgnoredAny>,
    #[serde(default)]
    #[allow(dead_code)]
    workspace_id: Option<IgnoredAny>,
    /// Refused by name (see the module header).
    #[serde(default)]
    tools: Option<IgnoredAny>,
    #[serde(default)]
    tool_choice: Option<IgnoredAny>,
    #[serde(default)]
    thinking: Option<IgnoredAny>,
    #[serde(default)]
    output_config: Option<IgnoredAny>,
    #[serde(default)]
    container: Option<IgnoredAny>,
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
    /// Images, documents, tool use and results: refused.
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
                .map(|b| match b {
                    Block::Text { text, .. } => Ok(text.as_str()),
                    Block::Other => Err(ApiError::invalid(
                        Some(field),
                        format!("{field}: only text content blocks are supported here (no images, documents or tool blocks)"),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|parts| parts.concat()),
        }
    }
}

/// A validated request: the conversation, an assistant prefill, the parameters.
pub(super) struct Valid {
    pub(super) model: String,
    pub(super) messages: Vec<ChatMessage>,
    pub(super) prefill: Option<String>,
    pub(super) params: GenerationParams,
    pub(super) stream: bool,
}

pub(super) fn parse(body: &[u8]) -> Result<Valid, ApiError> {
    let req: MessagesRequest = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(None, format!("invalid request body: {e}")))?;
    for (name, given) in [
        ("tools", req.tools.is_some()),
        ("tool_choice", req.tool_choice.is_some()),
        ("thinking", req.thinking.is_some()),
        ("output_config", req.output_config.is_some()),
        ("container", req.container.is_some()),
    ] {
        if given {
            return Err(ApiError::invalid(
                Some(name),
                format!("{name} is not supported by this server yet"),
            ));
        }
    }
    if req.max_tokens < 1 {
        return Err(ApiError::invalid(
            Some("max_tokens"),
            format!("max_tokens must be at least 1, got {}", req.max_tokens),
        ));
    }
    let (messages, prefill) = conversation(&req)?;
    Ok(Valid {
        params: GenerationParams {
            max_tokens: req.max_tokens as usize,
            sampling: sampling(&req)?,
            stop: req.stop_sequences.clone(),
            stop_token_ids: Vec::new(),
            logprobs: None,
            ignore_eos: false,
            grammar: None,
        },
        model: req.model,
        messages,
        prefill,
        stream: req.stream,
    })
}

/// Anthropic's sampling: temperature 0..=1 (default 1), `top_p` and `top_k` off
/// unless given, no min-p.
fn sampling(req: &MessagesRequest) -> Result<SamplingParams, ApiError> {
    let temperature = req.temperature.unwrap_or(1.0);
    if !(0.0..=1.0).contains(&temperature) {
        return Err(ApiError::invalid(
            Some("temperature"),
            format!("temperature must be between 0 and 1, got {temperature}"),
        ));
    }
    let top_p = req.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid(
            Some("top_p"),
            format!("top_p must be in (0, 1], got {top_p}"),
        ));
    }
    let top_k = match req.top_k {
        None => 0,
        Some(k) if k >= 1 => k as usize,
        Some(k) => {
            return Err(ApiError::invalid(
                Some("top_k"),
                format!("top_k must be at least 1, got {k}"),
            ));
        }
    };
    Ok(SamplingParams {
        temperature: temperature as f32,
        top_k,
        top_p: top_p as f32,
        min_p: 0.0,
        seed: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        ..SamplingParams::default()
    })
}

/// The chat messages (system first) and the assistant prefill, if the last
/// message is the assistant's.
fn conversation(req: &MessagesRequest) -> Result<(Vec<ChatMessage>, Option<String>), ApiError> {
    if req.messages.is_empty() {
        return Err(ApiError::invalid(
            Some("messages"),
            "messages: at least one message is required",
        ));
    }
    let mut out = Vec::with_capacity(req.messages.len() + 1);
    if let Some(system) = &req.system {
        let text = system.text("system")?;
        if !text.is_empty() {
            out.push(ChatMessage::new("system", &text));
        }
    }
    for (i, m) in req.messages.iter().enumerate() {
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        out.push(ChatMessage::new(
            role,
            &m.content.text(&format!("messages.{i}.content"))?,
        ));
    }
    let prefill = match req.messages.last().map(|m| m.role) {
        Some(Role::Assistant) => out.pop().map(|m| m.content),
        _ => None,
    };
    Ok((out, prefill))
}
