//! Chat prompts: a conversation rendered into the text the model was trained on.
//!
//! * A GGUF `tokenizer.chat_template` (Jinja) is rendered with minijinja, set up the
//!   way Hugging Face renders templates: `trim_blocks` and `lstrip_blocks`, Python
//!   string methods (`.strip()`, `.startswith()`, ...), `raise_exception`, and a
//!   `tojson` that does not HTML-escape.
//! * Gemma files without a template get the Gemma turn format built in:
//!   `<start_of_turn>user` / `<start_of_turn>model`, system text folded into the
//!   first user turn (as llama.cpp does).
//!
//! Invariant: a template that fails to parse or render is an error naming the
//! template line, never a panic or a silently different prompt.

use minijinja::value::Kwargs;
use minijinja::{Environment, Error, ErrorKind, Value, syntax::SyntaxConfig};
use serde::{Deserialize, Serialize};

use crate::error::ModelError;
use crate::hparams::Architecture;
use crate::tools::{Tool, ToolCall, ToolFormat, builtin_messages};

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// An assistant message's calls to tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// A `tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message of `role` saying `content`.
    pub fn new(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.to_string(),
            content: content.to_string(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// The message as templates see it (OpenAI's shape, as `transformers` passes
    /// it): `tool_calls` only when there are some, since templates test for the
    /// key itself.
    fn template_value(&self) -> Value {
        let mut pairs = vec![
            ("role", Value::from(self.role.as_str())),
            ("content", Value::from(self.content.as_str())),
        ];
        if !self.tool_calls.is_empty() {
            let calls: Vec<serde_json::Value> = self
                .tool_calls
                .iter()
                .map(|c| serde_json::json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                .collect();
            pairs.push(("tool_calls", Value::from(minijinja::value::Serde(&calls))));
        }
        if let Some(id) = &self.tool_call_id {
            pairs.push(("tool_call_id", Value::from(id.as_str())));
        }
        Value::from_pairs(pairs)
    }
}

const TEMPLATE_NAME: &str = "chat_template";

/// Extra variables for a chat template (`chat_template_kwargs`).
pub type TemplateVars = serde_json::Map<String, serde_json::Value>;

/// How a model's conversations become prompts.
pub enum ChatTemplate {
    /// The file's own Jinja template.
    Jinja {
        env: Box<Environment<'static>>,
        bos: String,
        eos: String,
        /// The tool-call format, when the template renders tools in one ferrox
        /// parses.
        tools: Option<ToolFormat>,
        /// The variables the template reads (`enable_thinking`,
        /// `reasoning_effort`, ...).
        reads: std::collections::BTreeSet<String>,
        /// Whether the model thinks in `<think>` tags.
        thinks: bool,
    },
    /// The built-in Gemma turn format.
    GemmaTurns,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChatTemplate::Jinja { .. } => f.write_str("ChatTemplate::Jinja"),
            ChatTemplate::GemmaTurns => f.write_str("ChatTemplate::GemmaTurns"),
        }
    }
}

fn template_error(e: &Error) -> ModelError {
    let mut msg = e.to_string();
    if let Some(line) = e.line() {
        msg = format!("line {line}: {msg}");
    }
    ModelError::ChatTemplate(msg)
}

/// `tojson` as `transformers` defines it: `json.dumps` without HTML escaping and
/// with non-ASCII kept, taking `indent` (positional or by name); `sort_keys` and
/// `ensure_ascii` by name too.
fn tojson(value: Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let bad =
        |e: serde_json::Error| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}"));
    let indent: Option<usize> = match indent {
        Some(v) if !v.is_none() => Some(usize::try_from(v)?),
        _ => kwargs.get::<Option<usize>>("indent")?,
    };
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let (item_sep, key_sep) = match separators.as_deref() {
        None => (", ", ": "),
        Some([item, key]) => (item.as_str(), key.as_str()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be (item separator, key separator)",
            ));
        }
    };
    let _ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let mut json = serde_json::to_value(&value).map_err(bad)?;
    if sort_keys {
        json = sorted(json);
    }
    let s = match indent {
        Some(n) => {
            let mut buf = Vec::new();
            let indent_str = " ".repeat(n);
            let fmt = serde_json::ser::PrettyFormatter::with_indent(indent_str.as_bytes());
            let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
            json.serialize(&mut ser).map_err(bad)?;
            String::from_utf8(buf).expect("JSON is UTF-8")
        }
        None => python_json(&json, item_sep, key_sep),
    };
    Ok(Value::from_safe_string(s))
}

/// `json` with every object's keys sorted.
fn sorted(json: serde_json::Value) -> serde_json::Value {
    match json {
        serde_json::Value::Object(m) => {
            let mut entries: Vec<(String, serde_json::Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        serde_json::Value::Array(a) => {
            serde_json::Value::Array(a.into_iter().map(sorted).collect())
        }
        v => v,
    }
}

/// `json` as Python's `json.dumps` writes it without an indent, with these
/// separators (by default `", "` and `": "`).
fn python_json(json: &serde_json::Value, item_sep: &str, key_sep: &str) -> String {
    match json {
        serde_json::Value::Object(m) => {
            let items: Vec<String> = m
                .iter()
                .map(|(k, v)| {
                    let key = serde_json::Value::String(k.clone());
                    format!("{key}{key_sep}{}", python_json(v, item_sep, key_sep))
                })
                .collect();
            format!("{{{}}}", items.join(item_sep))
        }
        serde_json::Value::Array(a) => {
            let items: Vec<String> = a
                .iter()
                .map(|v| python_json(v, item_sep, key_sep))
                .collect();
            format!("[{}]", items.join(item_sep))
        }
        v => v.to_string(),
    }
}

impl ChatTemplate {
    /// Compiles a Jinja chat template; `bos` / `eos` are the texts templates see as
    /// `bos_token` / `eos_token`.
    pub fn jinja(source: &str, bos: &str, eos: &str) -> Result<ChatTemplate, ModelError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| template_error(&e))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("template raised: {msg}"),
            ))
        });
        env.add_function("strftime_now", |fmt: String| -> String {
            // Deterministic: templates use this for a date line; ferrox has no clock here.
            fmt.replace("%d", "01")
                .replace("%m", "01")
                .replace("%Y", "2026")
                .replace("%b", "Jan")
                .replace("%B", "January")
        });
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| template_error(&e))?;
        let reads: std::collections::BTreeSet<String> = env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| template_error(&e))?
            .undeclared_variables(false)
            .into_iter()
            .collect();
        Ok(ChatTemplate::Jinja {
            env: Box::new(env),
            bos: bos.to_string(),
            eos: eos.to_string(),
            tools: ToolFormat::of_template(source).filter(|_| reads.contains("tools")),
            thinks: crate::reasoning::template_thinks(source),
            reads,
        })
    }

    /// The template a model's metadata calls for: its own Jinja template, else the
    /// built-in format of its architecture (Gemma 2 and 3), else `None`.
    pub fn for_model(
        source: Option<&str>,
        architecture: Architecture,
        bos: &str,
        eos: &str,
    ) -> Result<Option<ChatTemplate>, ModelError> {
        match (source, architecture) {
            (Some(s), _) => Ok(Some(ChatTemplate::jinja(s, bos, eos)?)),
            (None, Architecture::Gemma2 | Architecture::Gemma3) => {
                Ok(Some(ChatTemplate::GemmaTurns))
            }
            (None, _) => Ok(None),
        }
    }

    /// How the model writes tool calls: the template's format, else the built-in
    /// one (Hermes, described in the system prompt).
    pub fn tool_format(&self) -> ToolFormat {
        match self {
            ChatTemplate::Jinja { tools: Some(f), .. } => *f,
            _ => ToolFormat::Hermes,
        }
    }

    /// Whether the template reads the variable `name` (a knob such as
    /// `enable_thinking` or `reasoning_effort`).
    pub fn reads(&self, name: &str) -> bool {
        matches!(self, ChatTemplate::Jinja { reads, .. } if reads.contains(name))
    }

    /// Whether the model thinks in `<think>` tags before it answers.
    pub fn thinks(&self) -> bool {
        matches!(self, ChatTemplate::Jinja { thinks: true, .. })
    }

    /// Renders `messages` into a prompt; `add_generation_prompt` opens the assistant turn.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ModelError> {
        self.render_with_tools(messages, &[], &TemplateVars::new(), add_generation_prompt)
    }

    /// Renders `messages` offering `tools`: through the template when it renders
    /// tools in a format ferrox parses, else in the built-in format. `vars` are
    /// extra template variables (`chat_template_kwargs`); they cannot replace the
    /// conversation, the tools or the special tokens.
    pub fn render_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: &[Tool],
        vars: &TemplateVars,
        add_generation_prompt: bool,
    ) -> Result<String, ModelError> {
        let uses_history_tools = messages
            .iter()
            .any(|m| !m.tool_calls.is_empty() || m.role == "tool");
        let builtin = (!tools.is_empty() || uses_history_tools)
            && !matches!(self, ChatTemplate::Jinja { tools: Some(_), .. });
        if builtin {
            // A template without a system role gets the tools in the first user turn.
            let rewritten = builtin_messages(messages, tools, true);
            return self
                .render_with_tools(&rewritten, &[], vars, add_generation_prompt)
                .or_else(|_| {
                    let rewritten = builtin_messages(messages, tools, false);
                    self.render_with_tools(&rewritten, &[], vars, add_generation_prompt)
                });
        }
        match self {
            ChatTemplate::Jinja { env, bos, eos, .. } => {
                let t = env
                    .get_template(TEMPLATE_NAME)
                    .map_err(|e| template_error(&e))?;
                let tools: Option<Vec<serde_json::Value>> =
                    (!tools.is_empty()).then(|| tools.iter().map(Tool::template_value).collect());
                let ctx = minijinja::context! {
                    messages => messages.iter().map(ChatMessage::template_value).collect::<Vec<Value>>(),
                    tools => tools.map(|t| Value::from(minijinja::value::Serde(&t))),
                    add_generation_prompt => add_generation_prompt,
                    bos_token => bos,
                    eos_token => eos,
                    ..Value::from(minijinja::value::Serde(vars))
                };
                t.render(ctx).map_err(|e| template_error(&e))
            }
            ChatTemplate::GemmaTurns => Ok(render_gemma(messages, add_generation_prompt)),
        }
    }
}

/// Token ids of a conversation rendered by `template`: special tokens parsed (the
/// template spells them), BOS added only when the rendered text does not already
/// start with it (templates that write `{{ bos_token }}` must not get two).
pub fn encode_chat(
    template: Option<&ChatTemplate>,
    tokenizer: &crate::tokenizer::Tokenizer,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
) -> Result<Vec<u32>, ModelError> {
    encode_chat_with_tools(
        template,
        tokenizer,
        messages,
        &[],
        &TemplateVars::new(),
        add_generation_prompt,
    )
}

/// [`encode_chat`] offering `tools`.
pub fn encode_chat_with_tools(
    template: Option<&ChatTemplate>,
    tokenizer: &crate::tokenizer::Tokenizer,
    messages: &[ChatMessage],
    tools: &[Tool],
    vars: &TemplateVars,
    add_generation_prompt: bool,
) -> Result<Vec<u32>, ModelError> {
    let template = template.ok_or_else(|| {
        ModelError::ChatTemplate("the model has no chat template; send a raw prompt instead".into())
    })?;
    let text = template.render_with_tools(messages, tools, vars, add_generation_prompt)?;
    let starts_with_bos = tokenizer
        .bos()
        .is_some_and(|b| text.starts_with(&tokenizer.decode(&[b], true)));
    Ok(tokenizer.encode(&text, !starts_with_bos, true))
}

fn render_gemma(messages: &[ChatMessage], add_generation_prompt: bool) -> String {
    let mut out = String::new();
    let mut system = String::new();
    for m in messages {
        if m.role == "system" {
            system.push_str(m.content.trim());
            continue;
        }
        let role = if m.role == "assistant" {
            "model"
        } else {
            m.role.as_str()
        };
        out.push_str("<start_of_turn>");
        out.push_str(role);
        out.push('\n');
        if !system.is_empty() && role != "model" {
            out.push_str(&system);
            out.push_str("\n\n");
            system.clear();
        }
        out.push_str(m.content.trim());
        out.push_str("<end_of_turn>\n");
    }
    if add_generation_prompt {
        out.push_str("<start_of_turn>model\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemma_turns_fold_the_system_prompt_into_the_first_user_turn() {
        let msgs = [
            ChatMessage::new("system", " Be brief. "),
            ChatMessage::new("user", "Hi"),
            ChatMessage::new("assistant", "Hello"),
            ChatMessage::new("user", "Joke?"),
        ];
        let p = ChatTemplate::GemmaTurns.render(&msgs, true).unwrap();
        assert_eq!(
            p,
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n<start_of_turn>user\nJoke?<end_of_turn>\n<start_of_turn>model\n"
        );
    }

    #[test]
    fn tojson_takes_python_json_dumps_options() {
        let src = "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(separators=(',', ':')) }}|{{ x | tojson(sort_keys=true) }}";
        let t = ChatTemplate::jinja(src, "", "").unwrap();
        let ChatTemplate::Jinja { env, .. } = &t else {
            panic!()
        };
        let out = env
            .get_template(TEMPLATE_NAME)
            .unwrap()
            .render(minijinja::context! { x => Value::from(minijinja::value::Serde(serde_json::json!({"b": [1, 2], "a": "é"}))) })
            .unwrap();
        assert_eq!(
            out,
            "{\"b\": [1, 2], \"a\": \"é\"}|{\n  \"b\": [\n    1,\n    2\n  ],\n  \"a\": \"é\"\n}|{\"b\":[1,2],\"a\":\"é\"}|{\"a\": \"é\", \"b\": [1, 2]}"
        );
    }

    #[test]
    fn hugging_face_idioms_render() {
        let src = "{% for m in messages %}{% if m.content.strip().startswith('x') %}{{ m | tojson }}{% endif %}\n{% endfor %}{{ bos_token }}";
        let t = ChatTemplate::jinja(src, "<s>", "</s>").unwrap();
        let out = t
            .render(
                &[
                    ChatMessage::new("user", " x<&>"),
                    ChatMessage::new("user", "y"),
                ],
                false,
            )
            .unwrap();
        // transformers' tojson is json.dumps: ", " and ": " separators.
        assert_eq!(out, "{\"role\": \"user\", \"content\": \" x<&>\"}<s>");
    }

    #[test]
    fn a_broken_template_names_its_line() {
        let e = ChatTemplate::jinja("ok\n{% if %}", "", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2"), "{e}");
        let t =
            ChatTemplate::jinja("a\nb\n{{ raise_exception('no system role') }}", "", "").unwrap();
        let e = t.render(&[], false).unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("no system role"), "{e}");
    }
}
