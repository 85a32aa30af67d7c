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

use minijinja::{Environment, Error, ErrorKind, Value, syntax::SyntaxConfig};
use serde::{Deserialize, Serialize};

use crate::error::ModelError;
use crate::hparams::Architecture;

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    /// A message of `role` saying `content`.
    pub fn new(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.to_string(),
            content: content.to_string(),
        }
    }
}

const TEMPLATE_NAME: &str = "chat_template";

/// How a model's conversations become prompts.
pub enum ChatTemplate {
    /// The file's own Jinja template.
    Jinja {
        env: Box<Environment<'static>>,
        bos: String,
        eos: String,
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

fn tojson(value: Value, indent: Option<usize>) -> Result<Value, Error> {
    let bad =
        |e: serde_json::Error| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}"));
    let s = match indent {
        Some(n) => {
            let mut buf = Vec::new();
            let indent_str = " ".repeat(n);
            let fmt = serde_json::ser::PrettyFormatter::with_indent(indent_str.as_bytes());
            let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
            value.serialize(&mut ser).map_err(bad)?;
            String::from_utf8(buf).expect("JSON is UTF-8")
        }
        None => serde_json::to_string(&value).map_err(bad)?,
    };
    Ok(Value::from_safe_string(s))
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
        Ok(ChatTemplate::Jinja {
            env: Box::new(env),
            bos: bos.to_string(),
            eos: eos.to_string(),
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

    /// Renders `messages` into a prompt; `add_generation_prompt` opens the assistant turn.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ModelError> {
        match self {
            ChatTemplate::Jinja { env, bos, eos } => {
                let t = env
                    .get_template(TEMPLATE_NAME)
                    .map_err(|e| template_error(&e))?;
                let ctx = minijinja::context! {
                    messages => messages.iter().map(|m| Value::from_pairs([("role", m.role.as_str()), ("content", m.content.as_str())])).collect::<Vec<Value>>(),
                    add_generation_prompt => add_generation_prompt,
                    bos_token => bos,
                    eos_token => eos,
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
    let template = template.ok_or_else(|| {
        ModelError::ChatTemplate("the model has no chat template; send a raw prompt instead".into())
    })?;
    let text = template.render(messages, add_generation_prompt)?;
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
        assert_eq!(out, "{\"role\":\"user\",\"content\":\" x<&>\"}<s>");
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
