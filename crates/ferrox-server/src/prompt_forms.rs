//! llama-server's prompt forms, as token ids: the one reading of a prompt
//! that `/completion`, `/embedding` and `/v1/embeddings` share (llama.cpp's
//! `tokenize_input_prompts`).
//!
//! A prompt is text, token ids, ids mixed with text (`[12, "text", 34]`), a
//! `{"prompt_string": ...}` object, or a `{"content": [{"type": "text",
//! "text": ...}, ...]}` object. A list holding a number is one prompt (ids,
//! or ids mixed with text); any other list is a list of prompts. Text is
//! tokenized with special tokens parsed, BOS first when a prompt starts with
//! text, as llama-server does.

use ferrox_text::Tokenizer;
use serde_json::Value;

use crate::invalid::Invalid;

/// A body's prompts: one, or a list of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompts {
    One(Vec<u32>),
    Many(Vec<Vec<u32>>),
}

impl Prompts {
    /// Every prompt, in order.
    pub fn into_vec(self) -> Vec<Vec<u32>> {
        match self {
            Prompts::One(ids) => vec![ids],
            Prompts::Many(lists) => lists,
        }
    }
}

/// Whether `p` is in one of the forms OpenAI's completions route reads: text,
/// a list of texts, token ids, or a list of token-id lists.
pub fn is_openai_form(p: &Value) -> bool {
    match p {
        Value::String(_) => true,
        Value::Array(items) => {
            items.iter().all(Value::is_string)
                || items.iter().all(Value::is_number)
                || items
                    .iter()
                    .all(|i| i.as_array().is_some_and(|a| a.iter().all(Value::is_number)))
        }
        _ => false,
    }
}

/// The prompts `p` holds; `field` names it in errors.
pub fn prompts(tok: &Tokenizer, p: &Value, field: &str) -> Result<Prompts, Invalid> {
    match p {
        Value::Array(items) if !items.iter().any(Value::is_number) => items
            .iter()
            .enumerate()
            .map(|(i, item)| one_prompt(tok, item, &format!("{field}[{i}]")))
            .collect::<Result<_, _>>()
            .map(Prompts::Many),
        _ => one_prompt(tok, p, field).map(Prompts::One),
    }
}

/// One prompt, as token ids.
fn one_prompt(tok: &Tokenizer, p: &Value, field: &str) -> Result<Vec<u32>, Invalid> {
    match p {
        Value::String(s) => Ok(tok.encode(s, true, true)),
        Value::Array(items) => mixed_ids(tok, items, field),
        Value::Object(o) => {
            if o.get("multimodal_data").is_some_and(|m| !m.is_null()) {
                return Err(Invalid::Unsupported {
                    field: format!("{field}.multimodal_data"),
                    what: "images and audio are not supported: the models here take text only",
                });
            }
            match (o.get("prompt_string"), o.get("content")) {
                (Some(Value::String(s)), None) => Ok(tok.encode(s, true, true)),
                (None, Some(Value::Array(parts))) => {
                    let text = content_text(parts, &format!("{field}.content"))?;
                    Ok(tok.encode(&text, true, true))
                }
                (None, Some(_)) => Err(Invalid::Body {
                    path: Some(format!("{field}.content")),
                    detail: "content must be a list of parts ({\"type\": \"text\", \"text\": ...})"
                        .into(),
                }),
                _ => Err(Invalid::Body {
                    path: Some(field.to_string()),
                    detail: "a prompt object needs a prompt_string or a content list".into(),
                }),
            }
        }
        _ => Err(Invalid::Body {
            path: Some(field.to_string()),
            detail: "expected text, token ids and text, or a prompt object".into(),
        }),
    }
}

/// The text of `content` parts, joined; parts other than text are refused by
/// their type.
fn content_text(parts: &[Value], field: &str) -> Result<String, Invalid> {
    let mut text = String::new();
    for (i, part) in parts.iter().enumerate() {
        match (
            part.get("type").and_then(Value::as_str),
            part.get("text").and_then(Value::as_str),
        ) {
            (Some("text"), Some(t)) => text.push_str(t),
            (Some("image_url" | "input_image" | "input_audio" | "input_video"), _) => {
                return Err(Invalid::Unsupported {
                    field: format!("{field}[{i}]"),
                    what: "images, audio and video are not supported: the models here take \
                           text only",
                });
            }
            _ => {
                return Err(Invalid::Body {
                    path: Some(format!("{field}[{i}]")),
                    detail: "expected a part {\"type\": \"text\", \"text\": ...}".into(),
                });
            }
        }
    }
    Ok(text)
}

/// Token ids mixed with text; text is tokenized in place, BOS only at the
/// start.
fn mixed_ids(tok: &Tokenizer, items: &[Value], field: &str) -> Result<Vec<u32>, Invalid> {
    let mut ids = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            Value::String(s) => ids.extend(tok.encode(s, i == 0, true)),
            Value::Number(n) if n.as_u64().is_some_and(|n| n <= u32::MAX as u64) => {
                ids.push(n.as_u64().expect("checked") as u32)
            }
            _ => {
                return Err(Invalid::Body {
                    path: Some(format!("{field}[{i}]")),
                    detail: "expected a token id or text".into(),
                });
            }
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openai_forms_are_told_apart_from_llama_servers() {
        for p in [
            json!("a"),
            json!(["a", "b"]),
            json!([1, 2]),
            json!([[1], [2, 3]]),
        ] {
            assert!(is_openai_form(&p), "{p}");
        }
        for p in [
            json!([1, "a"]),
            json!({"prompt_string": "a"}),
            json!(["a", [1, 2]]),
            json!(["a", {"prompt_string": "b"}]),
        ] {
            assert!(!is_openai_form(&p), "{p}");
        }
    }
}
