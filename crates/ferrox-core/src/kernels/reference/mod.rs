//! Scalar reference kernels: the specification of every storage type.
//!
//! Every SIMD kernel in ferrox is tested against the function here with the same
//! name. These are written for clarity, not speed; they take raw little-endian
//! bytes as stored in GGUF and check every length before touching data.
//!
//! Invariants:
//! * `dequantize(t, bytes, out)` is bit-exact against the `gguf` Python package.
//! * `quantize(t, x)` exists for every weight type a test needs (floats and the
//!   32-value family); K-quant weights in tests are made from random blocks.
//! * `dot(t, w, a)` multiplies one row of weights of type `t` with activations
//!   quantized by `quantize_activations(t, x)` (Q8_0 for Q4_0 / Q5_0 / Q8_0 /
//!   IQ4_NL / MXFP4, Q8_1 for Q4_1 / Q5_1, Q8_K for the K family and IQ4_XS, plain f32 for
//!   float weights).

pub mod float;
pub mod iquants;
pub mod kdot;
pub mod kquantize;
pub mod kquants;
pub mod legacy;
pub mod mxfp4;

#[cfg(test)]
mod tests;

use crate::blocks::{self, BlockQ8_0, BlockQ8_1, BlockQ8K};
use crate::dtype::{DType, QK, QK_K};
use crate::error::CoreError;

fn check_len(dtype: DType, n: usize, bytes: usize) -> Result<(), CoreError> {
    let want = dtype.row_bytes(n).ok_or(CoreError::PartialBlock {
        dtype,
        block_len: dtype.block_len(),
        n,
    })?;
    if want != bytes {
        return Err(CoreError::ByteLength {
            dtype,
            n,
            want,
            got: bytes,
        });
    }
    Ok(())
}

/// Dequantizes `out.len()` values of type `dtype` stored in `bytes`.
pub fn dequantize(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<(), CoreError> {
    check_len(dtype, out.len(), bytes.len())?;
    match dtype {
        DType::F32 => float::f32_from_le(bytes, out),
        DType::F16 => float::f16_to_f32(bytes, out),
        DType::BF16 => float::bf16_to_f32(bytes, out),
        DType::Q4_0 => legacy::dequantize_q4_0(blocks::blocks_of(bytes)?, out),
        DType::Q4_1 => legacy::dequantize_q4_1(blocks::blocks_of(bytes)?, out),
        DType::Q5_0 => legacy::dequantize_q5_0(blocks::blocks_of(bytes)?, out),
        DType::Q5_1 => legacy::dequantize_q5_1(blocks::blocks_of(bytes)?, out),
        DType::Q8_0 => legacy::dequantize_q8_0(blocks::blocks_of(bytes)?, out),
        DType::Q8_1 => legacy::dequantize_q8_1(blocks::blocks_of(bytes)?, out),
        DType::Q2_K => kquants::dequantize_q2_k(blocks::blocks_of(bytes)?, out),
        DType::Q3_K => kquants::dequantize_q3_k(blocks::blocks_of(bytes)?, out),
        DType::Q4_K => kquants::dequantize_q4_k(blocks::blocks_of(bytes)?, out),
        DType::Q5_K => kquants::dequantize_q5_k(blocks::blocks_of(bytes)?, out),
        DType::Q6_K => kquants::dequantize_q6_k(blocks::blocks_of(bytes)?, out),
        DType::IQ4_NL => iquants::dequantize_iq4_nl(blocks::blocks_of(bytes)?, out),
        DType::IQ4_XS => iquants::dequantize_iq4_xs(blocks::blocks_of(bytes)?, out),
        DType::MXFP4 => mxfp4::dequantize_mxfp4(blocks::blocks_of(bytes)?, out),
        DType::Q8_K => {
            return Err(CoreError::Unsupported {
                what: "file dequantize",
                dtype,
            });
        }
    }
    Ok(())
}

/// Quantizes `x` to the storage type `dtype`, returning the bytes GGUF would hold.
pub fn quantize(dtype: DType, x: &[f32]) -> Result<Vec<u8>, CoreError> {
    if !x.len().is_multiple_of(dtype.block_len()) {
        return Err(CoreError::PartialBlock {
            dtype,
            block_len: dtype.block_len(),
            n: x.len(),
        });
    }
    let nb = x.len() / dtype.block_len();
    macro_rules! via_blocks {
        ($f:path) => {{
            let mut out = vec![Default::default(); nb];
            $f(x, &mut out);
            blocks::bytes_of(&out).to_vec()
        }};
    }
    Ok(match dtype {
        DType::F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => x
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes())
            .collect(),
        DType::BF16 => x
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes())
            .collect(),
        DType::Q4_0 => via_blocks!(legacy::quantize_q4_0),
        DType::Q4_1 => via_blocks!(legacy::quantize_q4_1),
        DType::Q5_0 => via_blocks!(legacy::quantize_q5_0),
        DType::Q5_1 => via_blocks!(legacy::quantize_q5_1),
        DType::Q8_0 => via_blocks!(legacy::quantize_q8_0),
        DType::Q8_1 => via_blocks!(legacy::quantize_q8_1),
        DType::IQ4_NL => via_blocks!(iquants::quantize_iq4_nl),
        DType::MXFP4 => via_blocks!(mxfp4::quantize_mxfp4),
        DType::Q2_K => blocks::bytes_of(&kquantize::quantize_q2_k(x)).to_vec(),
        DType::Q3_K => blocks::bytes_of(&kquantize::quantize_q3_k(x)).to_vec(),
        DType::Q4_K => blocks::bytes_of(&kquantize::quantize_q4_k(x)).to_vec(),
        DType::Q5_K => blocks::bytes_of(&kquantize::quantize_q5_k(x)).to_vec(),
        DType::Q6_K => blocks::bytes_of(&kquantize::quantize_q6_k(x)).to_vec(),
        _ => {
            return Err(CoreError::Unsupported {
                what: "reference quantize",
                dtype,
            });
        }
    })
}

/// Activations prepared for the dot product with one weight type.
#[derive(Clone, Debug)]
pub enum Activations {
    F32(Vec<f32>),
    Q8_0(Vec<BlockQ8_0>),
    Q8_1(Vec<BlockQ8_1>),
    Q8K(Vec<BlockQ8K>),
}

impl Activations {
    /// Number of activation values.
    pub fn len(&self) -> usize {
        match self {
            Activations::F32(v) => v.len(),
            Activations::Q8_0(v) => v.len() * QK,
            Activations::Q8_1(v) => v.len() * QK,
            Activations::Q8K(v) => v.len() * QK_K,
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The activation type weights of type `weight` multiply against.
pub fn activation_type(weight: DType) -> DType {
    match weight {
        DType::F32 | DType::F16 | DType::BF16 => DType::F32,
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 | DType::IQ4_NL | DType::MXFP4 => DType::Q8_0,
        DType::Q4_1 | DType::Q5_1 | DType::Q8_1 => DType::Q8_1,
        DType::Q2_K
        | DType::Q3_K
        | DType::Q4_K
        | DType::Q5_K
        | DType::Q6_K
        | DType::Q8_K
        | DType::IQ4_XS => DType::Q8_K,
    }
}

/// Quantizes activations `x` for a dot product with weights of type `weight`.
pub fn quantize_activations(weight: DType, x: &[f32]) -> Result<Activations, CoreError> {
    let act = activation_type(weight);
    if !x.len().is_multiple_of(act.block_len()) {
        return Err(CoreError::PartialBlock {
            dtype: act,
            block_len: act.block_len(),
            n: x.len(),
        });
    }
    let nb = x.len() / act.block_len();
    Ok(match act {
        DType::Q8_0 => {
            let mut v = vec![BlockQ8_0::default(); nb];
            legacy::quantize_q8_0(x, &mut v);
            Activations::Q8_0(v)
        }
        DType::Q8_1 => {
            let mut v = vec![BlockQ8_1::default(); nb];
            legacy::quantize_q8_1(x, &mut v);
            Activations::Q8_1(v)
        }
        DType::Q8_K => {
            let mut v = vec![BlockQ8K::default(); nb];
            kquants::quantize_q8_k(x, &mut v);
            Activations::Q8K(v)
        }
        _ => Activations::F32(x.to_vec()),
    })
}

/// Dot product of one row of `weight`-typed values in `w` with prepared activations.
pub fn dot(weight: DType, w: &[u8], a: &Activations) -> Result<f32, CoreError> {
    check_len(weight, a.len(), w.len())?;
    let mismatch = || CoreError::Unsupported {
        what: "dot with these activations",
        dtype: weight,
    };
    Ok(match (weight, a) {
        (DType::F32, Activations::F32(x)) => float::dot_f32(w, x),
        (DType::F16, Activations::F32(x)) => float::dot_f16(w, x),
        (DType::BF16, Activations::F32(x)) => float::dot_bf16(w, x),
        (DType::Q4_0, Activations::Q8_0(x)) => legacy::dot_q4_0_q8_0(blocks::blocks_of(w)?, x),
        (DType::Q5_0, Activations::Q8_0(x)) => legacy::dot_q5_0_q8_0(blocks::blocks_of(w)?, x),
        (DType::Q8_0, Activations::Q8_0(x)) => legacy::dot_q8_0_q8_0(blocks::blocks_of(w)?, x),
        (DType::Q4_1, Activations::Q8_1(x)) => legacy::dot_q4_1_q8_1(blocks::blocks_of(w)?, x),
        (DType::Q5_1, Activations::Q8_1(x)) => legacy::dot_q5_1_q8_1(blocks::blocks_of(w)?, x),
        (DType::Q2_K, Activations::Q8K(x)) => kdot::dot_q2_k_q8_k(blocks::blocks_of(w)?, x),
        (DType::Q3_K, Activations::Q8K(x)) => kdot::dot_q3_k_q8_k(blocks::blocks_of(w)?, x),
        (DType::Q4_K, Activations::Q8K(x)) => kdot::dot_q4_k_q8_k(blocks::blocks_of(w)?, x),
        (DType::Q5_K, Activations::Q8K(x)) => kdot::dot_q5_k_q8_k(blocks::blocks_of(w)?, x),
        (DType::Q6_K, Activations::Q8K(x)) => kdot::dot_q6_k_q8_k(blocks::blocks_of(w)?, x),
        (DType::IQ4_NL, Activations::Q8_0(x)) => iquants::dot_iq4_nl_q8_0(blocks::blocks_of(w)?, x),
        (DType::IQ4_XS, Activations::Q8K(x)) => iquants::dot_iq4_xs_q8_k(blocks::blocks_of(w)?, x),
        (DType::MXFP4, Activations::Q8_0(x)) => mxfp4::dot_mxfp4_q8_0(blocks::blocks_of(w)?, x),
        _ => return Err(mismatch()),
    })
}
