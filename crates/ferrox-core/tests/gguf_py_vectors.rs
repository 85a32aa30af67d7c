//! The reference kernels against vectors made by the `gguf` Python package
//! (`tests/fixtures/make_quant_vectors.py`): dequantization bit-exact for every
//! type, and quantization bit-exact where the package quantizes.

use ferrox_core::DType;
use ferrox_core::kernels::reference;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

#[test]
fn reference_kernels_match_gguf_py_bit_for_bit() {
    let text = include_str!("fixtures/quant_vectors.json");
    let doc: serde_json::Value = serde_json::from_str(text).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    let mut seen = Vec::new();
    for row in rows {
        let t = DType::from_name(row["type"].as_str().unwrap()).unwrap();
        let n = row["n"].as_u64().unwrap() as usize;
        let bytes = hex(row["bytes"].as_str().unwrap());
        let want = floats(&row["values"]);
        let mut got = vec![0.0f32; n];
        reference::dequantize(t, &bytes, &mut got).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{t} value {i}: {g} vs {w}");
        }
        if !row["input"].is_null() {
            let input = floats(&row["input"]);
            assert_eq!(
                reference::quantize(t, &input).unwrap(),
                bytes,
                "{t} quantization differs from gguf-py"
            );
        }
        seen.push(t);
    }
    for t in [
        DType::Q4_0,
        DType::Q5_1,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q5_K,
        DType::F16,
        DType::BF16,
        DType::IQ4_NL,
        DType::IQ4_XS,
    ] {
        assert!(seen.contains(&t), "no vector for {t}");
    }
}
