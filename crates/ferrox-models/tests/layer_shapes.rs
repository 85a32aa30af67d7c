//! Gemma 4's per-layer hyper-parameters: shared KV layers and per-layer counts.

use ferrox_gguf::{GgufFile, Metadata, Value};

use ferrox_models::{HyperParams, ModelError};
use ferrox_testkit::TinyModel;

/// The tiny Gemma 4's metadata with `key` set to `value`.
fn gemma4_with(key: &str, value: Value) -> Metadata {
    let file =
        GgufFile::from_bytes(TinyModel::new(ferrox_models::Architecture::Gemma4).gguf()).unwrap();
    let mut m = Metadata::default();
    for (k, v) in file.header().metadata.iter() {
        let v = if k == key { value.clone() } else { v.clone() };
        m.insert(k.to_string(), v).unwrap();
    }
    m
}

fn refusal(m: &Metadata) -> (String, String) {
    match HyperParams::from_metadata(m) {
        Err(ModelError::InvalidHyperParameter { key, reason }) => (key, reason),
        other => panic!("not refused by key: {other:?}"),
    }
}

#[test]
fn shared_layers_read_the_last_earlier_layer_of_their_kind() {
    let m = gemma4_with("gemma4.attention.shared_kv_layers", Value::U32(2));
    let hp = HyperParams::from_metadata(&m).unwrap();
    let sources: Vec<usize> = hp.attention.iter().map(|a| a.kv_layer).collect();
    assert_eq!(sources, [0, 1, 0, 1]);
    // One shared layer: the full layer 3 would read the window layer 2.
    let m = gemma4_with("gemma4.attention.shared_kv_layers", Value::U32(1));
    let (key, reason) = refusal(&m);
    assert_eq!(key, "gemma4.attention.shared_kv_layers");
    assert!(
        reason.contains("layer 3 would read the KV of layer 2"),
        "{reason}"
    );
    // Fewer than two layers of their own.
    let m = gemma4_with("gemma4.attention.shared_kv_layers", Value::U32(3));
    assert_eq!(refusal(&m).0, "gemma4.attention.shared_kv_layers");
}

#[test]
fn per_layer_counts_must_be_positive() {
    let m = gemma4_with("gemma4.attention.head_count_kv", Value::U32(0));
    assert_eq!(
        refusal(&m),
        (
            "gemma4.attention.head_count_kv".into(),
            "must be positive".into()
        )
    );
    let zero = Value::Array(ferrox_gguf::Array::I32(vec![64, 0, 128, 128]));
    let (key, reason) = refusal(&gemma4_with("gemma4.feed_forward_length", zero));
    assert_eq!(key, "gemma4.feed_forward_length");
    assert!(reason.contains("value 1"), "{reason}");
}
