//! Quantized block layouts, byte for byte as GGUF stores them.
//!
//! Invariants:
//! * Every weight block is `#[repr(C)]`, built only from byte arrays, so its
//!   alignment is 1: any byte slice of the right length can be viewed as a slice
//!   of blocks, wherever the tensor lies in the mmap. Multi-byte scalars (f16 scales)
//!   are little-endian byte pairs read through [`f16_le`].
//! * `size_of::<Block*>()` equals [`DType::block_bytes`]; both are asserted at
//!   compile time below.
//! * `BlockQ8K` is an activation block made in memory, never read from a file: it
//!   keeps native `f32` / `i16` fields (alignment 4).
//!
//! Layouts follow ggml's `ggml-common.h` (the GGUF format's definition of them).

use crate::dtype::{DType, QK, QK_K};
use crate::error::CoreError;

/// Bytes of packed 6-bit scales and mins in Q4_K / Q5_K blocks (and Q3_K's scales).
pub const K_SCALE_SIZE: usize = 12;

/// Reads a little-endian IEEE half stored as two bytes.
#[inline(always)]
pub fn f16_le(b: [u8; 2]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes(b)).to_f32()
}

/// Stores `x` as a little-endian IEEE half (round to nearest even).
#[inline(always)]
pub fn f16_le_bytes(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_bits().to_le_bytes()
}

/// 32 values: `x = d * (q - 8)`, `q` a nibble. Low nibbles are values 0..16,
/// high nibbles values 16..32.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct BlockQ4_0 {
    pub d: [u8; 2],
    pub qs: [u8; QK / 2],
}

/// 32 values: `x = d * q + m`, nibbles laid out as in Q4_0.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct BlockQ4_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qs: [u8; QK / 2],
}

/// 32 values: `x = d * (q - 16)`, `q` 5 bits: nibble plus one bit of `qh`
/// (bit `j` for value `j`, bit `j + 16` for value `j + 16`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct BlockQ5_0 {
    pub d: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// 32 values: `x = d * q + m`, `q` 5 bits as in Q5_0.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct BlockQ5_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// 32 values: `x = d * q`, `q` a signed byte.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct BlockQ8_0 {
    pub d: [u8; 2],
    pub qs: [i8; QK],
}

/// 32 values: `x = d * q`; `s = d * sum(q)` (the activation partner of Q4_1 / Q5_1).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct BlockQ8_1 {
    pub d: [u8; 2],
    pub s: [u8; 2],
    pub qs: [i8; QK],
}

/// 256 values in 16 groups of 16: `x = d * sc * q - dmin * m`, `q` 2 bits,
/// `scales[i]` = `sc | m << 4` (4 bits each).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: [u8; 2],
    pub dmin: [u8; 2],
}

/// 256 values in 16 groups of 16: `x = d * (sc - 32) * (q - 4 * !hbit)`, `q` 2 bits
/// plus one high bit in `hmask`; 16 six-bit scales packed in 12 bytes.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; K_SCALE_SIZE],
    pub d: [u8; 2],
}

/// 32 values: `x = d * IQ4_NL_VALUES[q]`, `q` a nibble (non-linear 4-bit grid).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct BlockIq4Nl {
    pub d: [u8; 2],
    pub qs: [u8; QK / 2],
}

/// 256 values in 8 groups of 32: `x = d * (ls - 32) * IQ4_NL_VALUES[q]`, the
/// 6-bit `ls` of group `g` split into `scales_l` (low 4 bits) and `scales_h`
/// (high 2 bits).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct BlockIq4Xs {
    pub d: [u8; 2],
    pub scales_h: [u8; 2],
    pub scales_l: [u8; QK_K / 64],
    pub qs: [u8; QK_K / 2],
}

impl Default for BlockIq4Xs {
    fn default() -> Self {
        BlockIq4Xs {
            d: [0; 2],
            scales_h: [0; 2],
            scales_l: [0; QK_K / 64],
            qs: [0; QK_K / 2],
        }
    }
}

/// 32 values: `x = e8m0_half(e) * MXFP4_VALUES[q]`, `q` a nibble; value `i`
/// is the low nibble of byte `i`, value `i + 16` its high nibble.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct BlockMxfp4 {
    pub e: u8,
    pub qs: [u8; QK / 2],
}

/// The E2M1 values, doubled (ggml's `kvalues_mxfp4`): the scale is halved to
/// match.
pub const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Half of the E8M0 scale `2^(e - 127)`, as ggml's `ggml_e8m0_to_fp32_half`
/// builds it from bits (subnormal for `e < 2`).
#[inline]
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        ((e as u32) - 1) << 23
    };
    f32::from_bits(bits)
}

/// The 16 values of the IQ4_NL / IQ4_XS grid (ggml's `kvalues_iq4nl`).
pub const IQ4_NL_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// 256 values in 8 groups of 32: `x = d * sc * q - dmin * m`, `q` a nibble,
/// 6-bit `sc` and `m` packed in 12 bytes.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct BlockQ4K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; K_SCALE_SIZE],
    pub qs: [u8; QK_K / 2],
}

/// 256 values in 8 groups of 32: as Q4_K with a fifth bit per value in `qh`.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct BlockQ5K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; K_SCALE_SIZE],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

/// 256 values in 16 groups of 16: `x = d * sc * (q - 32)`, `q` 6 bits (4 in `ql`,
/// 2 in `qh`), `sc` a signed byte.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: [u8; 2],
}

/// 256 activation values: `x = d * q`; `bsums[i]` is the sum of `qs[16 i .. 16 i + 16]`
/// (used to apply K-quant minimums without touching every value).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}

impl Default for BlockQ8K {
    fn default() -> Self {
        BlockQ8K {
            d: 0.0,
            qs: [0; QK_K],
            bsums: [0; QK_K / 16],
        }
    }
}

const _: () = {
    use std::mem::{align_of, size_of};
    assert!(size_of::<BlockQ4_0>() == DType::Q4_0.block_bytes());
    assert!(size_of::<BlockQ4_1>() == DType::Q4_1.block_bytes());
    assert!(size_of::<BlockQ5_0>() == DType::Q5_0.block_bytes());
    assert!(size_of::<BlockQ5_1>() == DType::Q5_1.block_bytes());
    assert!(size_of::<BlockQ8_0>() == DType::Q8_0.block_bytes());
    assert!(size_of::<BlockQ8_1>() == DType::Q8_1.block_bytes());
    assert!(size_of::<BlockQ2K>() == DType::Q2_K.block_bytes());
    assert!(size_of::<BlockQ3K>() == DType::Q3_K.block_bytes());
    assert!(size_of::<BlockIq4Nl>() == DType::IQ4_NL.block_bytes());
    assert!(size_of::<BlockIq4Xs>() == DType::IQ4_XS.block_bytes());
    assert!(size_of::<BlockMxfp4>() == DType::MXFP4.block_bytes());
    assert!(align_of::<BlockMxfp4>() == 1);
    assert!(size_of::<BlockQ4K>() == DType::Q4_K.block_bytes());
    assert!(size_of::<BlockQ5K>() == DType::Q5_K.block_bytes());
    assert!(size_of::<BlockQ6K>() == DType::Q6_K.block_bytes());
    assert!(size_of::<BlockQ8K>() == DType::Q8_K.block_bytes());
    assert!(align_of::<BlockQ4_0>() == 1);
    assert!(align_of::<BlockQ4_1>() == 1);
    assert!(align_of::<BlockQ5_0>() == 1);
    assert!(align_of::<BlockQ5_1>() == 1);
    assert!(align_of::<BlockQ8_0>() == 1);
    assert!(align_of::<BlockQ8_1>() == 1);
    assert!(align_of::<BlockQ2K>() == 1);
    assert!(align_of::<BlockQ3K>() == 1);
    assert!(align_of::<BlockQ4K>() == 1);
    assert!(align_of::<BlockQ5K>() == 1);
    assert!(align_of::<BlockQ6K>() == 1);
    assert!(align_of::<BlockIq4Nl>() == 1);
    assert!(align_of::<BlockIq4Xs>() == 1);
};

/// A block stored in files: alignment 1, every bit pattern valid.
///
/// # Safety
/// Implementors must be `#[repr(C)]`, made only of `u8` / `i8` arrays (so
/// alignment 1, no padding, and any byte pattern is a valid value), and
/// `DTYPE.block_bytes()` must equal their size.
pub unsafe trait ByteBlock: Copy + 'static {
    /// The storage type this block belongs to.
    const DTYPE: DType;
}

macro_rules! byte_block {
    ($($t:ty => $d:expr),* $(,)?) => {
        // SAFETY: each block is `repr(C)` plain bytes of exactly its type's
        // `block_bytes()` (asserted at compile time above).
        $(unsafe impl ByteBlock for $t { const DTYPE: DType = $d; })*
    };
}
byte_block!(
    BlockQ4_0 => DType::Q4_0,
    BlockQ4_1 => DType::Q4_1,
    BlockQ5_0 => DType::Q5_0,
    BlockQ5_1 => DType::Q5_1,
    BlockQ8_0 => DType::Q8_0,
    BlockQ8_1 => DType::Q8_1,
    BlockQ2K => DType::Q2_K,
    BlockQ3K => DType::Q3_K,
    BlockQ4K => DType::Q4_K,
    BlockQ5K => DType::Q5_K,
    BlockQ6K => DType::Q6_K,
    BlockIq4Nl => DType::IQ4_NL,
    BlockIq4Xs => DType::IQ4_XS,
    BlockMxfp4 => DType::MXFP4,
);

/// Views `bytes` as whole blocks of `B`; an error when the length is not a
/// multiple of the block size.
pub fn blocks_of<B: ByteBlock>(bytes: &[u8]) -> Result<&[B], CoreError> {
    let size = std::mem::size_of::<B>();
    if !bytes.len().is_multiple_of(size) {
        return Err(CoreError::ByteLength {
            dtype: B::DTYPE,
            n: bytes.len() / size * B::DTYPE.block_len(),
            want: bytes.len() / size * size,
            got: bytes.len(),
        });
    }
    // SAFETY: ByteBlock guarantees alignment 1, no padding and that every byte
    // pattern is a valid B; the length is a whole number of blocks.
    Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), bytes.len() / size) })
}

/// The bytes of a slice of file blocks (for writing them out).
pub fn bytes_of<B: ByteBlock>(blocks: &[B]) -> &[u8] {
    // SAFETY: ByteBlock types have no padding and alignment 1.
    unsafe {
        std::slice::from_raw_parts(blocks.as_ptr().cast::<u8>(), std::mem::size_of_val(blocks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_of_accepts_whole_blocks_at_any_offset() {
        let bytes = [0u8; 18 * 3 + 1];
        let v: &[BlockQ4_0] = blocks_of(&bytes[1..]).unwrap();
        assert_eq!(v.len(), 3);
        assert!(blocks_of::<BlockQ4_0>(&bytes[..20]).is_err());
        assert_eq!(bytes_of(v).len(), 54);
    }

    #[test]
    fn f16_helpers_round_trip() {
        for x in [0.0f32, 1.0, -2.5, 65504.0, 6.1035156e-5] {
            assert_eq!(f16_le(f16_le_bytes(x)), x);
        }
    }
}
