//! The KV element types at the engine: a type the model's heads cannot take
//! is refused at start, naming the flag.

use std::sync::Arc;

use ferrox_engine::{EngineConfig, start};
use ferrox_gguf::GgufFile;
use ferrox_models::{Architecture, Transformer};
use ferrox_testkit::TinyModel;
use ferrox_text::Tokenizer;

fn tiny_file() -> GgufFile {
    GgufFile::from_bytes(TinyModel::new(Architecture::Llama).gguf()).unwrap()
}

fn tiny_tokenizer() -> Arc<Tokenizer> {
    Arc::new(Tokenizer::from_metadata(&tiny_file().header().metadata).unwrap())
}

/// A KV type the model's heads cannot take is a start error naming the flag
/// (the tiny model's 8-wide heads hold no whole q8_0 block of 32).
#[test]
fn q8_0_kv_on_heads_narrower_than_its_blocks_is_a_start_error() {
    let m = Transformer::new(tiny_file(), 1).unwrap();
    let config = EngineConfig {
        kv_element: ferrox_models::kv_store::KvElement::Q8_0,
        ..EngineConfig::default()
    };
    match start(Box::new(m), tiny_tokenizer(), config) {
        Err(e) => assert!(e.to_string().contains("--kv-type q8_0"), "{e}"),
        Ok(_) => panic!("q8_0 KV started on 8-wide heads"),
    }
}
