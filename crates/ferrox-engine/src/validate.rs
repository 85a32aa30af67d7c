//! Request validation (SPEC S17): nothing malformed reaches the worker. Pure.
//!
//! Invariant: a refusal names the field and leaves the queue and the KV budget
//! exactly as they were (it happens before either is touched).

use crate::request::GenerationParams;

/// A request refused at validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidRequest {
    /// The offending field, as clients name it.
    pub param: &'static str,
    pub message: String,
}

fn bad(param: &'static str, message: String) -> Result<(), InvalidRequest> {
    Err(InvalidRequest { param, message })
}

/// Most alternatives a token's log-probability comes with.
pub const MAX_ALTERNATIVES: usize = 20;

/// Checks a prompt and its parameters against a vocabulary of `vocab` tokens
/// and a model that `generates` (or only embeds).
pub fn validate(
    prompt: &[u32],
    p: &GenerationParams,
    vocab: usize,
    generates: bool,
) -> Result<(), InvalidRequest> {
    if !generates && p.embed.is_none() {
        return bad(
            "model",
            "this model is an encoder: it embeds (/v1/embeddings, /v1/rerank) and does not generate"
                .into(),
        );
    }
    if let Some(t) = prompt.iter().find(|&&t| t as usize >= vocab) {
        return bad(
            "prompt",
            format!("token id {t} is outside the vocabulary of {vocab} tokens"),
        );
    }
    if p.max_tokens < 1 && p.prompt_logprobs.is_none() && p.embed.is_none() {
        return bad(
            "max_tokens",
            "max_tokens must be at least 1 (0 only when the prompt is scored)".into(),
        );
    }
    if p.embed.is_some() && p.max_tokens > 0 {
        return bad(
            "max_tokens",
            "an embedding request generates nothing: max_tokens must be 0".into(),
        );
    }
    if p.embed.is_some() && p.prompt_logprobs.is_some() {
        return bad(
            "prompt_logprobs",
            "an embedding request does not score its prompt".into(),
        );
    }
    if let Err(e) = p.sampling.validate() {
        return bad(e.field(), e.to_string());
    }
    if let Some(n) = p.logprobs
        && n > MAX_ALTERNATIVES
    {
        return bad(
            "top_logprobs",
            format!("at most {MAX_ALTERNATIVES} alternatives per token, got {n}"),
        );
    }
    if let Some(n) = p.prompt_logprobs
        && n > MAX_ALTERNATIVES
    {
        return bad(
            "prompt_logprobs",
            format!("at most {MAX_ALTERNATIVES} alternatives per prompt token, got {n}"),
        );
    }
    if let Some(t) = p.stop_token_ids.iter().find(|&&t| t as usize >= vocab) {
        return bad(
            "stop_token_ids",
            format!("token id {t} is outside the vocabulary of {vocab} tokens"),
        );
    }
    if let Some((t, _)) = p
        .sampling
        .logit_bias
        .iter()
        .find(|(t, _)| *t as usize >= vocab)
    {
        return bad(
            "logit_bias",
            format!("token id {t} is outside the vocabulary of {vocab} tokens"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPEC S17: bad values are refused with a message naming the field.
    #[test]
    fn out_of_range_values_are_refused_naming_the_field() {
        let ok = GenerationParams::greedy(4);
        assert!(validate(&[1, 2], &ok, 10, true).is_ok());
        assert_eq!(
            validate(&[1, 20], &ok, 10, true).unwrap_err().param,
            "prompt"
        );
        assert_eq!(
            validate(
                &[1],
                &GenerationParams {
                    max_tokens: 0,
                    ..ok.clone()
                },
                10,
                true
            )
            .unwrap_err()
            .param,
            "max_tokens"
        );
        let mut nan = ok.clone();
        nan.sampling.temperature = f32::NAN;
        assert_eq!(
            validate(&[1], &nan, 10, true).unwrap_err().param,
            "temperature"
        );
        let mut neg = ok.clone();
        neg.sampling.temperature = -1.0;
        assert_eq!(
            validate(&[1], &neg, 10, true).unwrap_err().param,
            "temperature"
        );
        let mut top_p = ok.clone();
        top_p.sampling.top_p = 0.0;
        assert_eq!(validate(&[1], &top_p, 10, true).unwrap_err().param, "top_p");
        let stop = GenerationParams {
            stop_token_ids: vec![10],
            ..ok.clone()
        };
        assert_eq!(
            validate(&[1], &stop, 10, true).unwrap_err().param,
            "stop_token_ids"
        );
        let mut bias = ok;
        bias.sampling.logit_bias = vec![(3, f32::INFINITY)];
        assert_eq!(
            validate(&[1], &bias, 10, true).unwrap_err().param,
            "logit_bias"
        );
    }

    #[test]
    fn an_encoder_embeds_and_never_generates() {
        let generate = GenerationParams::greedy(4);
        assert_eq!(
            validate(&[1], &generate, 10, false).unwrap_err().param,
            "model"
        );
        let embed = GenerationParams {
            embed: Some(ferrox_models::Pooling::Cls),
            ..GenerationParams::greedy(0)
        };
        assert!(validate(&[1], &embed, 10, false).is_ok());
    }
}
