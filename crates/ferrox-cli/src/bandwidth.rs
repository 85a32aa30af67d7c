//! The machine's memory read bandwidth, as `ferrox bench` measures it: the
//! bound a decode step cannot pass, since it reads every weight once.
//!
//! `threads` threads each sum their share of a buffer far larger than the
//! caches (1 GiB: some virtual machines report last-level caches of 480 MiB),
//! as 64-bit words the compiler vectorizes, once plainly and once asking for
//! the lines 32 KiB ahead as the packed kernels do (x86-64): the best pass of
//! either counts. The plain loop alone understates some CPUs: on an Intel
//! Emerald Rapids it read 21.9 GB/s and the prefetching one 26.9, so decodes
//! came out at over 100 % of it. `ferrox bench` measures before it loads the
//! model and frees the buffer first, so the buffer and the weights are never
//! resident together (a peak RSS of a model under 1 GiB is the buffer's:
//! measure the model's with `-n 0`).

use std::time::Instant;

/// Bytes of the buffer read.
const BUFFER_BYTES: usize = 1 << 30;
/// Passes over it per reader; the fastest counts.
const PASSES: usize = 3;
/// How far ahead the prefetching reader asks for lines, in words (32 KiB, the
/// packed kernels' distance).
#[cfg(target_arch = "x86_64")]
const AHEAD_WORDS: usize = 32768 / 8;

/// Read bandwidth in bytes per second over `threads` threads.
pub fn measure(threads: usize) -> f64 {
    let words = vec![1u64; BUFFER_BYTES / 8];
    READERS
        .iter()
        .map(|read| rate(&words, threads, *read))
        .fold(0.0, f64::max)
}

/// The read loops timed: plain, and on x86-64 also prefetching.
#[cfg(target_arch = "x86_64")]
const READERS: [fn(&[u64]) -> u64; 2] = [sum_words, sum_words_prefetched];
#[cfg(not(target_arch = "x86_64"))]
const READERS: [fn(&[u64]) -> u64; 1] = [sum_words];

/// Bytes per second of the fastest of [`PASSES`] passes of `read` over
/// `words`, split across `threads` threads.
fn rate(words: &[u64], threads: usize, read: fn(&[u64]) -> u64) -> f64 {
    let chunk = words.len().div_ceil(threads.max(1));
    let mut best = f64::INFINITY;
    for _ in 0..PASSES {
        let t = Instant::now();
        let sum: u64 = std::thread::scope(|s| {
            let parts: Vec<_> = words
                .chunks(chunk)
                .map(|part| s.spawn(move || read(part)))
                .collect();
            parts.into_iter().map(|p| p.join().expect("a reader")).sum()
        });
        assert_eq!(sum, words.len() as u64, "every word read once");
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::mem::size_of_val(words) as f64 / best
}

/// The sum of `words`, in eight independent lanes so that the loop is bound by
/// loads, not by one chain of additions.
fn sum_words(words: &[u64]) -> u64 {
    let mut lanes = [0u64; 8];
    let mut blocks = words.chunks_exact(8);
    for b in &mut blocks {
        for (lane, w) in lanes.iter_mut().zip(b) {
            *lane = lane.wrapping_add(*w);
        }
    }
    let tail: u64 = blocks.remainder().iter().sum();
    lanes.iter().sum::<u64>() + tail
}

/// [`sum_words`], asking for the line [`AHEAD_WORDS`] ahead of each 64-byte
/// block it sums.
#[cfg(target_arch = "x86_64")]
fn sum_words_prefetched(words: &[u64]) -> u64 {
    use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
    let mut lanes = [0u64; 8];
    let mut blocks = words.chunks_exact(8);
    for (i, b) in (&mut blocks).enumerate() {
        let ahead = words.as_ptr().wrapping_add(8 * i + AHEAD_WORDS);
        // SAFETY: a prefetch never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(ahead.cast()) };
        for (lane, w) in lanes.iter_mut().zip(b) {
            *lane = lane.wrapping_add(*w);
        }
    }
    let tail: u64 = blocks.remainder().iter().sum();
    lanes.iter().sum::<u64>() + tail
}

/// What share of `bandwidth` (bytes/s) a decode at `tokens_per_s` reads when
/// each token reads `bytes_per_token`.
pub fn share(bytes_per_token: f64, tokens_per_s: f64, bandwidth: f64) -> f64 {
    bytes_per_token * tokens_per_s / bandwidth
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_sum_every_word_including_the_tail() {
        let words: Vec<u64> = (1..=21).collect();
        assert_eq!(sum_words(&words), 21 * 22 / 2);
        assert_eq!(sum_words(&[]), 0);
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(sum_words_prefetched(&words), 21 * 22 / 2);
            assert_eq!(sum_words_prefetched(&[]), 0);
        }
    }

    #[test]
    fn share_is_bytes_per_second_over_bandwidth() {
        assert_eq!(share(1e9, 10.0, 20e9), 0.5);
    }
}
