//! Structured output: the request fields that constrain the output to a grammar,
//! validated into a [`GrammarSpec`] (pure; the handler compiles it).
//!
//! OpenAI's `response_format` (`text`, `json_object`, `json_schema` with
//! `strict`), llama-server's `json_schema` and `grammar` (GBNF, or Lark), and vLLM's
//! `guided_json`, `guided_regex`, `guided_grammar` and `guided_choice` all name
//! the same thing; at most one may be given.

use ferrox_models::grammar::GrammarSpec;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::request::type_error;

/// The output grammar a request asks for: OpenAI's `response_format`, or the
/// names llama-server (`json_schema`, `grammar`) and vLLM (`guided_json`,
/// `guided_regex`, `guided_grammar`, `guided_choice`) give the same thing. At
/// most one may be given.
pub(crate) fn output_grammar(o: &Map<String, Value>) -> Result<Option<GrammarSpec>, ApiError> {
    let mut found: Vec<(&str, GrammarSpec)> = Vec::new();
    if let Some(rf) = o.get("response_format").filter(|v| !v.is_null())
        && let Some(g) = response_format(rf)?
    {
        found.push(("response_format", g));
    }
    for field in ["json_schema", "guided_json"] {
        if let Some(v) = o.get(field).filter(|v| !v.is_null()) {
            found.push((field, schema_value(field, v, false)?));
        }
    }
    for field in ["grammar", "guided_grammar"] {
        if let Some(v) = o.get(field).filter(|v| !v.is_null()) {
            let g = v
                .as_str()
                .ok_or_else(|| type_error(field, "a string (a GBNF or Lark grammar)", v))?;
            found.push((field, GrammarSpec::grammar(g)));
        }
    }
    if let Some(v) = o.get("guided_regex").filter(|v| !v.is_null()) {
        let r = v
            .as_str()
            .ok_or_else(|| type_error("guided_regex", "a string", v))?;
        found.push(("guided_regex", GrammarSpec::Regex(r.to_string())));
    }
    if let Some(v) = o.get("guided_choice").filter(|v| !v.is_null()) {
        found.push(("guided_choice", choice_grammar(v)?));
    }
    match found.len() {
        0 | 1 => Ok(found.pop().map(|(_, g)| g)),
        _ => {
            let names: Vec<&str> = found.iter().map(|f| f.0).collect();
            Err(ApiError::invalid(
                Some(names[1]),
                format!(
                    "give one output constraint, not several: {}",
                    names.join(", ")
                ),
            ))
        }
    }
}

/// OpenAI's `response_format`: `text` (no constraint), `json_object` (any object,
/// or llama-server's `schema` inside it) or `json_schema` (`json_schema.schema`,
/// `json_schema.strict`).
fn response_format(rf: &Value) -> Result<Option<GrammarSpec>, ApiError> {
    const F: &str = "response_format";
    let o = rf
        .as_object()
        .ok_or_else(|| type_error(F, "an object", rf))?;
    match o.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => match o.get("schema").filter(|v| !v.is_null()) {
            Some(schema) => schema_value("response_format.schema", schema, false).map(Some),
            None => Ok(Some(GrammarSpec::JsonObject)),
        },
        Some("json_schema") => {
            let js = o
                .get("json_schema")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    ApiError::invalid(
                        Some(F),
                        "response_format json_schema needs a json_schema object with a schema",
                    )
                })?;
            let strict = match js.get("strict") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(v) => {
                    return Err(type_error(
                        "response_format.json_schema.strict",
                        "a boolean",
                        v,
                    ));
                }
            };
            match js.get("schema").filter(|v| !v.is_null()) {
                Some(schema) => {
                    schema_value("response_format.json_schema.schema", schema, strict).map(Some)
                }
                // OpenAI: a missing schema allows any JSON object.
                None => Ok(Some(GrammarSpec::JsonObject)),
            }
        }
        Some(t) => Err(ApiError::invalid(
            Some(F),
            format!("response_format type {t:?} is not one of text, json_object, json_schema"),
        )),
        None => Err(ApiError::invalid(Some(F), "response_format needs a type")),
    }
}

/// A JSON schema given as an object, or as a string holding one (vLLM).
fn schema_value(field: &str, v: &Value, strict: bool) -> Result<GrammarSpec, ApiError> {
    let schema = match v {
        Value::Object(_) | Value::Bool(true) => v.clone(),
        Value::String(s) => serde_json::from_str(s)
            .map_err(|e| ApiError::invalid(Some(field), format!("{field} is not JSON: {e}")))?,
        _ => return Err(type_error(field, "a JSON schema object", v)),
    };
    Ok(GrammarSpec::JsonSchema { schema, strict })
}

/// vLLM's `guided_choice`: the output is exactly one of the strings.
fn choice_grammar(v: &Value) -> Result<GrammarSpec, ApiError> {
    let choices: Vec<&str> = v
        .as_array()
        .filter(|a| !a.is_empty())
        .and_then(|a| a.iter().map(Value::as_str).collect())
        .ok_or_else(|| type_error("guided_choice", "a non-empty array of strings", v))?;
    let alternatives: Vec<String> = choices
        .iter()
        .map(|c| serde_json::to_string(c).expect("strings serialize"))
        .collect();
    Ok(GrammarSpec::Lark(format!(
        "start: {}",
        alternatives.join(" | ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn grammar(body: Value) -> Result<Option<GrammarSpec>, ApiError> {
        output_grammar(body.as_object().unwrap())
    }

    fn schema(schema: Value, strict: bool) -> Option<GrammarSpec> {
        Some(GrammarSpec::JsonSchema { schema, strict })
    }

    #[test]
    fn every_name_for_a_grammar_gives_its_spec() {
        let s = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let cases = [
            (json!({}), None),
            (json!({"response_format": {"type": "text"}}), None),
            (json!({"response_format": null}), None),
            (
                json!({"response_format": {"type": "json_object"}}),
                Some(GrammarSpec::JsonObject),
            ),
            (
                json!({"response_format": {"type": "json_object", "schema": s}}),
                schema(s.clone(), false),
            ),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": s, "strict": true}}}),
                schema(s.clone(), true),
            ),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
                Some(GrammarSpec::JsonObject),
            ),
            (json!({"json_schema": s}), schema(s.clone(), false)),
            (json!({"guided_json": s}), schema(s.clone(), false)),
            (
                json!({"guided_json": s.to_string()}),
                schema(s.clone(), false),
            ),
            (
                json!({"grammar": "start: \"a\""}),
                Some(GrammarSpec::Lark("start: \"a\"".into())),
            ),
            (
                json!({"guided_grammar": "start: \"a\""}),
                Some(GrammarSpec::Lark("start: \"a\"".into())),
            ),
            (
                json!({"grammar": "root ::= \"a\""}),
                Some(GrammarSpec::Gbnf("root ::= \"a\"".into())),
            ),
            (
                json!({"grammar": "root ::= \"a\""}),
                Some(GrammarSpec::Gbnf("root ::= \"a\"".into())),
            ),
            (
                json!({"guided_regex": "[0-9]+"}),
                Some(GrammarSpec::Regex("[0-9]+".into())),
            ),
            (
                json!({"guided_choice": ["yes", "n\"o"]}),
                Some(GrammarSpec::Lark(r#"start: "yes" | "n\"o""#.into())),
            ),
        ];
        for (body, want) in cases {
            assert_eq!(grammar(body.clone()).unwrap(), want, "{body}");
        }
    }

    #[test]
    fn malformed_or_several_grammars_are_refused_by_name() {
        let cases = [
            (json!({"response_format": "json"}), "response_format"),
            (
                json!({"response_format": {"type": "xml"}}),
                "response_format",
            ),
            (json!({"response_format": {}}), "response_format"),
            (
                json!({"response_format": {"type": "json_schema"}}),
                "response_format",
            ),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}}}),
                "response_format.json_schema.strict",
            ),
            (json!({"json_schema": 3}), "json_schema"),
            (json!({"guided_json": "{not json"}), "guided_json"),
            (json!({"grammar": ["a"]}), "grammar"),
            (json!({"guided_regex": 1}), "guided_regex"),
            (json!({"guided_choice": []}), "guided_choice"),
            (json!({"guided_choice": ["a", 1]}), "guided_choice"),
            (
                json!({"response_format": {"type": "json_object"}, "guided_regex": "a"}),
                "guided_regex",
            ),
        ];
        for (body, field) in cases {
            let e = grammar(body.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{body}: {}", e.message);
        }
    }
}
