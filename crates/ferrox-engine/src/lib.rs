//! ferrox-engine: the continuous-batching engine (SPEC S1-S19).
//!
//! * Pure policy: [`ceiling`] (KV refusals, S10), [`admission`] (the prefill pass,
//!   page-granular admission and request slots, S20-S25), [`scheduler`] (FIFO
//!   admission and step plans, S2, S8, S9), [`validate`] (S17), [`stop`] and
//!   [`output`] (S14-S16), [`queue_gate`] (the bounded queue, S11),
//!   [`speculation`] (prompt-lookup drafts).
//! * The KV ledger, pure too: [`pages`] (one pool's ids, reference counts, LRU of
//!   cached pages), [`prefix_index`] (chained page hashes), [`ledger`] (both pools,
//!   the prefix cache and every sequence's page tables, S7), [`states`] (a
//!   hybrid model's recurrent-state slots and their snapshots, S20).
//! * Threads and channels only in [`worker`] (the one owner of every in-flight
//!   request and of the KV cache, S1) and [`handle`] (submit, cancel, streams).
//! * [`stats`]: lock-free counters (S19).
//! * [`kv_plan`]: what a request costs in KV, and blocks from a memory budget
//!   (pure; `ferrox inspect` quotes it too); [`byte_size`]: `2GiB`-style sizes.
//!
//! KV memory is `ferrox_models::kv_store`: it holds the bytes at the pages the
//! ledger hands out, so the ledger is the allocator itself (S7); page arithmetic
//! and prices come from [`kv_plan`].

pub mod admission;
pub mod byte_size;
pub mod ceiling;
pub mod handle;
pub mod kv_events;
pub mod kv_plan;
pub mod ledger;
pub mod output;
pub mod pages;
pub mod prefix_index;
pub mod queue_gate;
pub mod request;
pub mod scheduler;
pub mod speculation;
pub mod states;
pub mod stats;
pub mod stop;
pub mod validate;
pub mod worker;

pub use handle::{EngineHandle, RequestStream, SubmitError};
pub use output::{FinishReason, OutputStage, TokenOutput};
pub use request::{Event, Failure, GenerationParams, RequestId, TokenLogprob, Usage};
pub use stop::{StopMatcher, StopOutcome};
pub use worker::{Drafter, EngineConfig, StartError, start, start_with_draft};
