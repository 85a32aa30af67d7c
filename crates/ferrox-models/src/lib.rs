//! ferrox-models: what a GGUF file computes.
//!
//! * [`arch`]: the described table of every architecture.
//! * [`hparams`]: hyper-parameters from metadata.
//! * [`weights`]: the tensors a layer reads, repacked for the kernels.
//! * [`transformer`]: the forward pass over a batch of spans ([`decoder`]),
//!   with [`moe`] experts and [`delta_net`] recurrent layers.
//! * [`encoder`]: a bidirectional encoder (BERT): embeddings and rerank scores.
//! * [`kv_store`]: KV bytes at the pages the engine's ledger hands out.
//! * [`activation_path`]: the fast integer-activation path or the exact f32 one.
//! * [`model`]: a file loaded with its tokenizer and chat template.
//! * [`perplexity`]: llama-perplexity's measure of a text.
//! * [`pooling`]: how embeddings pool hidden states and are normalized.

pub mod activation_path;
pub mod arch;
pub mod decoder;
pub mod delta_net;
pub mod encoder;
pub mod error;
pub mod hparams;
pub mod kv_store;
pub mod model;
pub mod moe;
pub mod perplexity;
pub mod pooling;
pub mod transformer;
pub mod weights;

pub use activation_path::ActivationPath;
pub use arch::{ArchSpec, Architecture};
pub use error::ModelError;
pub use hparams::{AttentionKind, HyperParams};
pub use pooling::Pooling;
pub use transformer::Transformer;
