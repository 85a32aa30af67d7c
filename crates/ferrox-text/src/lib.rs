//! ferrox-text: text in and out of a model, as its GGUF metadata defines it.
//!
//! * [`tokenizer`]: BPE and SentencePiece vocabularies, pre-tokenizers and
//!   special tokens, as llama.cpp reads them.
//! * [`chat`]: chat templates rendered as Python's jinja2 renders them in
//!   `transformers`, and the built-in formats for files without one.
//! * [`tools`]: the tool-call formats models write, parsed from their output.
//! * [`reasoning`]: where a reasoning model's thinking starts and ends.
//! * [`fim`]: fill-in-the-middle prompts, as llama-server builds them.
//!
//! Nothing here knows the transformer: a vocabulary and a template are all it
//! reads.

pub mod chat;
pub mod error;
pub mod fim;
pub mod reasoning;
pub mod tokenizer;
pub mod tools;

pub use error::TextError;
pub use tokenizer::Tokenizer;
