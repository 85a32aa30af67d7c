//! The fused float product (the encoder's): `out[t][r]` is one chain of fused
//! multiply-adds, `acc = fma(W[r][k], x[t][k], acc)` over `k = 0..cols` in
//! order, from 0.
//!
//! Invariants:
//! * A fused multiply-add is correctly rounded, so every build that keeps each
//!   element's chain gives the same bits: the kernels vectorize across rows and
//!   tokens, never across `k` (the portable body, the AVX2 and AVX-512 kernels
//!   of `kernels::x86_panel`; NEON is the portable body, which LLVM vectorizes
//!   with its fused `fmla`). An element depends on its own row and token only,
//!   so a token gets the same bits alone or in any batch, on any thread count
//!   (SPEC S3).
//! * Weights are dequantized a block of at most 256 KiB per task at a time, into
//!   panels of [`PANEL`] rows stored k-major (padded with zero rows), and swept
//!   by the tokens a block of at most 128 KiB at a time: both stay in L2.
//!
//! Why it exists beside [`super::matmul::matmul`]: that product keeps the
//! decoder's exact path bit-identical with its single-token row dots (sixteen
//! lanes, multiply then add, folded), which costs two instructions a
//! multiply-add and a horizontal fold per element. An encoder runs every
//! sequence whole, so its products always have many tokens; these chains need
//! neither, and run at about twice the rate (`matmul_speed`'s `fused` figure).

use rayon::prelude::*;

use super::activation::gelu_tanh;
use super::matmul::{Matrix, check_shapes, split};
use crate::pool::SharedMut;

/// Weight rows per panel: two AVX-512 registers, four AVX2 ones.
pub const PANEL: usize = 32;

/// Tokens one AVX-512 kernel call runs (24 accumulators), the widest group.
const GROUP_AVX512: usize = 12;

/// Tokens one AVX2 kernel call runs (12 accumulators, half a panel).
#[cfg(target_arch = "x86_64")]
const GROUP_AVX2: usize = 6;

/// Dequantized weight bytes a task holds at once.
const ROW_BLOCK_BYTES: usize = 256 * 1024;

/// Activation bytes a token block may hold.
const TOKEN_BLOCK_BYTES: usize = 128 * 1024;

/// What each output element gets after its chain, as it is stored (while it
/// is still in a register's reach, in place of a pass over the output).
#[derive(Clone, Copy, Debug, Default)]
pub struct Epilogue<'a> {
    /// Added to row `r`'s chain: `bias[r]` (`rows` values).
    pub bias: Option<&'a [f32]>,
    /// Then `gelu_tanh` of the element (the same bits as a pass of
    /// [`super::activation::gelu_tanh_each`]).
    pub gelu: bool,
}

impl Epilogue<'_> {
    /// `vals` (rows `r0..`) into `dst`, finished on `level`'s build.
    fn store(&self, level: crate::isa::Level, r0: usize, vals: &[f32; PANEL], dst: &mut [f32]) {
        let live = dst.len();
        if self.bias.is_none() && !self.gelu {
            dst.copy_from_slice(&vals[..live]);
            return;
        }
        const ZERO: [f32; PANEL] = [0.0; PANEL];
        let bias = self.bias.map(|b| &b[r0..(r0 + PANEL).min(b.len())]);
        match (<&mut [f32; PANEL]>::try_from(&mut *dst), bias) {
            (Ok(whole), None) => finish::run(level, whole, vals, &ZERO, self.gelu),
            (Ok(whole), Some(b)) => {
                let b = b.try_into().expect("a whole panel's rows have their bias");
                finish::run(level, whole, vals, b, self.gelu)
            }
            // The matrix's last panel, part padding.
            (Err(_), bias) => {
                let (mut whole, mut b) = ([0.0f32; PANEL], ZERO);
                if let Some(bias) = bias {
                    b[..live].copy_from_slice(&bias[..live]);
                }
                finish::run(level, &mut whole, vals, &b, self.gelu);
                dst.copy_from_slice(&whole[..live]);
            }
        }
    }
}

/// `dst[i] = gelu?(vals[i] + bias[i])` for a panel's rows, in one pass at the
/// dispatched level (fixed-length, so it compiles to whole vectors): a
/// baseline-built bias add followed by a vector GELU read each value back
/// across several narrow stores (a failed store forward), which cost more
/// than the product's own stores.
#[inline(always)]
fn finish_body(dst: &mut [f32; PANEL], vals: &[f32; PANEL], bias: &[f32; PANEL], gelu: bool) {
    let sums = dst.iter_mut().zip(vals.iter().zip(bias));
    match gelu {
        true => sums.for_each(|(d, (&v, &c))| *d = gelu_tanh(v + c)),
        false => sums.for_each(|(d, (&v, &c))| *d = v + c),
    }
}

dispatched!(
    /// [`finish_body`] at the active level (same bits at every level).
    fn finish / finish_at = finish_body(dst: &mut [f32; PANEL], vals: &[f32; PANEL], bias: &[f32; PANEL], gelu: bool) -> ()
);

/// `out[t * rows + r]` is the fused chain of `W[r]` and `x[t * cols ..]`, then
/// `epilogue`, for `n_tokens` tokens, on `pool`'s threads.
pub fn matmul_fused(
    w: &Matrix<'_>,
    x: &[f32],
    n_tokens: usize,
    out: &mut [f32],
    epilogue: Epilogue<'_>,
    pool: &rayon::ThreadPool,
) {
    matmul_fused_at(crate::isa::active(), w, x, n_tokens, out, epilogue, pool)
}

/// [`matmul_fused`] on the kernels of `level` (panics if this CPU cannot run it).
pub fn matmul_fused_at(
    level: crate::isa::Level,
    w: &Matrix<'_>,
    x: &[f32],
    n_tokens: usize,
    out: &mut [f32],
    epilogue: Epilogue<'_>,
    pool: &rayon::ThreadPool,
) {
    level.assert_runs_here();
    check_bias(w, epilogue);
    let Some((per_task, n_tasks)) = split(w, x, n_tokens, out, pool, PANEL) else {
        return;
    };
    let ptr = SharedMut(out.as_mut_ptr());
    pool.install(|| {
        (0..n_tasks).into_par_iter().for_each(|i| {
            let rows = i * per_task..((i + 1) * per_task).min(w.rows);
            // `task` makes no parallel call, so the borrow is never nested.
            PANELS.with_borrow_mut(|buf| task(level, w, x, n_tokens, rows, ptr, epilogue, buf));
        });
    });
}

/// [`matmul_fused`] of every row on the calling thread (for callers that run
/// many small products in parallel themselves): the same bits.
pub fn matmul_fused_serial(w: &Matrix<'_>, x: &[f32], n_tokens: usize, out: &mut [f32]) {
    check_shapes(w, x, n_tokens, out);
    let ptr = SharedMut(out.as_mut_ptr());
    let level = crate::isa::active();
    // `task` makes no parallel call, and this is not called inside one of its
    // emits, so the borrow is never nested.
    PANELS.with_borrow_mut(|buf| {
        task(
            level,
            w,
            x,
            n_tokens,
            0..w.rows,
            ptr,
            Epilogue::default(),
            buf,
        )
    });
}

fn check_bias(w: &Matrix<'_>, epilogue: Epilogue<'_>) {
    if let Some(b) = epilogue.bias {
        assert_eq!(b.len(), w.rows, "a bias holds one value a row");
    }
}

thread_local! {
    /// Each thread's panels and scratch, kept from call to call: every value
    /// is written before it is read, so a task neither allocates nor zeroes
    /// (a fresh zeroed buffer a task was 4 % of an embedding load's samples).
    static PANELS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One task's rows: their panels a block at a time, each swept by every token.
#[allow(clippy::too_many_arguments)]
fn task(
    level: crate::isa::Level,
    w: &Matrix<'_>,
    x: &[f32],
    n_tokens: usize,
    rows: std::ops::Range<usize>,
    out: SharedMut<f32>,
    epilogue: Epilogue<'_>,
    buf: &mut Vec<f32>,
) {
    if rows.is_empty() || n_tokens == 0 {
        return;
    }
    let cols = w.cols;
    let block = (ROW_BLOCK_BYTES / (4 * cols) / PANEL * PANEL)
        .max(PANEL)
        .min(rows.len().next_multiple_of(PANEL));
    // Whole groups of the widest kernel, so that only a call's last group
    // runs narrower.
    let token_block =
        (TOKEN_BLOCK_BYTES / (4 * cols) / GROUP_AVX512 * GROUP_AVX512).max(GROUP_AVX512);
    let need = (block + PANEL) * cols;
    if buf.len() < need {
        buf.resize(need, 0.0);
    }
    let (panels, scratch) = buf[..need].split_at_mut(block * cols);
    for b0 in rows.clone().step_by(block) {
        let b1 = (b0 + block).min(rows.end);
        let n_panels = (b1 - b0).div_ceil(PANEL);
        fill_panels(w, b0..b1, &mut panels[..n_panels * PANEL * cols], scratch);
        for t0 in (0..n_tokens).step_by(token_block) {
            let t1 = (t0 + token_block).min(n_tokens);
            for (p, panel) in panels.chunks_exact(PANEL * cols).take(n_panels).enumerate() {
                let r0 = b0 + p * PANEL;
                let live = (b1 - r0).min(PANEL);
                sweep(level, panel, &x[t0 * cols..t1 * cols], cols, |t, vals| {
                    // SAFETY: token t0 + t < n_tokens and rows r0..r0 + live lie
                    // inside `out` (checked by the caller) and belong to this
                    // task alone, so the slice is in bounds and no other thread
                    // touches it.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut(out.0.add((t0 + t) * w.rows + r0), live)
                    };
                    epilogue.store(level, r0, vals, dst);
                });
            }
        }
    }
}

/// Writes rows `rows` of `w` as panels, k-major, rows past the end zero:
/// each panel's rows are dequantized into `scratch` (`PANEL` rows), then
/// written out in the panel's order (sequential stores, the reads strided in
/// L1).
fn fill_panels(
    w: &Matrix<'_>,
    rows: std::ops::Range<usize>,
    panels: &mut [f32],
    scratch: &mut [f32],
) {
    let cols = w.cols;
    for (p, panel) in panels.chunks_exact_mut(PANEL * cols).enumerate() {
        for (i, row) in scratch.chunks_exact_mut(cols).enumerate() {
            let r = rows.start + p * PANEL + i;
            if r < rows.end {
                w.dequantize_row(r, row);
            } else {
                row.fill(0.0);
            }
        }
        for (k, step) in panel.chunks_exact_mut(PANEL).enumerate() {
            for (i, v) in step.iter_mut().enumerate() {
                *v = scratch[i * cols + k];
            }
        }
    }
}

/// Runs the tokens of `x` (`cols` values each) against `panel`, in groups the
/// level's kernel holds, handing each token's [`PANEL`] values to `emit`.
fn sweep(
    level: crate::isa::Level,
    panel: &[f32],
    x: &[f32],
    cols: usize,
    mut emit: impl FnMut(usize, &[f32; PANEL]),
) {
    let n = x.len() / cols;
    #[cfg(target_arch = "x86_64")]
    if level.has_avx2() {
        let avx512 = level.has_avx512();
        let group = if avx512 { GROUP_AVX512 } else { GROUP_AVX2 };
        for g0 in (0..n).step_by(group) {
            let count = group.min(n - g0);
            let xs = &x[g0 * cols..(g0 + count) * cols];
            x86_group(avx512, count, panel, xs, cols, &mut |t, v| emit(g0 + t, v));
        }
        return;
    }
    let _ = level;
    for t in 0..n {
        emit(t, &chain(panel, &x[t * cols..(t + 1) * cols]));
    }
}

/// The portable body: one token's chains against a panel.
fn chain(panel: &[f32], x: &[f32]) -> [f32; PANEL] {
    let mut acc = [0.0f32; PANEL];
    for (w, &v) in panel.chunks_exact(PANEL).zip(x) {
        for (a, &wi) in acc.iter_mut().zip(w) {
            *a = wi.mul_add(v, *a);
        }
    }
    acc
}

/// `count` tokens (1 to [`GROUP_AVX512`] on AVX-512, to [`GROUP_AVX2`] on
/// AVX2) on the x86 kernels.
#[cfg(target_arch = "x86_64")]
fn x86_group(
    avx512: bool,
    count: usize,
    panel: &[f32],
    x: &[f32],
    cols: usize,
    emit: &mut dyn FnMut(usize, &[f32; PANEL]),
) {
    fn run<const T: usize>(
        avx512: bool,
        panel: &[f32],
        x: &[f32],
        cols: usize,
        emit: &mut dyn FnMut(usize, &[f32; PANEL]),
    ) {
        assert!(panel.len() == PANEL * cols && x.len() >= T * cols);
        let mut out = [[0.0f32; PANEL]; T];
        if avx512 {
            assert!(T <= GROUP_AVX512);
            // SAFETY: the level was checked by the caller; lengths asserted above.
            unsafe { crate::kernels::x86_panel::panel_avx512::<T>(panel, x, cols, &mut out) };
        } else {
            assert!(T <= GROUP_AVX2);
            for half in 0..2 {
                // SAFETY: as above; half is 0 or 1.
                unsafe {
                    crate::kernels::x86_panel::panel_avx2::<T>(panel, half, x, cols, &mut out)
                };
            }
        }
        for (t, v) in out.iter().enumerate() {
            emit(t, v);
        }
    }
    macro_rules! by_count {
        ($($c:literal)*) => {
            match count {
                $($c => run::<$c>(avx512, panel, x, cols, emit),)*
                _ => unreachable!("a group holds 1 to GROUP_AVX512 (12) tokens"),
            }
        };
    }
    by_count!(1 2 3 4 5 6 7 8 9 10 11 12)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::kernels::reference::quantize;

    fn pool(n: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    }

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i + seed) * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect()
    }

    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    /// The chain of one row and token, written out as the definition says.
    fn chain_of(row: &[f32], x: &[f32]) -> f32 {
        row.iter()
            .zip(x)
            .fold(0.0f32, |acc, (&w, &v)| w.mul_add(v, acc))
    }

    /// Every level, every group size and leftover, padded panels, several row
    /// blocks and token blocks: each element is its chain, bit for bit.
    #[test]
    fn every_element_is_its_chain_at_every_level() {
        for (t, rows, cols, n) in [
            (DType::F16, 45, 67, 29),
            (DType::F32, 70, 9, 13),
            (DType::Q8_0, 33, 64, 1),
            // Rows so long that a row block is one panel and a token block 3 tokens.
            (DType::F16, 40, 11_000, 7),
        ] {
            let wf = values(rows * cols, 3);
            let bytes = quantize(t, &wf).unwrap();
            let w = Matrix::new(t, rows, cols, &bytes).unwrap();
            let x = values(n * cols, 11);
            let mut row = vec![0.0; cols];
            for level in crate::isa::Level::supported() {
                let mut out = vec![0.0; n * rows];
                matmul_fused_at(level, &w, &x, n, &mut out, Epilogue::default(), &pool(2));
                for r in 0..rows {
                    w.dequantize_row(r, &mut row);
                    for k in 0..n {
                        let want = chain_of(&row, &x[k * cols..(k + 1) * cols]);
                        assert_eq!(
                            out[k * rows + r].to_bits(),
                            want.to_bits(),
                            "{level:?} {t} row {r} token {k}"
                        );
                    }
                }
            }
        }
    }

    /// The epilogue is the pass it replaces, bit for bit at every level, and
    /// the serial product is the parallel one.
    #[test]
    fn the_epilogue_is_its_pass_and_the_serial_product_the_parallel_one() {
        // 70 rows: two whole panels and a part one.
        let (rows, cols, n) = (70, 40, 27);
        let bytes = quantize(DType::F16, &values(rows * cols, 4)).unwrap();
        let w = Matrix::new(DType::F16, rows, cols, &bytes).unwrap();
        let x = values(n * cols, 6);
        let bias = values(rows, 8);
        let mut plain = vec![0.0; n * rows];
        matmul_fused(&w, &x, n, &mut plain, Epilogue::default(), &pool(2));
        let mut serial = vec![0.0; n * rows];
        matmul_fused_serial(&w, &x, n, &mut serial);
        assert!(same_bits(&plain, &serial));
        for gelu in [false, true] {
            let want: Vec<f32> = plain
                .chunks_exact(rows)
                .flat_map(|row| row.iter().zip(&bias).map(|(&v, &c)| v + c))
                .map(|v| if gelu { gelu_tanh(v) } else { v })
                .collect();
            let epilogue = Epilogue {
                bias: Some(&bias),
                gelu,
            };
            for level in crate::isa::Level::supported() {
                let mut got = vec![0.0; n * rows];
                matmul_fused_at(level, &w, &x, n, &mut got, epilogue, &pool(2));
                assert!(same_bits(&want, &got), "{level:?}, gelu {gelu}");
            }
        }
    }

    #[test]
    fn a_token_gets_the_same_bits_alone_or_in_a_batch_on_any_thread_count() {
        let (rows, cols, n) = (37, 48, 15);
        let bytes = quantize(DType::F16, &values(rows * cols, 5)).unwrap();
        let w = Matrix::new(DType::F16, rows, cols, &bytes).unwrap();
        let x = values(n * cols, 17);
        let mut batched = vec![0.0; n * rows];
        matmul_fused(&w, &x, n, &mut batched, Epilogue::default(), &pool(2));
        for t in 0..n {
            for threads in [1, 3] {
                let mut alone = vec![0.0; rows];
                let xt = &x[t * cols..(t + 1) * cols];
                matmul_fused(&w, xt, 1, &mut alone, Epilogue::default(), &pool(threads));
                let same = same_bits(&alone, &batched[t * rows..(t + 1) * rows]);
                assert!(same, "token {t} differs alone on {threads} threads");
            }
        }
    }

    #[test]
    fn the_chains_are_the_product_within_rounding() {
        let (rows, cols, n) = (8, 384, 4);
        let bytes = quantize(DType::F32, &values(rows * cols, 2)).unwrap();
        let w = Matrix::new(DType::F32, rows, cols, &bytes).unwrap();
        let x = values(n * cols, 9);
        let mut out = vec![0.0; n * rows];
        matmul_fused(&w, &x, n, &mut out, Epilogue::default(), &pool(1));
        let wf = values(rows * cols, 2);
        for t in 0..n {
            for r in 0..rows {
                let exact: f64 = (0..cols)
                    .map(|k| wf[r * cols + k] as f64 * x[t * cols + k] as f64)
                    .sum();
                assert!((out[t * rows + r] as f64 - exact).abs() < 1e-4, "{r} {t}");
            }
        }
    }
}
