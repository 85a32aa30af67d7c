//! The encoder's bidirectional attention, one (sequence, head) block a task:
//! the block's scores are a product of its keys and queries, its output a
//! product of its values and weights, both on the fused float product
//! (`matmul_fused_serial`: each element one chain of fused multiply-adds), so
//! attention runs at the products' rate rather than a dot a key.
//!
//! For a block of `n` tokens and head size `hd`:
//! * `s[t][j] = chain(K[j], Q[t]) * scale` (`1/sqrt(hd)`);
//! * `p[t] = exp(s[t] - max s[t])`, summed to `z[t]`;
//! * `o[t][c] = chain(Vᵀ[c], p[t]) / z[t]`, the chain over `j` in order.
//!
//! Invariant: a block reads its own sequence's rows only, and its arithmetic
//! depends on `n` and `hd` alone, so a token gets the same bits alone or in any
//! batch (SPEC S3).

use std::cell::RefCell;

use ferrox_core::ops::exp::exp_shifted;
use ferrox_core::ops::matmul::Matrix;
use ferrox_core::ops::matmul_fused::matmul_fused_serial;
use ferrox_core::ops::vector;
use rayon::prelude::*;

/// The attention's shape.
#[derive(Clone, Copy, Debug)]
pub(super) struct Heads {
    /// Values a token's row holds (`n_heads * head_dim`).
    pub width: usize,
    pub n_heads: usize,
    pub head_dim: usize,
}

/// Buffers reused layer after layer: the queries, keys and output by block
/// (`[seq][head][token][hd]`) and the values transposed (`[seq][head][hd][token]`).
#[derive(Default)]
pub(super) struct Scratch {
    q: Vec<f32>,
    k: Vec<f32>,
    vt: Vec<f32>,
    o: Vec<f32>,
}

thread_local! {
    /// Each thread's scores, kept from block to block (written before read).
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Attention of each sequence's tokens (`lens`, in order) over its own, from
/// token-major `q`, `k`, `v` (`[tokens][width]`) into `out` (the same shape),
/// on the current rayon pool.
pub(super) fn attend(
    heads: Heads,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    lens: &[usize],
    scratch: &mut Scratch,
    out: &mut Vec<f32>,
) {
    let d = heads.width;
    let total: usize = lens.iter().sum();
    assert!(
        q.len() == total * d && k.len() == q.len() && v.len() == q.len(),
        "q, k and v hold every token's row"
    );
    for b in [
        &mut scratch.q,
        &mut scratch.k,
        &mut scratch.vt,
        &mut scratch.o,
    ] {
        b.resize(q.len(), 0.0);
    }
    out.resize(q.len(), 0.0);
    gather(heads, q, k, v, lens, scratch);
    let blocks = blocks(heads, lens, &mut scratch.o);
    let (sq, sk, svt) = (&scratch.q, &scratch.k, &scratch.vt);
    blocks.into_par_iter().for_each(|(at, n, o)| {
        let span = at..at + n * heads.head_dim;
        block(
            heads.head_dim,
            n,
            &sq[span.clone()],
            &sk[span.clone()],
            &svt[span],
            o,
        );
    });
    scatter(heads, lens, &scratch.o, out);
}

/// Every (sequence, head) block of `o`: its offset, its tokens, its memory.
fn blocks<'a>(
    heads: Heads,
    lens: &[usize],
    o: &'a mut [f32],
) -> Vec<(usize, usize, &'a mut [f32])> {
    let (d, hd) = (heads.width, heads.head_dim);
    by_sequence(o, lens, d)
        .into_iter()
        .zip(starts(lens))
        .zip(lens)
        .filter(|(_, n)| **n > 0)
        .flat_map(|((seq, first), &n)| {
            seq.chunks_exact_mut(n * hd)
                .enumerate()
                .map(move |(h, b)| (first * d + h * n * hd, n, b))
        })
        .collect()
}

/// Each sequence's rows of `x` (`d` wide) as mutable chunks, in order.
fn by_sequence<'a>(x: &'a mut [f32], lens: &[usize], d: usize) -> Vec<&'a mut [f32]> {
    let mut rest = x;
    lens.iter()
        .map(|&n| {
            let (s, r) = std::mem::take(&mut rest).split_at_mut(n * d);
            rest = r;
            s
        })
        .collect()
}

/// `q`, `k` into block layout and `v` transposed into its blocks, a sequence
/// a task.
fn gather(heads: Heads, q: &[f32], k: &[f32], v: &[f32], lens: &[usize], s: &mut Scratch) {
    let (d, hd) = (heads.width, heads.head_dim);
    let starts = starts(lens);
    let seqs = by_sequence(&mut s.q, lens, d)
        .into_iter()
        .zip(by_sequence(&mut s.k, lens, d))
        .zip(by_sequence(&mut s.vt, lens, d))
        .zip(starts)
        .zip(lens);
    seqs.collect::<Vec<_>>()
        .into_par_iter()
        .for_each(|((((bq, bk), bvt), first), &n)| {
            let rows = first * d..(first + n) * d;
            let (q, k, v) = (&q[rows.clone()], &k[rows.clone()], &v[rows]);
            for h in 0..heads.n_heads {
                let block = h * n * hd..(h + 1) * n * hd;
                let (bq, bk, bvt) = (
                    &mut bq[block.clone()],
                    &mut bk[block.clone()],
                    &mut bvt[block],
                );
                for t in 0..n {
                    let src = t * d + h * hd..t * d + (h + 1) * hd;
                    bq[t * hd..(t + 1) * hd].copy_from_slice(&q[src.clone()]);
                    bk[t * hd..(t + 1) * hd].copy_from_slice(&k[src.clone()]);
                    for (c, &x) in v[src].iter().enumerate() {
                        bvt[c * n + t] = x;
                    }
                }
            }
        });
}

/// The blocks of `o` back into token-major rows of `out`, a sequence a task.
fn scatter(heads: Heads, lens: &[usize], o: &[f32], out: &mut [f32]) {
    let (d, hd) = (heads.width, heads.head_dim);
    let seqs: Vec<_> = by_sequence(out, lens, d)
        .into_iter()
        .zip(starts(lens))
        .zip(lens)
        .collect();
    seqs.into_par_iter().for_each(|((rows, first), &n)| {
        let blocks = &o[first * d..(first + n) * d];
        for h in 0..heads.n_heads {
            let block = &blocks[h * n * hd..(h + 1) * n * hd];
            for t in 0..n {
                rows[t * d + h * hd..t * d + (h + 1) * hd]
                    .copy_from_slice(&block[t * hd..(t + 1) * hd]);
            }
        }
    });
}

/// Each sequence's first token.
fn starts(lens: &[usize]) -> Vec<usize> {
    lens.iter()
        .scan(0, |at, &n| {
            let first = *at;
            *at += n;
            Some(first)
        })
        .collect()
}

/// Queries a block's scores hold at once: a long sequence's scores stay
/// `QUERY_ROWS x n` (8 MB at 8k tokens), not `n x n`.
const QUERY_ROWS: usize = 256;

/// One (sequence, head) block of `n` tokens: `q`, `k` `[n][hd]`, `vt` `[hd][n]`,
/// into `o` `[n][hd]`, `QUERY_ROWS` queries at a time (a token's chains do not
/// depend on the tokens beside it in a product).
fn block(hd: usize, n: usize, q: &[f32], k: &[f32], vt: &[f32], o: &mut [f32]) {
    let scale = 1.0 / (hd as f32).sqrt();
    let (keys, values) = (Matrix::from_f32(n, hd, k), Matrix::from_f32(hd, n, vt));
    SCORES.with_borrow_mut(|scores| {
        for (q, o) in q.chunks(QUERY_ROWS * hd).zip(o.chunks_mut(QUERY_ROWS * hd)) {
            let rows = q.len() / hd;
            scores.resize(rows * n, 0.0);
            let scores = &mut scores[..rows * n];
            matmul_fused_serial(&keys, q, rows, scores);
            let mut inv = Vec::with_capacity(rows);
            for row in scores.chunks_exact_mut(n) {
                row.iter_mut().for_each(|s| *s *= scale);
                exp_shifted(row, vector::max(row));
                inv.push(1.0 / vector::sum(row));
            }
            matmul_fused_serial(&values, scores, rows, o);
            for (row, &z) in o.chunks_exact_mut(hd).zip(&inv) {
                row.iter_mut().for_each(|x| *x *= z);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i + seed) * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    /// Softmax attention in f64, token by token.
    fn exact(heads: Heads, q: &[f32], k: &[f32], v: &[f32], lens: &[usize]) -> Vec<f64> {
        let (d, hd) = (heads.width, heads.head_dim);
        let mut out = vec![0.0f64; q.len()];
        let mut first = 0;
        for &n in lens {
            for t in first..first + n {
                for h in 0..heads.n_heads {
                    let c = h * hd..(h + 1) * hd;
                    let s: Vec<f64> = (first..first + n)
                        .map(|j| {
                            let dot: f64 = q[t * d..][c.clone()]
                                .iter()
                                .zip(&k[j * d..][c.clone()])
                                .map(|(&a, &b)| a as f64 * b as f64)
                                .sum();
                            dot / (hd as f64).sqrt()
                        })
                        .collect();
                    let m = s.iter().cloned().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for (ci, col) in c.clone().enumerate() {
                        out[t * d + h * hd + ci] = (0..n)
                            .map(|j| e[j] * v[(first + j) * d + col] as f64)
                            .sum::<f64>()
                            / z;
                    }
                }
            }
            first += n;
        }
        out
    }

    fn run(heads: Heads, q: &[f32], k: &[f32], v: &[f32], lens: &[usize]) -> Vec<f32> {
        let mut out = Vec::new();
        attend(heads, q, k, v, lens, &mut Scratch::default(), &mut out);
        out
    }

    #[test]
    fn attention_is_the_exact_function_and_each_sequence_its_own() {
        let heads = Heads {
            width: 24,
            n_heads: 3,
            head_dim: 8,
        };
        let lens = [5, 0, 1, 17, 40, QUERY_ROWS + 9];
        let total: usize = lens.iter().sum();
        let (q, k, v) = (
            values(total * 24, 1),
            values(total * 24, 2),
            values(total * 24, 3),
        );
        let got = run(heads, &q, &k, &v, &lens);
        let want = exact(heads, &q, &k, &v, &lens);
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!((g as f64 - w).abs() < 1e-5, "element {i}: {g} against {w}");
        }
        // The last sequence alone: the same bits (SPEC S3).
        let last = QUERY_ROWS + 9;
        let from = (total - last) * 24;
        let alone = run(heads, &q[from..], &k[from..], &v[from..], &[last]);
        assert!(
            alone
                .iter()
                .zip(&got[from..])
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }
}
