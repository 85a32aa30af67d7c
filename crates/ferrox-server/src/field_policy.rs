//! The one written policy for every field of `/v1/chat/completions` and
//! `/v1/completions`: implemented; another server's name for an implemented
//! field (an alias, rewritten to it); accepted as a no-op because it means
//! nothing here; or refused with a 400 that names it. A field in none of these
//! lists is refused as unknown, so nothing a client sends is silently ignored.

use serde_json::{Map, Value};

use crate::error::ApiError;

/// Which endpoint a body was sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completions,
}

/// Fields both endpoints implement.
const COMMON: &[&str] = &[
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "seed",
    "stop",
    "stop_token_ids",
    "stream",
    "stream_options",
    "logprobs",
    "logit_bias",
    "n",
    "ignore_eos",
    "response_format",
    "json_schema",
    "grammar",
    "guided_json",
    "guided_regex",
    "guided_grammar",
    "guided_choice",
];

/// Fields only chat implements.
const CHAT_ONLY: &[&str] = &[
    "messages",
    "max_completion_tokens",
    "top_logprobs",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "chat_template_kwargs",
    "reasoning_effort",
];

/// Fields only completions implements.
const COMPLETIONS_ONLY: &[&str] = &["prompt"];

/// Other servers' names, and the field each stands for.
const ALIASES: &[(&str, &str)] = &[
    ("n_predict", "max_tokens"),
    ("repeat_penalty", "repetition_penalty"),
];

/// Fields accepted because they mean nothing here: one user, no stored
/// completions, one service tier, an automatic prefix cache.
const NO_OPS: &[&str] = &[
    "user",
    "metadata",
    "store",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
    "cache_prompt",
];

/// Fields refused because ferrox would answer differently from what they ask.
const REFUSED: &[(&str, &str)] = &[
    (
        "functions",
        "the legacy functions field is not supported; use tools",
    ),
    (
        "function_call",
        "the legacy function_call field is not supported; use tool_choice",
    ),
    ("suffix", "suffix (fill-in-the-middle) is not supported"),
    ("echo", "echo is not supported"),
    ("best_of", "best_of is not supported"),
    ("audio", "audio output is not supported"),
    ("modalities", "only text output is supported"),
    ("prediction", "predicted outputs are not supported"),
    ("web_search_options", "web search is not supported"),
    ("typical_p", "typical_p sampling is not implemented"),
    ("mirostat", "mirostat sampling is not implemented"),
    ("tfs_z", "tail-free sampling is not implemented"),
    ("verbosity", "verbosity is not supported"),
];

/// Checks `o` against the policy and rewrites aliases to the fields they stand
/// for; an alias given beside its field is refused as ambiguous.
pub fn apply(endpoint: Endpoint, o: &mut Map<String, Value>) -> Result<(), ApiError> {
    for &(alias, field) in ALIASES {
        if let Some(v) = o.remove(alias) {
            if o.contains_key(field) {
                return Err(ApiError::invalid(
                    Some(alias),
                    format!("{alias} and {field} name the same thing; give one"),
                ));
            }
            o.insert(field.to_string(), v);
        }
    }
    let own = match endpoint {
        Endpoint::Chat => CHAT_ONLY,
        Endpoint::Completions => COMPLETIONS_ONLY,
    };
    for (key, value) in o.iter() {
        let k = key.as_str();
        if COMMON.contains(&k) || own.contains(&k) || NO_OPS.contains(&k) {
            continue;
        }
        if let Some((_, why)) = REFUSED.iter().find(|r| r.0 == k) {
            if value.is_null() || *value == Value::Bool(false) {
                continue;
            }
            return Err(ApiError::invalid(Some(k), format!("{why} by this server")));
        }
        let other = match endpoint {
            Endpoint::Chat => COMPLETIONS_ONLY,
            Endpoint::Completions => CHAT_ONLY,
        };
        let hint = if other.contains(&k) {
            match endpoint {
                Endpoint::Chat => "; it belongs to /v1/completions",
                Endpoint::Completions => "; it belongs to /v1/chat/completions",
            }
        } else {
            ""
        };
        return Err(ApiError::invalid(
            Some(k),
            format!("unknown field {k:?}{hint}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(endpoint: Endpoint, v: Value) -> Result<Map<String, Value>, ApiError> {
        let mut o = v.as_object().unwrap().clone();
        apply(endpoint, &mut o).map(|()| o)
    }

    #[test]
    fn aliases_become_their_fields() {
        let o = run(
            Endpoint::Completions,
            json!({"prompt": "a", "n_predict": 3, "repeat_penalty": 1.1}),
        )
        .unwrap();
        assert_eq!(
            (o["max_tokens"].clone(), o["repetition_penalty"].clone()),
            (json!(3), json!(1.1))
        );
        assert!(!o.contains_key("n_predict"));
        let e = run(Endpoint::Chat, json!({"n_predict": 3, "max_tokens": 4})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("n_predict"));
    }

    #[test]
    fn every_refused_and_unknown_field_is_named() {
        for (field, _) in REFUSED {
            let e = run(Endpoint::Chat, json!({ *field: 1 })).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(*field));
        }
        for (endpoint, field, says) in [
            (Endpoint::Chat, "tempurature", "unknown field"),
            (Endpoint::Chat, "prompt", "belongs to /v1/completions"),
            (
                Endpoint::Completions,
                "messages",
                "belongs to /v1/chat/completions",
            ),
            (
                Endpoint::Completions,
                "tools",
                "belongs to /v1/chat/completions",
            ),
        ] {
            let e = run(endpoint, json!({ field: 1 })).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field));
            assert!(e.message.contains(says), "{}", e.message);
        }
        // No-ops, nulls and `false` for a refused feature pass.
        assert!(
            run(
                Endpoint::Chat,
                json!({"user": "u", "store": false, "metadata": {}, "echo": false, "suffix": null})
            )
            .is_ok()
        );
        assert!(run(Endpoint::Chat, json!({"tempurature": null})).is_err());
    }
}
