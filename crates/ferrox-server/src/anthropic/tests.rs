//! The Messages layer's parsing, error shapes and stop reasons.

use super::request::{Valid, parse, parse_count};
use super::*;

fn parsed(body: &str) -> Result<Valid, ApiError> {
    parse(body.as_bytes())
}

#[test]
fn a_request_becomes_a_conversation_with_its_system_prompt_and_prefill() {
    let v = parsed(
        r#"{"model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "Be brief."}],
            "messages": [{"role": "user", "content": "Hi"},
                         {"role": "assistant", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]}],
            "stop_sequences": ["\n"], "temperature": 0, "top_k": 3, "metadata": {"user_id": "u"}}"#,
    )
    .ok()
    .unwrap();
    let roles: Vec<&str> = v.messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user"]);
    assert_eq!(v.prefill.as_deref(), Some("Hello"));
    assert_eq!(v.params.max_tokens, 5);
    assert_eq!(v.params.stop, ["\n"]);
    assert_eq!(
        (v.params.sampling.temperature, v.params.sampling.top_k),
        (0.0, 3)
    );
}

#[test]
fn unsupported_or_malformed_fields_are_refused_by_name() {
    for (body, says) in [
        (
            r#"{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled"}}"#,
            "budget_tokens",
        ),
        (
            r#"{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search_20250305", "name": "web_search"}]}"#,
            "server tools",
        ),
        (
            r#"{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}]}"#,
            "input_schema",
        ),
        (
            r#"{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "g"}}"#,
            "not in tools",
        ),
        (
            r#"{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "any"}}"#,
            "no tools are given",
        ),
        (
            r#"{"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}"#,
            "max_tokens",
        ),
        (
            r#"{"model": "m", "max_tokens": 5, "messages": []}"#,
            "at least one message",
        ),
        (
            r#"{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "temperature": 1.5}"#,
            "temperature",
        ),
        (
            r#"{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "top_k": 0}"#,
            "top_k",
        ),
        (
            r#"{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "n": 2}"#,
            "unknown field \"n\"; it belongs to /v1/chat/completions",
        ),
        (
            r#"{"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}"#,
            "invalid request body",
        ),
        (
            r#"{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}"#,
            "only text and tool blocks",
        ),
    ] {
        let e = parsed(body)
            .err()
            .unwrap_or_else(|| panic!("{body} was accepted"));
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains(says), "{body}: {}", e.message);
    }
}

#[test]
fn errors_take_anthropics_types_and_a_full_queue_is_529() {
    let full = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "server_error",
        "queue_full",
        "full",
    );
    let e = AnthropicError(full);
    assert_eq!((e.status().as_u16(), e.kind()), (529, "overloaded_error"));
    let body: serde_json::Value = serde_json::from_str(&e.body()).unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "overloaded_error");
    let e = AnthropicError(ApiError::model_not_found("x", "y"));
    assert_eq!(e.kind(), "not_found_error");
}

#[test]
fn stop_reasons_name_the_matched_sequence() {
    let stops = vec!["a".to_string(), "b".to_string()];
    assert_eq!(
        stop_reason(FinishReason::StopString(1), &stops),
        ("stop_sequence", Some("b"))
    );
    assert_eq!(
        stop_reason(FinishReason::Length, &stops),
        ("max_tokens", None)
    );
    assert_eq!(stop_reason(FinishReason::Stop, &stops), ("end_turn", None));
}

#[test]
fn count_tokens_takes_the_prompt_fields_only() {
    let ok = r#"{"model": "m", "system": "s", "messages": [{"role": "user", "content": "x"}]}"#;
    assert!(parse_count(ok.as_bytes()).is_ok());
    let e = parse(ok.as_bytes()).err().expect("max_tokens is required");
    assert_eq!(e.param.as_deref(), Some("max_tokens"));
    let with_max =
        r#"{"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "x"}]}"#;
    let e = parse_count(with_max.as_bytes())
        .err()
        .expect("no max_tokens");
    assert!(
        e.message.contains("belongs to /v1/messages"),
        "{}",
        e.message
    );
}
