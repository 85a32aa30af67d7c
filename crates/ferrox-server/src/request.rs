//! Request bodies to validated requests (SPEC S17). Pure: JSON in, a
//! [`ValidRequest`] or an [`ApiError`] naming the field out.
//!
//! Invariants: every field is type-checked with a message naming it; parameters
//! ferrox does not implement and that would change the answer (`n > 1`, `echo`,
//! `functions`, ...) are refused, never silently ignored; fields that change
//! nothing (`user`, `metadata`, ...) are accepted. The output-constraint fields
//! are read by [`crate::structured`], the tool fields by [`crate::tool_request`].

use ferrox_engine::GenerationParams;
use ferrox_models::chat::{ChatMessage, TemplateVars};
use ferrox_models::grammar::GrammarSpec;
use ferrox_models::sampler::SamplingParams;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::field_policy::{self, Endpoint};

/// What the prompt is.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    /// A conversation for the chat template.
    Chat(Vec<ChatMessage>),
    /// One or more raw text prompts (one choice each).
    Text(Vec<String>),
    /// One or more prompts given as token ids.
    Tokens(Vec<Vec<u32>>),
}

/// A request that passed validation.
#[derive(Debug, Clone)]
pub struct ValidRequest {
    pub model: Option<String>,
    pub prompt: PromptInput,
    /// `max_tokens` / `max_completion_tokens`, if given.
    pub max_tokens: Option<usize>,
    /// Generation parameters (`max_tokens` filled in once the prompt is tokenized).
    pub params: GenerationParams,
    pub stream: bool,
    pub include_usage: bool,
    /// The grammar the output must follow (compiled by the handler).
    pub grammar: Option<GrammarSpec>,
    /// The tools offered (chat only).
    pub tools: Option<crate::tool_request::ToolRequest>,
    /// Extra chat template variables: `chat_template_kwargs`, and
    /// `reasoning_effort` for templates with that knob (chat only).
    pub template_vars: TemplateVars,
}

/// The most stop strings a request may give (OpenAI's bound).
const MAX_STOPS: usize = 4;

pub(crate) fn type_error(field: &str, want: &str, got: &Value) -> ApiError {
    let kind = match got {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    ApiError::invalid(Some(field), format!("{field}: expected {want}, got {kind}"))
}

fn number(o: &Map<String, Value>, field: &str) -> Result<Option<f64>, ApiError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite())
            .map(Some)
            .ok_or_else(|| type_error(field, "a finite number", v)),
    }
}

fn integer(o: &Map<String, Value>, field: &str) -> Result<Option<i64>, ApiError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| type_error(field, "an integer", v)),
    }
}

fn boolean(o: &Map<String, Value>, field: &str) -> Result<bool, ApiError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(type_error(field, "a boolean", v)),
    }
}

fn range(field: &str, v: f64, lo: f64, hi: f64) -> Result<f64, ApiError> {
    if v < lo || v > hi {
        return Err(ApiError::invalid(
            Some(field),
            format!("{field} must be between {lo} and {hi}, got {v}"),
        ));
    }
    Ok(v)
}

fn token_id(field: &str, v: &Value) -> Result<u32, ApiError> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| type_error(field, "non-negative integer token ids", v))
}

/// The fields chat and completions share, validated.
struct Common {
    params: GenerationParams,
    grammar: Option<GrammarSpec>,
    max_tokens: Option<usize>,
    stream: bool,
    include_usage: bool,
    model: Option<String>,
}

fn common(o: &Map<String, Value>) -> Result<Common, ApiError> {
    if let Some(n) = integer(o, "n")?
        && n != 1
    {
        return Err(ApiError::invalid(
            Some("n"),
            format!("n must be 1 (one choice per prompt), got {n}"),
        ));
    }
    let model = match o.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => return Err(type_error("model", "a string", v)),
    };
    let max_tokens = match (
        integer(o, "max_completion_tokens")?,
        integer(o, "max_tokens")?,
    ) {
        (Some(n), _) | (None, Some(n)) if n < 1 => {
            let field = if o.contains_key("max_completion_tokens") {
                "max_completion_tokens"
            } else {
                "max_tokens"
            };
            return Err(ApiError::invalid(
                Some(field),
                format!("{field} must be at least 1, got {n}"),
            ));
        }
        (Some(n), _) | (None, Some(n)) => Some(n as usize),
        (None, None) => None,
    };
    let d = SamplingParams::default();
    let mut s = SamplingParams {
        temperature: range(
            "temperature",
            number(o, "temperature")?.unwrap_or(d.temperature as f64),
            0.0,
            2.0,
        )? as f32,
        top_p: number(o, "top_p")?.unwrap_or(d.top_p as f64) as f32,
        min_p: number(o, "min_p")?.unwrap_or(d.min_p as f64) as f32,
        presence_penalty: number(o, "presence_penalty")?.unwrap_or(0.0) as f32,
        frequency_penalty: number(o, "frequency_penalty")?.unwrap_or(0.0) as f32,
        repetition_penalty: number(o, "repetition_penalty")?.unwrap_or(1.0) as f32,
        ..d
    };
    if let Some(k) = integer(o, "top_k")? {
        // vLLM's -1 and llama-server's 0 both mean off.
        s.top_k = match k {
            -1 | 0 => 0,
            k if k > 0 => k as usize,
            k => {
                return Err(ApiError::invalid(
                    Some("top_k"),
                    format!("top_k must be a positive count, or 0 or -1 for off, got {k}"),
                ));
            }
        };
    }
    if let Some(seed) = integer(o, "seed")? {
        s.seed = seed as u64;
    } else {
        s.seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    }
    if let Some(bias) = o.get("logit_bias").filter(|v| !v.is_null()) {
        let map = bias
            .as_object()
            .ok_or_else(|| type_error("logit_bias", "an object of token id to bias", bias))?;
        for (k, v) in map {
            let id: u32 = k.parse().map_err(|_| {
                ApiError::invalid(
                    Some("logit_bias"),
                    format!("logit_bias: key {k:?} is not a token id"),
                )
            })?;
            let b = v
                .as_f64()
                .filter(|x| x.is_finite())
                .ok_or_else(|| type_error("logit_bias", "numbers", v))?;
            s.logit_bias.push((id, b as f32));
        }
    }
    s.validate()
        .map_err(|e| ApiError::invalid(Some(e.field()), e.to_string()))?;
    let stop = match o.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(x)) => vec![x.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| type_error("stop", "strings", v))
            })
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(type_error("stop", "a string or an array of strings", v)),
    };
    if stop.len() > MAX_STOPS || stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            Some("stop"),
            format!(
                "stop takes at most {MAX_STOPS} non-empty strings, got {:?}",
                stop
            ),
        ));
    }
    let stop_token_ids = match o.get("stop_token_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| token_id("stop_token_ids", v))
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(type_error("stop_token_ids", "an array of token ids", v)),
    };
    let stream = boolean(o, "stream")?;
    let include_usage = match o.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(so)) => boolean(so, "include_usage")?,
        Some(v) => return Err(type_error("stream_options", "an object", v)),
    };
    if let Some(u) = o.get("user").filter(|v| !v.is_null() && !v.is_string()) {
        return Err(type_error("user", "a string", u));
    }
    let ignore_eos = boolean(o, "ignore_eos")?;
    Ok(Common {
        params: GenerationParams {
            max_tokens: 0,
            sampling: s,
            stop,
            stop_token_ids,
            logprobs: None,
            ignore_eos,
            grammar: None,
        },
        grammar: crate::structured::output_grammar(o)?,
        max_tokens,
        stream,
        include_usage,
        model,
    })
}

/// Chat's `logprobs: bool` with `top_logprobs: 0..=20`.
fn chat_logprobs(o: &Map<String, Value>) -> Result<Option<usize>, ApiError> {
    let on = boolean(o, "logprobs")?;
    let top = integer(o, "top_logprobs")?;
    match (on, top) {
        (false, Some(_)) => Err(ApiError::invalid(
            Some("top_logprobs"),
            "top_logprobs needs logprobs: true",
        )),
        (true, Some(n)) if !(0..=20).contains(&n) => Err(ApiError::invalid(
            Some("top_logprobs"),
            format!("top_logprobs must be between 0 and 20, got {n}"),
        )),
        (true, n) => Ok(Some(n.unwrap_or(0) as usize)),
        (false, None) => Ok(None),
    }
}

/// Completions' legacy `logprobs: 0..=5`.
fn text_logprobs(o: &Map<String, Value>) -> Result<Option<usize>, ApiError> {
    match o.get("logprobs") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_i64() {
            Some(n) if (0..=5).contains(&n) => Ok(Some(n as usize)),
            _ => Err(ApiError::invalid(
                Some("logprobs"),
                "logprobs must be an integer between 0 and 5",
            )),
        },
    }
}

fn object(body: &Value) -> Result<&Map<String, Value>, ApiError> {
    body.as_object()
        .ok_or_else(|| ApiError::invalid(None, "the request body must be a JSON object"))
}

/// Validates a `/v1/chat/completions` body.
pub fn parse_chat(body: &Value) -> Result<ValidRequest, ApiError> {
    let mut o = object(body)?.clone();
    field_policy::apply(Endpoint::Chat, &mut o)?;
    let o = &o;
    let Common {
        mut params,
        grammar,
        max_tokens,
        stream,
        include_usage,
        model,
    } = common(o)?;
    params.logprobs = chat_logprobs(o)?;
    let msgs = match o.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => {
            return Err(ApiError::invalid(
                Some("messages"),
                "messages must not be empty",
            ));
        }
        Some(v) => return Err(type_error("messages", "an array of messages", v)),
        None => return Err(ApiError::invalid(Some("messages"), "messages is required")),
    };
    let mut out = Vec::with_capacity(msgs.len());
    for (i, m) in msgs.iter().enumerate() {
        let field = format!("messages[{i}]");
        let mo = m
            .as_object()
            .ok_or_else(|| ApiError::invalid(Some(&field), format!("{field} must be an object")))?;
        let role = match mo.get("role").and_then(Value::as_str) {
            Some(r @ ("system" | "user" | "assistant" | "developer" | "tool")) => {
                if r == "developer" { "system" } else { r }
            }
            Some(r) => {
                return Err(ApiError::invalid(
                    Some(&field),
                    format!(
                        "{field}.role {r:?} is not supported (system, developer, user, assistant, tool)"
                    ),
                ));
            }
            None => {
                return Err(ApiError::invalid(
                    Some(&field),
                    format!("{field}.role must be a string"),
                ));
            }
        };
        let content = match mo.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None if role == "assistant" => String::new(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for p in parts {
                    match (
                        p.get("type").and_then(Value::as_str),
                        p.get("text").and_then(Value::as_str),
                    ) {
                        (Some("text"), Some(t)) => text.push_str(t),
                        _ => {
                            return Err(ApiError::invalid(
                                Some(&field),
                                format!("{field}.content: only text parts are supported"),
                            ));
                        }
                    }
                }
                text
            }
            _ => {
                return Err(ApiError::invalid(
                    Some(&field),
                    format!("{field}.content must be a string or an array of text parts"),
                ));
            }
        };
        let tool_calls = if role == "assistant" {
            crate::tool_request::message_tool_calls(&field, mo)?
        } else {
            Vec::new()
        };
        let tool_call_id = match (role, mo.get("tool_call_id")) {
            ("tool", Some(Value::String(id))) => Some(id.clone()),
            ("tool", _) => {
                return Err(ApiError::invalid(
                    Some(&field),
                    format!("{field}.tool_call_id must be the id of the call it answers"),
                ));
            }
            _ => None,
        };
        out.push(ChatMessage {
            role: role.to_string(),
            content,
            tool_calls,
            tool_call_id,
        });
    }
    let tools = crate::tool_request::tool_request(o)?;
    if tools.is_some() && grammar.is_some() {
        return Err(ApiError::invalid(
            Some("tools"),
            "give tools or an output constraint (response_format, grammar, ...), not both",
        ));
    }
    Ok(ValidRequest {
        model,
        prompt: PromptInput::Chat(out),
        max_tokens,
        params,
        stream,
        include_usage,
        grammar,
        tools,
        template_vars: template_vars(o)?,
    })
}

/// Validates a `/v1/completions` body.
pub fn parse_completion(body: &Value) -> Result<ValidRequest, ApiError> {
    let mut o = object(body)?.clone();
    field_policy::apply(Endpoint::Completions, &mut o)?;
    let o = &o;
    let Common {
        mut params,
        grammar,
        max_tokens,
        stream,
        include_usage,
        model,
    } = common(o)?;
    params.logprobs = text_logprobs(o)?;
    let bad = || {
        ApiError::invalid(
            Some("prompt"),
            "prompt must be a string, an array of strings, an array of token ids or an array of arrays of token ids",
        )
    };
    let prompt = match o.get("prompt") {
        None => return Err(ApiError::invalid(Some("prompt"), "prompt is required")),
        Some(Value::String(s)) => PromptInput::Text(vec![s.clone()]),
        Some(Value::Array(a)) if a.is_empty() => return Err(bad()),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => PromptInput::Text(
            a.iter()
                .map(|v| v.as_str().unwrap_or_default().to_string())
                .collect(),
        ),
        Some(Value::Array(a)) if a.iter().all(Value::is_number) => PromptInput::Tokens(vec![
            a.iter()
                .map(|v| token_id("prompt", v))
                .collect::<Result<_, _>>()?,
        ]),
        Some(Value::Array(a)) if a.iter().all(Value::is_array) => PromptInput::Tokens(
            a.iter()
                .map(|inner| {
                    inner.as_array().map_or(Ok(Vec::new()), |ids| {
                        ids.iter().map(|v| token_id("prompt", v)).collect()
                    })
                })
                .collect::<Result<_, _>>()?,
        ),
        Some(_) => return Err(bad()),
    };
    Ok(ValidRequest {
        model,
        prompt,
        max_tokens,
        params,
        stream,
        include_usage,
        grammar,
        tools: None,
        template_vars: TemplateVars::new(),
    })
}

/// `chat_template_kwargs` (variables for the chat template, as vLLM and
/// llama-server take them, e.g. `{"enable_thinking": false}`) and
/// `reasoning_effort`, which reaches templates as the variable of that name.
fn template_vars(o: &Map<String, Value>) -> Result<TemplateVars, ApiError> {
    let mut vars = match o.get("chat_template_kwargs") {
        None | Some(Value::Null) => TemplateVars::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(v) => return Err(type_error("chat_template_kwargs", "an object", v)),
    };
    match o.get("reasoning_effort") {
        None | Some(Value::Null) => {}
        Some(Value::String(e)) if ["minimal", "low", "medium", "high"].contains(&e.as_str()) => {
            vars.insert("reasoning_effort".into(), Value::String(e.clone()));
        }
        Some(v) => {
            return Err(ApiError::invalid(
                Some("reasoning_effort"),
                format!("reasoning_effort must be minimal, low, medium or high, got {v}"),
            ));
        }
    }
    Ok(vars)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn param_of(r: Result<ValidRequest, ApiError>) -> Option<String> {
        r.err().and_then(|e| e.param).map(String::from)
    }

    /// SPEC S17: malformed values are refused naming the field.
    #[test]
    fn bad_fields_are_refused_by_name() {
        let ok = json!({"messages": [{"role": "user", "content": "hi"}]});
        assert!(parse_chat(&ok).is_ok());
        let with = |k: &str, v: Value| {
            let mut b = ok.clone();
            b[k] = v;
            param_of(parse_chat(&b))
        };
        assert_eq!(
            with("temperature", json!("hot")).as_deref(),
            Some("temperature")
        );
        assert_eq!(
            with("temperature", json!(-1)).as_deref(),
            Some("temperature")
        );
        assert_eq!(with("max_tokens", json!(0)).as_deref(), Some("max_tokens"));
        assert_eq!(with("max_tokens", json!(-5)).as_deref(), Some("max_tokens"));
        assert_eq!(with("n", json!(2)).as_deref(), Some("n"));
        assert_eq!(with("top_k", json!(-3)).as_deref(), Some("top_k"));
        assert!(with("top_k", json!(-1)).is_none(), "-1 is vLLM's off");
        assert_eq!(
            with("stop", json!(["a", "b", "c", "d", "e"])).as_deref(),
            Some("stop")
        );
        assert_eq!(with("stop", json!([""])).as_deref(), Some("stop"));
        assert_eq!(with("min_p", json!(1.5)).as_deref(), Some("min_p"));
        assert_eq!(
            with("presence_penalty", json!(3)).as_deref(),
            Some("presence_penalty")
        );
        assert_eq!(
            with("logit_bias", json!({"3": 101})).as_deref(),
            Some("logit_bias")
        );
        assert_eq!(
            with("tools", json!([{"type": "function"}])).as_deref(),
            Some("tools[0]"),
            "a tool without a function"
        );
        assert_eq!(
            with("functions", json!([{"name": "f"}])).as_deref(),
            Some("functions"),
            "the legacy functions field is refused"
        );
        assert_eq!(
            with("top_logprobs", json!(3)).as_deref(),
            Some("top_logprobs"),
            "top_logprobs needs logprobs"
        );
        assert_eq!(with("logprobs", json!("yes")).as_deref(), Some("logprobs"));
        assert_eq!(with("stop", json!(5)).as_deref(), Some("stop"));
        assert_eq!(
            with("logit_bias", json!({"x": 1})).as_deref(),
            Some("logit_bias")
        );
        assert_eq!(with("top_p", json!(0)).as_deref(), Some("top_p"));
        assert_eq!(with("messages", json!([])).as_deref(), Some("messages"));
        assert_eq!(
            with("messages", json!([{"role": "tool", "content": "x"}])).as_deref(),
            Some("messages[0]")
        );
        assert!(
            with("user", json!("alice")).is_none(),
            "user changes nothing and is accepted"
        );
        assert!(
            param_of(parse_chat(&json!([1, 2]))).is_none() && parse_chat(&json!([1, 2])).is_err()
        );
    }

    #[test]
    fn prompts_come_as_text_lists_or_token_ids() {
        let p = |v: Value| parse_completion(&json!({"prompt": v})).map(|r| r.prompt);
        assert_eq!(p(json!("a")).unwrap(), PromptInput::Text(vec!["a".into()]));
        assert_eq!(
            p(json!(["a", "b"])).unwrap(),
            PromptInput::Text(vec!["a".into(), "b".into()])
        );
        assert_eq!(
            p(json!([1, 2])).unwrap(),
            PromptInput::Tokens(vec![vec![1, 2]])
        );
        assert_eq!(
            p(json!([[1], [2, 3]])).unwrap(),
            PromptInput::Tokens(vec![vec![1], vec![2, 3]])
        );
        assert!(p(json!([1, "a"])).is_err());
        assert!(p(json!([-1])).is_err());
    }

    #[test]
    fn sampling_fields_map_onto_the_sampler() {
        let r = parse_chat(&json!({
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "temperature": 0, "top_k": 5, "seed": 9, "stop": ["x", "y"], "max_completion_tokens": 7,
            "stream": true, "stream_options": {"include_usage": true}, "logit_bias": {"12": -3.5}, "stop_token_ids": [4]
        }))
        .unwrap();
        assert_eq!(
            (
                r.params.sampling.temperature,
                r.params.sampling.top_k,
                r.params.sampling.seed
            ),
            (0.0, 5, 9)
        );
        assert_eq!(
            (r.max_tokens, r.stream, r.include_usage),
            (Some(7), true, true)
        );
        assert_eq!(r.params.stop, vec!["x".to_string(), "y".to_string()]);
        assert_eq!(
            (
                r.params.sampling.logit_bias.clone(),
                r.params.stop_token_ids.clone()
            ),
            (vec![(12, -3.5)], vec![4])
        );
    }
}
