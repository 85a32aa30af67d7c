//! Tool calling's request fields: `tools`, `tool_choice` and
//! `parallel_tool_calls`, and the tool parts of messages (an assistant's
//! `tool_calls`, a `tool` message's `tool_call_id`), validated (pure).

use ferrox_models::tools::{Tool, ToolCall};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::request::type_error;

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
            return Err(ApiError::invalid(
                Some("tool_choice"),
                format!("tool_choice names {name:?}, which is not in tools"),
            ));
        }
        if tools.is_empty() {
            return match choice {
                ToolChoice::Auto => Ok(None),
                _ => Err(ApiError::invalid(
                    Some("tool_choice"),
                    "tool_choice requires a tool call, but no tools are given",
                )),
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
pub fn tool_request(o: &Map<String, Value>) -> Result<Option<ToolRequest>, ApiError> {
    let tools = match o.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, t)| tool(&format!("tools[{i}]"), t))
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(type_error("tools", "an array of tools", v)),
    };
    let parallel = match o.get("parallel_tool_calls") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(type_error("parallel_tool_calls", "a boolean", v)),
    };
    let choice = match o.get("tool_choice") {
        None | Some(Value::Null) => Some(ToolChoice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "none" => None,
            "auto" => Some(ToolChoice::Auto),
            "required" => Some(ToolChoice::Required),
            other => {
                return Err(ApiError::invalid(
                    Some("tool_choice"),
                    format!("tool_choice {other:?} is not none, auto, required or a function"),
                ));
            }
        },
        Some(v @ Value::Object(c)) => {
            let name = c
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .filter(|_| c.get("type").and_then(Value::as_str) == Some("function"))
                .ok_or_else(|| {
                    type_error(
                        "tool_choice",
                        "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                        v,
                    )
                })?;
            Some(ToolChoice::Named(name.to_string()))
        }
        Some(v) => return Err(type_error("tool_choice", "a string or an object", v)),
    };
    match choice {
        Some(choice) => ToolRequest::new(tools, choice, parallel),
        None => Ok(None),
    }
}

fn tool(field: &str, v: &Value) -> Result<Tool, ApiError> {
    let o = v
        .as_object()
        .ok_or_else(|| type_error(field, "an object", v))?;
    if o.get("type").and_then(Value::as_str) != Some("function") {
        return Err(ApiError::invalid(
            Some(field),
            format!("{field}.type must be \"function\" (the only kind of tool)"),
        ));
    }
    let f = o
        .get("function")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            ApiError::invalid(Some(field), format!("{field}.function must be an object"))
        })?;
    let name = f
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
        .ok_or_else(|| {
            ApiError::invalid(
                Some(field),
                format!("{field}.function.name must be a name of letters, digits, _ and -"),
            )
        })?;
    let description = match f.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) => Some(d.clone()),
        Some(v) => {
            return Err(type_error(
                &format!("{field}.function.description"),
                "a string",
                v,
            ));
        }
    };
    let parameters = match f.get("parameters") {
        None | Some(Value::Null) => serde_json::json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(v) => {
            return Err(type_error(
                &format!("{field}.function.parameters"),
                "a JSON schema object",
                v,
            ));
        }
    };
    Ok(Tool {
        name: name.to_string(),
        description,
        parameters,
    })
}

/// An assistant message's `tool_calls` (their `arguments` are JSON text).
pub fn message_tool_calls(field: &str, m: &Map<String, Value>) -> Result<Vec<ToolCall>, ApiError> {
    let calls = match m.get("tool_calls") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(type_error(&format!("{field}.tool_calls"), "an array", v)),
    };
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let f = format!("{field}.tool_calls[{i}]");
            let bad = |what: &str| ApiError::invalid(Some(&f), format!("{f}: {what}"));
            let id = c
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("id must be a string"))?;
            let function = c
                .get("function")
                .ok_or_else(|| bad("function is required"))?;
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("function.name must be a string"))?;
            let arguments = match function.get("arguments") {
                Some(Value::String(s)) => serde_json::from_str(s)
                    .map_err(|e| bad(&format!("function.arguments is not JSON: {e}")))?,
                Some(a @ Value::Object(_)) => a.clone(),
                _ => return Err(bad("function.arguments must be a JSON string")),
            };
            Ok(ToolCall {
                id: id.to_string(),
                name: name.to_string(),
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
        tool_request(v.as_object().unwrap())
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
