//! The real models: golden dequantization (bit-exact). Their hyper-parameters
//! and KV prices as `inspect` reports them are pinned in ferrox-cli's
//! `inspect.rs`.

use ferrox_core::kernels::reference;
use ferrox_gguf::GgufFile;
use ferrox_testkit::{golden_rows, real_model};

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
