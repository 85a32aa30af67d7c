//! A server state over a tiny random model, and a decoder that fails on cue.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ferrox_engine::{EngineConfig, start};
use ferrox_gguf::GgufFile;
use ferrox_models::decoder::{Decoder, Output, Span};
use ferrox_models::kv_store::KvStore;
use ferrox_models::{Architecture, HyperParams, ModelError, Transformer};
use ferrox_sampling::grammar::Grammars;
use ferrox_server::auth::ApiKey;
use ferrox_server::metrics::Metrics;
use ferrox_server::{AppState, Lifecycle, Limits, Phase, Server};
use ferrox_testkit::TinyModel;
use ferrox_text::Tokenizer;

/// How the decoder misbehaves from its `at`-th forward call on.
#[derive(Copy, Clone, Debug)]
pub enum Fault {
    None,
    /// Returns an error.
    Error {
        at: usize,
    },
    /// Panics (a bug in the forward pass).
    Panic {
        at: usize,
    },
    /// Sleeps this many milliseconds per call (slow generation).
    Slow {
        millis: u64,
    },
}

pub struct Faulty {
    inner: Transformer,
    calls: AtomicUsize,
    fault: Fault,
}

impl Decoder for Faulty {
    fn forward(&self, cache: &mut KvStore, spans: &[Span<'_>]) -> Result<Output, ModelError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        match self.fault {
            Fault::Error { at } if call >= at => {
                return Err(ModelError::Forward("simulated device fault".into()));
            }
            Fault::Panic { at } if call >= at => panic!("simulated bug in the forward pass"),
            Fault::Slow { millis } => std::thread::sleep(std::time::Duration::from_millis(millis)),
            _ => {}
        }
        self.inner.forward(cache, spans)
    }
    fn hyper_params(&self) -> &HyperParams {
        self.inner.hyper_params()
    }
}

/// What a test server is built with.
pub struct Setup {
    pub fault: Fault,
    pub limits: Limits,
    pub api_key: Option<&'static str>,
    pub max_seqs: usize,
    pub cors_origins: Vec<String>,
    pub webui: bool,
    pub log_prompts: bool,
    /// A chat template for the tiny model (it has none).
    pub chat_template: Option<&'static str>,
    /// `--pooling`.
    pub pooling: Option<ferrox_models::Pooling>,
    /// `--seed`.
    pub seed: Option<u64>,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            fault: Fault::None,
            limits: Limits::default(),
            api_key: None,
            max_seqs: 16,
            cors_origins: Vec::new(),
            webui: true,
            log_prompts: false,
            chat_template: None,
            pooling: None,
            seed: None,
        }
    }
}

/// A serving state over a tiny Llama model.
pub fn state(setup: Setup) -> Arc<AppState> {
    let file = || GgufFile::from_bytes(TinyModel::new(Architecture::Llama).gguf()).unwrap();
    let tokenizer = Arc::new(Tokenizer::from_metadata(&file().header().metadata).unwrap());
    let grammars = Grammars::new(&tokenizer);
    let inner = Transformer::new(file(), 1).unwrap();
    let embedding = ferrox_server::embeddings::EmbeddingSettings::choose(
        setup.pooling,
        ferrox_models::pooling::Normalize::PNorm(2),
        inner.hyper_params(),
        false,
    )
    .unwrap();
    let decoder = Faulty {
        inner,
        calls: AtomicUsize::new(0),
        fault: setup.fault,
    };
    let engine = start(
        Box::new(decoder),
        Arc::clone(&tokenizer),
        EngineConfig {
            kv_blocks: Some(256),
            max_seqs: setup.max_seqs,
            ..Default::default()
        },
    )
    .unwrap();
    Arc::new(AppState {
        metrics: Metrics::new(engine.clone(), "tiny"),
        engine,
        tokenizer,
        chat: setup
            .chat_template
            .map(|t| ferrox_text::chat::ChatTemplate::jinja(t, "", "").unwrap()),
        model_id: "tiny".into(),
        aliases: vec![],
        embedding,
        grammars,
        facts: ferrox_server::props::ServerFacts {
            model_path: "tiny.gguf".into(),
            total_slots: setup.max_seqs,
            chat_template: setup.chat_template.map(String::from),
            card: Default::default(),
        },
        server: Arc::new(Server {
            api_key: setup.api_key.map(|k| ApiKey::new(k).unwrap()),
            default_max_tokens: 64,
            default_seed: setup.seed,
            phase: Lifecycle::new(Phase::Serving),
            limits: setup.limits,
            cors_origins: setup.cors_origins,
            webui: setup.webui,
            log_prompts: setup.log_prompts,
            tally: Default::default(),
        }),
    })
}
