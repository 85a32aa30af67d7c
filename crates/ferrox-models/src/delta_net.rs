//! The gated delta-net layer (Qwen3.5's linear attention) over one sequence's
//! recurrent state, as llama.cpp's `build_layer_attn_linear` and
//! `build_delta_net_autoregressive` compute it. Per token `t`, from the layer's
//! projections `mixed = h Wqkv`, `z = h Wgate`, `beta = h Wbeta`,
//! `alpha = h Walpha`:
//!
//! * a causal depthwise convolution of `mixed` over the last `conv_kernel`
//!   inputs (the state keeps the previous `conv_kernel - 1`), then SiLU; split
//!   into queries `q`, keys `k` (`n_k_heads` each) and values `v`
//!   (`n_v_heads`); `q` and `k` L2-normalized per head (`x / sqrt(Σx² + eps)`);
//! * per value head `h` (its query and key head is `h mod n_k_heads`, ggml's
//!   tiled broadcast), with state `S_h` (`head_dim × head_dim`, a row per value
//!   dimension): `S_h ← exp(g) S_h` with `g = softplus(alpha_h + dt_bias_h) a_h`;
//!   `S_h ← S_h + sigmoid(beta_h) (v_h − S_h k) kᵀ`; `o_h = S_h q / sqrt(head_dim)`;
//! * `o_h` RMS-normed (`ssm_norm`) times `silu(z_h)`.
//!
//! Prefill and decode run the same per-token recurrence: the convolution token
//! by token, then each head through the span's tokens in order (heads in
//! parallel, each head's arithmetic in a fixed order). So a token's result does
//! not depend on how its sequence was split into spans, nor on the other
//! sequences of a batch (SPEC S3). The chunked (WY) form of prefill would change
//! the bits with the chunking, and the recurrence costs `4 head_dim²` flops per
//! head and token, a few percent of a layer's matrix products.
//!
//! State layout (f32): `[conv_kernel - 1][conv_channels]` oldest input first,
//! then `[n_v_heads][head_dim][head_dim]`.

use ferrox_core::ops::activation::{Gate, gated, silu_each};
use ferrox_core::ops::delta_rule;
use ferrox_core::ops::exp::exp;
use ferrox_core::ops::norm::rms_norm;
use ferrox_core::ops::vector::dot;
use ferrox_core::pool::{Parallel, for_each_chunk_pair_mut};

use crate::hparams::DeltaNetParams;
use crate::weights::DeltaNetWeights;

/// One span's inputs to the recurrence, `n` tokens each.
pub struct Projections<'a> {
    /// `[n][conv_channels]`
    pub mixed: &'a [f32],
    /// `[n][value_dim]`
    pub z: &'a [f32],
    /// `[n][n_v_heads]`
    pub beta: &'a [f32],
    /// `[n][n_v_heads]`
    pub alpha: &'a [f32],
}

impl<'a> Projections<'a> {
    /// The projections of tokens `..at` and of tokens `at..`.
    pub fn split_at(&self, p: &DeltaNetParams, at: usize) -> (Projections<'a>, Projections<'a>) {
        let (c, v, h) = (p.conv_channels(), p.value_dim(), p.n_v_heads);
        let (mixed, mixed2) = self.mixed.split_at(at * c);
        let (z, z2) = self.z.split_at(at * v);
        let (beta, beta2) = self.beta.split_at(at * h);
        let (alpha, alpha2) = self.alpha.split_at(at * h);
        let head = Projections {
            mixed,
            z,
            beta,
            alpha,
        };
        let tail = Projections {
            mixed: mixed2,
            z: z2,
            beta: beta2,
            alpha: alpha2,
        };
        (head, tail)
    }
}

/// `log(1 + e^x)`, as ggml computes it (`x` itself past 20).
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { (1.0 + exp(x)).ln() }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `x / sqrt(Σx² + eps)` in place.
fn l2_normalize(x: &mut [f32], eps: f32) {
    let inv = 1.0 / (dot(x, x) + eps).sqrt();
    x.iter_mut().for_each(|v| *v *= inv);
}

/// Runs `n` tokens of one sequence through the layer: `state` is the
/// sequence's state for this layer, updated in place; `out` gets `[n][value_dim]`
/// (the gated, normed head outputs, before `ssm_out`). The heads run on
/// `pool`'s threads.
pub fn run(
    p: &DeltaNetParams,
    w: &DeltaNetWeights,
    eps: f32,
    state: &mut [f32],
    x: &Projections<'_>,
    out: &mut [f32],
    pool: &dyn Parallel,
) {
    let (c, dk, nv) = (p.conv_channels(), p.head_dim, p.n_v_heads);
    let n = x.mixed.len() / c;
    assert!(
        state.len() == p.state_floats()
            && x.mixed.len() == n * c
            && x.z.len() == n * p.value_dim()
            && x.beta.len() == n * nv
            && x.alpha.len() == n * nv
            && out.len() == n * p.value_dim(),
        "delta-net buffers of {n} tokens"
    );
    if n == 0 {
        return;
    }
    let (conv_state, heads) = state.split_at_mut((p.conv_kernel - 1) * c);
    let qkv = convolve(p, w, eps, conv_state, x.mixed);
    let qk = 2 * p.n_k_heads * dk;
    // `[n_v_heads][n][head_dim]`: each head runs through the tokens in order.
    let mut by_head = vec![0.0f32; nv * n * dk];
    for_each_chunk_pair_mut(pool, (heads, dk * dk), (&mut by_head, n * dk), |h, s, o| {
        let kh = h % p.n_k_heads;
        for t in 0..n {
            let row = &qkv[t * c..(t + 1) * c];
            let q = &row[kh * dk..(kh + 1) * dk];
            let k = &row[qk / 2 + kh * dk..qk / 2 + (kh + 1) * dk];
            let v = &row[qk + h * dk..qk + (h + 1) * dk];
            let g = softplus(x.alpha[t * nv + h] + w.dt_bias[h]) * w.a[h];
            let b = sigmoid(x.beta[t * nv + h]);
            delta_rule::step(s, q, k, v, (exp(g), b), &mut o[t * dk..(t + 1) * dk]);
        }
    });
    let mut gate = vec![0.0f32; dk];
    for t in 0..n {
        for h in 0..nv {
            let o = &mut out[(t * nv + h) * dk..(t * nv + h + 1) * dk];
            o.copy_from_slice(&by_head[(h * n + t) * dk..(h * n + t + 1) * dk]);
            rms_norm(o, &w.norm, eps);
            // `silu(z) * o`: the product's bits are `o * silu(z)`'s.
            gate.copy_from_slice(&x.z[(t * nv + h) * dk..(t * nv + h + 1) * dk]);
            gated(&mut gate, o, Gate::Silu);
            o.copy_from_slice(&gate);
        }
    }
}

/// The convolution over every token, then SiLU and the per-head L2 norms of the
/// queries and keys: `[n][conv_channels]`. Shifts `conv_state` to the last
/// `conv_kernel - 1` inputs.
fn convolve(
    p: &DeltaNetParams,
    w: &DeltaNetWeights,
    eps: f32,
    conv_state: &mut [f32],
    mixed: &[f32],
) -> Vec<f32> {
    let (c, taps, dk) = (p.conv_channels(), p.conv_kernel, p.head_dim);
    let n = mixed.len() / c;
    let mut y = vec![0.0f32; n * c];
    for t in 0..n {
        let input = &mixed[t * c..(t + 1) * c];
        let yt = &mut y[t * c..(t + 1) * c];
        for (ch, out) in yt.iter_mut().enumerate() {
            let tap = &w.conv[ch * taps..(ch + 1) * taps];
            let mut acc = 0.0f32;
            for (j, &wj) in tap[..taps - 1].iter().enumerate() {
                acc += conv_state[j * c + ch] * wj;
            }
            *out = acc + input[ch] * tap[taps - 1];
        }
        silu_each(yt);
        conv_state.copy_within(c.., 0);
        conv_state[(taps - 2) * c..].copy_from_slice(input);
        for head in yt[..2 * p.n_k_heads * dk].chunks_exact_mut(dk) {
            l2_normalize(head, eps);
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::Linear;

    /// The scalar twin: the same layer in f64, token by token, with the plain
    /// formulas (no shared helpers), on random inputs with 2 key and 4 value
    /// heads.
    #[test]
    fn the_recurrence_matches_a_scalar_f64_twin_over_split_spans() {
        let p = DeltaNetParams {
            conv_kernel: 4,
            n_k_heads: 2,
            n_v_heads: 4,
            head_dim: 8,
        };
        let (c, v, nv, dk) = (p.conv_channels(), p.value_dim(), p.n_v_heads, p.head_dim);
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut rnd = |scale: f32, offset: f32| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            offset + scale * ((seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        };
        let unused = || Linear {
            weight: crate::weights::TensorRef::unused(),
            packed: None,
            bias: None,
        };
        let w = DeltaNetWeights {
            qkv: unused(),
            gate: unused(),
            beta: unused(),
            alpha: unused(),
            conv: (0..c * 4).map(|_| rnd(0.5, 0.0)).collect(),
            dt_bias: (0..nv).map(|_| rnd(0.5, 1.0)).collect(),
            a: (0..nv).map(|_| rnd(0.9, -1.0)).collect(),
            norm: (0..dk).map(|_| rnd(0.2, 1.0)).collect(),
            out: unused(),
        };
        let n = 7;
        let mixed: Vec<f32> = (0..n * c).map(|_| rnd(1.0, 0.0)).collect();
        let z: Vec<f32> = (0..n * v).map(|_| rnd(1.0, 0.0)).collect();
        let beta: Vec<f32> = (0..n * nv).map(|_| rnd(2.0, 0.0)).collect();
        let alpha: Vec<f32> = (0..n * nv).map(|_| rnd(2.0, 0.0)).collect();
        let eps = 1e-6f32;
        // ferrox, in spans of 3 and 4 tokens.
        let mut state = vec![0.0f32; p.state_floats()];
        let mut out = vec![0.0f32; n * v];
        let pool = ferrox_core::pool::SpinPool::new(2, "test").unwrap();
        for (t0, t1) in [(0, 3), (3, n)] {
            let x = Projections {
                mixed: &mixed[t0 * c..t1 * c],
                z: &z[t0 * v..t1 * v],
                beta: &beta[t0 * nv..t1 * nv],
                alpha: &alpha[t0 * nv..t1 * nv],
            };
            run(&p, &w, eps, &mut state, &x, &mut out[t0 * v..t1 * v], &pool);
        }
        // The twin.
        let f = |x: f32| x as f64;
        let silu64 = |x: f64| x / (1.0 + (-x).exp());
        let mut hist = vec![vec![0.0f64; c]; 3];
        let mut s = vec![vec![vec![0.0f64; dk]; dk]; nv];
        for t in 0..n {
            let input: Vec<f64> = mixed[t * c..(t + 1) * c].iter().map(|&x| f(x)).collect();
            let y: Vec<f64> = (0..c)
                .map(|ch| {
                    let tap = |j: usize| f(w.conv[ch * 4 + j]);
                    silu64((0..3).map(|j| hist[j][ch] * tap(j)).sum::<f64>() + input[ch] * tap(3))
                })
                .collect();
            hist.remove(0);
            hist.push(input);
            let head = |from: usize| -> Vec<f64> {
                let r = &y[from..from + dk];
                let norm = (r.iter().map(|x| x * x).sum::<f64>() + f(eps)).sqrt();
                r.iter().map(|x| x / norm).collect()
            };
            for h in 0..nv {
                let kh = h % 2;
                let (q, k) = (head(kh * dk), head(2 * dk + kh * dk));
                let vv = &y[4 * dk + h * dk..4 * dk + (h + 1) * dk];
                let a = f(alpha[t * nv + h]) + f(w.dt_bias[h]);
                let decay = ((1.0 + a.exp()).ln() * f(w.a[h])).exp();
                let b = 1.0 / (1.0 + (-f(beta[t * nv + h])).exp());
                let mut o = vec![0.0f64; dk];
                for j in 0..dk {
                    s[h][j].iter_mut().for_each(|m| *m *= decay);
                    let sk: f64 = (0..dk).map(|i| s[h][j][i] * k[i]).sum();
                    let d = b * (vv[j] - sk);
                    (0..dk).for_each(|i| s[h][j][i] += d * k[i]);
                    o[j] = (0..dk).map(|i| s[h][j][i] * q[i]).sum::<f64>() / (dk as f64).sqrt();
                }
                let ms = o.iter().map(|x| x * x).sum::<f64>() / dk as f64;
                for j in 0..dk {
                    let zj = f(z[t * v + h * dk + j]);
                    let want = o[j] / (ms + f(eps)).sqrt() * f(w.norm[j]) * silu64(zj);
                    let got = out[t * v + h * dk + j] as f64;
                    assert!(
                        (got - want).abs() < 1e-4 * (1.0 + want.abs()),
                        "token {t} head {h} dim {j}: {got} against {want}"
                    );
                }
            }
        }
    }
}
