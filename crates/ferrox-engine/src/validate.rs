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

/// Checks a prompt and its parameters against a vocabulary of `vocab` tokens.
pub fn validate(prompt: &[u32], p: &GenerationParams, vocab: usize) -> Result<(), InvalidRequest> {
    if let Some(t) = prompt.iter().find(|&&t| t as usize >= vocab) {
        return bad(
            "prompt",
            format!("token id {t} is outside the vocabulary of {vocab} tokens"),
        );
    }
    if p.max_tokens < 1 {
        return bad("max_tokens", "max_tokens must be at least 1".into());
    }
    let s = &p.sampling;
    if !(s.temperature >= 0.0 && s.temperature.is_finite()) {
        return bad(
            "temperature",
            format!(
                "temperature must be a finite number >= 0, got {}",
                s.temperature
            ),
        );
    }
    if !(s.top_p > 0.0 && s.top_p <= 1.0) {
        return bad("top_p", format!("top_p must be in (0, 1], got {}", s.top_p));
    }
    if !(0.0..=1.0).contains(&s.min_p) {
        return bad("min_p", format!("min_p must be in [0, 1], got {}", s.min_p));
    }
    if !(s.repetition_penalty > 0.0 && s.repetition_penalty.is_finite()) {
        return bad(
            "repetition_penalty",
            format!(
                "repetition_penalty must be a finite number > 0, got {}",
                s.repetition_penalty
            ),
        );
    }
    for (name, v) in [
        ("presence_penalty", s.presence_penalty),
        ("frequency_penalty", s.frequency_penalty),
    ] {
        if !(-2.0..=2.0).contains(&v) {
            return bad(name, format!("{name} must be in [-2, 2], got {v}"));
        }
    }
    if let Some(n) = p.logprobs
        && n > 20
    {
        return bad(
            "top_logprobs",
            format!("at most 20 alternatives per token, got {n}"),
        );
    }
    if let Some(t) = p.stop_token_ids.iter().find(|&&t| t as usize >= vocab) {
        return bad(
            "stop_token_ids",
            format!("token id {t} is outside the vocabulary of {vocab} tokens"),
        );
    }
    for &(t, b) in &s.logit_bias {
        if t as usize >= vocab {
            return bad(
                "logit_bias",
                format!("token id {t} is outside the vocabulary of {vocab} tokens"),
            );
        }
        if !b.is_finite() {
            return bad(
                "logit_bias",
                format!("bias for token {t} must be a finite number"),
            );
        }
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
        assert!(validate(&[1, 2], &ok, 10).is_ok());
        assert_eq!(validate(&[1, 20], &ok, 10).unwrap_err().param, "prompt");
        assert_eq!(
            validate(
                &[1],
                &GenerationParams {
                    max_tokens: 0,
                    ..ok.clone()
                },
                10
            )
            .unwrap_err()
            .param,
            "max_tokens"
        );
        let mut nan = ok.clone();
        nan.sampling.temperature = f32::NAN;
        assert_eq!(validate(&[1], &nan, 10).unwrap_err().param, "temperature");
        let mut neg = ok.clone();
        neg.sampling.temperature = -1.0;
        assert_eq!(validate(&[1], &neg, 10).unwrap_err().param, "temperature");
        let mut top_p = ok.clone();
        top_p.sampling.top_p = 0.0;
        assert_eq!(validate(&[1], &top_p, 10).unwrap_err().param, "top_p");
        let stop = GenerationParams {
            stop_token_ids: vec![10],
            ..ok.clone()
        };
        assert_eq!(
            validate(&[1], &stop, 10).unwrap_err().param,
            "stop_token_ids"
        );
        let mut bias = ok;
        bias.sampling.logit_bias = vec![(3, f32::INFINITY)];
        assert_eq!(validate(&[1], &bias, 10).unwrap_err().param, "logit_bias");
    }
}
