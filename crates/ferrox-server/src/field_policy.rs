//! The one field policy of every route that takes a generation request: each
//! route's table declares each of its top-level fields once, as implemented,
//! another server's name for an implemented field (an alias, rewritten to it),
//! accepted as a no-op because it means nothing here (removed before the body
//! is parsed), or refused with a 400 that names it. A field in no table of
//! the route is refused as unknown, with the route that has it if one does, so
//! nothing a client sends is silently ignored.

use serde_json::{Map, Value};

use crate::invalid::Invalid;

/// What a route does with a field.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Field {
    Implemented,
    /// Another server's name for this implemented field.
    Alias(&'static str),
    /// Accepted; it changes nothing here.
    NoOp,
    /// Refused, for this reason, unless `null` or `false`.
    Refused(&'static str),
    /// Accepted at the value that is ferrox's behaviour (then it changes
    /// nothing), or `null`; any other value is refused for this reason.
    Default(Fixed, &'static str),
}

/// The value a [`Field::Default`] field may take.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fixed {
    Bool(bool),
    Number(f64),
    Text(&'static str),
}

impl Fixed {
    fn admits(self, v: &Value) -> bool {
        match (self, v) {
            (_, Value::Null) => true,
            (Fixed::Bool(b), Value::Bool(v)) => b == *v,
            (Fixed::Number(n), Value::Number(v)) => v.as_f64() == Some(n),
            (Fixed::Text(t), Value::String(v)) => t == v,
            _ => false,
        }
    }
}

type Table = &'static [(&'static str, Field)];

/// A route's fields.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub route: &'static str,
    pub tables: &'static [Table],
}

use Field::*;

/// The sampling and output fields both OpenAI routes implement.
const OPENAI_COMMON: Table = &[
    ("model", Implemented),
    ("max_tokens", Implemented),
    ("temperature", Implemented),
    ("top_p", Implemented),
    ("top_k", Implemented),
    ("min_p", Implemented),
    ("presence_penalty", Implemented),
    ("frequency_penalty", Implemented),
    ("repetition_penalty", Implemented),
    ("seed", Implemented),
    ("stop", Implemented),
    ("stop_token_ids", Implemented),
    ("stream", Implemented),
    ("stream_options", Implemented),
    ("logprobs", Implemented),
    ("logit_bias", Implemented),
    ("n", Implemented),
    ("ignore_eos", Implemented),
    ("response_format", Implemented),
    ("json_schema", Implemented),
    ("grammar", Implemented),
    ("guided_json", Implemented),
    ("guided_regex", Implemented),
    ("guided_grammar", Implemented),
    ("guided_choice", Implemented),
    ("repeat_last_n", Implemented),
    ("n_predict", Alias("max_tokens")),
    ("repeat_penalty", Alias("repetition_penalty")),
    // One user, no stored completions, one service tier, an automatic prefix
    // cache.
    ("user", NoOp),
    ("metadata", NoOp),
    ("store", NoOp),
    ("service_tier", NoOp),
    ("prompt_cache_key", NoOp),
    ("safety_identifier", NoOp),
    ("cache_prompt", NoOp),
    // llama-server's slot: the prefix cache finds a request's pages in any.
    ("id_slot", NoOp),
    // Read before the route by the front of a server with several models
    // (`crate::front`); nothing for the model itself.
    ("keep_alive", NoOp),
    // Read only by samplers that must be off here (DRY, XTC, mirostat).
    ("dry_base", NoOp),
    ("dry_allowed_length", NoOp),
    ("dry_penalty_last_n", NoOp),
    ("dry_sequence_breakers", NoOp),
    ("xtc_threshold", NoOp),
    ("mirostat_tau", NoOp),
    ("mirostat_eta", NoOp),
    // Routers' and other servers' switches, at the value ferrox behaves by.
    (
        "skip_special_tokens",
        Default(
            Fixed::Bool(true),
            "special tokens are always left out of the text",
        ),
    ),
    (
        "no_stop_trim",
        Default(
            Fixed::Bool(false),
            "a matched stop string is always trimmed from the text",
        ),
    ),
    (
        "separate_reasoning",
        Default(
            Fixed::Bool(true),
            "reasoning is always separated into reasoning_content",
        ),
    ),
    (
        "include_reasoning",
        Default(
            Fixed::Bool(true),
            "reasoning is always returned as reasoning_content",
        ),
    ),
    (
        "stream_reasoning",
        Default(Fixed::Bool(true), "reasoning is always streamed"),
    ),
    (
        "return_hidden_states",
        Default(Fixed::Bool(false), "hidden states are not returned"),
    ),
    (
        "return_progress",
        Default(Fixed::Bool(false), "prompt progress is not reported"),
    ),
    (
        "dry_multiplier",
        Default(Fixed::Number(0.0), "DRY sampling is not implemented"),
    ),
    (
        "xtc_probability",
        Default(Fixed::Number(0.0), "XTC sampling is not implemented"),
    ),
    (
        "top_n_sigma",
        Default(
            Fixed::Number(-1.0),
            "top-n-sigma sampling is not implemented",
        ),
    ),
    ("best_of", Refused("best_of is not supported")),
    (
        "typical_p",
        Default(Fixed::Number(1.0), "typical_p sampling is not implemented"),
    ),
    (
        "mirostat",
        Default(Fixed::Number(0.0), "mirostat sampling is not implemented"),
    ),
    (
        "tfs_z",
        Default(Fixed::Number(1.0), "tail-free sampling is not implemented"),
    ),
    (
        "functions",
        Refused("the legacy functions field is not supported; use tools"),
    ),
    (
        "function_call",
        Refused("the legacy function_call field is not supported; use tool_choice"),
    ),
    ("audio", Refused("audio output is not supported")),
    ("modalities", Refused("only text output is supported")),
    ("prediction", Refused("predicted outputs are not supported")),
    ("web_search_options", Refused("web search is not supported")),
    ("verbosity", Refused("verbosity is not supported")),
];

const CHAT: Table = &[
    ("messages", Implemented),
    ("max_completion_tokens", Implemented),
    ("top_logprobs", Implemented),
    ("tools", Implemented),
    ("tool_choice", Implemented),
    ("parallel_tool_calls", Implemented),
    ("chat_template_kwargs", Implemented),
    ("reasoning_effort", Implemented),
    ("continue_final_message", Implemented),
    ("add_generation_prompt", Implemented),
];

const COMPLETIONS: Table = &[("prompt", Implemented), ("suffix", Implemented)];

/// Prompt scoring, on `/v1/completions` only (lm-eval's loglikelihood, vLLM's
/// `prompt_logprobs`).
const SCORING: Table = &[("echo", Implemented), ("prompt_logprobs", Implemented)];

/// Routes that answer without the prompt.
const NO_ECHO: Table = &[(
    "echo",
    Refused("echo is not supported here; /v1/completions echoes and scores the prompt"),
)];

/// The prompt of a Messages request, shared by `count_tokens`.
const MESSAGES_PROMPT: Table = &[
    ("model", Implemented),
    ("messages", Implemented),
    ("system", Implemented),
    ("tools", Implemented),
    ("tool_choice", Implemented),
    // Nothing here varies by them: one user, one tier, one speed, one place,
    // an automatic prefix cache.
    ("metadata", NoOp),
    ("service_tier", NoOp),
    ("speed", NoOp),
    ("inference_geo", NoOp),
    ("cache_control", NoOp),
    ("diagnostics", NoOp),
    ("user_profile_id", NoOp),
    ("workspace_id", NoOp),
    ("thinking", Implemented),
    ("output_config", Refused("output_config is not supported")),
    ("container", Refused("container is not supported")),
];

/// What a Messages request adds to its prompt: how to generate.
const MESSAGES_GENERATION: Table = &[
    ("max_tokens", Implemented),
    ("stop_sequences", Implemented),
    ("temperature", Implemented),
    ("top_p", Implemented),
    ("top_k", Implemented),
    ("stream", Implemented),
];

/// What Ollama's `/api/chat` and `/api/generate` share.
const OLLAMA_COMMON: Table = &[
    ("model", Implemented),
    ("stream", Implemented),
    ("format", Implemented),
    ("options", Implemented),
    ("think", Implemented),
    ("logprobs", Implemented),
    ("top_logprobs", Implemented),
    // Read before the route by the front of a server with several models
    // (`crate::front`); nothing for the model itself.
    ("keep_alive", NoOp),
];

const OLLAMA_CHAT_FIELDS: Table = &[("messages", Implemented), ("tools", Implemented)];

const OLLAMA_GENERATE_FIELDS: Table = &[
    ("prompt", Implemented),
    ("system", Implemented),
    ("raw", Implemented),
    ("context", Implemented),
    (
        "template",
        Refused("Go templates are not supported; the model's own chat template is used"),
    ),
    (
        "suffix",
        Refused("suffix (fill-in-the-middle) is not supported"),
    ),
    (
        "images",
        Refused("images are not supported: the models here take text only"),
    ),
    ("width", Refused("image generation is not supported")),
    ("height", Refused("image generation is not supported")),
    ("steps", Refused("image generation is not supported")),
];

/// Ollama's `options`: the sampler's, the context's, and the runner's (set
/// when the server starts here, so they change nothing per request).
const OLLAMA_OPTIONS_FIELDS: Table = &[
    ("num_predict", Implemented),
    ("num_ctx", Implemented),
    ("temperature", Implemented),
    ("top_k", Implemented),
    ("top_p", Implemented),
    ("min_p", Implemented),
    ("seed", Implemented),
    ("stop", Implemented),
    ("repeat_penalty", Implemented),
    ("repeat_last_n", Implemented),
    ("presence_penalty", Implemented),
    ("frequency_penalty", Implemented),
    (
        "typical_p",
        Default(Fixed::Number(1.0), "typical_p sampling is not implemented"),
    ),
    (
        "tfs_z",
        Default(Fixed::Number(1.0), "tail-free sampling is not implemented"),
    ),
    (
        "mirostat",
        Default(Fixed::Number(0.0), "mirostat sampling is not implemented"),
    ),
    ("mirostat_tau", NoOp),
    ("mirostat_eta", NoOp),
    // Ollama ignores it too.
    ("penalize_newline", NoOp),
    // The context is never shifted here: a request that does not fit is refused.
    ("num_keep", NoOp),
    // The runner's settings: threads, batch, memory mapping and GPUs are fixed
    // when `ferrox serve` starts.
    ("numa", NoOp),
    ("num_batch", NoOp),
    ("num_gpu", NoOp),
    ("main_gpu", NoOp),
    ("low_vram", NoOp),
    ("f16_kv", NoOp),
    ("logits_all", NoOp),
    ("vocab_only", NoOp),
    ("use_mmap", NoOp),
    ("use_mlock", NoOp),
    ("embedding_only", NoOp),
    ("num_thread", NoOp),
];

/// What llama-server's `/completion` and `/infill` add to the OpenAI fields.
const NATIVE_FIELDS: Table = &[
    ("n_probs", Implemented),
    ("return_tokens", Implemented),
    ("samplers", Implemented),
    // The context is never shifted, caches are found by prefix, and SSE pings
    // are the server's.
    ("n_keep", NoOp),
    ("n_discard", NoOp),
    ("n_cache_reuse", NoOp),
    ("dynatemp_exponent", NoOp),
    ("sse_ping_interval", NoOp),
    (
        "min_keep",
        Default(Fixed::Number(0.0), "min_keep is not implemented"),
    ),
    (
        "n_indent",
        Default(Fixed::Number(0.0), "n_indent is not implemented"),
    ),
    ("n_cmpl", Alias("n")),
    (
        "dynatemp_range",
        Default(Fixed::Number(0.0), "dynamic temperature is not implemented"),
    ),
    (
        "t_max_predict_ms",
        Default(
            Fixed::Number(0.0),
            "a prediction time limit is not implemented (--request-timeout bounds a request)",
        ),
    ),
    (
        "post_sampling_probs",
        Default(
            Fixed::Bool(false),
            "post-sampling probabilities are not reported (n_probs reports the model's log-probabilities)",
        ),
    ),
    (
        "timings_per_token",
        Default(Fixed::Bool(false), "timings come with the last chunk only"),
    ),
    (
        "response_fields",
        Refused("response_fields is not supported"),
    ),
    ("lora", Refused("LoRA adapters are not supported")),
];

/// `/infill`'s parts of the code.
const INFILL_FIELDS: Table = &[
    ("prompt", Implemented),
    ("input_prefix", Implemented),
    ("input_suffix", Implemented),
    ("input_extra", Implemented),
];

/// OpenAI's Responses API.
const RESPONSES_FIELDS: Table = &[
    ("model", Implemented),
    ("input", Implemented),
    ("instructions", Implemented),
    ("max_output_tokens", Implemented),
    ("temperature", Implemented),
    ("top_p", Implemented),
    ("top_k", Implemented),
    ("min_p", Implemented),
    ("seed", Implemented),
    ("stream", Implemented),
    ("tools", Implemented),
    ("tool_choice", Implemented),
    ("parallel_tool_calls", Implemented),
    ("text", Implemented),
    ("reasoning", Implemented),
    // One user, nothing stored, one tier, an automatic prefix cache; the
    // outputs `include` may ask for are there or do not exist here.
    ("store", NoOp),
    ("metadata", NoOp),
    ("user", NoOp),
    ("service_tier", NoOp),
    ("prompt_cache_key", NoOp),
    ("prompt_cache_retention", NoOp),
    ("safety_identifier", NoOp),
    ("include", NoOp),
    ("stream_options", NoOp),
    // It limits built-in tool calls, which do not exist here.
    ("max_tool_calls", NoOp),
    (
        "truncation",
        Default(
            Fixed::Text("disabled"),
            "an input is never truncated here; one that does not fit is refused",
        ),
    ),
    (
        "previous_response_id",
        Refused(
            "previous_response_id is not supported (responses are not stored here; send the whole conversation in input)",
        ),
    ),
    (
        "conversation",
        Refused(
            "conversation is not supported (conversations are not stored here; send the whole conversation in input)",
        ),
    ),
    (
        "background",
        Refused("background responses are not supported"),
    ),
    (
        "prompt",
        Refused("stored prompt templates are not supported"),
    ),
    (
        "top_logprobs",
        Refused("log-probabilities are not returned on /v1/responses"),
    ),
];

/// What every embedding route takes besides its inputs.
const EMBEDDING_COMMON: Table = &[("model", Implemented), ("embd_normalize", Implemented)];

const OPENAI_EMBEDDING_FIELDS: Table = &[
    ("input", Implemented),
    // llama-server's name for the inputs.
    ("content", Alias("input")),
    ("encoding_format", Implemented),
    ("dimensions", Implemented),
    ("user", NoOp),
];

const NATIVE_EMBEDDING_FIELDS: Table = &[("content", Implemented), ("input", Alias("content"))];

/// Ollama's `/api/embed` (and `/api/embeddings`, whose input is `prompt`).
const OLLAMA_EMBED_FIELDS: Table = &[
    ("model", Implemented),
    ("input", Implemented),
    ("prompt", Alias("input")),
    ("truncate", Implemented),
    ("dimensions", Implemented),
    ("options", Implemented),
    // Read before the route by the front of a server with several models.
    ("keep_alive", NoOp),
];

const RERANK_FIELDS: Table = &[
    ("model", Implemented),
    ("query", Implemented),
    ("documents", Implemented),
    ("top_n", Implemented),
    ("return_documents", Implemented),
    // Hugging Face TEI's shape.
    ("texts", Implemented),
    ("return_text", Implemented),
    ("raw_scores", Implemented),
    (
        "truncate",
        Default(
            Fixed::Bool(false),
            "an input over the context is refused, never cut",
        ),
    ),
    ("truncation_direction", NoOp),
];

pub const CHAT_COMPLETIONS: Policy = Policy {
    route: "/v1/chat/completions",
    tables: &[OPENAI_COMMON, CHAT, NO_ECHO],
};

pub const TEXT_COMPLETIONS: Policy = Policy {
    route: "/v1/completions",
    tables: &[OPENAI_COMMON, COMPLETIONS, SCORING],
};

pub const ANTHROPIC_MESSAGES: Policy = Policy {
    route: "/v1/messages",
    tables: &[MESSAGES_PROMPT, MESSAGES_GENERATION],
};

pub const ANTHROPIC_COUNT_TOKENS: Policy = Policy {
    route: "/v1/messages/count_tokens",
    tables: &[MESSAGES_PROMPT],
};

pub const OLLAMA_CHAT: Policy = Policy {
    route: "/api/chat",
    tables: &[OLLAMA_COMMON, OLLAMA_CHAT_FIELDS],
};

pub const OLLAMA_GENERATE: Policy = Policy {
    route: "/api/generate",
    tables: &[OLLAMA_COMMON, OLLAMA_GENERATE_FIELDS],
};

/// The `options` object of Ollama's routes (its errors name `options.FIELD`).
pub const OLLAMA_OPTIONS: Policy = Policy {
    route: "options",
    tables: &[OLLAMA_OPTIONS_FIELDS],
};

pub const NATIVE_COMPLETION: Policy = Policy {
    route: "/completion",
    tables: &[OPENAI_COMMON, COMPLETIONS, NATIVE_FIELDS, NO_ECHO],
};

pub const NATIVE_INFILL: Policy = Policy {
    route: "/infill",
    tables: &[OPENAI_COMMON, NATIVE_FIELDS, INFILL_FIELDS, NO_ECHO],
};

pub const RESPONSES: Policy = Policy {
    route: "/v1/responses",
    tables: &[RESPONSES_FIELDS],
};

pub const EMBEDDINGS: Policy = Policy {
    route: "/v1/embeddings",
    tables: &[EMBEDDING_COMMON, OPENAI_EMBEDDING_FIELDS],
};

pub const NATIVE_EMBEDDING: Policy = Policy {
    route: "/embedding",
    tables: &[EMBEDDING_COMMON, NATIVE_EMBEDDING_FIELDS],
};

pub const OLLAMA_EMBED: Policy = Policy {
    route: "/api/embed",
    tables: &[OLLAMA_EMBED_FIELDS],
};

pub const RERANK: Policy = Policy {
    route: "/v1/rerank",
    tables: &[RERANK_FIELDS],
};

/// Every route's policy, for the hint of an unknown field.
const ROUTES: [Policy; 13] = [
    CHAT_COMPLETIONS,
    TEXT_COMPLETIONS,
    ANTHROPIC_MESSAGES,
    ANTHROPIC_COUNT_TOKENS,
    OLLAMA_CHAT,
    OLLAMA_GENERATE,
    NATIVE_COMPLETION,
    NATIVE_INFILL,
    RESPONSES,
    EMBEDDINGS,
    NATIVE_EMBEDDING,
    OLLAMA_EMBED,
    RERANK,
];

impl Policy {
    /// What the route does with `field` (`None`: unknown).
    pub fn field(&self, field: &str) -> Option<Field> {
        self.entries().find(|(f, _)| *f == field).map(|(_, p)| p)
    }

    fn entries(&self) -> impl Iterator<Item = (&'static str, Field)> {
        self.tables.iter().flat_map(|t| t.iter().copied())
    }

    /// Another route that implements `field`, the one whose path shares most
    /// with this one's (`max_tokens` on `count_tokens` belongs to
    /// `/v1/messages`, not to `/v1/chat/completions`).
    fn nearest_route_with(&self, field: &str) -> Option<&'static str> {
        let shared = |r: &str| {
            r.bytes()
                .zip(self.route.bytes())
                .take_while(|(a, b)| a == b)
                .count()
        };
        ROUTES
            .iter()
            .filter(|p| p.route != self.route && p.field(field) == Some(Implemented))
            .fold(None, |best: Option<&Policy>, p| match best {
                Some(b) if shared(b.route) >= shared(p.route) => Some(b),
                _ => Some(p),
            })
            .map(|p| p.route)
    }

    /// Checks `body` against the policy: aliases rewritten to their fields
    /// (one given beside its field is ambiguous), no-ops and `null` / `false`
    /// refused fields removed, anything refused or unknown named.
    pub fn apply(&self, body: Value) -> Result<Map<String, Value>, Invalid> {
        let Value::Object(mut o) = body else {
            return Err(Invalid::NotAnObject);
        };
        for (alias, field) in self.entries().filter_map(|(a, p)| match p {
            Alias(f) => Some((a, f)),
            _ => None,
        }) {
            if let Some(v) = o.remove(alias) {
                if o.contains_key(field) {
                    return Err(Invalid::Ambiguous { alias, field });
                }
                o.insert(field.to_string(), v);
            }
        }
        let mut kept = Map::new();
        for (key, value) in o {
            match self.field(&key) {
                Some(Implemented) => {
                    kept.insert(key, value);
                }
                Some(NoOp) | Some(Alias(_)) => {}
                Some(Refused(_)) if value.is_null() || value == Value::Bool(false) => {}
                Some(Refused(why)) => return Err(Invalid::Refused { field: key, why }),
                Some(Default(fixed, _)) if fixed.admits(&value) => {}
                Some(Default(_, why)) => return Err(Invalid::Refused { field: key, why }),
                None => {
                    let implemented_on = self.nearest_route_with(&key);
                    return Err(Invalid::UnknownField {
                        field: key,
                        implemented_on,
                    });
                }
            }
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(policy: Policy, v: Value) -> Result<Map<String, Value>, Invalid> {
        policy.apply(v)
    }

    #[test]
    fn each_field_is_declared_once_per_route() {
        for p in ROUTES.into_iter().chain([OLLAMA_OPTIONS]) {
            let mut names: Vec<&str> = p.entries().map(|(f, _)| f).collect();
            let n = names.len();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), n, "{} declares a field twice", p.route);
        }
    }

    #[test]
    fn aliases_become_their_fields() {
        let o = run(
            TEXT_COMPLETIONS,
            json!({"prompt": "a", "n_predict": 3, "repeat_penalty": 1.1}),
        )
        .unwrap();
        assert_eq!(
            (o["max_tokens"].clone(), o["repetition_penalty"].clone()),
            (json!(3), json!(1.1))
        );
        assert!(!o.contains_key("n_predict"));
        let e = run(CHAT_COMPLETIONS, json!({"n_predict": 3, "max_tokens": 4})).unwrap_err();
        assert_eq!(e.field(), Some("n_predict"));
    }

    #[test]
    fn every_refused_and_unknown_field_is_named() {
        for p in ROUTES.into_iter().chain([OLLAMA_OPTIONS]) {
            for (field, _) in p.entries().filter(|(_, f)| matches!(f, Refused(_))) {
                // `1` is neither null nor false.
                let e = run(p, json!({ field: 1 })).unwrap_err();
                assert!(matches!(e, Invalid::Refused { .. }), "{e}");
                assert_eq!(e.field(), Some(field));
            }
        }
        for (policy, field, says) in [
            (CHAT_COMPLETIONS, "tempurature", "unknown field"),
            (CHAT_COMPLETIONS, "prompt", "belongs to /v1/completions"),
            (CHAT_COMPLETIONS, "system", "belongs to /v1/messages"),
            (
                TEXT_COMPLETIONS,
                "messages",
                "belongs to /v1/chat/completions",
            ),
            (TEXT_COMPLETIONS, "tools", "belongs to /v1/chat/completions"),
            (ANTHROPIC_MESSAGES, "n", "belongs to /v1/chat/completions"),
        ] {
            let e = run(policy, json!({ field: 1 })).unwrap_err();
            assert_eq!(e.field(), Some(field));
            assert!(e.to_string().contains(says), "{e}");
        }
        // A switch at ferrox's value passes and is gone; another value is
        // refused naming it.
        for p in ROUTES.into_iter().chain([OLLAMA_OPTIONS]) {
            for (field, fixed, other) in p.entries().filter_map(|(f, p)| match p {
                Default(Fixed::Bool(b), _) => Some((f, json!(b), json!(!b))),
                Default(Fixed::Number(n), _) => Some((f, json!(n as i64), json!(n + 0.5))),
                Default(Fixed::Text(t), _) => Some((f, json!(t), json!(format!("not {t}")))),
                _ => None,
            }) {
                assert_eq!(run(p, json!({ field: fixed })), Ok(Map::new()), "{field}");
                let e = run(p, json!({ field: other })).unwrap_err();
                assert!(matches!(e, Invalid::Refused { .. }), "{field}: {e}");
            }
        }
        // No-ops, nulls and `false` for a refused feature pass, and are gone.
        let o = run(
            CHAT_COMPLETIONS,
            json!({"user": "u", "store": false, "metadata": {}, "echo": false, "functions": null}),
        )
        .unwrap();
        assert!(o.is_empty(), "{o:?}");
        assert!(run(CHAT_COMPLETIONS, json!({"tempurature": null})).is_err());
        assert_eq!(run(CHAT_COMPLETIONS, json!([])), Err(Invalid::NotAnObject));
    }
}
