//! Request bodies to validated requests (SPEC S17). Pure: JSON in, a
//! [`ValidRequest`] or an [`ApiError`] naming the field out.
//!
//! A body goes through three steps: the route's [`field_policy`] (which fields
//! exist: aliases rewritten, no-ops dropped, refused and unknown fields named), serde into the
//! typed bodies of [`crate::openai::request`] (a wrong type is a 400 naming the
//! field's path, e.g. `messages[1].content`), then the bounds and combinations
//! here. The output-constraint fields are read by [`crate::structured`], the
//! tool fields by [`crate::tool_request`].

use ferrox_engine::GenerationParams;
use ferrox_engine::validate::MAX_ALTERNATIVES;
use ferrox_sampling::grammar::GrammarSpec;
use ferrox_text::chat::{ChatMessage, TemplateVars};
use ferrox_text::fim::Infill;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;
use crate::field_policy::{self, Policy};
use crate::generation::{self, Generation};
use crate::invalid::Invalid;
use crate::openai::request::{
    ChatFields, CompletionFields, Content, ContentPart, Message, Prompt, SharedFields,
};

/// What the prompt is.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    /// A conversation for the chat template.
    Chat(Vec<ChatMessage>),
    /// One or more raw text prompts (one choice each).
    Text(Vec<String>),
    /// One or more prompts given as token ids.
    Tokens(Vec<Vec<u32>>),
    /// Fill-in-the-middle; `field` names what asked for it.
    Infill { infill: Infill, field: &'static str },
}

impl From<ValidRequest> for Generation {
    fn from(r: ValidRequest) -> Generation {
        let prompt = match r.prompt {
            PromptInput::Chat(messages) => generation::Prompt::Chat {
                messages,
                vars: r.template_vars,
                prefill: r.prefill,
            },
            PromptInput::Text(texts) => generation::Prompt::Text(texts),
            PromptInput::Tokens(ids) => generation::Prompt::Tokens(ids),
            PromptInput::Infill { infill, field } => generation::Prompt::Infill { infill, field },
        };
        Generation {
            prompt,
            tools: r.tools,
            grammar: r.grammar,
            params: r.params,
            max_tokens: r.max_tokens,
            context: None,
            choices: r.choices,
        }
    }
}

/// A request that passed validation.
#[derive(Debug, Clone)]
pub struct ValidRequest {
    pub prompt: PromptInput,
    /// The start of the answer, continued as is (`continue_final_message`).
    pub prefill: Option<String>,
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
    /// Choices per prompt (`n`).
    pub choices: usize,
    /// What the answer shows of the prompt (completions only).
    pub shown: PromptShown,
}

/// What a completions answer shows of its prompt.
#[derive(Debug, Clone, Copy, Default)]
pub struct PromptShown {
    /// `echo`: the prompt before the completion.
    pub echo: bool,
    /// `echo` with `logprobs`: the echoed tokens come with their scores.
    pub scored: bool,
    /// vLLM's `prompt_logprobs`: the prompt's scores as their own list.
    pub listed: bool,
}

impl PromptShown {
    /// Whether the answer shows the prompt at all.
    pub fn any(self) -> bool {
        self.echo || self.listed
    }
}

/// The most stop strings a request may give (OpenAI's bound).
const MAX_STOPS: usize = 4;

/// `body` read as `T`; a type error names the path of the field.
pub(crate) fn typed<T: DeserializeOwned>(body: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(body).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let path = (path != ".").then_some(path);
        ApiError::from(Invalid::Body {
            path,
            detail: inner.to_string(),
        })
    })
}

/// The fields chat and completions share, validated.
struct Common {
    params: GenerationParams,
    grammar: Option<GrammarSpec>,
    max_tokens: Option<usize>,
    stream: bool,
    include_usage: bool,
    n: usize,
}

/// The most choices one request may ask for (`n`).
const MAX_CHOICES: i64 = 16;

/// `max_completion_tokens` (chat's newer name) or `max_tokens`: at least 1.
fn max_tokens(field: &'static str, n: Option<i64>) -> Result<Option<usize>, Invalid> {
    match n {
        Some(n) if n < 1 => Err(Invalid::OutOfRange {
            field,
            bound: "at least 1".into(),
            got: n.to_string(),
        }),
        n => Ok(n.map(|n| n as usize)),
    }
}

fn stops(f: &mut SharedFields) -> Result<Vec<String>, Invalid> {
    let stop = f.stop.take().map(|s| s.into_vec()).unwrap_or_default();
    if stop.len() > MAX_STOPS || stop.iter().any(String::is_empty) {
        return Err(Invalid::OutOfRange {
            field: "stop",
            bound: format!("at most {MAX_STOPS} non-empty strings").into(),
            got: format!("{stop:?}"),
        });
    }
    Ok(stop)
}

fn common(mut f: SharedFields, max: Option<usize>) -> Result<Common, ApiError> {
    let n = match f.n {
        None => 1,
        Some(n) if (1..=MAX_CHOICES).contains(&n) => n as usize,
        Some(n) => {
            return Err(Invalid::OutOfRange {
                field: "n",
                bound: format!("between 1 and {MAX_CHOICES}").into(),
                got: n.to_string(),
            }
            .into());
        }
    };
    let max_tokens = match max {
        Some(n) => Some(n),
        None => max_tokens("max_tokens", f.max_tokens)?,
    };
    let sampling = f.sampling_fields().validate(&crate::sampling::OPENAI)?;
    let stop = stops(&mut f)?;
    let grammar = crate::structured::output_grammar(&mut f)?;
    Ok(Common {
        params: GenerationParams {
            max_tokens: 0,
            sampling,
            stop,
            stop_token_ids: f.stop_token_ids.unwrap_or_default(),
            logprobs: None,
            prompt_logprobs: None,
            embed: None,
            ignore_eos: f.ignore_eos.unwrap_or(false),
            grammar: None,
        },
        grammar,
        max_tokens,
        stream: f.stream.unwrap_or(false),
        include_usage: f
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        n,
    })
}

/// Chat's `logprobs: bool` with `top_logprobs: 0..=20`.
fn chat_logprobs(on: Option<bool>, top: Option<i64>) -> Result<Option<usize>, Invalid> {
    match (on.unwrap_or(false), top) {
        (false, Some(_)) => Err(Invalid::Needs {
            field: "top_logprobs",
            needs: "logprobs: true",
        }),
        (true, Some(n)) if !(0..=20).contains(&n) => Err(Invalid::OutOfRange {
            field: "top_logprobs",
            bound: "between 0 and 20".into(),
            got: n.to_string(),
        }),
        (true, n) => Ok(Some(n.unwrap_or(0) as usize)),
        (false, None) => Ok(None),
    }
}

/// Completions' legacy `logprobs: 0..=5`.
fn text_logprobs(n: Option<i64>) -> Result<Option<usize>, Invalid> {
    match n {
        None => Ok(None),
        Some(n) if (0..=5).contains(&n) => Ok(Some(n as usize)),
        Some(n) => Err(Invalid::OutOfRange {
            field: "logprobs",
            bound: "an integer between 0 and 5".into(),
            got: n.to_string(),
        }),
    }
}

/// The body after the route's field policy (aliases rewritten, no-ops gone,
/// no unknown fields left).
pub(crate) fn policed(policy: &Policy, body: &Value) -> Result<Value, ApiError> {
    Ok(Value::Object(policy.apply(body.clone())?))
}

/// The text of a message's content; `field` names it in errors.
fn content_text(field: &str, content: Content) -> Result<String, ApiError> {
    match content {
        Content::Text(s) => Ok(s),
        Content::Parts(parts) => parts
            .into_iter()
            .map(|p| match p {
                ContentPart::Text { text } => Ok(text),
                ContentPart::NotText => Err(ApiError::from(Invalid::Unsupported {
                    field: field.to_string(),
                    what: "only text parts are supported (no images, audio or files)",
                })),
            })
            .collect(),
    }
}

/// One message of the history as the template takes it.
fn chat_message(i: usize, m: Message) -> Result<ChatMessage, ApiError> {
    let field = format!("messages[{i}].content");
    Ok(match m {
        Message::System { content, .. } | Message::Developer { content, .. } => {
            ChatMessage::new("system", &content_text(&field, content)?)
        }
        Message::User { content, .. } => ChatMessage::new("user", &content_text(&field, content)?),
        Message::Assistant {
            content,
            tool_calls,
            ..
        } => {
            let text = match content {
                Some(c) => content_text(&field, c)?,
                None => String::new(),
            };
            let mut m = ChatMessage::new("assistant", &text);
            m.tool_calls = crate::tool_request::message_tool_calls(
                &format!("messages[{i}].tool_calls"),
                tool_calls.unwrap_or_default(),
            )?;
            m
        }
        Message::Tool {
            content,
            tool_call_id,
        } => {
            let mut m = ChatMessage::new("tool", &content_text(&field, content)?);
            m.tool_call_id = Some(tool_call_id);
            m
        }
    })
}

/// The last message, the assistant's, taken off to be continued.
fn final_message(messages: &mut Vec<ChatMessage>) -> Result<String, Invalid> {
    match messages.last() {
        Some(m) if m.role == "assistant" && m.tool_calls.is_empty() => {
            Ok(messages.pop().expect("a last message").content)
        }
        _ => Err(Invalid::Needs {
            field: "continue_final_message",
            needs: "a last message from the assistant, without tool calls",
        }),
    }
}

/// Validates a `/v1/chat/completions` body.
pub fn parse_chat(body: &Value) -> Result<ValidRequest, ApiError> {
    let o = policed(&field_policy::CHAT_COMPLETIONS, body)?;
    let chat: ChatFields = typed(&o)?;
    let max = max_tokens("max_completion_tokens", chat.max_completion_tokens)?;
    let Common {
        mut params,
        grammar,
        max_tokens,
        stream,
        include_usage,
        n,
    } = common(typed(&o)?, max)?;
    params.logprobs = chat_logprobs(chat.logprobs, chat.top_logprobs)?;
    let messages = match chat.messages {
        Some(m) if !m.is_empty() => m,
        Some(_) => {
            return Err(Invalid::Empty {
                field: "messages",
                item: "message",
            }
            .into());
        }
        None => return Err(Invalid::Missing { field: "messages" }.into()),
    };
    let mut messages = messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| chat_message(i, m))
        .collect::<Result<Vec<_>, _>>()?;
    match (chat.add_generation_prompt, chat.continue_final_message) {
        (Some(true), Some(true)) => {
            return Err(Invalid::Conflict {
                field: "add_generation_prompt",
                why: "add_generation_prompt and continue_final_message cannot both be true",
            }
            .into());
        }
        (Some(false), c) if c != Some(true) => {
            return Err(Invalid::Needs {
                field: "add_generation_prompt",
                needs: "continue_final_message: true (a prompt that does not open the assistant's turn continues its last message)",
            }
            .into());
        }
        _ => {}
    }
    let prefill = match chat.continue_final_message {
        Some(true) => Some(final_message(&mut messages)?),
        _ => None,
    };
    let tools =
        crate::tool_request::tool_request(chat.tools, chat.tool_choice, chat.parallel_tool_calls)?;
    if tools.is_some() && prefill.is_some() {
        return Err(Invalid::Conflict {
            field: "continue_final_message",
            why: "an assistant prefill cannot be combined with tools",
        }
        .into());
    }
    if tools.is_some() && grammar.is_some() {
        return Err(Invalid::Conflict {
            field: "tools",
            why: "give tools or an output constraint (response_format, grammar, ...), not both",
        }
        .into());
    }
    let mut template_vars = chat.chat_template_kwargs.unwrap_or_default();
    if let Some(e) = chat.reasoning_effort {
        template_vars.insert("reasoning_effort".into(), e.as_str().into());
    }
    Ok(ValidRequest {
        prompt: PromptInput::Chat(messages),
        prefill,
        max_tokens,
        params,
        stream,
        include_usage,
        grammar,
        tools,
        template_vars,
        choices: n,
        shown: PromptShown::default(),
    })
}

/// Validates a `/v1/completions` body.
pub fn parse_completion(body: &Value) -> Result<ValidRequest, ApiError> {
    completion_of(&policed(&field_policy::TEXT_COMPLETIONS, body)?)
}

/// Validates a completions body its route's policy has passed.
pub(crate) fn completion_of(o: &Value) -> Result<ValidRequest, ApiError> {
    let text: CompletionFields = typed(o)?;
    let shared: SharedFields = typed(o)?;
    let echo = text.echo.unwrap_or(false);
    // A scored prompt may ask for no completion at all.
    let zero = (echo || text.prompt_logprobs.is_some()) && shared.max_tokens == Some(0);
    let Common {
        mut params,
        grammar,
        max_tokens,
        stream,
        include_usage,
        n,
    } = common(shared, zero.then_some(0))?;
    params.logprobs = text_logprobs(text.logprobs)?;
    params.prompt_logprobs =
        prompt_scoring(echo, params.logprobs, text.prompt_logprobs, max_tokens)?;
    let shown = PromptShown {
        echo,
        scored: echo && params.logprobs.is_some(),
        listed: text.prompt_logprobs.is_some(),
    };
    let prompt = match text.prompt {
        None => return Err(Invalid::Missing { field: "prompt" }.into()),
        Some(Prompt::Text(s)) => PromptInput::Text(vec![s]),
        Some(Prompt::Texts(t)) if t.is_empty() => {
            return Err(Invalid::Empty {
                field: "prompt",
                item: "prompt",
            }
            .into());
        }
        Some(Prompt::Texts(t)) => PromptInput::Text(t),
        Some(Prompt::Tokens(ids)) => PromptInput::Tokens(vec![ids]),
        Some(Prompt::TokenLists(lists)) => PromptInput::Tokens(lists),
    };
    let prompt = match (prompt, text.suffix) {
        (p, None) => p,
        (PromptInput::Text(mut t), Some(suffix)) if t.len() == 1 => PromptInput::Infill {
            infill: Infill {
                prefix: t.remove(0),
                suffix,
                ..Infill::default()
            },
            field: "suffix",
        },
        (_, Some(_)) => {
            return Err(Invalid::Needs {
                field: "suffix",
                needs: "one prompt given as a string (the code before the suffix)",
            }
            .into());
        }
    };
    Ok(ValidRequest {
        prompt,
        prefill: None,
        max_tokens,
        params,
        stream,
        include_usage,
        grammar,
        tools: None,
        template_vars: TemplateVars::new(),
        choices: n,
        shown,
    })
}

/// Completions' prompt scoring: `echo` with `logprobs` scores the prompt with
/// that many alternatives, as does vLLM's `prompt_logprobs`; `echo` with
/// `max_tokens: 0` scores it to answer nothing but the prompt.
fn prompt_scoring(
    echo: bool,
    logprobs: Option<usize>,
    prompt_logprobs: Option<i64>,
    max_tokens: Option<usize>,
) -> Result<Option<usize>, Invalid> {
    let asked = match prompt_logprobs {
        Some(n) if !(0..=MAX_ALTERNATIVES as i64).contains(&n) => {
            return Err(Invalid::OutOfRange {
                field: "prompt_logprobs",
                bound: format!("between 0 and {MAX_ALTERNATIVES}").into(),
                got: n.to_string(),
            });
        }
        Some(n) => Some(n as usize),
        None => None,
    };
    let echoed = match (echo, logprobs, max_tokens) {
        (true, Some(n), _) => Some(n),
        (true, None, Some(0)) => Some(0),
        _ => None,
    };
    Ok(asked.max(echoed))
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
        assert_eq!(with("n", json!(17)).as_deref(), Some("n"));
        assert_eq!(with("n", json!(0)).as_deref(), Some("n"));
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

    /// Messages are typed by role: OpenAI's fields (and what its SDKs echo back
    /// from an answer) pass, anything else is refused naming the message.
    #[test]
    fn messages_are_typed_by_role() {
        let chat = |m: Value| parse_chat(&json!({"messages": m}));
        let echoed = json!([
            {"role": "user", "content": "hi", "name": "ann"},
            {"role": "assistant", "content": null, "refusal": null, "annotations": [], "audio": null,
             "function_call": null, "reasoning_content": "hmm",
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "42"}]},
            {"role": "developer", "content": "be brief"}
        ]);
        let PromptInput::Chat(msgs) = chat(echoed).unwrap().prompt else {
            panic!("a chat prompt")
        };
        let roles: Vec<&str> = msgs.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "system"]);
        assert_eq!(msgs[1].tool_calls[0].arguments, json!({"a": 1}));
        assert_eq!(msgs[2].content, "42");
        for (m, param, says) in [
            (
                json!([{"role": "user", "content": "x", "mood": 1}]),
                "messages[0]",
                "unknown field `mood`",
            ),
            (
                json!([{"role": "robot", "content": "x"}]),
                "messages[0].role",
                "unknown variant `robot`",
            ),
            (
                json!([{"content": "x"}]),
                "messages[0]",
                "missing field `role`",
            ),
            (
                json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]),
                "messages[0].content",
                "only text parts",
            ),
            (
                json!([{"role": "user", "content": 5}]),
                "messages[0]",
                "a string or an array of content parts",
            ),
            (
                json!([{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{no"}}]}]),
                "messages[0].tool_calls[0]",
                "not JSON",
            ),
        ] {
            let e = chat(m.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{m}: {}", e.message);
            assert!(e.message.contains(says), "{m}: {}", e.message);
        }
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

    /// What routers and other servers' clients add (vllm-router, SillyTavern,
    /// Open WebUI) passes at ferrox's own behaviour and is refused by name
    /// away from it.
    #[test]
    fn interop_fields_pass_at_ferrox_values_and_are_refused_away_from_them() {
        let body = json!({
            "messages": [{"role": "user", "content": "hi"}],
            "skip_special_tokens": true, "no_stop_trim": false, "continue_final_message": false,
            "separate_reasoning": true, "include_reasoning": true, "stream_reasoning": true,
            "return_hidden_states": false, "return_progress": false, "dry_multiplier": 0,
            "dry_base": 1.75, "dry_sequence_breakers": ["\n"], "xtc_probability": 0.0,
            "xtc_threshold": 0.1, "typical_p": 1, "tfs_z": 1.0, "mirostat": 0, "top_n_sigma": -1,
            "id_slot": -1, "keep_alive": "5m", "repeat_last_n": 128
        });
        let r = parse_chat(&body).unwrap();
        assert_eq!(r.params.sampling.penalty_last_n, 128);
        for (field, value) in [
            ("no_stop_trim", json!(true)),
            ("skip_special_tokens", json!(false)),
            ("dry_multiplier", json!(0.8)),
            ("typical_p", json!(0.9)),
            ("return_hidden_states", json!(true)),
        ] {
            let mut b = body.clone();
            b[field] = value;
            assert_eq!(param_of(parse_chat(&b)).as_deref(), Some(field));
        }
        let mut b = body.clone();
        b["repeat_last_n"] = json!(-1);
        assert_eq!(
            parse_chat(&b).unwrap().params.sampling.penalty_last_n,
            usize::MAX
        );
        b["repeat_last_n"] = json!(-2);
        assert_eq!(param_of(parse_chat(&b)).as_deref(), Some("repeat_last_n"));
    }

    /// vLLM's `continue_final_message`: the assistant's last message is the
    /// start of the answer.
    #[test]
    fn continue_final_message_makes_the_last_message_a_prefill() {
        let body = json!({
            "messages": [{"role": "user", "content": "Capital of France?"},
                         {"role": "assistant", "content": "The capital is"}],
            "continue_final_message": true
        });
        let r = parse_chat(&body).unwrap();
        assert_eq!(r.prefill.as_deref(), Some("The capital is"));
        let PromptInput::Chat(m) = &r.prompt else {
            panic!("a chat prompt")
        };
        assert_eq!(m.len(), 1);
        let mut b = body.clone();
        b["messages"] = json!([{"role": "user", "content": "x"}]);
        assert_eq!(
            param_of(parse_chat(&b)).as_deref(),
            Some("continue_final_message")
        );
        b = body.clone();
        b["tools"] = json!([{"type": "function", "function": {"name": "f"}}]);
        assert_eq!(
            param_of(parse_chat(&b)).as_deref(),
            Some("continue_final_message")
        );
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
            (0.0, 5, Some(9))
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
