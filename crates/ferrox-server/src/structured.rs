//! Structured output: the request fields that constrain the output to a grammar,
//! validated into a [`GrammarSpec`] (pure; the handler compiles it).
//!
//! OpenAI's `response_format` (`text`, `json_object`, `json_schema` with
//! `strict`), llama-server's `json_schema` and `grammar` (GBNF, or Lark), and vLLM's
//! `guided_json`, `guided_regex`, `guided_grammar` and `guided_choice` all name
//! the same thing; at most one may be given.

use ferrox_sampling::grammar::GrammarSpec;
use serde_json::Value;

use crate::error::ApiError;
use crate::invalid::Invalid;
use crate::openai::request::{JsonSchemaFormat, ResponseFormat, Schema, SharedFields};

/// The output grammar a request asks for (the constraint fields are taken out
/// of `f`). At most one may be given.
pub(crate) fn output_grammar(f: &mut SharedFields) -> Result<Option<GrammarSpec>, ApiError> {
    let mut found: Vec<(&str, GrammarSpec)> = Vec::new();
    if let Some(rf) = f.response_format.take()
        && let Some(g) = response_format(rf)?
    {
        found.push(("response_format", g));
    }
    for (field, schema) in [
        ("json_schema", f.json_schema.take()),
        ("guided_json", f.guided_json.take()),
    ] {
        if let Some(s) = schema {
            found.push((field, schema_spec(field, s, false)?));
        }
    }
    for (field, grammar) in [
        ("grammar", f.grammar.take()),
        ("guided_grammar", f.guided_grammar.take()),
    ] {
        if let Some(g) = grammar {
            found.push((field, GrammarSpec::grammar(&g)));
        }
    }
    if let Some(r) = f.guided_regex.take() {
        found.push(("guided_regex", GrammarSpec::Regex(r)));
    }
    if let Some(c) = f.guided_choice.take() {
        found.push(("guided_choice", choice_grammar(&c)?));
    }
    match found.len() {
        0 | 1 => Ok(found.pop().map(|(_, g)| g)),
        _ => {
            let given = found.iter().map(|f| f.0).collect();
            Err(Invalid::SeveralConstraints { given }.into())
        }
    }
}

/// OpenAI's `response_format`: `text` (no constraint), `json_object` (any object,
/// or llama-server's `schema` inside it) or `json_schema` (`json_schema.schema`,
/// `json_schema.strict`).
fn response_format(rf: ResponseFormat) -> Result<Option<GrammarSpec>, ApiError> {
    match rf {
        ResponseFormat::Text => Ok(None),
        ResponseFormat::JsonObject { schema: None } => Ok(Some(GrammarSpec::JsonObject)),
        ResponseFormat::JsonObject { schema: Some(s) } => {
            schema_spec("response_format.schema", s, false).map(Some)
        }
        ResponseFormat::JsonSchema { json_schema: None } => Err(Invalid::Needs {
            field: "response_format",
            needs: "a json_schema object with a schema when its type is json_schema",
        }
        .into()),
        ResponseFormat::JsonSchema {
            json_schema: Some(JsonSchemaFormat { schema, strict, .. }),
        } => match schema {
            Some(s) => schema_spec(
                "response_format.json_schema.schema",
                s,
                strict.unwrap_or(false),
            )
            .map(Some),
            // OpenAI: a missing schema allows any JSON object.
            None => Ok(Some(GrammarSpec::JsonObject)),
        },
    }
}

/// A JSON schema given as an object (or `true`), or as a string holding one (vLLM).
fn schema_spec(field: &str, s: Schema, strict: bool) -> Result<GrammarSpec, ApiError> {
    let schema = match s {
        Schema::Object(o) => Value::Object(o),
        Schema::AnyValue(true) => Value::Bool(true),
        Schema::AnyValue(false) => {
            return Err(Invalid::Unsupported {
                field: field.to_string(),
                what: "the schema false allows no output at all",
            }
            .into());
        }
        Schema::Text(t) => serde_json::from_str(&t).map_err(|e| Invalid::Body {
            path: Some(field.to_string()),
            detail: format!("not JSON: {e}"),
        })?,
    };
    Ok(GrammarSpec::JsonSchema { schema, strict })
}

/// vLLM's `guided_choice`: the output is exactly one of the strings.
fn choice_grammar(choices: &[String]) -> Result<GrammarSpec, ApiError> {
    if choices.is_empty() {
        return Err(Invalid::Empty {
            field: "guided_choice",
            item: "string",
        }
        .into());
    }
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
        let mut f: SharedFields = crate::request::typed(&body)?;
        output_grammar(&mut f)
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
                "response_format.type",
            ),
            (json!({"response_format": {}}), "response_format"),
            (
                json!({"response_format": {"type": "json_schema"}}),
                "response_format",
            ),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}}}),
                "response_format",
            ),
            (json!({"json_schema": 3}), "json_schema"),
            (json!({"guided_json": "{not json"}), "guided_json"),
            (json!({"grammar": ["a"]}), "grammar"),
            (json!({"guided_regex": 1}), "guided_regex"),
            (json!({"guided_choice": []}), "guided_choice"),
            (json!({"guided_choice": ["a", 1]}), "guided_choice[1]"),
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
