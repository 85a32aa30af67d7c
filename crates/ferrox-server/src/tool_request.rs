//! Tool calling's request fields: `tools`, `tool_choice` and
//! `parallel_tool_calls`, and the tool parts of messages (an assistant's
//! `tool_calls`, a `tool` message's `tool_call_id`), validated (pure).

use ferrox_text::tools::{Tool, ToolCall};
use serde_json::Value;

use crate::error::ApiError;
use crate::invalid::Invalid;
use crate::openai::request::{Arguments, ToolCallIn, ToolChoiceIn, ToolDef};

/// What the model may or must do with the tools.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolChoice {
    /// Answer in text or call tools, as it decides.
    Auto,
    /// Call at least one tool.
    Required,
    /// Call this function.
    Named(String),
}

/// The tools a request offers, when it offers any (`tool_choice: "none"` offers
/// none).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolRequest {
    pub tools: Vec<Tool>,
    pub choice: ToolChoice,
    /// Whether one answer may call several tools.
    pub parallel: bool,
}

impl ToolRequest {
    /// The tools on offer under `choice` (`None` when none are given and none
    /// must be called): a forced call needs tools, and a named one a tool of
    /// that name. Both APIs' fields end here.
    pub fn new(
        tools: Vec<Tool>,
        choice: ToolChoice,
        parallel: bool,
    ) -> Result<Option<ToolRequest>, ApiError> {
        if let ToolChoice::Named(name) = &choice
            && !tools.is_empty()
            && !tools.iter().any(|t| &t.name == name)
        {
            return Err(Invalid::NotOffered { name: name.clone() }.into());
        }
        if tools.is_empty() {
            return match choice {
                ToolChoice::Auto => Ok(None),
                _ => Err(Invalid::Needs {
                    field: "tool_choice",
                    needs: "tools: it requires a tool call, but no tools are given",
                }
                .into()),
            };
        }
        Ok(Some(ToolRequest {
            tools,
            choice,
            parallel,
        }))
    }

    /// The functions a forced call may go to: the named one, or all.
    pub fn callable(&self) -> Vec<Tool> {
        match &self.choice {
            ToolChoice::Named(n) => self
                .tools
                .iter()
                .filter(|t| &t.name == n)
                .cloned()
                .collect(),
            _ => self.tools.clone(),
        }
    }
}

/// `tools`, `tool_choice` and `parallel_tool_calls`.
pub fn tool_request(
    tools: Option<Vec<ToolDef>>,
    choice: Option<ToolChoiceIn>,
    parallel: Option<bool>,
) -> Result<Option<ToolRequest>, ApiError> {
    let tools = tools
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, t)| tool(&format!("tools[{i}]"), t))
        .collect::<Result<Vec<_>, _>>()?;
    let choice = match choice {
        None => ToolChoice::Auto,
        Some(ToolChoiceIn::Mode(m)) => match m.as_str() {
            "none" => return Ok(None),
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(Invalid::OutOfRange {
                    field: "tool_choice",
                    bound: "none, auto, required or a function".into(),
                    got: format!("{other:?}"),
                }
                .into());
            }
        },
        Some(ToolChoiceIn::Named(n)) if n.kind == "function" => ToolChoice::Named(n.function.name),
        Some(ToolChoiceIn::Named(n)) => {
            return Err(Invalid::OutOfRange {
                field: "tool_choice",
                bound: "of type \"function\"".into(),
                got: format!("{:?}", n.kind),
            }
            .into());
        }
    };
    ToolRequest::new(tools, choice, parallel.unwrap_or(true))
}

fn tool(field: &str, t: ToolDef) -> Result<Tool, ApiError> {
    if t.kind != "function" {
        return Err(Invalid::Unsupported {
            field: field.to_string(),
            what: "type must be \"function\" (the only kind of tool)",
        }
        .into());
    }
    let f = t.function.ok_or_else(|| Invalid::Unsupported {
        field: field.to_string(),
        what: "function must be an object",
    })?;
    let valid_name = !f.name.is_empty()
        && f.name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid_name {
        return Err(Invalid::Unsupported {
            field: field.to_string(),
            what: "function.name must be a name of letters, digits, _ and -",
        }
        .into());
    }
    Ok(Tool {
        name: f.name,
        description: f.description,
        parameters: f.parameters.map_or_else(
            || serde_json::json!({"type": "object", "properties": {}}),
            Value::Object,
        ),
    })
}

/// An assistant message's `tool_calls` (their `arguments` are JSON text);
/// `field` names the list in errors.
pub fn message_tool_calls(field: &str, calls: Vec<ToolCallIn>) -> Result<Vec<ToolCall>, ApiError> {
    calls
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let f = format!("{field}[{i}]");
            let arguments = match c.function.arguments {
                Arguments::Json(s) => serde_json::from_str(&s).map_err(|e| Invalid::Body {
                    path: Some(f.clone()),
                    detail: format!("function.arguments is not JSON: {e}"),
                })?,
                Arguments::Object(o) => Value::Object(o),
            };
            Ok(ToolCall {
                id: c.id,
                name: c.function.name,
                arguments,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Option<ToolRequest>, ApiError> {
        let f: crate::openai::request::ChatFields = crate::request::typed(&v)?;
        tool_request(f.tools, f.tool_choice, f.parallel_tool_calls)
    }

    fn weather() -> Value {
        json!({"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object"}}})
    }

    #[test]
    fn tools_and_choices_parse() {
        let r = parse(json!({"tools": [weather()]})).unwrap().unwrap();
        assert_eq!(
            (r.choice.clone(), r.parallel, r.tools[0].name.as_str()),
            (ToolChoice::Auto, true, "get_weather")
        );
        let r = parse(
            json!({"tools": [weather()], "tool_choice": "required", "parallel_tool_calls": false}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (r.choice.clone(), r.parallel),
            (ToolChoice::Required, false)
        );
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        let r = parse(json!({"tools": [weather()], "tool_choice": named}))
            .unwrap()
            .unwrap();
        assert_eq!(r.choice, ToolChoice::Named("get_weather".into()));
        assert_eq!(
            parse(json!({"tools": [weather()], "tool_choice": "none"})).unwrap(),
            None
        );
        assert_eq!(parse(json!({})).unwrap(), None);
    }

    #[test]
    fn malformed_tools_are_refused_by_name() {
        for (body, field) in [
            (json!({"tools": {}}), "tools"),
            (json!({"tools": [{"type": "code"}]}), "tools[0]"),
            (
                json!({"tools": [{"type": "function", "function": {"name": "a b"}}]}),
                "tools[0]",
            ),
            (
                json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": 1}}]}),
                "tools[0].function.parameters",
            ),
            (
                json!({"tools": [weather()], "tool_choice": "always"}),
                "tool_choice",
            ),
            (
                json!({"tools": [weather()], "tool_choice": {"type": "function", "function": {"name": "other"}}}),
                "tool_choice",
            ),
            (json!({"tool_choice": "required"}), "tool_choice"),
            (
                json!({"tools": [weather()], "parallel_tool_calls": "yes"}),
                "parallel_tool_calls",
            ),
        ] {
            let e = parse(body.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{body}: {}", e.message);
        }
    }
}
