//! Ollama's `/api/chat` and `/api/generate` bodies, validated into a
//! [`Valid`] request: the field policy (top level and `options`), the
//! conversation or prompt, `options` on the sampler with Ollama's defaults,
//! `format` on the structured-output machinery, `tools`, and `think`.

use ferrox_engine::GenerationParams;
use ferrox_sampling::grammar::GrammarSpec;
use ferrox_text::chat::{ChatMessage, TemplateVars};
use ferrox_text::fim::Infill;
use ferrox_text::tools::ToolCall;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::field_policy::{OLLAMA_CHAT, OLLAMA_GENERATE, OLLAMA_OPTIONS, Policy};
use crate::generation::{Generation, Prompt, RequestContext};
use crate::invalid::Invalid;
use crate::openai::request::ToolDef;
use crate::request::typed;
use crate::sampling::SamplingFields;
use crate::state::AppState;
use crate::tool_request::tool_request;

/// What both routes share.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Common {
    /// Whatever it names, the one served model answers.
    #[expect(dead_code, reason = "required, checked for its type only")]
    model: String,
    /// Ollama streams unless told not to.
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    format: Option<Format>,
    #[serde(default)]
    options: Option<Options>,
    #[serde(default)]
    think: Option<Think>,
    #[serde(default)]
    logprobs: Option<bool>,
    #[serde(default)]
    top_logprobs: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChatBody {
    #[serde(flatten)]
    common: Common,
    #[serde(default)]
    messages: Vec<MessageIn>,
    #[serde(default)]
    tools: Option<Vec<ToolDef>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GenerateBody {
    #[serde(flatten)]
    common: Common,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    system: Option<String>,
    #[serde(default)]
    raw: Option<bool>,
    /// The token ids a previous answer returned, continued.
    #[serde(default)]
    context: Option<Vec<u32>>,
    /// The code after the answer: fill-in-the-middle with `prompt` before it.
    #[serde(default)]
    suffix: Option<String>,
}

/// `format`: `"json"` (any JSON value Ollama means an object), `""` (none), or a
/// JSON schema.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Format {
    Named(String),
    Schema(Map<String, Value>),
}

/// `think`: on or off, or a level for models with a reasoning-effort knob.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Think {
    Switch(bool),
    Level(String),
}

/// The `options` this server reads (the rest were taken out by the policy).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    num_predict: Option<i64>,
    num_ctx: Option<i64>,
    temperature: Option<f64>,
    top_k: Option<i64>,
    top_p: Option<f64>,
    min_p: Option<f64>,
    seed: Option<i64>,
    stop: Option<Vec<String>>,
    repeat_penalty: Option<f64>,
    repeat_last_n: Option<i64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageIn {
    role: String,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    images: Option<Vec<IgnoredAny>>,
    /// An assistant's earlier thinking: templates drop it from history.
    #[serde(default)]
    #[allow(dead_code)]
    thinking: Option<IgnoredAny>,
    #[serde(default)]
    tool_calls: Vec<CallIn>,
    /// A `tool` message: the tool that answered.
    #[serde(default)]
    tool_name: Option<String>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallIn {
    #[serde(default)]
    id: Option<String>,
    function: FunctionIn,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FunctionIn {
    name: String,
    #[serde(default)]
    arguments: Map<String, Value>,
    #[serde(default)]
    #[allow(dead_code)]
    index: Option<IgnoredAny>,
}

/// A request that passed validation.
pub(super) struct Valid {
    pub generation: Generation,
    pub stream: bool,
    /// Whether a thinking model's thinking is split off (`think` not false).
    pub think: bool,
    /// Whether the answer carries the prompt's and answer's token ids
    /// (`/api/generate`'s `context`).
    pub context: bool,
    /// No prompt: Ollama's way to load a model, answered at once.
    pub load_only: bool,
}

/// The body with the policy applied at the top and inside `options`; a
/// sampler field at the top is pointed inside `options`.
pub(super) fn policed(policy: &Policy, body: &Value) -> Result<Value, ApiError> {
    let mut o = policy.apply(body.clone()).map_err(|e| match e {
        Invalid::UnknownField { field, .. } if OLLAMA_OPTIONS.field(&field).is_some() => {
            Invalid::OutsideOptions { field }
        }
        e => e,
    })?;
    if let Some(options) = o.remove("options").filter(|v| !v.is_null()) {
        let options = OLLAMA_OPTIONS
            .apply(options)
            .map_err(|e| e.within("options"))?;
        o.insert("options".into(), Value::Object(options));
    }
    Ok(Value::Object(o))
}

/// A `/api/chat` body.
pub(super) fn parse_chat(st: &AppState, body: &Value) -> Result<Valid, ApiError> {
    let b: ChatBody = typed(&policed(&OLLAMA_CHAT, body)?)?;
    let load_only = b.messages.is_empty();
    let messages = conversation(st, b.messages)?;
    let tools = tool_request(b.tools, None, None)?;
    let mut valid = common(st, b.common, tools.is_some())?;
    valid.generation.prompt = Prompt::Chat {
        messages,
        vars: std::mem::take(&mut valid.vars),
        prefill: None,
    };
    valid.generation.tools = tools;
    Ok(valid.done(false, load_only))
}

/// A `/api/generate` body: the prompt as the user's turn of the chat template
/// (with `system`), or as is with `raw` or for a model without a template;
/// `context` goes before it.
pub(super) fn parse_generate(st: &AppState, body: &Value) -> Result<Valid, ApiError> {
    let b: GenerateBody = typed(&policed(&OLLAMA_GENERATE, body)?)?;
    let prompt = b.prompt.unwrap_or_default();
    let raw = b.raw.unwrap_or(false) || st.chat.is_none();
    if raw && b.system.is_some() {
        return Err(Invalid::Conflict {
            field: "system",
            why: "system needs the chat template, which a raw prompt (or a model without one) skips",
        }
        .into());
    }
    let mut valid = common(st, b.common, false)?;
    let context = b.context.unwrap_or_default();
    let load_only = prompt.is_empty() && context.is_empty() && b.suffix.is_none();
    valid.generation.prompt = if let Some(suffix) = b.suffix {
        Prompt::Infill {
            infill: Infill {
                prefix: prompt,
                suffix,
                ..Infill::default()
            },
            field: "suffix",
        }
        .after(context)
    } else if raw {
        let mut ids = context;
        ids.extend(st.tokenizer.encode(&prompt, ids.is_empty(), true));
        Prompt::Tokens(vec![ids])
    } else {
        let mut messages: Vec<ChatMessage> = b
            .system
            .iter()
            .map(|s| ChatMessage::new("system", s))
            .collect();
        messages.push(ChatMessage::new("user", &prompt));
        Prompt::Chat {
            messages,
            vars: std::mem::take(&mut valid.vars),
            prefill: None,
        }
        .after(context)
    };
    Ok(valid.done(true, load_only))
}

/// What [`common`] validates, before the prompt is set.
struct Partial {
    generation: Generation,
    vars: TemplateVars,
    stream: bool,
    think: bool,
}

impl Partial {
    fn done(self, context: bool, load_only: bool) -> Valid {
        Valid {
            generation: self.generation,
            stream: self.stream,
            think: self.think,
            context,
            load_only,
        }
    }
}

fn common(st: &AppState, c: Common, tools: bool) -> Result<Partial, ApiError> {
    let o = c.options.unwrap_or_default();
    let sampling = SamplingFields {
        temperature: o.temperature,
        top_p: o.top_p,
        top_k: o.top_k,
        min_p: o.min_p,
        presence_penalty: o.presence_penalty,
        frequency_penalty: o.frequency_penalty,
        repetition_penalty: o.repeat_penalty,
        logit_bias: None,
        seed: o.seed,
        penalty_last_n: o.repeat_last_n,
    }
    .validate(&crate::sampling::OLLAMA)?;
    let grammar = match c.format {
        None => None,
        Some(Format::Named(n)) if n.is_empty() => None,
        Some(Format::Named(n)) if n == "json" => Some(GrammarSpec::JsonObject),
        Some(Format::Named(n)) => {
            return Err(Invalid::OutOfRange {
                field: "format",
                bound: "\"json\" or a JSON schema".into(),
                got: format!("{n:?}"),
            }
            .into());
        }
        Some(Format::Schema(schema)) => Some(GrammarSpec::JsonSchema {
            schema: Value::Object(schema),
            strict: false,
        }),
    };
    if tools && grammar.is_some() {
        return Err(Invalid::Conflict {
            field: "format",
            why: "give tools or a format, not both",
        }
        .into());
    }
    let (think, vars) = think(st, c.think)?;
    Ok(Partial {
        generation: Generation {
            prompt: Prompt::Text(Vec::new()),
            tools: None,
            grammar,
            params: GenerationParams {
                max_tokens: 0,
                sampling,
                stop: o.stop.unwrap_or_default(),
                stop_token_ids: Vec::new(),
                logprobs: logprobs(c.logprobs, c.top_logprobs)?,
                prompt_logprobs: None,
                embed: None,
                ignore_eos: false,
                grammar: None,
            },
            max_tokens: num_predict(o.num_predict)?,
            context: num_ctx(o.num_ctx)?,
            choices: 1,
        },
        vars,
        stream: c.stream.unwrap_or(true),
        think,
    })
}

/// `num_predict`: a count, or -1 (no limit) and -2 (fill the context), which
/// both take what the context leaves, capped by `--default-max-tokens` as any
/// request without a limit.
fn num_predict(n: Option<i64>) -> Result<Option<usize>, Invalid> {
    match n {
        None | Some(-1 | -2) => Ok(None),
        Some(n) if n >= 1 => Ok(Some(n as usize)),
        Some(n) => Err(Invalid::OutOfRange {
            field: "options.num_predict",
            bound: "at least 1, or -1 / -2 for what the context leaves".into(),
            got: n.to_string(),
        }),
    }
}

/// `num_ctx`: the request's own context, within the server's (a larger one is
/// the server's: the context is fixed when the server starts).
fn num_ctx(n: Option<i64>) -> Result<Option<RequestContext>, Invalid> {
    match n {
        None => Ok(None),
        Some(n) if n >= 1 => Ok(Some(RequestContext {
            tokens: n as usize,
            field: "options.num_ctx",
        })),
        Some(n) => Err(Invalid::OutOfRange {
            field: "options.num_ctx",
            bound: "at least 1".into(),
            got: n.to_string(),
        }),
    }
}

fn logprobs(on: Option<bool>, top: Option<i64>) -> Result<Option<usize>, Invalid> {
    match (on.unwrap_or(false), top) {
        (false, Some(n)) if n > 0 => Err(Invalid::Needs {
            field: "top_logprobs",
            needs: "logprobs: true",
        }),
        (true, Some(n)) if !(0..=20).contains(&n) => Err(Invalid::OutOfRange {
            field: "top_logprobs",
            bound: "between 0 and 20".into(),
            got: n.to_string(),
        }),
        (true, n) => Ok(Some(n.unwrap_or(0) as usize)),
        (false, _) => Ok(None),
    }
}

/// `think`: whether thinking is split off, and the template variables that
/// switch it (`enable_thinking`) or set its level (`reasoning_effort`). A model
/// that does not think refuses `think: true` or a level, as Ollama does.
fn think(st: &AppState, t: Option<Think>) -> Result<(bool, TemplateVars), ApiError> {
    let thinks = st.thinks();
    let mut vars = TemplateVars::new();
    let asked = match t {
        None => return Ok((thinks, vars)),
        Some(Think::Switch(false)) => {
            st.thinking_off(&mut vars);
            return Ok((false, vars));
        }
        Some(Think::Switch(true)) => None,
        Some(Think::Level(l)) => Some(l),
    };
    if !thinks {
        return Err(Invalid::Unsupported {
            field: "think".into(),
            what: "the served model does not think (its chat template has no thinking)",
        }
        .into());
    }
    if let Some(level) = asked {
        if !matches!(level.as_str(), "low" | "medium" | "high") {
            return Err(Invalid::OutOfRange {
                field: "think",
                bound: "true, false, \"low\", \"medium\" or \"high\"".into(),
                got: format!("{level:?}"),
            }
            .into());
        }
        vars.insert("reasoning_effort".into(), Value::String(level));
        st.check_template_vars(&vars)?;
    }
    Ok((true, vars))
}

/// Ollama's messages as the chat template takes them: images refused by name;
/// an assistant's calls get ids (Ollama's carry none) that a later `tool`
/// message, named by `tool_name`, is matched to.
fn conversation(st: &AppState, messages: Vec<MessageIn>) -> Result<Vec<ChatMessage>, ApiError> {
    let format = st.tool_format();
    let mut issued = 0;
    let mut open_calls: Vec<ToolCall> = Vec::new();
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.into_iter().enumerate() {
        if m.images.as_ref().is_some_and(|v| !v.is_empty()) {
            return Err(Invalid::Unsupported {
                field: format!("messages[{i}].images"),
                what: "images are not supported: the models here take text only",
            }
            .into());
        }
        if !matches!(m.role.as_str(), "system" | "user" | "assistant" | "tool") {
            return Err(Invalid::OutOfRange {
                field: "role",
                bound: "system, user, assistant or tool".into(),
                got: format!("messages[{i}].role {:?}", m.role),
            }
            .into());
        }
        let mut msg = ChatMessage::new(&m.role, m.content.as_deref().unwrap_or(""));
        for c in m.tool_calls {
            let id = c.id.unwrap_or_else(|| {
                issued += 1;
                format.call_id(issued)
            });
            let call = ToolCall {
                id,
                name: c.function.name,
                arguments: Value::Object(c.function.arguments),
            };
            open_calls.push(call.clone());
            msg.tool_calls.push(call);
        }
        if m.role == "tool" {
            msg.tool_call_id = m.tool_call_id.or_else(|| {
                let k = match &m.tool_name {
                    Some(name) => open_calls.iter().position(|c| &c.name == name),
                    None => (!open_calls.is_empty()).then_some(0),
                }?;
                Some(open_calls.remove(k).id)
            });
        }
        out.push(msg);
    }
    Ok(out)
}
