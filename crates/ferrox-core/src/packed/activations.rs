//! Activations quantized for the integer products: per token, per block of 32
//! values, `x[i] ~ da * qa[i]` with `qa` 16-bit integers.
//!
//! Invariants (each token alone decides its own numbers, SPEC S3):
//! * `da = max|x| / 32767`, `qa[i] = round_half_even(x[i] * (32767 / max|x|))`
//!   clamped to +-32767; a block of zeros has `da = 0` and `qa = 0`. Every step is
//!   one IEEE f32 operation, so any build gives the same integers.
//! * `sa = da * (sum qa as f32)`: the block's sum, used by weight offsets; `sh`
//!   the same of each 16-value half, used by split offsets (Q2_K), computed only
//!   when asked ([`QuantizedRows::add_half_sums`]): most models have no Q2_K.
//! * `hs`: each 16-value half's exact integer sum (what the AVX2 build's
//!   one-token Q6_K product takes its values' bias back with), computed by
//!   every build for every input. It costs the quantization a sixth of its
//!   rate on AVX2 and a fifth on AVX-512 (one thread, 512 x 2048 values:
//!   3.69 -> 3.15 and 3.40 -> 2.69 Gvalues/s), Gemma 3's prefill 1.3 % on
//!   AVX-512 (pp512, three alternations); computing it only for the builds
//!   whose kernels take it would need the AVX2 kernel to run without it too.
//! * The rounding error is at most `da / 2` per value.

use std::sync::{Mutex, PoisonError};

use super::BLOCK;
use super::kernel::TokenActs;
use crate::isa::Level;
use crate::pool::{Parallel, Serial};

/// Consecutive blocks to quantize: their inputs, outputs, scales, sums and
/// halves' integer sums.
struct Blocks<'a> {
    x: &'a [f32],
    qa: &'a mut [i16],
    da: &'a mut [f32],
    sa: &'a mut [f32],
    hs: &'a mut [i32],
}

impl Blocks<'_> {
    fn quantize(&mut self, level: Level) {
        let blocks = self
            .x
            .chunks_exact(BLOCK)
            .zip(self.qa.chunks_exact_mut(BLOCK));
        let sums = self.da.iter_mut().zip(self.sa.iter_mut());
        for (((xb, qb), (da, sa)), hs) in blocks.zip(sums).zip(self.hs.chunks_exact_mut(2)) {
            let (xb, qb): (&[f32; BLOCK], &mut [i16; BLOCK]) = (
                xb.try_into().expect("32 values"),
                qb.try_into().expect("32 values"),
            );
            let hs: &mut [i32; 2] = hs.try_into().expect("two halves");
            (*da, *sa) = quantize_block_at(level, xb, qb, hs);
        }
    }
}

/// `n` token rows of `cols` values, quantized block by block.
#[derive(Clone, Debug, Default)]
pub struct QuantizedRows {
    pub n: usize,
    pub cols: usize,
    /// `n * cols` integers, row-major.
    pub qa: Vec<i16>,
    /// `n * cols / 32` block scales.
    pub da: Vec<f32>,
    /// `n * cols / 32` scaled block sums.
    pub sa: Vec<f32>,
    /// `n * cols / 16` scaled half-block sums once [`QuantizedRows::add_half_sums`]
    /// ran for these rows; else empty.
    pub sh: Vec<f32>,
    /// `n * cols / 16` exact integer half-block sums.
    pub hs: Vec<i32>,
}

const QMAX: f32 = 32767.0;

/// Blocks from which quantization is split across the thread pool
/// ([`QuantizedRows::quantize_on`]).
const PARALLEL_BLOCKS: usize = 1024;

impl QuantizedRows {
    /// Quantizes `x` (`n` rows of `cols` values, `cols` a multiple of 32), reusing
    /// this value's buffers, on the calling thread.
    pub fn quantize(&mut self, x: &[f32], n: usize, cols: usize) {
        self.quantize_on(x, n, cols, &Serial);
    }

    /// [`QuantizedRows::quantize`], split across `pool`'s threads from 1,024
    /// blocks (prefill chunks, full batches): each block is
    /// its own function of its own values, so the split changes nothing.
    pub fn quantize_on(&mut self, x: &[f32], n: usize, cols: usize, pool: &dyn Parallel) {
        assert!(
            cols.is_multiple_of(BLOCK),
            "{cols} values per row are not whole blocks of {BLOCK}"
        );
        assert_eq!(x.len(), n * cols, "activations must be n x cols");
        let nb = n * cols / BLOCK;
        self.n = n;
        self.cols = cols;
        self.qa.resize(n * cols, 0);
        self.da.resize(nb, 0.0);
        self.sa.resize(nb, 0.0);
        self.hs.resize(2 * nb, 0);
        self.sh.clear();
        let level = crate::isa::active();
        let per_task = if nb >= PARALLEL_BLOCKS {
            PARALLEL_BLOCKS / 4
        } else {
            nb.max(1)
        };
        let tasks = x
            .chunks(per_task * BLOCK)
            .zip(self.qa.chunks_mut(per_task * BLOCK))
            .zip(
                self.da
                    .chunks_mut(per_task)
                    .zip(self.sa.chunks_mut(per_task)),
            )
            .zip(self.hs.chunks_mut(2 * per_task))
            .map(|(((x, qa), (da, sa)), hs)| Blocks { x, qa, da, sa, hs });
        if nb < PARALLEL_BLOCKS {
            tasks.for_each(|mut t| t.quantize(level));
            return;
        }
        // Each task locks its own blocks, once (never contended).
        let tasks: Vec<Mutex<Blocks<'_>>> = tasks.map(Mutex::new).collect();
        pool.for_each(tasks.len(), &|i| {
            let mut t = tasks[i].lock().unwrap_or_else(PoisonError::into_inner);
            t.quantize(level);
        });
    }

    /// The integers of token `t`.
    pub fn row(&self, t: usize) -> &[i16] {
        &self.qa[t * self.cols..(t + 1) * self.cols]
    }

    /// Blocks per row.
    pub fn blocks(&self) -> usize {
        self.cols / BLOCK
    }

    /// Fills `sh`: each 16-value half's sum, `da * (sum qa as f32)`, exact in its
    /// integers (what split offsets multiply; see `packed`).
    pub fn add_half_sums(&mut self) {
        let da = &self.da;
        self.sh = self
            .hs
            .iter()
            .enumerate()
            .map(|(h, &sum)| da[h / 2] * sum as f32)
            .collect();
    }

    /// Whether `sh` holds these rows' half sums.
    pub fn has_half_sums(&self) -> bool {
        self.sh.len() == 2 * self.da.len()
    }

    /// Token `t`'s activations, as the kernel takes them (`sh` empty unless
    /// [`QuantizedRows::add_half_sums`] ran).
    pub fn token(&self, t: usize) -> TokenActs<'_> {
        let nb = self.blocks();
        TokenActs {
            qa: self.row(t),
            da: &self.da[t * nb..(t + 1) * nb],
            sa: &self.sa[t * nb..(t + 1) * nb],
            sh: self.sh.get(2 * t * nb..2 * (t + 1) * nb).unwrap_or(&[]),
            hs: &self.hs[2 * t * nb..2 * (t + 1) * nb],
        }
    }
}

/// [`quantize_block`] on the build of `level`, which this CPU runs.
#[inline(always)]
fn quantize_block_at(
    level: Level,
    x: &[f32; BLOCK],
    q: &mut [i16; BLOCK],
    halves: &mut [i32; 2],
) -> (f32, f32) {
    #[cfg(target_arch = "x86_64")]
    {
        if level.has_avx512() {
            // SAFETY: the level runs on this CPU (the active one).
            return unsafe { quantize_block_avx512(x, q, halves) };
        }
        if level.has_avx2() {
            // SAFETY: as above.
            return unsafe { quantize_block_avx2(x, q, halves) };
        }
    }
    let _ = level;
    quantize_block(x, q, halves)
}

/// [`quantize_block`] on AVX2, as [`quantize_block_avx512`] does it in four
/// registers of 8 (the scalar source compiled for AVX2 was not vectorized:
/// 0.55 Gvalues/s against 3.5 on AVX-512, `matmul_speed`'s quantize figure).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_block_avx2(
    x: &[f32; BLOCK],
    q: &mut [i16; BLOCK],
    halves: &mut [i32; 2],
) -> (f32, f32) {
    use std::arch::x86_64::*;
    // SAFETY: 32 values in and out, four 8-lane quarters each.
    unsafe {
        let v: [__m256; 4] = [
            _mm256_loadu_ps(x.as_ptr()),
            _mm256_loadu_ps(x.as_ptr().add(8)),
            _mm256_loadu_ps(x.as_ptr().add(16)),
            _mm256_loadu_ps(x.as_ptr().add(24)),
        ];
        let sign = _mm256_set1_ps(-0.0);
        let m = _mm256_max_ps(
            _mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
            _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])),
        );
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        if amax == 0.0 || !amax.is_finite() {
            return quantize_block(x, q, halves);
        }
        let inv = _mm256_set1_ps(QMAX / amax);
        let (lo, hi) = (_mm256_set1_ps(-QMAX), _mm256_set1_ps(QMAX));
        /// Multiply, clamp to the integer bounds, round half to even (the
        /// conversion's default mode): the scalar twin's result for finite
        /// values. (A function, not a closure: see `packed::x86::avx2`.)
        #[inline(always)]
        unsafe fn round(v: __m256, inv: __m256, lo: __m256, hi: __m256) -> __m256i {
            // SAFETY: register operations; AVX2 runs (the caller).
            unsafe {
                _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v, inv), lo), hi))
            }
        }
        let (a, b, c, d) = (
            round(v[0], inv, lo, hi),
            round(v[1], inv, lo, hi),
            round(v[2], inv, lo, hi),
            round(v[3], inv, lo, hi),
        );
        // packs keeps the 128-bit lanes apart: 0..4 8..12 4..8 12..16, put back
        // in order by the 64-bit permute.
        let first = _mm256_permute4x64_epi64::<0xD8>(_mm256_packs_epi32(a, b));
        let second = _mm256_permute4x64_epi64::<0xD8>(_mm256_packs_epi32(c, d));
        _mm256_storeu_si256(q.as_mut_ptr().cast(), first);
        _mm256_storeu_si256(q.as_mut_ptr().add(16).cast(), second);
        // Each half's 16 integers to one sum: lanes 0..4 hold the first half's
        // partial sums and 4..8 the second's, then pairs of lanes.
        let (h0, h1) = (_mm256_add_epi32(a, b), _mm256_add_epi32(c, d));
        let s = _mm256_hadd_epi32(h0, h1);
        let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        let s = _mm_hadd_epi32(s, s);
        *halves = [_mm_cvtsi128_si32(s), _mm_extract_epi32::<1>(s)];
        block_scales(amax, halves)
    }
}

/// Quantizes one block into `q`, its halves' integer sums into `halves`, and
/// returns its scale and scaled sum, `(da, sa)`: zeros for a block of zeros,
/// NaN for one that is not finite (its integers and sums zero).
#[inline(always)]
fn quantize_block(x: &[f32; BLOCK], q: &mut [i16; BLOCK], halves: &mut [i32; 2]) -> (f32, f32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 || !amax.is_finite() {
        q.fill(0);
        *halves = [0; 2];
        let d = if amax == 0.0 { 0.0 } else { f32::NAN };
        return (d, d);
    }
    let inv = QMAX / amax;
    *halves = [0; 2];
    for (i, (o, &v)) in q.iter_mut().zip(x).enumerate() {
        let r = (v * inv).round_ties_even().clamp(-QMAX, QMAX) as i16;
        *o = r;
        halves[i / (BLOCK / 2)] += r as i32;
    }
    block_scales(amax, halves)
}

/// `(da, sa)` of a finite block whose largest magnitude is `amax` and whose
/// halves' integers sum to `halves`: `sa = da * (sum qa as f32)`. (The builds
/// return these two in registers and write the halves where they are kept:
/// a twelve-byte result went through memory, and quantizing ran a quarter
/// slower.)
#[inline(always)]
fn block_scales(amax: f32, halves: &[i32; 2]) -> (f32, f32) {
    let da = amax / QMAX;
    (da, da * (halves[0] + halves[1]) as f32)
}

/// [`quantize_block`] on AVX-512: the same f32 operations per value (multiply,
/// clamp to integer bounds, round half to even), exact integer sums.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn quantize_block_avx512(
    x: &[f32; BLOCK],
    q: &mut [i16; BLOCK],
    halves: &mut [i32; 2],
) -> (f32, f32) {
    use std::arch::x86_64::*;
    // SAFETY: 32 values in and out, two 16-lane halves each.
    unsafe {
        let (a, b) = (
            _mm512_loadu_ps(x.as_ptr()),
            _mm512_loadu_ps(x.as_ptr().add(16)),
        );
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
        if amax == 0.0 || !amax.is_finite() {
            return quantize_block(x, q, halves);
        }
        let inv = _mm512_set1_ps(QMAX / amax);
        let (lo, hi) = (_mm512_set1_ps(-QMAX), _mm512_set1_ps(QMAX));
        let qa = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(a, inv), lo), hi));
        let qb = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(b, inv), lo), hi));
        _mm256_storeu_si256(q.as_mut_ptr().cast(), _mm512_cvtepi32_epi16(qa));
        _mm256_storeu_si256(q.as_mut_ptr().add(16).cast(), _mm512_cvtepi32_epi16(qb));
        *halves = [_mm512_reduce_add_epi32(qa), _mm512_reduce_add_epi32(qb)];
        block_scales(amax, halves)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rounding_error_is_at_most_half_a_step_and_rows_are_independent() {
        let x: Vec<f32> = (0..3 * 64)
            .map(|i| ((i * 7919) % 1013) as f32 / 300.0 - 1.7)
            .collect();
        let mut all = QuantizedRows::default();
        all.quantize(&x, 3, 64);
        all.add_half_sums();
        for t in 0..3 {
            let mut one = QuantizedRows::default();
            one.quantize(&x[t * 64..(t + 1) * 64], 1, 64);
            one.add_half_sums();
            assert_eq!(one.row(0), all.row(t));
            assert_eq!(one.da, all.da[2 * t..2 * t + 2]);
            assert_eq!(one.sh, all.sh[4 * t..4 * t + 4]);
            assert_eq!(one.hs, all.hs[4 * t..4 * t + 4]);
        }
        for (k, half) in all.qa.chunks_exact(BLOCK / 2).enumerate() {
            let sum: i32 = half.iter().map(|&q| q as i32).sum();
            assert_eq!(all.hs[k], sum, "half {k}");
            assert_eq!(all.sh[k], all.da[k / 2] * sum as f32, "half {k}");
        }
        for (i, &v) in x.iter().enumerate() {
            let da = all.da[i / BLOCK];
            assert!(
                (da * all.qa[i] as f32 - v).abs() <= da * 0.5001,
                "value {i}"
            );
        }
        // Every build this CPU runs (AVX-512, AVX2, portable) gives the same bits.
        for level in crate::isa::Level::supported() {
            let mut s = 7u32;
            for k in 0..2000 {
                let x: [f32; BLOCK] = std::array::from_fn(|_| {
                    s = s.wrapping_mul(1664525).wrapping_add(1013904223);
                    ((s >> 8) as f32 / (1 << 24) as f32 - 0.5) * 10f32.powi(k % 7 - 3)
                });
                let (mut want, mut got) = ([0i16; BLOCK], [0i16; BLOCK]);
                let (mut want_halves, mut got_halves) = ([0i32; 2], [0i32; 2]);
                let a = quantize_block(&x, &mut want, &mut want_halves);
                let b = quantize_block_at(level, &x, &mut got, &mut got_halves);
                assert_eq!(
                    (want, a.0.to_bits(), a.1.to_bits(), want_halves),
                    (got, b.0.to_bits(), b.1.to_bits(), got_halves),
                    "{level:?} block {k}"
                );
            }
        }
        // Large inputs are split across threads: the same numbers as row by row.
        let (n, cols) = (64, 1024);
        let big: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 7919) % 2003) as f32 / 700.0 - 1.4)
            .collect();
        let mut whole = QuantizedRows::default();
        let pool = crate::pool::SpinPool::new(2, "test").expect("a thread");
        whole.quantize_on(&big, n, cols, &pool);
        for t in 0..n {
            let mut one = QuantizedRows::default();
            one.quantize(&big[t * cols..(t + 1) * cols], 1, cols);
            assert_eq!(one.row(0), whole.row(t));
            assert_eq!(one.da, whole.da[t * 32..(t + 1) * 32]);
            assert_eq!(one.sa, whole.sa[t * 32..(t + 1) * 32]);
            assert_eq!(one.hs, whole.hs[t * 64..(t + 1) * 64]);
        }
        let mut zeros = QuantizedRows::default();
        zeros.quantize(&[0.0; 32], 1, 32);
        assert_eq!((zeros.da[0], zeros.sa[0], zeros.qa[5]), (0.0, 0.0, 0));
    }
}
