//! ferrox-models: what a GGUF file means as a model.
//!
//! * [`activation_path`]: the fast integer-activation path or the exact f32 one.
//! * [`arch`]: the described table of every architecture.
//! * [`hparams`]: hyper-parameters from metadata.
//! * [`kv_plan`]: KV shape, request pricing, blocks from a memory budget (SPEC S7, S10).
//! * [`inspect`]: the `ferrox inspect` report.
//! * [`catalog`]: the models ferrox fetches by name, and the cache directory.
//! * [`byte_size`]: `2GiB`-style sizes.
//! * [`testing`]: locating real models and golden files from tests.

pub mod activation_path;
pub mod arch;
pub mod byte_size;
pub mod catalog;
pub mod chat;
pub mod decoder;
pub mod delta_net;
pub mod error;
pub mod grammar;
pub mod hparams;
pub mod inspect;
pub mod kv_plan;
pub mod kv_store;
pub mod model;
pub mod moe;
pub mod reasoning;
pub mod sampler;
pub mod testing;
pub mod tokenizer;
pub mod tools;
pub mod transformer;
pub mod weights;

pub use activation_path::ActivationPath;
pub use arch::{ArchSpec, Architecture};
pub use error::ModelError;
pub use hparams::{AttentionKind, HyperParams};
pub use kv_plan::{KvPlan, KvShape};
pub use tokenizer::Tokenizer;
pub use transformer::Transformer;
