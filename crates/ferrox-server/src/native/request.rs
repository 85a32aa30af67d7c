//! `/completion` and `/infill` bodies in llama-server's own terms, validated
//! into the completions request plus what these routes add: `n_probs`,
//! `return_tokens`, `samplers`, and `/infill`'s parts of the code.
//!
//! What llama-server reads differently from the OpenAI route is rewritten
//! first: `n_predict: -1` and `seed: -1` are its "none"; `logit_bias` may be
//! pairs (`[[id or text, bias or false], ...]`); a prompt may mix token ids
//! and text (`[12, "text", 34]`).

use ferrox_sampling::sampler::SamplingParams;
use ferrox_text::fim::{ExtraFile, Infill};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::field_policy::{NATIVE_COMPLETION, NATIVE_INFILL};
use crate::invalid::Invalid;
use crate::prompt_forms::{Prompts, is_openai_form, prompts};
use crate::request::{PromptInput, ValidRequest, completion_of, policed, typed};
use crate::state::AppState;

/// A validated `/completion` or `/infill` request.
pub(super) struct Native {
    pub valid: ValidRequest,
    /// Whether the answer lists its token ids (always, when streamed).
    pub return_tokens: bool,
    /// Alternatives reported per token (`completion_probabilities`).
    pub n_probs: usize,
}

/// What these routes add to the OpenAI fields.
#[derive(Deserialize, Default)]
struct NativeFields {
    #[serde(default)]
    n_probs: Option<i64>,
    #[serde(default)]
    return_tokens: Option<bool>,
    #[serde(default)]
    samplers: Option<Samplers>,
}

/// `samplers`: names, or llama.cpp's one-letter codes in a string.
#[derive(Deserialize)]
#[serde(untagged)]
enum Samplers {
    Names(Vec<String>),
    Letters(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InfillFields {
    input_prefix: String,
    input_suffix: String,
    #[serde(default)]
    input_extra: Vec<ExtraIn>,
    #[serde(default)]
    prompt: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExtraIn {
    #[serde(default)]
    filename: Option<String>,
    text: String,
}

/// Which route.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    Completion,
    Infill,
}

/// Validates a body of `kind`.
pub(super) fn parse(st: &AppState, kind: Kind, body: &Value) -> Result<Native, ApiError> {
    let Value::Object(mut o) = body.clone() else {
        return Err(Invalid::NotAnObject.into());
    };
    for (field, none) in [("n_predict", -1), ("seed", -1)] {
        if o.get(field).and_then(Value::as_i64) == Some(none) {
            o.remove(field);
        }
    }
    if let Some(bias) = o.get("logit_bias").filter(|b| !b.is_null()) {
        let map = logit_bias(st, bias)?;
        o.insert("logit_bias".into(), Value::Object(map));
    }
    if kind == Kind::Completion
        && let Some(p) = o.get("prompt")
        && let Some(ids) = prompt_ids(st, p)?
    {
        o.insert("prompt".into(), ids);
    }
    let policy = match kind {
        Kind::Completion => &NATIVE_COMPLETION,
        Kind::Infill => &NATIVE_INFILL,
    };
    let Value::Object(mut o) = policed(policy, &Value::Object(o))? else {
        unreachable!("a policy keeps an object an object")
    };
    let native: NativeFields = typed(&Value::Object(take(
        &mut o,
        &["n_probs", "return_tokens", "samplers"],
    )))?;
    let infill = match kind {
        Kind::Infill => {
            let parts = take(
                &mut o,
                &["input_prefix", "input_suffix", "input_extra", "prompt"],
            );
            let infill = infill_of(typed(&Value::Object(parts))?);
            // The prompt is built from the parts.
            o.insert("prompt".into(), Value::String(String::new()));
            Some(infill)
        }
        Kind::Completion => None,
    };
    let mut valid = completion_of(&Value::Object(o))?;
    if let Some(infill) = infill {
        valid.prompt = PromptInput::Infill {
            infill,
            field: "input_suffix",
        };
    }
    let n_probs = match native.n_probs {
        None => 0,
        Some(n) if (0..=20).contains(&n) => n as usize,
        Some(n) => {
            return Err(Invalid::OutOfRange {
                field: "n_probs",
                bound: "between 0 and 20".into(),
                got: n.to_string(),
            }
            .into());
        }
    };
    if n_probs > 0 {
        valid.params.logprobs = Some(n_probs);
    }
    if let Some(s) = native.samplers {
        apply_samplers(&mut valid.params.sampling, &s.names()?)?;
    }
    Ok(Native {
        valid,
        return_tokens: native.return_tokens.unwrap_or(false),
        n_probs,
    })
}

/// The fields `keys` taken out of `o`.
fn take(o: &mut Map<String, Value>, keys: &[&str]) -> Map<String, Value> {
    keys.iter()
        .filter_map(|k| o.remove(*k).map(|v| (k.to_string(), v)))
        .collect()
}

fn infill_of(f: InfillFields) -> Infill {
    Infill {
        prefix: f.input_prefix,
        suffix: f.input_suffix,
        extra: f
            .input_extra
            .into_iter()
            .map(|e| ExtraFile {
                filename: e.filename.unwrap_or_else(|| "tmp".into()),
                text: e.text,
            })
            .collect(),
        prompt: f.prompt.unwrap_or_default(),
    }
}

/// llama-server's `logit_bias` as OpenAI's map of token ids: pairs
/// (`[[id or text, bias or false], ...]`) or a map whose keys may be text; a
/// text's every token gets the bias, and `false` bans (the lowest bias, -100).
fn logit_bias(st: &AppState, given: &Value) -> Result<Map<String, Value>, ApiError> {
    let bad = |detail: &str| Invalid::Body {
        path: Some("logit_bias".into()),
        detail: detail.into(),
    };
    let entries: Vec<(Value, Value)> = match given {
        Value::Array(pairs) => pairs
            .iter()
            .map(|pair| match pair.as_array().map(Vec::as_slice) {
                Some([key, bias]) => Ok((key.clone(), bias.clone())),
                _ => Err(bad("each entry must be [token id or text, bias or false]")),
            })
            .collect::<Result<_, _>>()?,
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                let key = k
                    .parse::<u64>()
                    .map_or_else(|_| Value::from(k.as_str()), Value::from);
                (key, v.clone())
            })
            .collect(),
        _ => return Err(bad("expected a list of pairs or an object").into()),
    };
    let mut map = Map::new();
    for (key, bias) in entries {
        let bias = match bias {
            Value::Bool(false) => Value::from(-100.0),
            b if b.is_number() => b,
            _ => return Err(bad("a bias must be a number or false").into()),
        };
        let ids = match key {
            Value::Number(n) => {
                vec![n.as_u64().ok_or_else(|| bad("a token id is a count"))? as u32]
            }
            Value::String(text) => st.tokenizer.encode(&text, false, false),
            _ => return Err(bad("a key must be a token id or a text").into()),
        };
        for id in ids {
            map.insert(id.to_string(), bias.clone());
        }
    }
    Ok(map)
}

/// A prompt in one of llama-server's forms OpenAI's route does not take
/// ([`crate::prompt_forms`]), as token ids; `None` for the forms OpenAI's
/// route reads.
fn prompt_ids(st: &AppState, p: &Value) -> Result<Option<Value>, ApiError> {
    if is_openai_form(p) {
        return Ok(None);
    }
    Ok(Some(match prompts(&st.tokenizer, p, "prompt")? {
        Prompts::One(ids) => ids.into(),
        Prompts::Many(lists) => lists.into(),
    }))
}

/// The samplers ferrox applies, in its order.
const CHAIN: [&str; 5] = ["penalties", "top_k", "top_p", "min_p", "temperature"];

/// Samplers llama.cpp has that are off here unless their own fields turn them
/// on, which the field policy refuses: listing them changes nothing.
const OFF_HERE: [&str; 5] = ["dry", "typ_p", "xtc", "top_n_sigma", "infill"];

impl Samplers {
    /// The names, llama.cpp's one-letter codes and aliases spelled out.
    fn names(&self) -> Result<Vec<String>, Invalid> {
        let names: Vec<String> = match self {
            Samplers::Names(n) => n.clone(),
            Samplers::Letters(s) => s
                .chars()
                .map(|c| {
                    Ok(match c {
                        'e' => "penalties",
                        'd' => "dry",
                        's' => "top_n_sigma",
                        'k' => "top_k",
                        'y' => "typ_p",
                        'p' => "top_p",
                        'm' => "min_p",
                        'x' => "xtc",
                        't' => "temperature",
                        'i' => "infill",
                        _ => return Err(unknown_sampler(&c.to_string())),
                    }
                    .to_string())
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(names
            .into_iter()
            .map(|n| match n.as_str() {
                "temp" => "temperature".into(),
                "typical_p" => "typ_p".into(),
                "nucleus" => "top_p".into(),
                _ => n,
            })
            .collect())
    }
}

fn unknown_sampler(name: &str) -> Invalid {
    Invalid::OutOfRange {
        field: "samplers",
        bound: format!(
            "names among {} and {}",
            CHAIN.join(", "),
            OFF_HERE.join(", ")
        )
        .into(),
        got: format!("{name:?}"),
    }
}

/// `samplers`: a sampler left out is not used (its setting becomes its off
/// value; penalties stay as their own fields set them, as older clients do not
/// list them); those used must come in ferrox's order, once each.
fn apply_samplers(s: &mut SamplingParams, names: &[String]) -> Result<(), Invalid> {
    let mut positions = Vec::new();
    for n in names {
        match CHAIN.iter().position(|c| c == n) {
            Some(p) => positions.push(p),
            None if OFF_HERE.contains(&n.as_str()) => {}
            None => return Err(unknown_sampler(n)),
        }
    }
    if positions.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Invalid::OutOfRange {
            field: "samplers",
            bound: format!(
                "in the order ferrox applies them, once each: {}",
                CHAIN.join(", ")
            )
            .into(),
            got: format!("{names:?}"),
        });
    }
    let has = |name: &str| names.iter().any(|n| n == name);
    if !has("top_k") {
        s.top_k = 0;
    }
    if !has("top_p") {
        s.top_p = 1.0;
    }
    if !has("min_p") {
        s.min_p = 0.0;
    }
    if !has("temperature") && s.temperature > 0.0 {
        s.temperature = 1.0;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samplers_left_out_are_off_and_the_order_is_ferroxs() {
        let mut s = SamplingParams::default();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        apply_samplers(
            &mut s,
            &names(&["dry", "top_k", "typ_p", "xtc", "temperature"]),
        )
        .unwrap();
        assert_eq!(
            (s.top_k, s.top_p, s.min_p, s.temperature),
            (40, 1.0, 0.0, 0.8)
        );
        let e = apply_samplers(&mut s, &names(&["temperature", "top_k"])).unwrap_err();
        assert_eq!(e.field(), Some("samplers"));
        assert!(e.to_string().contains("penalties, top_k"), "{e}");
        let e = apply_samplers(&mut s, &names(&["mirostat"])).unwrap_err();
        assert!(e.to_string().contains("\"mirostat\""), "{e}");
        let letters = Samplers::Letters("kpmt".into()).names().unwrap();
        assert_eq!(letters, ["top_k", "top_p", "min_p", "temperature"]);
    }
}
