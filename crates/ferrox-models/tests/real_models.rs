//! The real models: golden dequantization (bit-exact) and their hyper-parameters
//! and KV prices as `inspect` reports them.

use ferrox_core::DType;
use ferrox_core::kernels::reference;
use ferrox_gguf::GgufFile;
use ferrox_models::inspect::{KvOptions, ModelReport};
use ferrox_models::kv_plan::defaults;
use ferrox_models::testing::{golden_rows, real_model};
use ferrox_models::{AttentionKind, HyperParams};

fn check_golden_dequant(model: &str, golden: &str) {
    let Some(path) = real_model(model) else {
        return;
    };
    let Some(rows) = golden_rows(golden) else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let mut types = Vec::new();
    for row in &rows {
        let name = row["tensor"].as_str().unwrap();
        let t = file.tensor(name).unwrap();
        assert_eq!(t.dtype().name(), row["type"].as_str().unwrap(), "{name}");
        let shape: Vec<u64> = row["shape_gguf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(t.shape(), &shape[..], "{name}");
        let n = row["n_elements"].as_u64().unwrap() as usize;
        let mut values = vec![0f32; n];
        reference::dequantize(t.dtype(), t.data, &mut values).unwrap();
        let first: Vec<f32> = row["first_64"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let last: Vec<f32> = row["last_8"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        for (i, (g, w)) in values.iter().zip(&first).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{name}[{i}]: {g} vs {w}");
        }
        for (i, (g, w)) in values[n - last.len()..].iter().zip(&last).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{name}[-{}]: {g} vs {w}",
                last.len() - i
            );
        }
        let sum: f64 = values.iter().map(|&v| v as f64).sum();
        let sum_sq: f64 = values.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let (want_sum, want_sq) = (
            row["sum"].as_f64().unwrap(),
            row["sum_sq"].as_f64().unwrap(),
        );
        assert!(
            (sum - want_sum).abs() <= 1e-9 * want_sum.abs().max(1.0),
            "{name} sum {sum} vs {want_sum}"
        );
        assert!(
            (sum_sq - want_sq).abs() <= 1e-9 * want_sq.abs(),
            "{name} sum_sq {sum_sq} vs {want_sq}"
        );
        types.push(t.dtype());
    }
    assert!(!types.is_empty());
}

#[test]
fn real_model_smollm2_dequantizes_bit_exactly_against_golden() {
    check_golden_dequant("smollm2-135m", "dequant-smollm2-135m.jsonl");
}

#[test]
fn real_model_gemma3_dequantizes_bit_exactly_against_golden() {
    check_golden_dequant("gemma3-270m", "dequant-gemma3-270m.jsonl");
}

fn report(model: &str) -> Option<ModelReport> {
    let file = GgufFile::open(real_model(model)?).unwrap();
    let opts = KvOptions {
        ctx: None,
        memory: 1 << 30,
        block_size: defaults::KV_BLOCK_SIZE,
        max_seqs: defaults::MAX_SEQS,
        prefill_chunk: defaults::PREFILL_CHUNK,
        element_bytes: defaults::KV_ELEMENT_BYTES,
    };
    Some(ModelReport::new(&file, &opts).unwrap())
}

#[test]
fn real_model_smollm2_hyper_parameters_and_kv_price() {
    let Some(r) = report("smollm2-135m") else {
        return;
    };
    let hp: &HyperParams = &r.hyper_params;
    assert_eq!(
        (hp.n_layers, hp.n_embd, hp.n_ff, hp.n_heads, hp.n_kv_heads),
        (30, 576, 1536, 9, 3)
    );
    assert_eq!(
        (
            hp.head_dim_k,
            hp.head_dim_v,
            hp.rope_dim,
            hp.context_length,
            hp.vocab_size
        ),
        (64, 64, 64, 8192, 49152)
    );
    assert_eq!(hp.sliding_window(), None);
    // 30 layers x 3 kv heads x (64 + 64) x 4 bytes.
    assert_eq!(r.kv.by_layer_kind.len(), 1);
    assert_eq!(r.kv.by_layer_kind[0].bytes_per_position, 46_080);
    assert_eq!(r.kv.bytes_per_full_context_request, 46_080 * 8192);
    assert_eq!(r.kv.plan.n_blocks, (1u64 << 30) / (46_080 * 16));
    assert_eq!(r.kv.full_context_requests_that_fit, 2);
    assert_eq!(r.tensor_types["Q4_1"].tensors, 210);
    assert_eq!(r.tokenizer_model.as_deref(), Some("gpt2"));
}

#[test]
fn real_model_gemma3_hyper_parameters_and_kv_price() {
    let Some(r) = report("gemma3-270m") else {
        return;
    };
    let hp = &r.hyper_params;
    assert_eq!(
        (hp.n_layers, hp.n_embd, hp.n_ff, hp.n_heads, hp.n_kv_heads),
        (18, 640, 2048, 4, 1)
    );
    assert_eq!(
        (
            hp.head_dim_k,
            hp.head_dim_v,
            hp.context_length,
            hp.vocab_size
        ),
        (256, 256, 32768, 262144)
    );
    assert_eq!(hp.sliding_window(), Some(512));
    let global: Vec<usize> = (0..18)
        .filter(|&i| hp.layers[i] == AttentionKind::Full)
        .collect();
    assert_eq!(global, vec![5, 11, 17]);
    assert_eq!(
        (hp.rope_freq_base, hp.rope_freq_base_local),
        (1_000_000.0, 10_000.0)
    );
    // Full layers: 3 x 1 x 512 x 4 bytes; window layers: 15 x 1 x 512 x 4 bytes, held in
    // a seat of (512 + 512 - 2) / 16 + 2 = 65 window pages of 16 positions, and priced
    // at no more than window + chunk = 1024 positions (SPEC S10).
    let kinds: Vec<(usize, u64, Option<u64>)> =
        r.kv.by_layer_kind
            .iter()
            .map(|k| (k.layers, k.bytes_per_position, k.max_positions_per_request))
            .collect();
    assert_eq!(kinds, vec![(3, 6144, None), (15, 30720, Some(1040))]);
    assert_eq!(
        r.kv.bytes_per_full_context_request,
        6144 * 32768 + 30720 * 1024
    );
    assert_eq!(r.tokenizer_model.as_deref(), Some("llama"));
    assert_eq!(r.tensor_types["Q6_K"].tensors, 9);
    assert!(r.tensor_types.keys().all(|k| DType::from_name(k).is_some()));
}
