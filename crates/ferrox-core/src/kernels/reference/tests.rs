//! Properties of the reference kernels on random data at odd block counts.

use super::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const ODD_BLOCK_COUNTS: [usize; 6] = [1, 3, 15, 17, 31, 33];

fn random_values(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| rng.random_range(-1.0f32..1.0) * if rng.random_bool(0.05) { 8.0 } else { 1.0 })
        .collect()
}

/// Random bytes for a block of `dtype`, with its f16 scales set to small finite values.
fn random_block(rng: &mut ChaCha8Rng, dtype: DType) -> Vec<u8> {
    let mut b: Vec<u8> = (0..dtype.block_bytes()).map(|_| rng.random()).collect();
    let mut put = |at: usize, v: f32| b[at..at + 2].copy_from_slice(&blocks::f16_le_bytes(v));
    let d = rng.random_range(0.001f32..0.05);
    let dmin = rng.random_range(0.0005f32..0.02);
    match dtype {
        DType::Q2_K => {
            put(80, d);
            put(82, dmin);
        }
        DType::Q3_K => put(108, d),
        DType::Q4_K | DType::Q5_K => {
            put(0, d);
            put(2, dmin);
        }
        DType::Q6_K => put(208, d),
        DType::IQ4_NL | DType::IQ4_XS => put(0, d),
        _ => unreachable!("only K-quant and IQ4 weights are made from random blocks"),
    }
    b
}

/// Weights of `dtype` for `n` values: quantized from random data where a reference
/// quantizer exists, random blocks otherwise.
fn random_weights(rng: &mut ChaCha8Rng, dtype: DType, n: usize) -> Vec<u8> {
    match quantize(dtype, &random_values(rng, n)) {
        Ok(bytes) => bytes,
        Err(_) => (0..n / dtype.block_len())
            .flat_map(|_| random_block(rng, dtype))
            .collect(),
    }
}

fn dequantized(dtype: DType, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0.0; n];
    dequantize(dtype, bytes, &mut out).unwrap();
    out
}

fn activation_values(a: &Activations) -> Vec<f32> {
    let mut out = vec![0.0; a.len()];
    match a {
        Activations::F32(v) => out.copy_from_slice(v),
        Activations::Q8_0(v) => legacy::dequantize_q8_0(v, &mut out),
        Activations::Q8_1(v) => legacy::dequantize_q8_1(v, &mut out),
        Activations::Q8K(v) => kquants::dequantize_q8_k(v, &mut out),
    }
    out
}

const WEIGHT_TYPES: [DType; 15] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q2_K,
    DType::Q3_K,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::IQ4_NL,
    DType::IQ4_XS,
];

#[test]
fn quantize_then_dequantize_stays_within_the_type_error_bound() {
    // Largest error relative to the block's largest magnitude, per type.
    let bound = |t: DType| match t {
        DType::F32 => 0.0,
        DType::F16 => 1e-3,
        DType::BF16 => 8e-3,
        DType::Q8_0 | DType::Q8_1 => 1.0 / 127.0,
        DType::Q5_0 => 1.0 / 16.0 + 1e-3,
        DType::Q5_1 => 1.0 / 31.0 + 1e-3,
        DType::Q4_0 => 1.0 / 8.0 + 1e-3,
        DType::Q4_1 => 1.0 / 15.0 + 1e-3,
        // Grid steps of up to 24 of 127, and 127 above the top point 113.
        DType::IQ4_NL => 14.0 / 127.0 + 1e-3,
        _ => unreachable!(),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for t in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q8_1,
        DType::IQ4_NL,
    ] {
        for nb in ODD_BLOCK_COUNTS {
            let n = nb * t.block_len().max(32);
            let x = random_values(&mut rng, n);
            let bytes = quantize(t, &x).unwrap();
            assert_eq!(bytes.len(), t.row_bytes(n).unwrap());
            let y = dequantized(t, &bytes, n);
            for (xb, yb) in x.chunks(32).zip(y.chunks(32)) {
                let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                for (a, b) in xb.iter().zip(yb) {
                    assert!(
                        (a - b).abs() <= bound(t) * amax.max(1e-6) * 1.01,
                        "{t}: {a} vs {b} (amax {amax})"
                    );
                }
            }
        }
    }
}

#[test]
fn q8_k_quantization_keeps_exact_block_sums() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    for nb in ODD_BLOCK_COUNTS {
        let x = random_values(&mut rng, nb * QK_K);
        let Activations::Q8K(blocks) = quantize_activations(DType::Q4_K, &x).unwrap() else {
            panic!()
        };
        for b in &blocks {
            for (g, s) in b.bsums.iter().enumerate() {
                assert_eq!(
                    *s as i32,
                    b.qs[16 * g..16 * g + 16]
                        .iter()
                        .map(|&q| q as i32)
                        .sum::<i32>()
                );
            }
        }
        let y = activation_values(&Activations::Q8K(blocks));
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= 8.0 / 127.0, "{a} vs {b}");
        }
    }
    let Activations::Q8K(zero) = quantize_activations(DType::Q6_K, &[0.0; QK_K]).unwrap() else {
        panic!()
    };
    assert_eq!(zero[0], BlockQ8K::default());
}

/// The integer dot product equals the f64 dot of the dequantized operands: the
/// kernel adds no error of its own beyond f32 rounding of block sums.
#[test]
fn dot_equals_the_dot_of_dequantized_operands() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for t in WEIGHT_TYPES {
        for nb in ODD_BLOCK_COUNTS {
            let n = nb * t.block_len().max(QK_K);
            let w = random_weights(&mut rng, t, n);
            let x = random_values(&mut rng, n);
            let a = quantize_activations(t, &x).unwrap();
            let got = dot(t, &w, &a).unwrap() as f64;
            let wv = dequantized(t, &w, n);
            let av = activation_values(&a);
            let want: f64 = wv.iter().zip(&av).map(|(&p, &q)| p as f64 * q as f64).sum();
            let scale: f64 = wv
                .iter()
                .zip(&av)
                .map(|(&p, &q)| (p as f64 * q as f64).abs())
                .sum();
            // Q4_1 / Q5_1 fold their minimum through the f16 `s = d * sum(q)` of Q8_1.
            let tol = if matches!(t, DType::Q4_1 | DType::Q5_1) {
                2e-3
            } else {
                2e-5
            };
            assert!(
                (got - want).abs() <= tol * scale.max(1.0),
                "{t} x{nb}: {got} vs {want} (scale {scale})"
            );
        }
    }
}

/// Against plain f32 activations, the quantized dot stays within the activation
/// type's quantization error.
#[test]
fn dot_tracks_the_f32_dot_within_the_activation_tolerance() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    for t in WEIGHT_TYPES {
        for nb in ODD_BLOCK_COUNTS {
            let n = nb * t.block_len().max(QK_K);
            let w = random_weights(&mut rng, t, n);
            let x = random_values(&mut rng, n);
            let got = dot(t, &w, &quantize_activations(t, &x).unwrap()).unwrap() as f64;
            let wv = dequantized(t, &w, n);
            let want: f64 = wv.iter().zip(&x).map(|(&p, &q)| p as f64 * q as f64).sum();
            let norm = (wv.iter().map(|&v| (v as f64).powi(2)).sum::<f64>()
                * x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>())
            .sqrt();
            let tol = if t.is_quantized() { 2e-2 } else { 1e-5 };
            assert!(
                (got - want).abs() <= tol * norm.max(1e-9),
                "{t} x{nb}: {got} vs {want} (norm {norm})"
            );
        }
    }
}

#[test]
fn lengths_are_checked_before_any_data_is_read() {
    let mut out = vec![0.0; 32];
    assert!(matches!(
        dequantize(DType::Q4_0, &[0; 17], &mut out),
        Err(CoreError::ByteLength { .. })
    ));
    let mut odd = vec![0.0; 33];
    assert!(matches!(
        dequantize(DType::Q4_0, &[0; 36], &mut odd),
        Err(CoreError::PartialBlock { .. })
    ));
    assert!(matches!(
        quantize(DType::Q8_0, &[0.0; 31]),
        Err(CoreError::PartialBlock { .. })
    ));
    let a = quantize_activations(DType::Q8_0, &[0.5; 64]).unwrap();
    assert!(matches!(
        dot(DType::Q8_0, &[0; 34], &a),
        Err(CoreError::ByteLength { .. })
    ));
    let k = quantize_activations(DType::Q4_K, &[0.5; 256]).unwrap();
    assert!(matches!(
        dot(DType::Q4_0, &[0; 8 * 18], &k),
        Err(CoreError::Unsupported { .. })
    ));
}

#[test]
fn q3_k_scales_unpack_every_six_bit_value() {
    // Pack 16 known scales (0..64) the way ggml's quantizer does, then unpack.
    let want: [u8; 16] = [0, 1, 31, 32, 33, 63, 17, 48, 5, 60, 2, 40, 9, 50, 27, 36];
    let mut packed = [0u8; 12];
    for (j, &l) in want.iter().enumerate() {
        if j < 8 {
            packed[j] = l & 0x0F;
        } else {
            packed[j - 8] |= (l & 0x0F) << 4;
        }
        packed[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
    }
    let got = kquants::q3k_scales(&packed);
    for j in 0..16 {
        assert_eq!(got[j] as i32, want[j] as i32 - 32);
    }
}
