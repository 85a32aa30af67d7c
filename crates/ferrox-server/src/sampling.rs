//! One sampling validator for every route: the sampling fields as any API
//! names them, checked against that API's bounds ([`Bounds`]) and then the
//! sampler's own ([`SamplingParams::validate`]).

use std::collections::BTreeMap;

use ferrox_sampling::sampler::SamplingParams;

use crate::invalid::Invalid;

/// The sampling fields of a request, as given.
#[derive(Clone, Debug, Default)]
pub struct SamplingFields {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    /// Token id (as a string key) to bias.
    pub logit_bias: Option<BTreeMap<String, f64>>,
    pub seed: Option<i64>,
    /// Tokens the penalties look back over: -1 the whole context, 0 none.
    pub penalty_last_n: Option<i64>,
}

/// How `top_k` reads.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TopK {
    /// A positive count, or vLLM's -1 or llama-server's 0 for off.
    ZeroOrMinusOneIsOff,
    /// A positive count (Anthropic).
    Positive,
}

/// An API's bounds and defaults.
#[derive(Copy, Clone, Debug)]
pub struct Bounds {
    pub max_temperature: f64,
    /// `max_temperature` in the error's words.
    pub temperature_bound: &'static str,
    pub top_k: TopK,
    /// The sampler a request that gives no field gets.
    pub defaults: fn() -> SamplingParams,
}

/// OpenAI's chat and completions: temperature up to 2, and the engine's
/// defaults (llama-server's).
pub const OPENAI: Bounds = Bounds {
    max_temperature: 2.0,
    temperature_bound: "between 0 and 2",
    top_k: TopK::ZeroOrMinusOneIsOff,
    defaults: SamplingParams::default,
};

/// Anthropic's Messages: temperature up to 1, default 1 with no truncation.
pub const ANTHROPIC: Bounds = Bounds {
    max_temperature: 1.0,
    temperature_bound: "between 0 and 1",
    top_k: TopK::Positive,
    defaults: || SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        ..SamplingParams::default()
    },
};

/// Ollama's `options`: any non-negative temperature, and the defaults its
/// documentation gives (temperature 0.8, top-k 40, top-p 0.9, repeat penalty
/// 1.1 over the last 64 tokens, no min-p).
pub const OLLAMA: Bounds = Bounds {
    max_temperature: f64::MAX,
    temperature_bound: "at least 0",
    top_k: TopK::ZeroOrMinusOneIsOff,
    defaults: || SamplingParams {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.0,
        repetition_penalty: 1.1,
        penalty_last_n: 64,
        ..SamplingParams::default()
    },
};

impl SamplingFields {
    /// The sampler these fields ask for, within `bounds`; a request without a
    /// seed gets the server's (`--seed`) or one from the clock when it is
    /// submitted.
    pub fn validate(&self, bounds: &Bounds) -> Result<SamplingParams, Invalid> {
        let d = (bounds.defaults)();
        let temperature = match self.temperature {
            Some(t) if !(0.0..=bounds.max_temperature).contains(&t) => {
                return Err(Invalid::OutOfRange {
                    field: "temperature",
                    bound: bounds.temperature_bound.into(),
                    got: t.to_string(),
                });
            }
            Some(t) => t as f32,
            None => d.temperature,
        };
        let mut logit_bias = Vec::new();
        for (key, &bias) in self.logit_bias.iter().flatten() {
            let id: u32 = key
                .parse()
                .map_err(|_| Invalid::NotATokenId { key: key.clone() })?;
            logit_bias.push((id, finite("logit_bias", Some(bias), 0.0)?));
        }
        let s = SamplingParams {
            temperature,
            top_k: top_k(self.top_k, bounds.top_k, d.top_k)?,
            top_p: finite("top_p", self.top_p, d.top_p)?,
            min_p: finite("min_p", self.min_p, d.min_p)?,
            presence_penalty: finite(
                "presence_penalty",
                self.presence_penalty,
                d.presence_penalty,
            )?,
            frequency_penalty: finite(
                "frequency_penalty",
                self.frequency_penalty,
                d.frequency_penalty,
            )?,
            repetition_penalty: finite(
                "repetition_penalty",
                self.repetition_penalty,
                d.repetition_penalty,
            )?,
            logit_bias,
            seed: self.seed.map(|s| s as u64),
            penalty_last_n: penalty_last_n(self.penalty_last_n, d.penalty_last_n)?,
        };
        s.validate().map_err(Invalid::Sampling)?;
        Ok(s)
    }
}

fn finite(field: &'static str, v: Option<f64>, default: f32) -> Result<f32, Invalid> {
    match v {
        Some(x) if !x.is_finite() => Err(Invalid::NotFinite { field }),
        Some(x) => Ok(x as f32),
        None => Ok(default),
    }
}

fn top_k(k: Option<i64>, rule: TopK, default: usize) -> Result<usize, Invalid> {
    let bound = match rule {
        TopK::ZeroOrMinusOneIsOff => "a positive count, or 0 or -1 for off",
        TopK::Positive => "at least 1",
    };
    match (k, rule) {
        (None, _) => Ok(default),
        (Some(k), _) if k > 0 => Ok(k as usize),
        (Some(-1 | 0), TopK::ZeroOrMinusOneIsOff) => Ok(0),
        (Some(k), _) => Err(Invalid::OutOfRange {
            field: "top_k",
            bound: bound.into(),
            got: k.to_string(),
        }),
    }
}

fn penalty_last_n(n: Option<i64>, default: usize) -> Result<usize, Invalid> {
    match n {
        None => Ok(default),
        Some(-1) => Ok(usize::MAX),
        Some(n) if n >= 0 => Ok(n as usize),
        Some(n) => Err(Invalid::OutOfRange {
            field: "repeat_last_n",
            bound: "a count, or -1 for the whole context".into(),
            got: n.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_api_has_its_bounds() {
        let hot = SamplingFields {
            temperature: Some(1.5),
            ..Default::default()
        };
        assert_eq!(hot.validate(&OPENAI).unwrap().temperature, 1.5);
        let e = hot.validate(&ANTHROPIC).unwrap_err();
        assert_eq!(e.field(), Some("temperature"));
        assert!(e.to_string().contains("between 0 and 1"), "{e}");
        let off = SamplingFields {
            top_k: Some(-1),
            ..Default::default()
        };
        assert_eq!(off.validate(&OPENAI).unwrap().top_k, 0);
        assert_eq!(off.validate(&ANTHROPIC).unwrap_err().field(), Some("top_k"));
        let plain = SamplingFields::default();
        assert_eq!(plain.validate(&ANTHROPIC).unwrap().top_p, 1.0);
        assert_eq!(plain.validate(&OPENAI).unwrap().top_p, 0.95);
        let wide = SamplingFields {
            top_p: Some(1.5),
            ..Default::default()
        };
        assert_eq!(
            wide.validate(&ANTHROPIC).unwrap_err().field(),
            Some("top_p")
        );
    }
}
