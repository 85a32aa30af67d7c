//! Matrix products of quantized weights with f32 activations: the one kernel shape
//! of the forward pass (rows = tokens of the step, cols = output features).
//!
//! Invariants:
//! * `out[t][r] = dot(dequantize(W[r]), x[t])` with [`super::vector::dot`], for every
//!   token `t` and row `r`: the same operations whatever the number of tokens, the
//!   tiling or the thread that computes it (SPEC S3). A weight row is dequantized
//!   once per call and reused by every token (a decode step of 16 requests is one
//!   16-token call, not 16 calls).
//! * Weights are never dequantized whole: a task's rows a block of at most 256 KiB
//!   at a time, swept by the tokens a block of 128 KiB at a time (both stay in L2),
//!   or block by block inside the fused row dot for a single token (bit-identical,
//!   see `kernels::fast`).

use crate::dtype::DType;
use crate::error::CoreError;
use crate::kernels::fast;
use crate::pool::{Parallel, SharedMut, with_scratch};

use super::vector::dot;

/// Weight rows swept together over a token block (a row tile).
pub const ROW_TILE: usize = 8;

/// A weight matrix as stored in GGUF: `rows` rows of `cols` values, row-major.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    pub dtype: DType,
    /// Output features.
    pub rows: usize,
    /// Input features (values per stored row).
    pub cols: usize,
    data: &'a [u8],
    row_bytes: usize,
}

impl<'a> Matrix<'a> {
    /// Views `data` as a `rows x cols` matrix of `dtype`, checking every length.
    pub fn new(
        dtype: DType,
        rows: usize,
        cols: usize,
        data: &'a [u8],
    ) -> Result<Matrix<'a>, CoreError> {
        let row_bytes = dtype.row_bytes(cols).ok_or(CoreError::PartialBlock {
            dtype,
            block_len: dtype.block_len(),
            n: cols,
        })?;
        let want = row_bytes.checked_mul(rows).ok_or(CoreError::ByteLength {
            dtype,
            n: usize::MAX,
            want: usize::MAX,
            got: data.len(),
        })?;
        if want != data.len() {
            return Err(CoreError::ByteLength {
                dtype,
                n: rows * cols,
                want,
                got: data.len(),
            });
        }
        Ok(Matrix {
            dtype,
            rows,
            cols,
            data,
            row_bytes,
        })
    }

    /// Views `values` as a `rows x cols` F32 matrix (activations as a product's
    /// left side, e.g. attention's keys).
    pub fn from_f32(rows: usize, cols: usize, values: &'a [f32]) -> Matrix<'a> {
        assert_eq!(
            values.len(),
            rows * cols,
            "a matrix holds rows x cols values"
        );
        // SAFETY: the bytes of initialized f32s are initialized u8s, the length
        // is the same memory's, and u8 needs no alignment.
        let data =
            unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), 4 * values.len()) };
        Matrix {
            dtype: DType::F32,
            rows,
            cols,
            data,
            row_bytes: 4 * cols,
        }
    }

    /// Stored bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// The stored bytes of row `r`.
    pub fn row(&self, r: usize) -> &'a [u8] {
        &self.data[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    /// Dequantizes row `r` into `out` (`cols` values).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert_eq!(out.len(), self.cols, "a row holds cols values");
        fast::dequantize_row(self.dtype, self.row(r), out);
    }

    /// `W[r] . x` without materializing the row (`x` holds `cols` values).
    pub fn dot_row(&self, r: usize, x: &[f32]) -> f32 {
        assert_eq!(x.len(), self.cols, "activations hold cols values");
        fast::dot_row(self.dtype, self.row(r), x)
    }
}

/// Activation bytes a token block may hold: the block is swept once for each
/// row tile, so it must stay in the core's L2 (all of a prefill's tokens, swept
/// for every tile, were streamed from L3 once per eight rows).
const TOKEN_BLOCK_BYTES: usize = 128 * 1024;

/// Dequantized weight bytes a task holds at once: rows dequantized once and
/// swept by every token block, beside it in L2.
const ROW_BLOCK_BYTES: usize = 256 * 1024;

/// Tokens swept together by a row tile: as many as [`TOKEN_BLOCK_BYTES`] hold,
/// whole register tiles of 4, at least 4.
fn token_block(cols: usize) -> usize {
    (TOKEN_BLOCK_BYTES / (4 * cols.max(1)) / 4 * 4).max(4)
}

/// Rows dequantized together: as many as [`ROW_BLOCK_BYTES`] hold, whole row
/// tiles, at least one.
fn row_block(cols: usize) -> usize {
    (ROW_BLOCK_BYTES / (4 * cols.max(1)) / ROW_TILE * ROW_TILE).max(ROW_TILE)
}

fn tile(
    w: &Matrix<'_>,
    x: &[f32],
    n_tokens: usize,
    rows: std::ops::Range<usize>,
    out: SharedMut<f32>,
    buf: &mut Vec<f32>,
) {
    let cols = w.cols;
    if n_tokens == 1 {
        for r in rows {
            // SAFETY: as below.
            unsafe { *out.0.add(r) = w.dot_row(r, x) };
        }
        return;
    }
    let (row_block, token_block) = (row_block(cols), token_block(cols));
    buf.resize(row_block * cols, 0.0);
    for b0 in rows.clone().step_by(row_block) {
        let b1 = (b0 + row_block).min(rows.end);
        for r in b0..b1 {
            w.dequantize_row(r, &mut buf[(r - b0) * cols..(r - b0 + 1) * cols]);
        }
        for t0 in (0..n_tokens).step_by(token_block) {
            let tokens = t0..(t0 + token_block).min(n_tokens);
            for r0 in (b0..b1).step_by(ROW_TILE) {
                let r1 = (r0 + ROW_TILE).min(b1);
                let at = (r0 - b0) * cols;
                row_tile(w, x, tokens.clone(), r0..r1, &buf[at..], out);
            }
        }
    }
}

/// `out[t][r]` for the rows `rows` (dequantized in `buf`, row `rows.start`
/// first) and the tokens `tokens`.
fn row_tile(
    w: &Matrix<'_>,
    x: &[f32],
    tokens: std::ops::Range<usize>,
    rows: std::ops::Range<usize>,
    buf: &[f32],
    out: SharedMut<f32>,
) {
    let (cols, r0) = (w.cols, rows.start);
    let row = |r: usize| &buf[(r - r0) * cols..(r - r0 + 1) * cols];
    let tok = |t: usize| &x[t * cols..(t + 1) * cols];
    // SAFETY: (the writes below) (t, r) is inside `out` (checked by the caller) and
    // row r belongs to this task alone.
    let put = |t: usize, r: usize, v: f32| unsafe { *out.0.add(t * w.rows + r) = v };
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut t0 = tokens.start;
    #[cfg(target_arch = "x86_64")]
    {
        let level = crate::isa::active();
        if level.has_avx512() {
            // SAFETY: feature detected; every row and token holds `cols` values.
            t0 = register_tiles::<4, 4>(
                tokens.clone(),
                rows.clone(),
                &row,
                &tok,
                &put,
                |w, x, o| unsafe { crate::kernels::x86::dot_4x4::<false>(w, x, o) },
            );
        } else if level.has_avx2() {
            // SAFETY: as above.
            t0 = register_tiles::<4, 2>(
                tokens.clone(),
                rows.clone(),
                &row,
                &tok,
                &put,
                |w, x, o| unsafe { crate::kernels::x86::dot_tile_avx2(w, x, o) },
            );
        }
    }
    for t in t0..tokens.end {
        for r in rows.clone() {
            put(t, r, dot(row(r), tok(t)));
        }
    }
}

/// Sweeps `R x T` register tiles (`kernel`, bit-identical to `dot` per element)
/// over the rows and whole tiles of `tokens`; rows past the last whole `R` go by
/// `dot`. Returns the first token left undone.
#[cfg(target_arch = "x86_64")]
fn register_tiles<'a, const R: usize, const T: usize>(
    tokens: std::ops::Range<usize>,
    rows: std::ops::Range<usize>,
    row: &impl Fn(usize) -> &'a [f32],
    tok: &impl Fn(usize) -> &'a [f32],
    put: &impl Fn(usize, usize, f32),
    kernel: impl Fn([&[f32]; R], [&[f32]; T], &mut [[f32; T]; R]),
) -> usize {
    let mut t0 = tokens.start;
    while t0 + T <= tokens.end {
        let mut r = rows.start;
        while r + R <= rows.end {
            let mut o = [[0.0f32; T]; R];
            kernel(
                std::array::from_fn(|i| row(r + i)),
                std::array::from_fn(|i| tok(t0 + i)),
                &mut o,
            );
            for (dr, orow) in o.iter().enumerate() {
                for (dt, &v) in orow.iter().enumerate() {
                    put(t0 + dt, r + dr, v);
                }
            }
            r += R;
        }
        for rr in r..rows.end {
            for t in t0..t0 + T {
                put(t, rr, dot(row(rr), tok(t)));
            }
        }
        t0 += T;
    }
    t0
}

/// Panics unless `x` is `n_tokens x cols` and `out` `n_tokens x rows`.
pub(super) fn check_shapes(w: &Matrix<'_>, x: &[f32], n_tokens: usize, out: &[f32]) {
    assert_eq!(
        x.len(),
        n_tokens * w.cols,
        "activations must be n_tokens x cols"
    );
    assert_eq!(
        out.len(),
        n_tokens * w.rows,
        "output must be n_tokens x rows"
    );
}

/// Checks a product's shapes (panics unless `x` is `n_tokens x cols` and `out`
/// `n_tokens x rows`) and splits its rows into tasks for `pool`: enough to
/// balance, each a whole number of `unit` rows. `(rows per task, tasks)`, or
/// `None` when there is nothing to compute.
pub(super) fn split(
    w: &Matrix<'_>,
    x: &[f32],
    n_tokens: usize,
    out: &[f32],
    pool: &dyn Parallel,
    unit: usize,
) -> Option<(usize, usize)> {
    check_shapes(w, x, n_tokens, out);
    if n_tokens == 0 || w.rows == 0 {
        return None;
    }
    let threads = pool.threads().max(1);
    let per_task = w
        .rows
        .div_ceil(threads * 4)
        .next_multiple_of(unit)
        .max(unit);
    Some((per_task, w.rows.div_ceil(per_task)))
}

/// `out[t * rows + r] = W[r] . x[t * cols ..]` for `n_tokens` tokens, on `pool`'s threads.
pub fn matmul(w: &Matrix<'_>, x: &[f32], n_tokens: usize, out: &mut [f32], pool: &dyn Parallel) {
    let Some((per_task, n_tasks)) = split(w, x, n_tokens, out, pool, ROW_TILE) else {
        return;
    };
    let ptr = SharedMut(out.as_mut_ptr());
    pool.for_each(n_tasks, &|i| {
        let rows = i * per_task..((i + 1) * per_task).min(w.rows);
        with_scratch(&SCRATCH, Vec::new, |buf| {
            tile(w, x, n_tokens, rows, ptr, buf)
        });
    });
}

thread_local! {
    /// A thread's dequantized rows for [`tile`], kept across products.
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::reference::quantize;

    fn pool(n: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    }

    #[test]
    fn every_token_gets_the_same_bits_alone_or_in_a_batch_on_any_thread_count() {
        let (rows, cols, n) = (37, 64, 9);
        let wf: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let bytes = quantize(DType::Q8_0, &wf).unwrap();
        let w = Matrix::new(DType::Q8_0, rows, cols, &bytes).unwrap();
        let x: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 104729) % 997) as f32 / 400.0 - 1.2)
            .collect();
        let mut batched = vec![0.0; n * rows];
        matmul(&w, &x, n, &mut batched, &pool(2));
        for t in 0..n {
            for threads in [1, 3] {
                let mut alone = vec![0.0; rows];
                matmul(
                    &w,
                    &x[t * cols..(t + 1) * cols],
                    1,
                    &mut alone,
                    &pool(threads),
                );
                let same = alone
                    .iter()
                    .zip(&batched[t * rows..(t + 1) * rows])
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "token {t} differs alone on {threads} threads");
            }
        }
        // And the values are the product of the dequantized weights.
        let mut row = vec![0.0; cols];
        w.dequantize_row(5, &mut row);
        let want: f32 = row.iter().zip(&x[..cols]).map(|(a, b)| a * b).sum();
        assert!((batched[5] - want).abs() < 1e-4);
    }

    /// Register tiles, the rows and tokens past them, token blocks and the tail
    /// of a row past its last 16 values all give `dot`'s bits.
    #[test]
    fn every_element_is_the_portable_dot_of_its_row_and_token() {
        for (t, cols) in [
            (DType::F16, 67),
            (DType::BF16, 48),
            (DType::F32, 9),
            (DType::Q2_K, 256),
            // Rows so long that a token block holds 4 tokens: 11 tokens are swept
            // as blocks of 4, 4 and 3 (`token_block`).
            (DType::F16, 8195),
        ] {
            let (rows, n) = (13, 11);
            let wf: Vec<f32> = (0..rows * cols)
                .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            let bytes = quantize(t, &wf).unwrap_or_else(|_| {
                crate::kernels::test_rows::random_row(t, rows * cols / t.block_len(), 4)
            });
            let w = Matrix::new(t, rows, cols, &bytes).unwrap();
            let x: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 104729) % 997) as f32 / 400.0 - 1.2)
                .collect();
            let mut out = vec![0.0; n * rows];
            matmul(&w, &x, n, &mut out, &pool(2));
            let mut row = vec![0.0; cols];
            for r in 0..rows {
                w.dequantize_row(r, &mut row);
                for k in 0..n {
                    let want = crate::ops::vector::dot_portable(&row, &x[k * cols..(k + 1) * cols]);
                    assert_eq!(
                        out[k * rows + r].to_bits(),
                        want.to_bits(),
                        "{t} row {r} token {k}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_matrix_with_the_wrong_byte_length_is_refused() {
        assert!(Matrix::new(DType::Q8_0, 2, 32, &[0; 67]).is_err());
        assert!(Matrix::new(DType::Q8_0, 2, 30, &[0; 68]).is_err());
    }
}
