//! Software prefetch: a hint that bytes are read soon, for reads the hardware
//! prefetcher cannot foresee (a KV cache's runs, each in another page).

/// Asks the caches for every 64-byte line of `values`. Only a hint: it
/// changes no result, and does nothing on a target without the instruction
/// here.
#[inline]
pub fn read_soon<T>(values: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let start = values.as_ptr().cast::<u8>();
        for line in (0..std::mem::size_of_val(values)).step_by(64) {
            // SAFETY: a prefetch never faults; the address lies inside `values`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.add(line).cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = values;
}
