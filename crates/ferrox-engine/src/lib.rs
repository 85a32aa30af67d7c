//! ferrox-engine: the continuous-batching engine (SPEC S1-S19).
//!
//! Planned house (issue "The continuous-batching engine"): the paged KV pool whose
//! block ledger is the real allocator, the pure admission policy and scheduler
//! (state in, step plan out), the single worker thread that owns every in-flight
//! request, and the `EngineHandle` other threads submit through. Its pricing of
//! KV memory is `ferrox_models::kv_plan`, shared with `ferrox inspect`.
//!
//! Nothing is implemented here yet; the crate exists so that the dependency
//! direction core <- gguf <- models <- engine <- server <- cli is fixed from the start.
