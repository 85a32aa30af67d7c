//! Tool calling: the functions a request offers, the calls a model makes, and the
//! text formats models write them in.
//!
//! * [`ToolFormat`]: how a model writes a call. Hermes / Qwen wrap a JSON object
//!   in `<tool_call>` tags; Llama 3.1+ answers with one JSON object with
//!   `parameters`; Mistral writes `[TOOL_CALLS]` and a JSON array; gpt-oss
//!   (harmony) addresses a commentary message `to=functions.NAME` whose body is
//!   the arguments, ended by `<|call|>`. The format
//!   comes from the chat template; a template that knows none of them (or no
//!   tools at all) gets the built-in format: Hermes, described in the system
//!   prompt by [`builtin_messages`].
//! * [`ToolFormat::parse`] splits a finished answer into text and calls.
//! * [`ToolFormat::call_grammar`] is the grammar that forces one call (or
//!   several) to an offered function, with arguments valid for its schema, for
//!   `tool_choice: "required"` or a named function.
//! * [`ToolStream`] holds back streamed text that may be the start of a call.

use serde_json::{Value, json};

use crate::chat::ChatMessage;

/// A function a request offers the model.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}

impl Tool {
    /// The OpenAI shape templates expect: `{"type": "function", "function": {...}}`.
    pub fn template_value(&self) -> Value {
        let mut f = json!({"name": self.name, "parameters": self.parameters});
        if let Some(d) = &self.description {
            f["description"] = json!(d);
        }
        json!({"type": "function", "function": f})
    }
}

/// A call the model made (or made earlier, in a conversation's history).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments object.
    pub arguments: Value,
}

impl ToolCall {
    /// The arguments' JSON text in the pieces a stream sends them in (three, or
    /// fewer for short arguments): clients must reassemble them, as OpenAI's and
    /// Anthropic's streams require.
    pub fn argument_pieces(&self) -> Vec<String> {
        let chars: Vec<char> = self.arguments.to_string().chars().collect();
        chars
            .chunks(chars.len().div_ceil(3).max(1))
            .map(|p| p.iter().collect())
            .collect()
    }
}

/// How a model writes tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` (Hermes,
    /// Qwen, and ferrox's built-in format).
    Hermes,
    /// One `{"name": ..., "parameters": {...}}` object as the answer (Llama 3.1+).
    Llama3,
    /// `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (Mistral).
    Mistral,
    /// `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}`
    /// or `<|start|>assistant to=functions.NAME<|channel|>commentary
    /// json<|message|>{...}`, ended by `<|call|>` (gpt-oss's harmony format;
    /// one call per message).
    Harmony,
}

const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";
const MISTRAL_OPEN: &str = "[TOOL_CALLS]";
/// A harmony message to a function names its recipient so.
const HARMONY_RECIPIENT: &str = "to=functions.";
/// Where a harmony header may begin (the channel or a new message).
const HARMONY_HEADERS: [&str; 3] = ["<|start|>", "<|channel|>", HARMONY_RECIPIENT];
const HARMONY_BODY: &str = "<|message|>";
const HARMONY_ENDS: [&str; 3] = ["<|call|>", "<|end|>", "<|start|>"];

impl ToolFormat {
    /// The format a chat template writes calls in, if it handles tools in a
    /// format ferrox parses.
    pub fn of_template(source: &str) -> Option<ToolFormat> {
        if source.contains("<|channel|>commentary") && source.contains("<|call|>") {
            Some(ToolFormat::Harmony)
        } else if source.contains(MISTRAL_OPEN) {
            Some(ToolFormat::Mistral)
        } else if source.contains(HERMES_OPEN) {
            Some(ToolFormat::Hermes)
        } else if source.contains("\"parameters\": ") && source.contains("ipython") {
            Some(ToolFormat::Llama3)
        } else {
            None
        }
    }

    /// A fresh call id: Mistral's templates require 9 alphanumerics.
    pub fn call_id(self, n: u64) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut x = nanos ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(std::process::id());
        let mut id = String::new();
        let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        for _ in 0..9 {
            id.push(alphabet[(x % 62) as usize] as char);
            x /= 62;
            x ^= x << 13;
        }
        match self {
            ToolFormat::Mistral => id,
            _ => format!("call_{id}"),
        }
    }

    /// Splits a finished answer into its text and its calls (ids from `ids`). An
    /// answer whose call markup does not parse is all text.
    pub fn parse(self, text: &str, ids: &mut dyn FnMut() -> String) -> (String, Vec<ToolCall>) {
        let calls = match self {
            ToolFormat::Hermes => parse_hermes(text),
            ToolFormat::Llama3 => parse_llama3(text),
            ToolFormat::Mistral => parse_mistral(text),
            ToolFormat::Harmony => parse_harmony(text),
        };
        match calls {
            Some((content, calls)) if !calls.is_empty() => (
                content,
                calls
                    .into_iter()
                    .map(|(name, arguments)| ToolCall {
                        id: ids(),
                        name,
                        arguments,
                    })
                    .collect(),
            ),
            _ => (text.to_string(), Vec::new()),
        }
    }

    /// The grammar, in llguidance's Lark syntax, of an answer that is calls to
    /// `tools` (one, or one or more when `parallel`; always one in harmony,
    /// whose message holds one call), with arguments valid for each function's
    /// schema.
    pub fn call_grammar(self, tools: &[Tool], parallel: bool) -> String {
        let args_key = if self == ToolFormat::Llama3 {
            "parameters"
        } else {
            "arguments"
        };
        let alternatives: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({
                    "type": "object",
                    "properties": {"name": {"const": t.name}, args_key: t.parameters},
                    "required": ["name", args_key],
                    "additionalProperties": false,
                })
            })
            .collect();
        let call = json!({"anyOf": alternatives});
        let options =
            json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "});
        let mut call_schema = call.clone();
        call_schema["x-guidance"] = options.clone();
        match self {
            ToolFormat::Hermes => {
                let more = if parallel { " (\"\\n\" call)*" } else { "" };
                format!(
                    "start: call{more}\ncall: \"{HERMES_OPEN}\\n\" %json {call_schema} \"\\n{HERMES_CLOSE}\"\n"
                )
            }
            ToolFormat::Llama3 => format!("start: %json {call_schema}\n"),
            ToolFormat::Harmony => harmony_grammar(tools),
            ToolFormat::Mistral => {
                let mut list = json!({"type": "array", "items": call, "minItems": 1});
                if !parallel {
                    list["maxItems"] = json!(1);
                }
                list["x-guidance"] = options;
                format!(
                    "start: {} %json {list}\n",
                    serde_json::to_string(MISTRAL_OPEN).expect("strings serialize")
                )
            }
        }
    }

    /// Where a call may begin in streamed text: the text before it can be shown.
    fn call_start(self, text: &str) -> Option<usize> {
        match self {
            ToolFormat::Hermes => text.find(HERMES_OPEN),
            ToolFormat::Mistral => text.find(MISTRAL_OPEN),
            ToolFormat::Harmony => HARMONY_HEADERS.iter().filter_map(|h| text.find(h)).min(),
            // A Llama 3 call is the whole answer: a first `{` may begin one.
            ToolFormat::Llama3 => text
                .find(|c: char| !c.is_whitespace())
                .filter(|&i| text[i..].starts_with('{')),
        }
    }

    /// The longest end of `text` that could still grow into a call's start.
    fn pending_len(self, text: &str) -> usize {
        let marker = match self {
            ToolFormat::Hermes => HERMES_OPEN,
            ToolFormat::Mistral => MISTRAL_OPEN,
            ToolFormat::Harmony => {
                return HARMONY_HEADERS
                    .iter()
                    .map(|h| crate::reasoning::partial_suffix(text, h))
                    .max()
                    .unwrap_or(0);
            }
            ToolFormat::Llama3 => {
                return if text.trim().is_empty() {
                    text.len()
                } else {
                    0
                };
            }
        };
        crate::reasoning::partial_suffix(text, marker)
    }
}

/// `name` and the arguments object of a `{"name", key}` call object.
fn call_of(v: &Value, key: &str) -> Option<(String, Value)> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = match v.get(key) {
        Some(Value::String(s)) => serde_json::from_str(s).ok()?,
        Some(a @ Value::Object(_)) => a.clone(),
        None => json!({}),
        Some(_) => return None,
    };
    Some((name, args))
}

fn parse_hermes(text: &str) -> Option<(String, Vec<(String, Value)>)> {
    let mut calls = Vec::new();
    let mut content = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(HERMES_OPEN) {
        content.push_str(&rest[..start]);
        let after = &rest[start + HERMES_OPEN.len()..];
        let end = after.find(HERMES_CLOSE).unwrap_or(after.len());
        let v: Value = serde_json::from_str(after[..end].trim()).ok()?;
        calls.push(call_of(&v, "arguments")?);
        rest = after.get(end + HERMES_CLOSE.len()..).unwrap_or("");
    }
    content.push_str(rest);
    Some((content.trim().to_string(), calls))
}

fn parse_llama3(text: &str) -> Option<(String, Vec<(String, Value)>)> {
    let body = text.trim().trim_start_matches("<|python_tag|>");
    let v: Value = serde_json::from_str(body).ok()?;
    let key = if v.get("parameters").is_some() {
        "parameters"
    } else {
        "arguments"
    };
    Some((String::new(), vec![call_of(&v, key)?]))
}

fn parse_mistral(text: &str) -> Option<(String, Vec<(String, Value)>)> {
    let start = text.find(MISTRAL_OPEN)?;
    let list: Value = serde_json::from_str(text[start + MISTRAL_OPEN.len()..].trim()).ok()?;
    let calls = list
        .as_array()?
        .iter()
        .map(|c| call_of(c, "arguments"))
        .collect::<Option<Vec<_>>>()?;
    Some((text[..start].trim().to_string(), calls))
}

/// gpt-oss's calls: each message addressed `to=functions.NAME`, its body (after
/// `<|message|>`, up to `<|call|>`, `<|end|>`, the next message or the end) the
/// arguments. The text is what comes before the first call's header.
fn parse_harmony(text: &str) -> Option<(String, Vec<(String, Value)>)> {
    let mut calls = Vec::new();
    let mut content_end = None;
    let mut rest = text;
    let mut offset = 0;
    while let Some(at) = rest.find(HARMONY_RECIPIENT) {
        if content_end.is_none() {
            content_end = Some(harmony_header_start(&text[..offset + at]));
        }
        let after = &rest[at + HARMONY_RECIPIENT.len()..];
        let name_len = after
            .find(|c: char| c.is_whitespace() || c == '<')
            .unwrap_or(after.len());
        let name = after[..name_len].to_string();
        let body_at = after.find(HARMONY_BODY)? + HARMONY_BODY.len();
        let body = &after[body_at..];
        let end = HARMONY_ENDS
            .iter()
            .filter_map(|e| body.find(e))
            .min()
            .unwrap_or(body.len());
        let arguments: Value = match body[..end].trim() {
            "" => json!({}),
            args => serde_json::from_str(args).ok()?,
        };
        if name.is_empty() || !arguments.is_object() {
            return None;
        }
        calls.push((name, arguments));
        let consumed = at + HARMONY_RECIPIENT.len() + body_at + end;
        offset += consumed;
        rest = &rest[consumed..];
    }
    let content = content_end.map_or(text, |e| &text[..e]);
    Some((content.trim().to_string(), calls))
}

/// Where the header of a message whose recipient follows `before` begins: its
/// nearest `<|channel|>` or `<|start|>`, and the `<|start|>assistant` just
/// before a channel.
fn harmony_header_start(before: &str) -> usize {
    let Some(h) = ["<|start|>", "<|channel|>"]
        .iter()
        .filter_map(|m| before.rfind(m))
        .max()
    else {
        return before.len();
    };
    before[..h]
        .strip_suffix("<|start|>assistant")
        .map_or(h, str::len)
}

/// The grammar of one harmony call to an offered function: the commentary
/// channel's header with its control tokens (`<|channel|>`, `<|constrain|>`,
/// `<|message|>` as tokens, not text), then arguments valid for its schema.
fn harmony_grammar(tools: &[Tool]) -> String {
    let options =
        json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "});
    let mut lark = String::from("start: ");
    let rules: Vec<String> = (0..tools.len()).map(|i| format!("call_{i}")).collect();
    lark.push_str(&rules.join(" | "));
    lark.push('\n');
    for (i, t) in tools.iter().enumerate() {
        let mut schema = t.parameters.clone();
        if let Some(o) = schema.as_object_mut() {
            o.insert("x-guidance".into(), options.clone());
        }
        let header = serde_json::to_string(&format!("commentary {HARMONY_RECIPIENT}{} ", t.name))
            .expect("strings serialize");
        lark.push_str(&format!(
            "call_{i}: <|channel|> {header} <|constrain|> \"json\" <|message|> %json {schema}\n"
        ));
    }
    lark
}

/// Streamed text of an answer that may call tools: text is shown until a call may
/// have begun; from there it is held until the end, then parsed.
#[derive(Debug)]
pub struct ToolStream {
    format: ToolFormat,
    text: String,
    shown: usize,
    in_call: bool,
}

impl ToolStream {
    pub fn new(format: ToolFormat) -> ToolStream {
        ToolStream {
            format,
            text: String::new(),
            shown: 0,
            in_call: false,
        }
    }

    /// The format the calls are written in.
    pub fn format(&self) -> ToolFormat {
        self.format
    }

    /// Adds `piece`; returns the text that can be shown now.
    pub fn push(&mut self, piece: &str) -> String {
        self.text.push_str(piece);
        if self.in_call {
            return String::new();
        }
        let unshown = &self.text[self.shown..];
        let safe = match self.format.call_start(unshown) {
            Some(i) => {
                self.in_call = true;
                i
            }
            None => unshown.len() - self.format.pending_len(unshown),
        };
        let out = unshown[..safe].to_string();
        self.shown += safe;
        out
    }

    /// The end of the answer: the text not shown yet (when it held no call), and
    /// the calls.
    pub fn finish(self, ids: &mut dyn FnMut() -> String) -> (String, Vec<ToolCall>) {
        let (_, calls) = self.format.parse(&self.text, ids);
        // With calls, the text around them was shown already, up to the first one.
        let rest = if calls.is_empty() {
            self.text[self.shown..].to_string()
        } else {
            String::new()
        };
        (rest, calls)
    }

    /// Adds the answer's `last` piece and ends it: all the text still to show,
    /// and the calls.
    pub fn finish_with(
        mut self,
        last: &str,
        ids: &mut dyn FnMut() -> String,
    ) -> (String, Vec<ToolCall>) {
        let shown = self.push(last);
        let (rest, calls) = self.finish(ids);
        (shown + &rest, calls)
    }
}

/// The conversation rewritten for a template that does not handle tools:
/// ferrox's built-in (Hermes) format, with the functions described in the system
/// message (or, for templates without a system role, at the start of the first
/// user message), earlier calls written as `<tool_call>` blocks and results as
/// user turns in `<tool_response>` blocks, as Qwen's template does.
pub fn builtin_messages(
    messages: &[ChatMessage],
    tools: &[Tool],
    in_system: bool,
) -> Vec<ChatMessage> {
    let mut listing = String::new();
    for t in tools {
        listing.push('\n');
        listing.push_str(&t.template_value().to_string());
    }
    let instructions = format!(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>{listing}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>"
    );
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len() + 1);
    let system = messages.first().filter(|m| m.role == "system");
    let preamble = match system {
        Some(m) => format!("{}\n\n{instructions}", m.content),
        None => instructions,
    };
    // Without tools on offer (a history with calls only), nothing is described.
    let mut preamble = Some(preamble).filter(|_| !tools.is_empty());
    if in_system && let Some(p) = preamble.take() {
        out.push(ChatMessage::new("system", &p));
    } else if let Some(m) = system.filter(|_| preamble.is_none()) {
        out.push(m.clone());
    }
    let skip = usize::from(system.is_some());
    for m in &messages[skip..] {
        match m.role.as_str() {
            "assistant" if !m.tool_calls.is_empty() => {
                let mut text = m.content.clone();
                for c in &m.tool_calls {
                    let call = json!({"name": c.name, "arguments": c.arguments});
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&format!("{HERMES_OPEN}\n{call}\n{HERMES_CLOSE}"));
                }
                out.push(ChatMessage::new("assistant", &text));
            }
            "tool" => {
                let response = format!("<tool_response>\n{}\n</tool_response>", m.content);
                match out.last_mut() {
                    Some(prev)
                        if prev.role == "user" && prev.content.ends_with("</tool_response>") =>
                    {
                        prev.content.push('\n');
                        prev.content.push_str(&response);
                    }
                    _ => out.push(ChatMessage::new("user", &response)),
                }
            }
            "user" if preamble.is_some() => {
                let text = format!("{}\n\n{}", preamble.take().unwrap_or_default(), m.content);
                out.push(ChatMessage::new("user", &text));
            }
            _ => out.push(ChatMessage::new(&m.role, &m.content)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("call_{n}")
        }
    }

    #[test]
    fn each_format_parses_its_calls_and_leaves_other_text() {
        let cases = [
            (
                ToolFormat::Hermes,
                "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
                "Let me check.",
                vec![
                    ("get_weather", json!({"city": "Paris"})),
                    ("get_time", json!({})),
                ],
            ),
            (
                ToolFormat::Llama3,
                "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                "",
                vec![("get_weather", json!({"city": "Paris"}))],
            ),
            (
                ToolFormat::Mistral,
                "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": \"{}\"}]",
                "",
                vec![
                    ("get_weather", json!({"city": "Paris"})),
                    ("get_time", json!({})),
                ],
            ),
            // gpt-oss as it writes a call after its thinking (the reasoning
            // split has taken the analysis channel and `<|start|>assistant`)...
            (
                ToolFormat::Harmony,
                "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}",
                "",
                vec![("get_weather", json!({"city": "Paris"}))],
            ),
            // ...and as its template writes one, after a preamble, with a second.
            (
                ToolFormat::Harmony,
                "Checking.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|><|start|>assistant<|channel|>commentary to=functions.get_time<|message|><|call|>",
                "Checking.<|end|>",
                vec![
                    ("get_weather", json!({"city": "Paris"})),
                    ("get_time", json!({})),
                ],
            ),
        ];
        for (format, text, content, want) in cases {
            let (c, calls) = format.parse(text, &mut ids());
            assert_eq!(c, content, "{format:?}");
            let got: Vec<(&str, Value)> = calls
                .iter()
                .map(|c| (c.name.as_str(), c.arguments.clone()))
                .collect();
            assert_eq!(got, want, "{format:?}");
            assert_eq!(calls[0].id, "call_1");
        }
        // Markup that does not parse is text.
        for (format, text) in [
            (ToolFormat::Hermes, "<tool_call>\n{\"name\": \n</tool_call>"),
            (ToolFormat::Llama3, "The answer is {42}."),
            (ToolFormat::Mistral, "[TOOL_CALLS] oops"),
            (
                ToolFormat::Harmony,
                "<|channel|>commentary to=functions.f<|message|>{\"a\": ",
            ),
        ] {
            assert_eq!(format.parse(text, &mut ids()), (text.to_string(), vec![]));
        }
    }

    #[test]
    fn call_grammars_allow_one_call_or_several() {
        let tools = [Tool {
            name: "f".into(),
            description: None,
            parameters: json!({"type": "object"}),
        }];
        let one = ToolFormat::Hermes.call_grammar(&tools, false);
        assert!(one.starts_with("start: call\n"), "{one}");
        let many = ToolFormat::Hermes.call_grammar(&tools, true);
        assert!(many.starts_with("start: call (\"\\n\" call)*\n"), "{many}");
    }

    #[test]
    fn a_stream_shows_text_until_a_call_may_begin() {
        let mut s = ToolStream::new(ToolFormat::Hermes);
        let mut shown = String::new();
        for piece in [
            "Sure",
            ", checking",
            " <tool",
            "_call>\n{\"name\": \"f\", ",
            "\"arguments\": {}}\n</tool_call>",
        ] {
            shown.push_str(&s.push(piece));
        }
        assert_eq!(shown, "Sure, checking ");
        let (rest, calls) = s.finish(&mut ids());
        assert_eq!((rest.as_str(), calls.len()), ("", 1));
        // Text that only looked like a call's start is shown in the end.
        let mut s = ToolStream::new(ToolFormat::Hermes);
        assert_eq!(s.push("a <to"), "a ");
        assert_eq!(s.push("y"), "<toy");
        let mut s = ToolStream::new(ToolFormat::Hermes);
        assert_eq!(s.push("a <tool"), "a ");
        assert_eq!(s.finish(&mut ids()), ("<tool".to_string(), vec![]));
    }

    #[test]
    fn the_builtin_format_describes_tools_and_rewrites_the_history() {
        let tools = [Tool {
            name: "get_weather".into(),
            description: Some("Weather of a city".into()),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }];
        let mut call = ChatMessage::new("assistant", "");
        call.tool_calls = vec![ToolCall {
            id: "call_1".into(),
            name: "get_weather".into(),
            arguments: json!({"city": "Paris"}),
        }];
        let mut result = ChatMessage::new("tool", "18 C");
        result.tool_call_id = Some("call_1".into());
        let msgs = [ChatMessage::new("user", "Weather in Paris?"), call, result];
        let out = builtin_messages(&msgs, &tools, true);
        assert_eq!(out.len(), 4);
        assert_eq!(out[0].role, "system");
        assert!(
            out[0].content.contains("\"name\":\"get_weather\""),
            "{}",
            out[0].content
        );
        assert_eq!(
            out[2].content,
            "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>"
        );
        assert_eq!(
            (out[3].role.as_str(), out[3].content.as_str()),
            ("user", "<tool_response>\n18 C\n</tool_response>")
        );
    }
}
