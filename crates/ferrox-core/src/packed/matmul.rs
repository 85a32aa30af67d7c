//! `out[t][r] = W[r] . x[t]` on the integer-activation path: activations quantized
//! once per call, then each task sweeps its groups of 16 rows over the tokens,
//! [`TOKEN_TILE`] tokens per kernel call (a group's weights are unpacked once per
//! tile), `TOKEN_CHUNK` tokens at a time (their activations stay in cache).
//!
//! Invariant: an output element is the kernel's function of its own row and its own
//! token's activations, whatever the tokens in the call, the tiles or the threads.

use super::kernel::{TOKEN_TILE, TokenActs, group};
use super::{GROUP_ROWS, PackedMatrix, QuantizedRows};
use crate::pool::{Parallel, SharedMut, with_scratch};

/// Tokens whose activations are swept over a task's groups before the next ones
/// (they stay in L2 while the groups' weights come round again).
const TOKEN_CHUNK: usize = 64;

/// `out[t * rows + r]` for the `acts.n` tokens of `acts` (quantized from rows of
/// `w.cols` values), on `pool`'s threads.
pub fn packed_matmul(w: &PackedMatrix, acts: &QuantizedRows, out: &mut [f32], pool: &dyn Parallel) {
    packed_matmul_each(&mut [(w, acts, out)], pool);
}

/// [`packed_matmul`] of several matrices by the same activations (q, k and v; gate
/// and up), as one parallel region: one fork and join instead of one per matrix.
pub fn packed_matmul_many(
    jobs: &mut [(&PackedMatrix, &mut [f32])],
    acts: &QuantizedRows,
    pool: &dyn Parallel,
) {
    let mut each: Vec<(&PackedMatrix, &QuantizedRows, &mut [f32])> = jobs
        .iter_mut()
        .map(|(w, out)| (*w, acts, &mut **out))
        .collect();
    packed_matmul_each(&mut each, pool);
}

/// [`packed_matmul`] of several matrices, each by its own activations (a
/// mixture's chosen experts, each on the rows routed to it), as one parallel
/// region. Each output is what [`packed_matmul`] gives alone.
pub fn packed_matmul_each(
    jobs: &mut [(&PackedMatrix, &QuantizedRows, &mut [f32])],
    pool: &dyn Parallel,
) {
    let threads = pool.threads().max(1);
    // (job, groups) pairs, a few per thread and matrix.
    let mut tasks = Vec::new();
    let mut outs = Vec::with_capacity(jobs.len());
    for (j, (w, acts, out)) in jobs.iter_mut().enumerate() {
        assert_eq!(acts.cols, w.cols, "activations hold cols values per token");
        assert!(
            !w.format.needs_half_sums() || acts.has_half_sums(),
            "{} needs the activations' half sums (QuantizedRows::add_half_sums)",
            w.dtype
        );
        assert_eq!(out.len(), acts.n * w.rows, "output must be n_tokens x rows");
        outs.push(SharedMut(out.as_mut_ptr()));
        if acts.n == 0 {
            continue;
        }
        let groups = w.groups();
        let per_task = groups.div_ceil(threads * 4).max(1);
        tasks.extend(
            (0..groups)
                .step_by(per_task)
                .map(|g0| (j, g0..(g0 + per_task).min(groups))),
        );
    }
    if tasks.is_empty() {
        return;
    }
    let jobs: Vec<(&PackedMatrix, &QuantizedRows)> =
        jobs.iter().map(|(w, acts, _)| (*w, *acts)).collect();
    pool.for_each(tasks.len(), &|task| {
        let (j, groups) = &tasks[task];
        let ((w, acts), ptr) = (jobs[*j], outs[*j]);
        let (n, nb) = (acts.n, acts.blocks());
        with_scratch(
            &TILE,
            || [[0.0; GROUP_ROWS]; TOKEN_TILE],
            |tile| {
                for chunk in (0..n).step_by(TOKEN_CHUNK) {
                    let end = (chunk + TOKEN_CHUNK).min(n);
                    // The chunk's tokens, sliced once for all its groups.
                    let toks: Vec<TokenActs<'_>> = (chunk..end).map(|t| acts.token(t)).collect();
                    for g in groups.clone() {
                        let r0 = g * GROUP_ROWS;
                        let valid = (w.rows - r0).min(GROUP_ROWS);
                        let mut t0 = chunk;
                        while t0 < end {
                            let k = (end - t0).min(TOKEN_TILE);
                            let tile_toks = &toks[t0 - chunk..t0 - chunk + k];
                            group(w.format, w.group(g), nb, tile_toks, &mut tile[..k]);
                            for (i, row) in tile[..k].iter().enumerate() {
                                let at = ptr.at((t0 + i) * w.rows + r0);
                                // SAFETY: (t0 + i, r0..r0 + valid) is inside this job's
                                // output and these rows belong to this task alone.
                                unsafe {
                                    if valid == GROUP_ROWS {
                                        // A whole group's row: a copy of constant size,
                                        // inlined.
                                        at.cast::<[f32; GROUP_ROWS]>().write_unaligned(*row);
                                    } else {
                                        std::ptr::copy_nonoverlapping(row.as_ptr(), at, valid);
                                    }
                                }
                            }
                            t0 += k;
                        }
                    }
                }
            },
        );
    });
}

thread_local! {
    /// Each thread's kernel outputs for one tile of tokens, kept across tasks
    /// (zeroing a fresh one per task was 1 % of a prefill's samples).
    static TILE: std::cell::RefCell<[[f32; GROUP_ROWS]; TOKEN_TILE]> =
        const { std::cell::RefCell::new([[0.0; GROUP_ROWS]; TOKEN_TILE]) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::kernels::test_rows::{random, random_row};
    use crate::ops::matmul::{Matrix, matmul};

    /// `n` random rows of `cols` activations and their quantized form (with
    /// half sums).
    fn quantized_random(n: usize, cols: usize, seed: u64) -> (Vec<f32>, QuantizedRows) {
        let x: Vec<f32> = random(n * cols, seed)
            .iter()
            .map(|&b| (b as f32 - 128.0) / 50.0)
            .collect();
        let mut q = QuantizedRows::default();
        q.quantize(&x, n, cols);
        q.add_half_sums();
        (x, q)
    }

    /// `m` by `q` in a call of its own, on another thread count, gives `got`'s bits.
    fn assert_alone_gives(m: &PackedMatrix, q: &QuantizedRows, got: &[f32]) {
        let mut alone = vec![0.0; q.n * m.rows];
        packed_matmul(m, q, &mut alone, &pool(3));
        assert!(
            alone
                .iter()
                .zip(got)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{}",
            m.dtype
        );
    }

    /// Random matrices of `(type, rows)`, `cols` wide, packed.
    fn packed_matrices(shapes: &[(DType, usize)], cols: usize, seed: u64) -> Vec<PackedMatrix> {
        shapes
            .iter()
            .map(|&(t, rows)| {
                let bytes: Vec<u8> = (0..rows)
                    .flat_map(|r| random_row(t, cols / t.block_len(), seed + r as u64))
                    .collect();
                PackedMatrix::pack(&Matrix::new(t, rows, cols, &bytes).unwrap(), &pool(1)).unwrap()
            })
            .collect()
    }

    fn pool(n: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    }

    #[test]
    fn several_matrices_in_one_region_give_the_bits_of_one_call_each() {
        let cols = 256;
        let (_, q) = quantized_random(5, cols, 3);
        let mats = packed_matrices(
            &[(DType::Q4_1, 40), (DType::Q8_0, 16), (DType::Q5_0, 70)],
            cols,
            9,
        );
        let mut together: Vec<Vec<f32>> = mats.iter().map(|m| vec![0.0; 5 * m.rows]).collect();
        {
            let mut jobs: Vec<(&PackedMatrix, &mut [f32])> = mats
                .iter()
                .zip(together.iter_mut())
                .map(|(m, o)| (m, o.as_mut_slice()))
                .collect();
            packed_matmul_many(&mut jobs, &q, &pool(2));
        }
        for (m, got) in mats.iter().zip(&together) {
            assert_alone_gives(m, &q, got);
        }
    }

    #[test]
    fn matrices_with_their_own_activations_in_one_region_give_the_bits_of_one_call_each() {
        let cols = 256;
        let acts: Vec<QuantizedRows> = [3usize, 1, 0, 5]
            .iter()
            .enumerate()
            .map(|(k, &n)| quantized_random(n, cols, 40 + k as u64).1)
            .collect();
        let mats = packed_matrices(
            &[
                (DType::Q4_K, 40),
                (DType::Q6_K, 16),
                (DType::Q2_K, 33),
                (DType::Q8_0, 20),
            ],
            cols,
            90,
        );
        let mut together: Vec<Vec<f32>> = mats
            .iter()
            .zip(&acts)
            .map(|(m, q)| vec![f32::NAN; q.n * m.rows])
            .collect();
        {
            let mut jobs: Vec<(&PackedMatrix, &QuantizedRows, &mut [f32])> = mats
                .iter()
                .zip(&acts)
                .zip(together.iter_mut())
                .map(|((m, q), o)| (m, q, o.as_mut_slice()))
                .collect();
            packed_matmul_each(&mut jobs, &pool(2));
        }
        for ((m, q), got) in mats.iter().zip(&acts).zip(&together) {
            assert_alone_gives(m, q, got);
        }
    }

    #[test]
    fn every_token_gets_the_same_bits_alone_or_in_a_batch_and_stays_close_to_f32() {
        for t in crate::packed::kernel::tests::TYPES {
            let (rows, cols, n) = (37, 512, 9);
            let bytes: Vec<u8> = (0..rows)
                .flat_map(|r| random_row(t, cols / t.block_len(), 31 + r as u64))
                .collect();
            let m = Matrix::new(t, rows, cols, &bytes).unwrap();
            let p = PackedMatrix::pack(&m, &pool(2)).unwrap();
            let (x, q) = quantized_random(n, cols, 77);
            let mut batched = vec![0.0; n * rows];
            packed_matmul(&p, &q, &mut batched, &pool(2));
            let mut exact = vec![0.0; n * rows];
            matmul(&m, &x, n, &mut exact, &pool(2));
            for k in 0..n {
                for threads in [1, 3] {
                    let mut one = QuantizedRows::default();
                    one.quantize(&x[k * cols..(k + 1) * cols], 1, cols);
                    one.add_half_sums();
                    let mut alone = vec![0.0; rows];
                    packed_matmul(&p, &one, &mut alone, &pool(threads));
                    let same = alone
                        .iter()
                        .zip(&batched[k * rows..(k + 1) * rows])
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{t}: token {k} differs alone on {threads} threads");
                }
            }
            let scale = exact.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            for (a, b) in batched.iter().zip(&exact) {
                assert!((a - b).abs() <= 1e-4 * scale, "{t}: {a} vs f32 path {b}");
            }
        }
    }
}
