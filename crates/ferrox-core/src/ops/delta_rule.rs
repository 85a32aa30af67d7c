//! One token's gated delta rule on one head's recurrent state (Qwen3.5's
//! delta-net, `ferrox_models::delta_net`), row by row: each row of the state is
//! decayed, written along the key and read along the query while it sits in
//! L1, and every reduction is [`super::vector::dot`]'s fixed-lane sum. The
//! builds for AVX-512 and AVX2 compile the one body, so they give the portable
//! build's bits.

use super::vector::{LANES, dot_body, fold};

dispatched!(
    /// `s` is `[v.len()][k.len()]`, a row per value dimension; `gates` is
    /// `(decay, beta)`. Per row `j`: `row *= decay`; `d = beta (v[j] - row·k)`;
    /// `row += d k`; `o[j] = (row·q) / sqrt(k.len())`.
    pub fn step / step_at = step_body(
        s: &mut [f32],
        q: &[f32],
        k: &[f32],
        v: &[f32],
        gates: (f32, f32),
        o: &mut [f32]
    ) -> ()
);

/// Rows run four at a time: their reductions are independent chains, which
/// the core overlaps; each row's arithmetic is the one-row form's.
#[inline(always)]
fn step_body(s: &mut [f32], q: &[f32], k: &[f32], v: &[f32], gates: (f32, f32), o: &mut [f32]) {
    let (decay, beta) = gates;
    let dk = k.len();
    assert!(
        dk > 0 && q.len() == dk && s.len() == v.len() * dk && o.len() == v.len(),
        "a delta-rule step on a {}-value state of rows of {dk}",
        s.len()
    );
    let scale = 1.0 / (dk as f32).sqrt();
    let mut rows = s.chunks_exact_mut(4 * dk);
    let (mut vs, mut os) = (v.chunks_exact(4), o.chunks_exact_mut(4));
    for ((four, v4), o4) in (&mut rows).zip(&mut vs).zip(&mut os) {
        four.iter_mut().for_each(|m| *m *= decay);
        let dots = dots4(four, k);
        let d: [f32; 4] = std::array::from_fn(|r| beta * (v4[r] - dots[r]));
        for (r, row) in four.chunks_exact_mut(dk).enumerate() {
            row.iter_mut().zip(k).for_each(|(m, &ki)| *m += d[r] * ki);
        }
        let read = dots4(four, q);
        for (oj, x) in o4.iter_mut().zip(read) {
            *oj = x * scale;
        }
    }
    let rest = rows.into_remainder();
    for ((row, &vj), oj) in rest
        .chunks_exact_mut(dk)
        .zip(vs.remainder())
        .zip(os.into_remainder())
    {
        row.iter_mut().for_each(|m| *m *= decay);
        let d = beta * (vj - dot_body(row, k));
        row.iter_mut().zip(k).for_each(|(m, &ki)| *m += d * ki);
        *oj = dot_body(row, q) * scale;
    }
}

/// [`dot_body`] of each of four rows (`rows` is `[4][x.len()]`) with `x`.
#[inline(always)]
fn dots4(rows: &[f32], x: &[f32]) -> [f32; 4] {
    let n = x.len();
    let whole = n / LANES * LANES;
    let mut acc = [[0.0f32; LANES]; 4];
    for c in (0..whole).step_by(LANES) {
        let xc = &x[c..c + LANES];
        for (r, a) in acc.iter_mut().enumerate() {
            let rc = &rows[r * n + c..r * n + c + LANES];
            for l in 0..LANES {
                a[l] += rc[l] * xc[l];
            }
        }
    }
    for (r, a) in acc.iter_mut().enumerate() {
        for (l, i) in (whole..n).enumerate() {
            a[l] += rows[r * n + i] * x[i];
        }
    }
    acc.map(fold)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::Level;

    /// Every build this CPU runs gives the portable build's bits, on rows of
    /// whole lanes and with a tail.
    #[test]
    fn every_build_gives_the_portable_bits() {
        for (dk, dv) in [(128, 9), (37, 6)] {
            let f = |i: usize, m: usize| ((i * m % 97) as f32 - 48.0) / 31.0;
            let s0: Vec<f32> = (0..dv * dk).map(|i| f(i, 13)).collect();
            let q: Vec<f32> = (0..dk).map(|i| f(i, 7)).collect();
            let k: Vec<f32> = (0..dk).map(|i| f(i, 11) / 8.0).collect();
            let v: Vec<f32> = (0..dv).map(|i| f(i, 5)).collect();
            let run = |level: Option<Level>| {
                let (mut s, mut o) = (s0.clone(), vec![0.0f32; dv]);
                match level {
                    Some(l) => step_at(l, &mut s, &q, &k, &v, (0.9, 0.4), &mut o),
                    None => step_body(&mut s, &q, &k, &v, (0.9, 0.4), &mut o),
                }
                (s, o)
            };
            let want = run(None);
            for level in Level::supported() {
                assert_eq!(run(Some(level)), want, "{level:?}, rows of {dk}");
            }
        }
    }
}
