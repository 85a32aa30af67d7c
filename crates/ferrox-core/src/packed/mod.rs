//! The integer-activation path: weights repacked at load into 16-row groups, and
//! activations quantized to 16-bit integers per 32-value block, multiplied with
//! exact integer dot products (`vpdpwssd` on AVX-512 VNNI).
//!
//! The function it computes (the contract every build of it returns bit for bit):
//! for weight row `r` and token `t`, with blocks `b` of 32 input features,
//!
//! ```text
//! I[b]   = sum_i w[r][b][i] * qa[t][b][i]                (exact, 32-bit integers)
//! out    = 0;  for b in order:  out = fma(I[b] as f32 * scale[r][b], da[t][b], out)
//!                               (then out = fma(offset[r][b], sa[t][b], out))
//! ```
//!
//! where `fma(a, b, c)` is `a * b + c` rounded once, `w`, `scale`, `offset` come
//! from the GGUF block exactly (the value is `scale * w + offset`, see [`layout`])
//! and `qa`, `da`, `sa` are the token's activations quantized per block (see
//! [`activations`]). In the split formats (Q3_K, Q6_K, Q2_K) the two 16-value
//! halves `h` have their own scales, and Q2_K its own offsets: each half in turn
//! takes `out = fma(I[b][h] as f32 * scale[r][b][h], da[t][b], out)` (then `out =
//! fma(offset[r][b][h], sh[t][b][h], out)`, `sh` the half's sum). The per-block
//! integer sums are exact, so their order never matters; the f32 operations run in
//! block order, one lane per weight row, each multiply-add fused (a product of
//! many tokens is bound by the instructions that fold each block's sum into its
//! row's: a fused one is one instruction where a product and a sum are two).
//! Nothing depends on the other tokens of the call or on how rows are split
//! across threads (SPEC S3).
//!
//! Error against the f32-activation path: the activation rounding, at most
//! `max|x| / 65534` per value of a block, ~1e-5 relative.

pub mod activations;
mod block_parts;
pub mod kernel;
pub mod layout;
pub mod matmul;
#[cfg(target_arch = "aarch64")]
mod neon;
mod repack;
mod storage;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

pub use activations::QuantizedRows;
pub use layout::{Format, PackedMatrix};
pub use matmul::{packed_matmul, packed_matmul_each, packed_matmul_many};

/// Whether this CPU has a hand-written build of the packed kernel (the portable
/// one is the specification, correct everywhere but several times slower than
/// the f32 path; callers choose that path where this is false).
pub fn has_simd_kernel() -> bool {
    cfg!(target_arch = "x86_64") && crate::isa::active().has_avx2()
}

/// Weight rows computed together (the lanes of one kernel call).
pub const GROUP_ROWS: usize = 16;
/// Input features per block (one integer dot product).
pub const BLOCK: usize = 32;
