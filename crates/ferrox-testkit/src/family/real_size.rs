//! What the benchmark models at real sizes need beyond the test shapes:
//! llama-quantize's quant mix, quantization fast enough for billions of
//! values, and vocabularies padded to the real embedding's rows.

use ferrox_core::DType;
use ferrox_core::kernels::reference::quantize;
use ferrox_gguf::Value;

/// llama-quantize's `Q4_K_M` choice for tensor `name` of a file of `n_layers`
/// layers and `n_experts` experts (0 or 1: dense), `tied` when the embeddings
/// are the head (`llama_tensor_get_type_impl`).
pub(super) fn q4_k_m_type(name: &str, n_layers: usize, n_experts: usize, tied: bool) -> DType {
    let use_more_bits = |i: usize| {
        let n = n_layers;
        i < n / 8 || i >= 7 * n / 8 || (i as isize - (n / 8) as isize).rem_euclid(3) == 2
    };
    let layer = || {
        name.strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|i| i.parse::<usize>().ok())
            .expect("a layer tensor")
    };
    if name == "output.weight" || (tied && name == "token_embd.weight") {
        DType::Q6_K
    } else if name.contains("attn_v.weight")
        || name.contains("attn_qkv.weight")
        || name.contains("attn_k.weight")
    {
        // A fused `attn_qkv` is "attn_v-like" to llama-quantize (its
        // `category_is_attn_v`), counted with the `attn_v`s: one a layer.
        let v_like = !name.contains("attn_k.weight");
        if n_experts == 8 {
            DType::Q8_0
        } else if v_like && use_more_bits(layer()) {
            DType::Q6_K
        } else {
            DType::Q4_K
        }
    } else if name.contains("ffn_down") && use_more_bits(layer()) {
        DType::Q6_K
    } else if name.contains("attn_output.weight") && n_experts == 8 {
        DType::Q5_K
    } else {
        DType::Q4_K
    }
}

/// `values` quantized to `dtype`, rows of `row` values in parallel (the bytes of
/// one call: each row's blocks depend on that row alone).
pub(super) fn quantize_rows(dtype: DType, values: &[f32], row: usize) -> Vec<u8> {
    use rayon::prelude::*;
    const PARALLEL: usize = 1 << 20;
    if values.len() < PARALLEL || dtype == DType::F32 {
        return quantize(dtype, values).expect("family shapes are whole blocks");
    }
    values
        .par_chunks(row * (PARALLEL / row).max(1))
        .map(|c| quantize(dtype, c).expect("family shapes are whole blocks"))
        .collect::<Vec<_>>()
        .concat()
}

/// A tokenizer key's value for `rows` tokens where the vocabulary has `tokens`:
/// the per-token arrays padded with unused control tokens, as real files pad
/// their vocabularies to the embedding's rows.
pub(super) fn padded(key: &str, value: &Value, tokens: usize, rows: usize) -> Value {
    use ferrox_gguf::Array;
    let extra = tokens..rows;
    match (key, value) {
        (_, _) if rows == tokens => value.clone(),
        ("tokenizer.ggml.tokens", Value::Array(Array::String(v))) => {
            let pad = extra.map(|i| format!("<|reserved_{i}|>"));
            Value::Array(Array::String(v.iter().cloned().chain(pad).collect()))
        }
        ("tokenizer.ggml.token_type", Value::Array(Array::I32(v))) => {
            let control = 3;
            Value::Array(Array::I32(
                v.iter().copied().chain(extra.map(|_| control)).collect(),
            ))
        }
        ("tokenizer.ggml.scores", Value::Array(Array::F32(v))) => Value::Array(Array::F32(
            v.iter().copied().chain(extra.map(|_| 0.0)).collect(),
        )),
        _ => value.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layers whose `attn_v` and `ffn_down` llama-quantize's Q4_K_M takes to
    /// Q6_K: on 4 layers as it did on the benchmark models' Q8_0 copies (2 and
    /// 3), on 16 as its `use_more_bits` gives for Llama-3.2-1B.
    #[test]
    fn the_q4_k_m_mix_is_llama_quantizes() {
        let six = |n: usize, name: &str| -> Vec<usize> {
            (0..n)
                .filter(|&i| {
                    q4_k_m_type(&format!("blk.{i}.{name}.weight"), n, 0, true) == DType::Q6_K
                })
                .collect()
        };
        for name in ["attn_v", "ffn_down", "ffn_down_exps"] {
            assert_eq!(six(4, name), [2, 3], "{name}");
            assert_eq!(six(16, name), [0, 1, 4, 7, 10, 13, 14, 15], "{name}");
        }
        assert!(six(16, "attn_k").is_empty() && six(16, "ffn_up").is_empty());
        assert_eq!(q4_k_m_type("token_embd.weight", 4, 0, true), DType::Q6_K);
        assert_eq!(q4_k_m_type("token_embd.weight", 4, 128, false), DType::Q4_K);
        assert_eq!(q4_k_m_type("output.weight", 4, 128, false), DType::Q6_K);
        assert_eq!(q4_k_m_type("blk.0.attn_k.weight", 4, 8, false), DType::Q8_0);
        assert_eq!(
            q4_k_m_type("blk.0.attn_output.weight", 4, 8, false),
            DType::Q5_K
        );
    }
}
