//! The KV ceilings every path that runs a request is held to (SPEC S10): one
//! object, one pricing, checked in a fixed order before anything is queued.
//!
//! Invariants: pure (no locks, no clocks); `>` not `>=` (exactly at a ceiling is
//! admitted); a refusal carries the positions and the KV bytes of the request and
//! of the ceiling it hit, priced by `crate::kv_plan` from the model's own KV
//! shape.

use crate::kv_plan::{KvPlan, KvShape, blocks_for};

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
        let blocks = blocks_for(positions, self.block_size);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv_plan::LayerKv;
    use ferrox_models::hparams::AttentionKind;

    fn ceiling(blocks: Option<u64>) -> KvCeiling {
        let shape = KvShape {
            layers: vec![LayerKv {
                attention: AttentionKind::Full,
                n_kv_heads: 1,
                head_dim_k: 4,
                head_dim_v: 4,
            }],
            element: ferrox_models::kv_store::KvElement::F32,
        };
        let plan = blocks.map(|n| KvPlan::from_blocks(&shape, n, 16, 4, 8).unwrap());
        KvCeiling {
            max_context: 100,
            shape,
            plan,
            prefill_chunk: 8,
            block_size: 16,
        }
    }

    /// SPEC S7: blocks round up, and one token holds one block.
    #[test]
    fn blocks_round_up_and_one_token_holds_one_block() {
        let c = ceiling(Some(10));
        assert_eq!(c.check(1, 0), Ok(1));
        assert_eq!(
            c.check(0, 1),
            Ok(1),
            "an empty prompt still holds its BOS position"
        );
        assert_eq!(c.check(16, 1), Ok(2));
        assert_eq!(c.check(10, 22), Ok(2));
    }

    /// SPEC S10, S18: exactly at a ceiling is admitted, one past it is refused with the
    /// S18 code and both prices from the KV shape.
    #[test]
    fn exactly_at_a_ceiling_is_admitted_and_one_past_is_refused() {
        let c = ceiling(Some(4));
        assert_eq!(c.check(60, 4), Ok(4));
        let r = c.check(60, 5).unwrap_err();
        assert_eq!(
            (r.kind.code(), r.positions, r.positions_limit),
            ("device_memory_budget_exceeded", 65, 64)
        );
        assert_eq!((r.estimated_bytes, r.limit_bytes), (65 * 32, 64 * 32));
        assert!(
            ceiling(None).check(60, 40).is_ok(),
            "no budget configured: only the context binds"
        );
        let r = ceiling(None).check(60, 41).unwrap_err();
        assert_eq!(
            (r.kind.code(), r.positions, r.positions_limit),
            ("context_length_exceeded", 101, 100)
        );
    }
}
