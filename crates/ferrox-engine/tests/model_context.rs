//! The context the engine serves reaches the model: LongRoPE picks its factor
//! set by it, as llama.cpp does by its context per sequence.

use std::sync::{Arc, Mutex};

use ferrox_engine::{EngineConfig, start};
use ferrox_gguf::GgufFile;
use ferrox_models::decoder::{Decoder, Output, Span};
use ferrox_models::kv_store::KvStore;
use ferrox_models::{Architecture, HyperParams, ModelError, Transformer};
use ferrox_testkit::TinyModel;
use ferrox_text::Tokenizer;

/// A decoder that records the context the engine limits it to.
struct ContextProbe {
    inner: Transformer,
    limited: Arc<Mutex<Vec<usize>>>,
}

impl Decoder for ContextProbe {
    fn forward(&self, cache: &mut KvStore, spans: &[Span<'_>]) -> Result<Output, ModelError> {
        self.inner.forward(cache, spans)
    }
    fn hyper_params(&self) -> &HyperParams {
        self.inner.hyper_params()
    }
    fn limit_context(&mut self, context: usize) {
        self.limited.lock().unwrap().push(context);
    }
}

/// The engine limits the model once at start, to `max_context` or (when unset
/// or larger) the model's context.
#[test]
fn the_engine_limits_the_model_to_the_context_it_serves() {
    let file = || GgufFile::from_bytes(TinyModel::new(Architecture::Llama).gguf()).unwrap();
    let tokenizer = Arc::new(Tokenizer::from_metadata(&file().header().metadata).unwrap());
    let context_length = Transformer::new(file(), 1)
        .unwrap()
        .hyper_params()
        .context_length;
    for (max_context, want) in [
        (Some(96), 96),
        (None, context_length),
        (Some(1 << 30), context_length),
    ] {
        let limited = Arc::new(Mutex::new(Vec::new()));
        let d = ContextProbe {
            inner: Transformer::new(file(), 1).unwrap(),
            limited: Arc::clone(&limited),
        };
        let config = EngineConfig {
            max_context,
            ..EngineConfig::default()
        };
        drop(start(Box::new(d), Arc::clone(&tokenizer), config).unwrap());
        assert_eq!(
            *limited.lock().unwrap(),
            [want],
            "max_context {max_context:?}"
        );
    }
}
