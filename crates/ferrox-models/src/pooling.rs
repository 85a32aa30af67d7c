//! Embeddings: how a prompt's hidden states become one vector (llama.cpp's
//! `pooling_type`), and how the vector is normalized (its `embd_normalize`).
//! Pure.
//!
//! The hidden states pooled are the last layer's, after the output norm (what
//! llama.cpp's graphs name `result_norm`), one row per prompt token.

use std::fmt;
use std::str::FromStr;

/// How an embedding pools a prompt's hidden states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// Every token's state, unpooled.
    None,
    /// The mean of every token's state.
    Mean,
    /// The first token's state.
    Cls,
    /// The last token's state (decoder embedding models, Qwen3-Embedding).
    Last,
    /// A relevance score from a classification head over the first token's
    /// state (cross-encoder rerankers).
    Rank,
}

/// The names [`Pooling`] parses, as llama-server's `--pooling` takes them.
pub const POOLING_NAMES: &str = "none, mean, cls, last, rank";

impl Pooling {
    /// The pooling of a GGUF `{arch}.pooling_type` code (llama.cpp's enum), or
    /// `None` for a code it does not define.
    pub fn from_gguf(code: u64) -> Option<Pooling> {
        Some(match code {
            0 => Pooling::None,
            1 => Pooling::Mean,
            2 => Pooling::Cls,
            3 => Pooling::Last,
            4 => Pooling::Rank,
            _ => return None,
        })
    }

    /// Its name, as `--pooling` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }

    /// Whether it reads the last token's state only, so that the prompt's
    /// earlier positions may come from the prefix cache.
    pub fn last_only(self) -> bool {
        self == Pooling::Last
    }
}

impl fmt::Display for Pooling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A pooling name that is none of [`POOLING_NAMES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown pooling {0:?} (one of: {POOLING_NAMES})")]
pub struct UnknownPooling(pub String);

impl FromStr for Pooling {
    type Err = UnknownPooling;

    fn from_str(s: &str) -> Result<Pooling, UnknownPooling> {
        Ok(match s {
            "none" => Pooling::None,
            "mean" => Pooling::Mean,
            "cls" => Pooling::Cls,
            "last" => Pooling::Last,
            "rank" => Pooling::Rank,
            _ => return Err(UnknownPooling(s.to_string())),
        })
    }
}

/// A pooled embedding being gathered, chunk by chunk, from a prompt's
/// hidden states (token positions in order).
#[derive(Clone, Debug)]
pub struct Pool {
    pooling: Pooling,
    /// The sum so far (mean), the chosen row (cls, last), or every row (none).
    acc: Vec<f64>,
    rows: usize,
}

impl Pool {
    /// An empty pool of rows `width` wide. `Rank` is pooled as `Cls` (the
    /// classification head is the model's, after this).
    pub fn new(pooling: Pooling, width: usize) -> Pool {
        let acc = match pooling {
            Pooling::None => Vec::new(),
            _ => vec![0.0; width],
        };
        Pool {
            pooling,
            acc,
            rows: 0,
        }
    }

    /// Its pooling.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Takes the hidden state of the prompt's token at `position`; `last`
    /// says whether it is the prompt's last token. Positions come in order,
    /// from 0 unless the pooling reads the last only.
    pub fn add(&mut self, position: usize, row: &[f32], last: bool) {
        match self.pooling {
            Pooling::None => self.acc.extend(row.iter().map(|&v| v as f64)),
            Pooling::Mean => {
                for (a, &v) in self.acc.iter_mut().zip(row) {
                    *a += v as f64;
                }
            }
            Pooling::Cls | Pooling::Rank if position == 0 => copy(&mut self.acc, row),
            Pooling::Last if last => copy(&mut self.acc, row),
            Pooling::Cls | Pooling::Rank | Pooling::Last => {}
        }
        self.rows += 1;
    }

    /// The embedding: one row, or one per token for `None`.
    pub fn finish(self) -> Vec<Vec<f32>> {
        let width = self.acc.len() / self.rows.max(1);
        match self.pooling {
            Pooling::None if width > 0 => self
                .acc
                .chunks_exact(width)
                .map(|r| r.iter().map(|&v| v as f32).collect())
                .collect(),
            Pooling::None => Vec::new(),
            Pooling::Mean => {
                let n = self.rows.max(1) as f64;
                vec![self.acc.iter().map(|&v| (v / n) as f32).collect()]
            }
            Pooling::Cls | Pooling::Rank | Pooling::Last => {
                vec![self.acc.iter().map(|&v| v as f32).collect()]
            }
        }
    }
}

fn copy(to: &mut [f64], row: &[f32]) {
    for (a, &v) in to.iter_mut().zip(row) {
        *a = v as f64;
    }
}

/// How an embedding is normalized: llama.cpp's `embd_normalize` codes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Normalize {
    /// As is (`-1`).
    Off,
    /// Scaled so that the largest magnitude is 32760, as int16 (`0`).
    MaxAbsInt16,
    /// Divided by its p-norm (`1` taxicab, `2` Euclidean, `p > 2`).
    PNorm(u32),
}

impl Normalize {
    /// The normalization of llama.cpp's code (`-1`, `0`, `1`, `2`, `p`).
    pub fn from_code(code: i64) -> Option<Normalize> {
        match code {
            -1 => Some(Normalize::Off),
            0 => Some(Normalize::MaxAbsInt16),
            p if p > 0 => u32::try_from(p).ok().map(Normalize::PNorm),
            _ => None,
        }
    }

    /// Normalizes `v` in place (a zero vector stays zero).
    pub fn apply(self, v: &mut [f32]) {
        let norm = match self {
            Normalize::Off => return,
            Normalize::MaxAbsInt16 => {
                v.iter().fold(0.0f64, |m, &x| m.max(x.abs() as f64)) / 32760.0
            }
            Normalize::PNorm(2) => v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt(),
            Normalize::PNorm(p) => v
                .iter()
                .map(|&x| (x.abs() as f64).powi(p as i32))
                .sum::<f64>()
                .powf(1.0 / p as f64),
        };
        let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
        v.iter_mut().for_each(|x| *x = (*x as f64 * scale) as f32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pooled(p: Pooling, rows: &[[f32; 2]]) -> Vec<Vec<f32>> {
        let mut pool = Pool::new(p, 2);
        for (i, r) in rows.iter().enumerate() {
            pool.add(i, r, i + 1 == rows.len());
        }
        pool.finish()
    }

    #[test]
    fn each_pooling_reads_its_rows() {
        let rows = [[1.0, 2.0], [3.0, 4.0], [5.0, 9.0]];
        assert_eq!(pooled(Pooling::Mean, &rows), vec![vec![3.0, 5.0]]);
        assert_eq!(pooled(Pooling::Cls, &rows), vec![vec![1.0, 2.0]]);
        assert_eq!(pooled(Pooling::Rank, &rows), vec![vec![1.0, 2.0]]);
        assert_eq!(pooled(Pooling::Last, &rows), vec![vec![5.0, 9.0]]);
        assert_eq!(
            pooled(Pooling::None, &rows),
            rows.iter().map(|r| r.to_vec()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn last_pooling_may_start_past_the_cached_prefix() {
        let mut pool = Pool::new(Pooling::Last, 2);
        pool.add(7, &[1.0, 1.0], false);
        pool.add(8, &[2.0, 3.0], true);
        assert_eq!(pool.finish(), vec![vec![2.0, 3.0]]);
    }

    #[test]
    fn normalizations_follow_llama_cpp() {
        let mut v = [3.0f32, -4.0];
        Normalize::PNorm(2).apply(&mut v);
        assert_eq!(v, [0.6, -0.8]);
        let mut v = [3.0f32, -4.0];
        Normalize::PNorm(1).apply(&mut v);
        assert!((v[0] - 3.0 / 7.0).abs() < 1e-7 && (v[1] + 4.0 / 7.0).abs() < 1e-7);
        let mut v = [3.0f32, -4.0];
        Normalize::MaxAbsInt16.apply(&mut v);
        assert_eq!(v, [24570.0, -32760.0]);
        let mut v = [3.0f32, -4.0];
        Normalize::Off.apply(&mut v);
        assert_eq!(v, [3.0, -4.0]);
        let mut zero = [0.0f32; 3];
        Normalize::PNorm(2).apply(&mut zero);
        assert_eq!(zero, [0.0; 3]);
        assert_eq!(Normalize::from_code(-2), None);
        assert_eq!(Normalize::from_code(3), Some(Normalize::PNorm(3)));
    }

    #[test]
    fn names_and_codes_round_trip() {
        for code in 0..5 {
            let p = Pooling::from_gguf(code).unwrap();
            assert_eq!(p.name().parse::<Pooling>(), Ok(p));
        }
        assert_eq!(Pooling::from_gguf(5), None);
        let e = "avg".parse::<Pooling>().unwrap_err();
        assert!(e.to_string().contains("none, mean, cls, last, rank"), "{e}");
    }
}
