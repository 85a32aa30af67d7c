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

use minijinja::{Environment, Error, syntax::SyntaxConfig};
use serde::{Deserialize, Serialize};

mod python;

use crate::error::TextError;
use crate::reasoning::ThinkFormat;
use crate::tools::{Tool, ToolCall, ToolFormat, builtin_messages};

/// A chat format built in for files that carry no template.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BuiltinTemplate {
    /// `<start_of_turn>user` / `<start_of_turn>model`, system text folded into
    /// the first user turn (Gemma 2 and 3, as llama.cpp formats them).
    GemmaTurns,
}

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
    /// key itself; a call's `arguments` as an object.
    pub fn template_value(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("role".into(), self.role.clone().into());
        m.insert("content".into(), self.content.clone().into());
        if !self.tool_calls.is_empty() {
            let calls: Vec<serde_json::Value> = self
                .tool_calls
                .iter()
                .map(|c| serde_json::json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                .collect();
            m.insert("tool_calls".into(), calls.into());
        }
        if let Some(id) = &self.tool_call_id {
            m.insert("tool_call_id".into(), id.clone().into());
        }
        serde_json::Value::Object(m)
    }
}

pub(crate) const TEMPLATE_NAME: &str = "chat_template";

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
        /// How the model marks its thinking, when it thinks.
        thinks: Option<ThinkFormat>,
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

fn template_error(e: &Error) -> TextError {
    let mut msg = e.to_string();
    if let Some(line) = e.line() {
        msg = format!("line {line}: {msg}");
    }
    TextError::ChatTemplate(msg)
}

impl ChatTemplate {
    /// Compiles a Jinja chat template; `bos` / `eos` are the texts templates see as
    /// `bos_token` / `eos_token`. `strftime_now` reads the local clock.
    pub fn jinja(source: &str, bos: &str, eos: &str) -> Result<ChatTemplate, TextError> {
        ChatTemplate::jinja_at(source, bos, eos, None)
    }

    /// [`ChatTemplate::jinja`] whose `strftime_now` formats `fixed_time` (Unix
    /// seconds, UTC) when given, so that a rendering can be reproduced.
    pub fn jinja_at(
        source: &str,
        bos: &str,
        eos: &str,
        fixed_time: Option<i64>,
    ) -> Result<ChatTemplate, TextError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| template_error(&e))?;
        env.set_syntax(syntax);
        python::install(&mut env, fixed_time);
        env.add_template_owned(TEMPLATE_NAME, python::without_generation_tags(source))
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
            thinks: ThinkFormat::of_template(source),
            reads,
        })
    }

    /// The template a model's metadata calls for: its own Jinja template, else
    /// the built-in format its architecture names, else `None`.
    pub fn for_model(
        source: Option<&str>,
        builtin: Option<BuiltinTemplate>,
        bos: &str,
        eos: &str,
    ) -> Result<Option<ChatTemplate>, TextError> {
        match (source, builtin) {
            (Some(s), _) => Ok(Some(ChatTemplate::jinja(s, bos, eos)?)),
            (None, Some(BuiltinTemplate::GemmaTurns)) => Ok(Some(ChatTemplate::GemmaTurns)),
            (None, None) => Ok(None),
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

    /// How the model marks the thinking it does before it answers, if it thinks.
    pub fn thinks(&self) -> Option<ThinkFormat> {
        match self {
            ChatTemplate::Jinja { thinks, .. } => *thinks,
            ChatTemplate::GemmaTurns => None,
        }
    }

    /// Renders `messages` into a prompt; `add_generation_prompt` opens the assistant turn.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TextError> {
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
    ) -> Result<String, TextError> {
        let uses_history_tools = messages
            .iter()
            .any(|m| !m.tool_calls.is_empty() || m.role == "tool");
        let builtin = (!tools.is_empty() || uses_history_tools)
            && !matches!(self, ChatTemplate::Jinja { tools: Some(_), .. });
        if builtin {
            return self.render_builtin_tools(messages, tools, vars, add_generation_prompt);
        }
        let offered = Some(tools).filter(|t| !t.is_empty());
        self.render_parts(messages, offered, vars, add_generation_prompt)
    }

    /// The built-in tool format: the tools described in the system prompt, or in
    /// the first user turn for a template without a system role; a template that
    /// iterates `tools` regardless gets an empty list rather than `None`.
    fn render_builtin_tools(
        &self,
        messages: &[ChatMessage],
        tools: &[Tool],
        vars: &TemplateVars,
        add_generation_prompt: bool,
    ) -> Result<String, TextError> {
        let mut first_error = None;
        for in_system in [true, false] {
            let rewritten = builtin_messages(messages, tools, in_system);
            for offered in [None, Some(&[][..])] {
                match self.render_parts(&rewritten, offered, vars, add_generation_prompt) {
                    Ok(text) => return Ok(text),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        Err(first_error.expect("at least one rendering was tried"))
    }

    fn render_parts(
        &self,
        messages: &[ChatMessage],
        tools: Option<&[Tool]>,
        vars: &TemplateVars,
        add_generation_prompt: bool,
    ) -> Result<String, TextError> {
        match self {
            ChatTemplate::Jinja { bos, eos, .. } => {
                let ctx = template_context(messages, tools, vars, bos, eos, add_generation_prompt);
                self.render_context(&ctx)
            }
            ChatTemplate::GemmaTurns => Ok(render_gemma(messages, add_generation_prompt)),
        }
    }

    /// Renders a Jinja template with exactly the variables of `ctx` (a
    /// [`template_context`]); the built-in Gemma format has no template to render.
    pub fn render_context(&self, ctx: &serde_json::Value) -> Result<String, TextError> {
        let ChatTemplate::Jinja { env, .. } = self else {
            return Err(TextError::ChatTemplate(
                "the built-in Gemma turn format is not a Jinja template".into(),
            ));
        };
        let t = env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| template_error(&e))?;
        t.render(python::top_level(ctx))
            .map_err(|e| template_error(&e))
    }

    /// The BOS and EOS texts a Jinja template sees.
    pub fn special_tokens(&self) -> Option<(&str, &str)> {
        match self {
            ChatTemplate::Jinja { bos, eos, .. } => Some((bos, eos)),
            ChatTemplate::GemmaTurns => None,
        }
    }
}

/// The variables a chat template is rendered with, as `transformers`' `apply_chat_template`
/// passes them: `messages`, `tools` (`None` when none are offered), `documents`
/// (`none`), `add_generation_prompt`, `bos_token`, `eos_token`, then `vars`, which
/// cannot replace any of those.
pub fn template_context(
    messages: &[ChatMessage],
    tools: Option<&[Tool]>,
    vars: &TemplateVars,
    bos: &str,
    eos: &str,
    add_generation_prompt: bool,
) -> serde_json::Value {
    let mut ctx = vars.clone();
    let tools = tools.map(|t| t.iter().map(Tool::template_value).collect());
    let own: [(&str, serde_json::Value); 6] = [
        (
            "messages",
            messages.iter().map(ChatMessage::template_value).collect(),
        ),
        (
            "tools",
            tools.map_or(serde_json::Value::Null, serde_json::Value::Array),
        ),
        ("documents", serde_json::Value::Null),
        ("add_generation_prompt", add_generation_prompt.into()),
        ("bos_token", bos.into()),
        ("eos_token", eos.into()),
    ];
    for (k, v) in own {
        ctx.insert(k.to_string(), v);
    }
    serde_json::Value::Object(ctx)
}

/// Token ids of a conversation rendered by `template`: special tokens parsed (the
/// template spells them), BOS added only when the rendered text does not already
/// start with it (templates that write `{{ bos_token }}` must not get two).
pub fn encode_chat(
    template: Option<&ChatTemplate>,
    tokenizer: &crate::tokenizer::Tokenizer,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
) -> Result<Vec<u32>, TextError> {
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
) -> Result<Vec<u32>, TextError> {
    let template = template.ok_or_else(|| {
        TextError::ChatTemplate("the model has no chat template; send a raw prompt instead".into())
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
