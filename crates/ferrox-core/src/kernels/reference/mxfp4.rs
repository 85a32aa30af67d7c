//! MXFP4, the OCP microscaling 4-bit float (gpt-oss's expert weights), as ggml
//! stores it: 32 values share an E8M0 exponent `e`; each value is an E2M1
//! nibble. ggml keeps the E2M1 values doubled (integers, [`MXFP4_VALUES`]) and
//! the scale halved ([`e8m0_to_f32_half`]), so `x = e8m0_half(e) * value[q]`;
//! nibble `j` of byte `i` is value `i` (low) or `i + 16` (high). Dequantization
//! follows gguf-py's `MXFP4.dequantize_blocks`, quantization its
//! `quantize_blocks`, the dot with Q8_0 activations ggml's
//! `ggml_vec_dot_mxfp4_q8_0`.

use super::iquants::{group_dot, nibble_values};
use crate::blocks::{BlockMxfp4, BlockQ8_0, MXFP4_VALUES, e8m0_to_f32_half, f16_le};
use crate::dtype::QK;

/// The doubled E2M1 integers of one block.
#[inline]
pub fn mxfp4_group(b: &BlockMxfp4) -> [i8; QK] {
    nibble_values(&b.qs, &MXFP4_VALUES)
}

/// Dequantizes MXFP4 blocks into `out`.
pub fn dequantize_mxfp4(blocks: &[BlockMxfp4], out: &mut [f32]) {
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = e8m0_to_f32_half(b.e);
        for (v, &q) in y.iter_mut().zip(&mxfp4_group(b)) {
            *v = d * q as f32;
        }
    }
}

/// Quantizes `x` (whole 32-value blocks) as gguf-py does: the exponent
/// `floor(log2(max |x|)) - 2 + 127` (0 for an all-zero block), then each value
/// the nearest grid point (the first on a tie).
pub fn quantize_mxfp4(x: &[f32], out: &mut [BlockMxfp4]) {
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        b.e = if amax > 0.0 {
            (amax.log2().floor() - 2.0 + 127.0).clamp(0.0, 255.0) as u8
        } else {
            0
        };
        let d = e8m0_to_f32_half(b.e);
        let nearest = |v: f32| {
            let mut best = 0usize;
            let mut err = f32::INFINITY;
            for (i, &k) in MXFP4_VALUES.iter().enumerate() {
                let e = (d * k as f32 - v).abs();
                if e < err {
                    (best, err) = (i, e);
                }
            }
            best as u8
        };
        for i in 0..16 {
            b.qs[i] = nearest(xb[i]) | nearest(xb[i + 16]) << 4;
        }
    }
}

/// MXFP4 weights times Q8_0 activations.
pub fn dot_mxfp4_q8_0(w: &[BlockMxfp4], a: &[BlockQ8_0]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let sumi = group_dot(&mxfp4_group(x), &y.qs);
        sum += e8m0_to_f32_half(x.e) * f16_le(y.d) * sumi as f32;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::kernels::reference::{dequantize, quantize};

    // Made by gguf-py (llama-cpp-python 0.3.36's vendor/llama.cpp/gguf-py):
    // five blocks with exponents 0, 1, 2, 127 and 133 (both branches of
    // e8m0_to_fp32_half) and random nibbles, dequantized; 64 values quantized.
    const RAW: [u8; 85] = [
        0, 168, 229, 184, 171, 238, 171, 20, 206, 245, 153, 204, 5, 37, 53, 213, 206, 1, 192, 173,
        6, 120, 63, 96, 236, 131, 118, 4, 87, 161, 124, 71, 42, 73, 2, 237, 16, 194, 250, 10, 103,
        206, 13, 143, 2, 38, 71, 133, 118, 36, 98, 127, 196, 35, 57, 146, 50, 179, 145, 104, 206,
        53, 141, 33, 181, 39, 151, 11, 133, 180, 138, 66, 0, 165, 98, 123, 12, 144, 184, 24, 38,
        129, 1, 202, 255,
    ];
    const DEQUANT_BITS: [u32; 160] = [
        0x00000000, 0x00c00000, 0x00000000, 0x80600000, 0x81000000, 0x80600000, 0x00800000,
        0x81000000, 0x00c00000, 0x80200000, 0x80800000, 0x00c00000, 0x00c00000, 0x00c00000,
        0x00c00000, 0x81000000, 0x80400000, 0x81000000, 0x80600000, 0x80400000, 0x81000000,
        0x80400000, 0x00200000, 0x80800000, 0x81400000, 0x80200000, 0x80800000, 0x00000000,
        0x00400000, 0x00600000, 0x80c00000, 0x80800000, 0x00000000, 0x81400000, 0x01800000,
        0x00000000, 0x81c00000, 0x00000000, 0x81000000, 0x00c00000, 0x01800000, 0x01000000,
        0x01c00000, 0x00400000, 0x81000000, 0x01c00000, 0x80800000, 0x80400000, 0x81000000,
        0x80800000, 0x00000000, 0x01c00000, 0x00c00000, 0x01800000, 0x81800000, 0x00000000,
        0x01c00000, 0x00000000, 0x01400000, 0x80800000, 0x01c00000, 0x01000000, 0x00800000,
        0x01000000, 0x81c00000, 0x00000000, 0x01000000, 0x81000000, 0x81000000, 0x02400000,
        0x82000000, 0x81c00000, 0x82400000, 0x01000000, 0x02000000, 0x02400000, 0x01c00000,
        0x02000000, 0x01800000, 0x01000000, 0x82000000, 0x00800000, 0x81800000, 0x82400000,
        0x00000000, 0x02000000, 0x81800000, 0x00000000, 0x00000000, 0x00000000, 0x01000000,
        0x01800000, 0x00000000, 0x02400000, 0x01000000, 0x02000000, 0x40000000, 0x3fc00000,
        0xbf000000, 0x3f800000, 0x3f800000, 0x3fc00000, 0x3f000000, 0x00000000, 0xc0800000,
        0x40400000, 0xc0400000, 0x3f000000, 0x40400000, 0x40c00000, 0x40c00000, 0xbfc00000,
        0xc0000000, 0x3f800000, 0x3fc00000, 0xbf000000, 0x3fc00000, 0xbfc00000, 0xbf000000,
        0x40800000, 0xc0000000, 0x3fc00000, 0x00000000, 0x3f800000, 0xbfc00000, 0x3f800000,
        0xbf000000, 0x00000000, 0x43000000, 0xc2800000, 0x42800000, 0x00000000, 0x43400000,
        0x42800000, 0xc2c00000, 0xc3000000, 0x00000000, 0x00000000, 0x00000000, 0x43800000,
        0x42000000, 0x42000000, 0xc2800000, 0xc3c00000, 0xc2c00000, 0x00000000, 0x43000000,
        0x00000000, 0xc2800000, 0x43800000, 0x43c00000, 0x00000000, 0xc2000000, 0xc2c00000,
        0x42000000, 0x42800000, 0x00000000, 0x00000000, 0xc3000000, 0xc3c00000,
    ];
    const X_BITS: [u32; 64] = [
        0x3b32c302, 0xbc4a118e, 0xbc1d008e, 0x3c8312d5, 0x3b04f606, 0xbc8de580, 0xba5b6790,
        0xbc3e953c, 0xbbce3483, 0xbb9fe8e5, 0xbbe9bd10, 0x3bb554c0, 0xba256047, 0xbbc12514,
        0x3b863ae9, 0x3c07f6a8, 0xbc8698b3, 0xbb28402b, 0xbc20af87, 0xbae2f541, 0xbc534224,
        0x3958f45b, 0xb9c6a162, 0xbb477367, 0xbc2bb139, 0xbb81d2db, 0xbc32cda7, 0xbc5e0993,
        0x3b1350ca, 0xbc35c182, 0x3c3fbdc7, 0x3beacfbb, 0xc0bfca58, 0x3f50feb6, 0xc0538793,
        0x3dcb1a83, 0x3e060998, 0xc0bee3a7, 0xbf3344bc, 0xbf44725e, 0x4038b440, 0xc062d679,
        0x400db43c, 0xc05300b6, 0xbf7e6e71, 0xc0215ef0, 0x408b1405, 0x3fda319f, 0x40e97242,
        0x3ff67ef3, 0x40223d15, 0x4021693f, 0xbfe8f057, 0xbe57209d, 0x4081a328, 0xbf984687,
        0x3f10ff80, 0xbd82659e, 0x3fe9f06b, 0xbf8c1ffd, 0xbeea0722, 0x3f3a2621, 0x3e9e3e59,
        0xc0261324,
    ];
    const QUANT: [u8; 34] = [
        119, 225, 157, 220, 150, 209, 14, 0, 173, 219, 170, 220, 211, 16, 219, 82, 68, 127, 127,
        66, 93, 80, 192, 15, 105, 170, 21, 14, 68, 173, 154, 29, 22, 211,
    ];

    #[test]
    fn mxfp4_is_bit_exact_against_gguf_py() {
        let mut y = vec![0.0f32; DEQUANT_BITS.len()];
        dequantize(DType::MXFP4, &RAW, &mut y).unwrap();
        let bits: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
        assert_eq!(bits, DEQUANT_BITS);
        let x: Vec<f32> = X_BITS.iter().map(|&b| f32::from_bits(b)).collect();
        assert_eq!(quantize(DType::MXFP4, &x).unwrap(), QUANT);
    }

    #[test]
    fn the_half_scale_follows_ggml_at_both_branches() {
        assert_eq!(e8m0_to_f32_half(127), 0.5);
        assert_eq!(e8m0_to_f32_half(128), 1.0);
        assert_eq!(e8m0_to_f32_half(0).to_bits(), 0x0020_0000);
        assert_eq!(e8m0_to_f32_half(1).to_bits(), 0x0040_0000);
        assert_eq!(e8m0_to_f32_half(2), f32::MIN_POSITIVE);
    }
}
