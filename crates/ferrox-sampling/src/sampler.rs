//! Per-request sampling (SPEC S5): each request owns its sampler, its seeded RNG
//! and its penalty state; nothing is shared between requests.
//!
//! Order, as llama.cpp's default chain: logit bias -> repetition / presence /
//! frequency penalties over the last `penalty_last_n` tokens -> top-k -> top-p ->
//! min-p (the last three on the softmax at temperature 1) -> temperature -> a
//! categorical draw. Temperature 0 is greedy: the highest logit after bias and
//! penalties, the lowest id on ties.
//!
//! Invariants: the RNG is `ChaCha8Rng` seeded from the request's seed (a named,
//! fixed stream), and draws use our own conversion of 24 random bits to a float, so
//! the same seed gives the same tokens on every platform and version.

use rand_chacha::ChaCha8Rng;

use crate::grammar::TokenMask;
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// What a request asks of sampling.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1 = off.
    pub top_p: f32,
    /// 0 = off.
    pub min_p: f32,
    /// 1 = off (llama.cpp's `--repeat-penalty`).
    pub repetition_penalty: f32,
    /// 0 = off (OpenAI's `presence_penalty`).
    pub presence_penalty: f32,
    /// 0 = off (OpenAI's `frequency_penalty`).
    pub frequency_penalty: f32,
    /// Tokens of history the penalties look at.
    pub penalty_last_n: usize,
    /// Added to the logits of these tokens.
    pub logit_bias: Vec<(u32, f32)>,
    /// The RNG's seed; `None`: one from the clock, when the sampler starts.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            logit_bias: Vec::new(),
            seed: None,
        }
    }
}

/// A sampling parameter out of its range (the one validation of sampling bounds:
/// the server, the engine and `ferrox run` all call [`SamplingParams::validate`]).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SamplingError {
    #[error("temperature must be a finite number >= 0, got {0}")]
    Temperature(f32),
    #[error("top_p must be in (0, 1], got {0}")]
    TopP(f32),
    #[error("min_p must be in [0, 1], got {0}")]
    MinP(f32),
    #[error("repetition_penalty must be a finite number > 0, got {0}")]
    RepetitionPenalty(f32),
    #[error("presence_penalty must be in [-2, 2], got {0}")]
    PresencePenalty(f32),
    #[error("frequency_penalty must be in [-2, 2], got {0}")]
    FrequencyPenalty(f32),
    #[error("logit_bias for token {0} must be in [-100, 100], got {1}")]
    LogitBias(u32, f32),
}

impl SamplingError {
    /// The field at fault, as the OpenAI API names it.
    pub fn field(&self) -> &'static str {
        match self {
            SamplingError::Temperature(_) => "temperature",
            SamplingError::TopP(_) => "top_p",
            SamplingError::MinP(_) => "min_p",
            SamplingError::RepetitionPenalty(_) => "repetition_penalty",
            SamplingError::PresencePenalty(_) => "presence_penalty",
            SamplingError::FrequencyPenalty(_) => "frequency_penalty",
            SamplingError::LogitBias(..) => "logit_bias",
        }
    }
}

impl SamplingParams {
    /// Checks every bound (NaN fails every check).
    pub fn validate(&self) -> Result<(), SamplingError> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(SamplingError::Temperature(self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplingError::TopP(self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(SamplingError::MinP(self.min_p));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return Err(SamplingError::RepetitionPenalty(self.repetition_penalty));
        }
        if !(-2.0..=2.0).contains(&self.presence_penalty) {
            return Err(SamplingError::PresencePenalty(self.presence_penalty));
        }
        if !(-2.0..=2.0).contains(&self.frequency_penalty) {
            return Err(SamplingError::FrequencyPenalty(self.frequency_penalty));
        }
        if let Some(&(t, b)) = self
            .logit_bias
            .iter()
            .find(|(_, b)| !(-100.0..=100.0).contains(b))
        {
            return Err(SamplingError::LogitBias(t, b));
        }
        Ok(())
    }

    /// Greedy decoding with no penalties.
    pub fn greedy() -> SamplingParams {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..Default::default()
        }
    }
}

/// One request's sampler.
/// A seed for a sampler whose request names none.
pub fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[derive(Clone, Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
    history: Vec<u32>,
}

impl Sampler {
    /// A sampler whose penalty history starts with `prompt`.
    pub fn new(params: SamplingParams, prompt: &[u32]) -> Sampler {
        let rng = ChaCha8Rng::seed_from_u64(params.seed.unwrap_or_else(clock_seed));
        let keep = prompt.len().saturating_sub(params.penalty_last_n);
        Sampler {
            params,
            rng,
            history: prompt[keep..].to_vec(),
        }
    }

    /// The parameters.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Records a token that joined the sequence (for penalties).
    pub fn accept(&mut self, token: u32) {
        self.history.push(token);
        let n = self.params.penalty_last_n;
        if self.history.len() > 2 * n.max(1) {
            self.history.drain(..self.history.len() - n);
        }
    }

    fn adjusted(&self, logits: &[f32], allowed: Option<&TokenMask>) -> Vec<f32> {
        let p = &self.params;
        let mut l = logits.to_vec();
        if let Some(mask) = allowed {
            for (t, v) in l.iter_mut().enumerate() {
                if !mask.allows(t as u32) {
                    *v = f32::NEG_INFINITY;
                }
            }
        }
        for &(id, b) in &p.logit_bias {
            if let Some(v) = l.get_mut(id as usize) {
                *v += b;
            }
        }
        let penalized =
            p.repetition_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0;
        if penalized && p.penalty_last_n > 0 {
            let recent = &self.history[self.history.len().saturating_sub(p.penalty_last_n)..];
            let mut counts: Vec<(u32, u32)> = Vec::with_capacity(recent.len());
            for &t in recent {
                match counts.iter_mut().find(|c| c.0 == t) {
                    Some(c) => c.1 += 1,
                    None => counts.push((t, 1)),
                }
            }
            for (t, c) in counts {
                if let Some(v) = l.get_mut(t as usize) {
                    if p.repetition_penalty != 1.0 {
                        *v = if *v > 0.0 {
                            *v / p.repetition_penalty
                        } else {
                            *v * p.repetition_penalty
                        };
                    }
                    *v -= c as f32 * p.frequency_penalty + p.presence_penalty;
                }
            }
        }
        l
    }

    /// Picks the next token from `logits` (one row of the vocabulary).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        self.sample_within(logits, None)
    }

    /// Picks the next token from `logits` among the tokens `allowed` lets through
    /// (all, without a mask): the others are removed before bias, penalties and
    /// truncation, so the sampler's rules apply to the allowed tokens alone.
    pub fn sample_within(&mut self, logits: &[f32], allowed: Option<&TokenMask>) -> u32 {
        let l = self.adjusted(logits, allowed);
        let p = &self.params;
        if p.temperature <= 0.0 {
            return argmax(&l);
        }
        let mut cand: Vec<(u32, f32)> = l
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.is_nan() && **v > f32::NEG_INFINITY)
            .map(|(i, &v)| (i as u32, v))
            .collect();
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if p.top_k > 0 && p.top_k < cand.len() {
            cand.select_nth_unstable_by(p.top_k - 1, by_logit);
            cand.truncate(p.top_k);
        }
        cand.sort_unstable_by(by_logit);
        if cand.is_empty() {
            return argmax(&l);
        }
        let max = cand[0].1 as f64;
        let probs: Vec<f64> = {
            let e: Vec<f64> = cand.iter().map(|c| (c.1 as f64 - max).exp()).collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(|x| x / s).collect()
        };
        let mut keep = cand.len();
        if p.top_p < 1.0 {
            let mut cum = 0.0;
            for (i, &pr) in probs.iter().enumerate() {
                cum += pr;
                if cum >= p.top_p as f64 {
                    keep = keep.min(i + 1);
                    break;
                }
            }
        }
        if p.min_p > 0.0 {
            let floor = probs[0] * p.min_p as f64;
            keep = keep.min(probs.iter().take_while(|&&pr| pr >= floor).count().max(1));
        }
        cand.truncate(keep);
        let t = p.temperature as f64;
        let weights: Vec<f64> = cand
            .iter()
            .map(|c| ((c.1 as f64 - max) / t).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        let u = (self.rng.next_u32() >> 8) as f64 / (1u32 << 24) as f64 * total;
        let mut acc = 0.0;
        for (c, w) in cand.iter().zip(&weights) {
            acc += w;
            if u < acc {
                return c.0;
            }
        }
        cand[cand.len() - 1].0
    }
}

/// Index of the largest value; the lowest index on ties; NaN never wins.
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &x) in v.iter().enumerate() {
        if x > best_v {
            best = i;
            best_v = x;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        vec![1.0, 3.0, 2.5, 3.0, -1.0, 0.5]
    }

    #[test]
    fn greedy_takes_the_lowest_id_among_the_best() {
        let mut s = Sampler::new(SamplingParams::greedy(), &[]);
        assert_eq!(s.sample(&logits()), 1);
        assert_eq!(argmax(&[f32::NAN, 1.0]), 1);
    }

    #[test]
    fn the_same_seed_gives_the_same_tokens_and_another_seed_differs() {
        let params = SamplingParams {
            temperature: 1.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: Some(42),
            ..Default::default()
        };
        let run = |p: SamplingParams| {
            let mut s = Sampler::new(p, &[]);
            (0..64).map(|_| s.sample(&logits())).collect::<Vec<_>>()
        };
        assert_eq!(run(params.clone()), run(params.clone()));
        assert_ne!(
            run(params.clone()),
            run(SamplingParams {
                seed: Some(43),
                ..params
            })
        );
    }

    #[test]
    fn top_k_one_and_min_p_one_are_greedy() {
        for p in [
            SamplingParams {
                temperature: 1.0,
                top_k: 1,
                ..Default::default()
            },
            SamplingParams {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
                min_p: 1.0,
                ..Default::default()
            },
        ] {
            let mut s = Sampler::new(p, &[]);
            for _ in 0..20 {
                assert!(matches!(s.sample(&logits()), 1 | 3));
            }
        }
    }

    #[test]
    fn top_p_keeps_only_the_nucleus() {
        let mut s = Sampler::new(
            SamplingParams {
                temperature: 1.0,
                top_k: 0,
                top_p: 0.5,
                min_p: 0.0,
                seed: Some(1),
                ..Default::default()
            },
            &[],
        );
        let l = vec![10.0, 0.0, 0.0, 0.0];
        for _ in 0..50 {
            assert_eq!(s.sample(&l), 0);
        }
    }

    #[test]
    fn penalties_and_bias_move_the_choice() {
        let mut s = Sampler::new(
            SamplingParams {
                repetition_penalty: 2.0,
                ..SamplingParams::greedy()
            },
            &[1, 3],
        );
        assert_eq!(s.sample(&logits()), 2, "both 3.0s halved below 2.5");
        let mut s = Sampler::new(
            SamplingParams {
                presence_penalty: 1.0,
                ..SamplingParams::greedy()
            },
            &[],
        );
        s.accept(1);
        assert_eq!(s.sample(&logits()), 3);
        let mut s = Sampler::new(
            SamplingParams {
                logit_bias: vec![(5, 10.0)],
                ..SamplingParams::greedy()
            },
            &[],
        );
        assert_eq!(s.sample(&logits()), 5);
    }
}
