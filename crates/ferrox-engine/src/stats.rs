//! Engine counters (SPEC S19), written by the worker and read by anyone without
//! locks while it runs.

use std::sync::atomic::{AtomicU64, Ordering};

/// Lock-free counters and gauges of one engine.
#[derive(Debug, Default)]
pub struct EngineStats {
    pub prefill_chunks: AtomicU64,
    pub prefill_tokens: AtomicU64,
    pub decode_steps: AtomicU64,
    pub queue_rejections: AtomicU64,
    pub kv_blocks_total: AtomicU64,
    pub kv_blocks_free: AtomicU64,
    pub kv_block_size: AtomicU64,
    /// Most blocks ever held at once, summed over the in-flight requests.
    pub peak_blocks_held: AtomicU64,
    /// Blocks held by in-flight requests now.
    pub blocks_held: AtomicU64,
    pub refusals_too_large: AtomicU64,
    pub refusals_context_length: AtomicU64,
    pub refusals_invalid: AtomicU64,
    pub aborted: AtomicU64,
    pub running: AtomicU64,
    pub finished_stop: AtomicU64,
    pub finished_length: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    /// Prompts looked up in the prefix cache (once each, at admission).
    pub prefix_queries: AtomicU64,
    /// Prompt tokens found in the prefix cache (not run again).
    pub prefix_hit_tokens: AtomicU64,
    /// Cached pages evicted to make room.
    pub prefix_evictions: AtomicU64,
    /// Blocks no request holds that the prefix cache keeps (evictable).
    pub kv_blocks_cached: AtomicU64,
    /// Blocks referenced by in-flight requests (a shared block counts once).
    pub kv_blocks_in_use: AtomicU64,
    /// Prefill passes in which the queue's head waited for recurrent-state
    /// slots (SPEC S20's recurrent budget; hybrid models).
    pub recurrent_waits: AtomicU64,
    /// Free recurrent-state slots (hybrid models).
    pub recurrent_slots_free: AtomicU64,
    /// Recurrent-state snapshots kept for prefix hits (hybrid models).
    pub state_snapshots: AtomicU64,
    /// Tokens drafted by speculation and run for checking.
    pub drafted_tokens: AtomicU64,
    /// Drafted tokens kept (each one a step saved).
    pub accepted_tokens: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub prefill_chunks: u64,
    pub prefill_tokens: u64,
    pub decode_steps: u64,
    pub queue_depth: u64,
    pub queue_rejections: u64,
    pub kv_blocks_total: u64,
    pub kv_blocks_free: u64,
    pub kv_block_size: u64,
    pub peak_blocks_held: u64,
    pub blocks_held: u64,
    pub refusals_too_large: u64,
    pub refusals_context_length: u64,
    pub refusals_invalid: u64,
    pub aborted: u64,
    pub running: u64,
    pub finished_stop: u64,
    pub finished_length: u64,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    pub prefix_queries: u64,
    pub prefix_hit_tokens: u64,
    pub prefix_evictions: u64,
    pub kv_blocks_cached: u64,
    pub kv_blocks_in_use: u64,
    pub recurrent_waits: u64,
    pub recurrent_slots_free: u64,
    pub state_snapshots: u64,
    pub drafted_tokens: u64,
    pub accepted_tokens: u64,
}

impl EngineStats {
    /// Adds `n` to a counter.
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// Sets a gauge.
    pub fn set(c: &AtomicU64, v: u64) {
        c.store(v, Ordering::Relaxed);
    }

    /// Reads every counter; `held` (running plus waiting) comes from the queue
    /// gate, and the queue depth is what of it is not running.
    pub fn snapshot(&self, held: usize) -> StatsSnapshot {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let running = g(&self.running);
        StatsSnapshot {
            prefill_chunks: g(&self.prefill_chunks),
            prefill_tokens: g(&self.prefill_tokens),
            decode_steps: g(&self.decode_steps),
            queue_depth: (held as u64).saturating_sub(running),
            queue_rejections: g(&self.queue_rejections),
            kv_blocks_total: g(&self.kv_blocks_total),
            kv_blocks_free: g(&self.kv_blocks_free),
            kv_block_size: g(&self.kv_block_size),
            peak_blocks_held: g(&self.peak_blocks_held),
            blocks_held: g(&self.blocks_held),
            refusals_too_large: g(&self.refusals_too_large),
            refusals_context_length: g(&self.refusals_context_length),
            refusals_invalid: g(&self.refusals_invalid),
            aborted: g(&self.aborted),
            running,
            finished_stop: g(&self.finished_stop),
            finished_length: g(&self.finished_length),
            prompt_tokens: g(&self.prompt_tokens),
            generated_tokens: g(&self.generated_tokens),
            prefix_queries: g(&self.prefix_queries),
            prefix_hit_tokens: g(&self.prefix_hit_tokens),
            prefix_evictions: g(&self.prefix_evictions),
            kv_blocks_cached: g(&self.kv_blocks_cached),
            kv_blocks_in_use: g(&self.kv_blocks_in_use),
            recurrent_waits: g(&self.recurrent_waits),
            recurrent_slots_free: g(&self.recurrent_slots_free),
            state_snapshots: g(&self.state_snapshots),
            drafted_tokens: g(&self.drafted_tokens),
            accepted_tokens: g(&self.accepted_tokens),
        }
    }
}
