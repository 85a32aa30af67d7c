//! The KV ceilings every path that runs a request is held to (SPEC S10): one
//! object, one pricing, checked in a fixed order before anything is queued.
//!
//! Invariants: pure (no locks, no clocks); `>` not `>=` (exactly at a ceiling is
//! admitted); a refusal carries the positions and the KV bytes of the request and
//! of the ceiling it hit, priced by `ferrox_models::kv_plan` from the model's own KV
//! shape.

use ferrox_models::kv_plan::{KvPlan, KvShape};

/// Which ceiling refused a request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CeilingKind {
    /// Longer than any one request may be.
    ContextLength,
    /// More blocks than the whole server owns.
    DeviceMemoryBudget,
}

impl CeilingKind {
    /// The error code clients see.
    pub fn code(self) -> &'static str {
        match self {
            CeilingKind::ContextLength => "context_length_exceeded",
            CeilingKind::DeviceMemoryBudget => "device_memory_budget_exceeded",
        }
    }
}

/// A request refused by a KV ceiling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvRefusal {
    pub kind: CeilingKind,
    /// Positions the request needs (prompt + max_tokens).
    pub positions: u64,
    /// Positions the ceiling allows.
    pub positions_limit: u64,
    /// KV bytes of the request.
    pub estimated_bytes: u64,
    /// KV bytes of the ceiling.
    pub limit_bytes: u64,
    /// A sentence naming the knob.
    pub message: String,
}

/// The ceilings of one engine.
#[derive(Clone, Debug)]
pub struct KvCeiling {
    /// The longest request, in positions (model context or `--max-context`).
    pub max_context: u64,
    pub shape: KvShape,
    /// The block pool (`None`: no budget configured, only the context ceiling binds).
    pub plan: Option<KvPlan>,
    /// Token budget of one step (prices sliding-window layers).
    pub prefill_chunk: usize,
    /// Positions per block.
    pub block_size: usize,
}

impl KvCeiling {
    /// Positions a request of `prompt_tokens` and `max_tokens` occupies (an empty
    /// prompt still runs on one token, SPEC S6).
    pub fn positions(prompt_tokens: usize, max_tokens: usize) -> u64 {
        prompt_tokens.max(1) as u64 + max_tokens as u64
    }

    /// Blocks a request of `positions` reserves (SPEC S7).
    pub fn blocks_for(&self, positions: u64) -> u64 {
        positions.div_ceil(self.block_size as u64).max(1)
    }

    /// Checks a request against the ceilings, context first (SPEC S10); returns the
    /// blocks it will reserve.
    pub fn check(&self, prompt_tokens: usize, max_tokens: usize) -> Result<u64, KvRefusal> {
        let positions = Self::positions(prompt_tokens, max_tokens);
        let price = |p: u64| self.shape.request_bytes(p, self.prefill_chunk);
        if positions > self.max_context {
            return Err(KvRefusal {
                kind: CeilingKind::ContextLength,
                positions,
                positions_limit: self.max_context,
                estimated_bytes: price(positions),
                limit_bytes: price(self.max_context),
                message: format!(
                    "this request needs {positions} positions ({prompt_tokens} prompt + {max_tokens} max_tokens) but the context is {} (the model's context length or --max-context / FERROX_CB_MAX_CONTEXT); shorten the prompt or lower max_tokens",
                    self.max_context
                ),
            });
        }
        let blocks = self.blocks_for(positions);
        if let Some(plan) = &self.plan
            && blocks > plan.n_blocks
        {
            return Err(KvRefusal {
                kind: CeilingKind::DeviceMemoryBudget,
                positions,
                positions_limit: plan.request_limit_positions(),
                estimated_bytes: price(positions),
                limit_bytes: price(plan.request_limit_positions()),
                message: format!(
                    "this request needs {blocks} KV blocks of {} positions but the server owns {} in all (--kv-memory / FERROX_CB_KV_MEMORY or --kv-blocks / FERROX_CB_KV_BLOCKS); lower max_tokens or give the server more KV memory",
                    self.block_size, plan.n_blocks
                ),
            });
        }
        Ok(blocks)
    }
}
