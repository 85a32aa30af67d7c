//! ferrox-engine: the continuous-batching engine (SPEC S1-S19).
//!
//! Here now, shared by every path that runs a request:
//! * [`stop`]: the stop-string matcher (S15).
//! * [`output`]: tokens to text deltas and a finish reason (S14-S16).
//!
//! To come (issue "The continuous-batching engine"): the KV block ledger over
//! `ferrox_models::kv_cache`, the pure admission policy and scheduler, the worker
//! thread that owns every in-flight request, and the `EngineHandle`.

pub mod output;
pub mod stop;

pub use output::{FinishReason, OutputStage, TokenOutput};
pub use stop::{StopMatcher, StopOutcome};
