//! Scoring the forward pass against golden continuations (`exact-*.jsonl`: the
//! float64 reference; `llama-*.jsonl`: llama.cpp), as the fidelity bars count:
//! step-1 top token equal, greedy continuations identical, and the mean absolute
//! top-5 log-prob error over the steps where the greedy prefix still agrees.
//! Golden tokens are fed back (teacher forcing), so later steps stay comparable.

use serde_json::Value;

use crate::ActivationPath;
use crate::Transformer;
use crate::decoder::{Decoder, Span, Want};
use crate::kv_store::KvStore;

/// How a model's continuations compare with a golden file's.
#[derive(Clone, Debug, Default)]
pub struct Score {
    pub prompts: usize,
    pub first_equal: usize,
    pub identical: usize,
    pub err_sum: f64,
    pub err_n: usize,
}

impl Score {
    pub fn mean_error(&self) -> f64 {
        self.err_sum / self.err_n.max(1) as f64
    }

    /// Panics unless at least `identical` continuations are identical and the
    /// mean error is at most `error`.
    pub fn check(&self, label: &str, identical: usize, error: f64) {
        assert!(
            self.identical >= identical,
            "{label}: identical continuations {}/{} (bar {identical})",
            self.identical,
            self.prompts
        );
        assert!(
            self.mean_error() <= error,
            "{label}: mean error {} (bar {error})",
            self.mean_error()
        );
    }
}

/// The bars of an activation path against the exact reference: (identical
/// continuations of 16 at least, mean error at most).
pub fn exact_bar(path: ActivationPath) -> (usize, f64) {
    match path {
        ActivationPath::Int16 => (10, 0.05),
        ActivationPath::F32 => (15, 0.005),
    }
}

fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let sum: f64 = logits.iter().map(|&v| (v as f64 - max).exp()).sum();
    logits.iter().map(|&v| v as f64 - max - sum.ln()).collect()
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an id array")
        .iter()
        .map(|v| v.as_u64().expect("an id") as u32)
        .collect()
}

/// Scores `m` on golden `rows`, printing each differing continuation and the
/// totals under `label`.
pub fn score(m: &Transformer, rows: &[Value], label: &str) -> Score {
    let mut cache = KvStore::new(m.kv_layout(), 16);
    let mut s = Score {
        prompts: rows.len(),
        ..Score::default()
    };
    for row in rows {
        let (prompt, want) = (ids(&row["prompt_ids"]), ids(&row["ids"]));
        let top5 = row["top5"].as_array().expect("top5");
        let seq = cache.fresh_table(prompt.len() + want.len() + 1);
        let mut forward = |start: usize, tokens: &[u32]| {
            let span = Span {
                pages: &seq,
                start,
                tokens,
                want: Want::Last,
            };
            m.forward(&mut cache, &[span])
                .expect("forward")
                .last_of(0)
                .expect("last logits")
                .to_vec()
        };
        let mut logits = forward(0, &prompt);
        let mut got = Vec::new();
        for step in 0..want.len() {
            let next = argmax(&logits);
            if got == want[..step] {
                let lp = log_softmax(&logits);
                for e in top5[step].as_array().expect("five entries") {
                    let id = e["id"].as_u64().expect("id") as usize;
                    s.err_sum += (lp[id] - e["logprob"].as_f64().expect("logprob")).abs();
                    s.err_n += 1;
                }
            }
            s.first_equal += usize::from(step == 0 && next == want[0]);
            got.push(next);
            if step + 1 < want.len() {
                logits = forward(prompt.len() + step, &[want[step]]);
            }
        }
        if got == want {
            s.identical += 1;
        } else {
            eprintln!(
                "{label}: {:?} differs: got {got:?}\n want {want:?}",
                row["prompt"]
            );
        }
    }
    eprintln!(
        "{label}: step-1 {}/{}, identical {}/{}, mean top-5 log-prob error {:.5} nats over {} values",
        s.first_equal,
        s.prompts,
        s.identical,
        s.prompts,
        s.mean_error(),
        s.err_n
    );
    s
}
