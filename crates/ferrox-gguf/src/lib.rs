//! ferrox-gguf: GGUF v2/v3 files.
//!
//! * [`Gguf::parse`] reads a header from bytes (pure, hostile-input safe).
//! * [`GgufFile`] memory-maps a file (or holds owned bytes) and hands out tensors
//!   as (storage type, shape, byte slice) views.
//! * [`Metadata`] has typed getters whose errors name the key and both types.
//! * [`GgufWriter`] makes files, for tests and tiny models.
//!
//! Hostile input gives a [`GgufError`], never a panic, and nothing is allocated
//! from a count the file claims before the count is checked against its size.

mod cursor;
pub mod error;
pub mod file;
pub mod file_type;
pub mod metadata;
pub mod parse;
pub mod tensor;
pub mod value;
pub mod writer;

pub use error::{GgufError, Result};
pub use file::GgufFile;
pub use file_type::file_type_name;
pub use metadata::Metadata;
pub use parse::Gguf;
pub use tensor::{TensorInfo, TensorView};
pub use value::{Array, Value, ValueType};
pub use writer::GgufWriter;
