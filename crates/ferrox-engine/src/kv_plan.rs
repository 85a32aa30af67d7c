//! KV cache shape, the price of a request in KV bytes, and the block plan that
//! turns a memory budget into KV blocks. The one place this arithmetic lives:
//! `ferrox inspect`, admission (SPEC S7) and typed refusals (SPEC S10) all quote it.
//!
//! Memory model:
//! * Full-attention layers keep every position. Their KV is paged in blocks of
//!   `block_size` positions; one block holds those positions for *all* full
//!   layers: `block_bytes = block_size * full_bytes_per_position`.
//! * Sliding-window layers keep at most `window` positions, plus one prefill chunk
//!   that may be in flight while the oldest positions slide out. They live in a
//!   pool of window pages of `block_size` positions; each request slot has a seat
//!   of [`window_pages_per_request`] of them, set aside before the blocks are
//!   counted.
//! * A request of `P` positions costs [`blocks_for`] `= max(1, ceil(P / block_size))`
//!   blocks, and is priced at `P * full_bpp + min(P, window + chunk) * window_bpp`
//!   bytes.
//!
//! [`blocks_for`] and [`window_pages_per_request`] are the one page arithmetic of
//! the project: the engine's ledger and admission, the ceilings, `inspect` and the
//! metrics all call them (pure functions, so that `inspect` can price a model
//! without starting an engine).
//!
//! Invariants: pure functions of their inputs (no I/O, no clocks); every product
//! is checked, so absurd inputs are errors rather than wrapped numbers.

use ferrox_models::hparams::{AttentionKind, HyperParams};
use ferrox_models::kv_store::KvElement;

use crate::byte_size::format_bytes;

/// A KV plan that cannot be made from the knobs and the model given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvPlanError {
    #[error("KV plan: {0} must be at least 1")]
    ZeroKnob(&'static str),
    #[error("KV plan: the model has no full-attention layers to page")]
    NothingToPage,
    #[error(
        "KV plan: {} of KV memory does not cover the sliding-window seats of {max_seqs} requests ({} each); raise --kv-memory or lower --max-seqs",
        format_bytes(*memory),
        format_bytes(*seat_bytes)
    )]
    SeatsDoNotFit {
        memory: u64,
        max_seqs: usize,
        seat_bytes: u64,
    },
}

/// Defaults shared by the CLI, the engine and `inspect`.
pub mod defaults {
    /// Token positions per KV block (`--kv-block-size`).
    pub const KV_BLOCK_SIZE: usize = 16;
    /// KV memory when neither blocks nor a size are given (`--kv-memory`).
    pub const KV_MEMORY_BYTES: u64 = 1 << 30;
    /// Requests in flight at once (`--max-seqs`).
    pub const MAX_SEQS: usize = 16;
    /// Token budget of one step (`--prefill-chunk`).
    pub const PREFILL_CHUNK: usize = 512;
    /// An encoder's least token budget a step: its passes hold whole
    /// sequences and keep no KV, so a larger pass costs only activations
    /// (about 50 MB at bge-small's width) and spreads each product's weight
    /// unpacking over more tokens (16 clients on bge-small: 1.63x ->
    /// 1.68x llama-server by medians of three rounds).
    pub const ENCODER_PASS_TOKENS: usize = 2048;
}

/// Pages (blocks) of `page_size` positions that `positions` positions occupy; an
/// empty request still holds one (SPEC S6, S7).
pub fn blocks_for(positions: u64, page_size: usize) -> u64 {
    positions.div_ceil(page_size as u64).max(1)
}

/// Window pages one request can hold at once, at most: the pages of the last
/// `window - 1` positions before a span plus those of a span of up to
/// `max_span` positions, each range possibly straddling one more page boundary.
///
/// A span of `c` tokens starting at position `n` reads from `n + 1 - window` and
/// writes up to `n + c - 1`, so it touches
/// `floor((n + c - 1) / ps) - floor((n + 1 - window) / ps) + 1
///  <= (c + window - 2) / ps + 2` pages.
pub fn window_pages_per_request(window: usize, max_span: usize, page_size: usize) -> u64 {
    ((max_span + window).saturating_sub(2) / page_size) as u64 + 2
}

/// KV geometry of one layer.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LayerKv {
    pub attention: AttentionKind,
    pub n_kv_heads: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
}

impl LayerKv {
    /// Bytes one position takes in this layer (keys and values) in
    /// elements of `element`.
    pub fn bytes_per_position(&self, element: KvElement) -> u64 {
        let row = |dim: usize| element.row_bytes(dim);
        (self.n_kv_heads * (row(self.head_dim_k) + row(self.head_dim_v))) as u64
    }
}

/// The KV shape of a model: what each layer stores per token position.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct KvShape {
    /// The layers that keep KV, in order.
    pub layers: Vec<LayerKv>,
    /// The type of the stored elements.
    pub element: KvElement,
}

impl KvShape {
    /// The KV shape of a model with cache elements of type `element`: the
    /// layers that keep KV (a shared-KV layer reads another's and keeps none).
    pub fn new(hp: &HyperParams, element: KvElement) -> KvShape {
        let layers = hp
            .layers
            .iter()
            .zip(&hp.attention)
            .enumerate()
            .filter(|(i, (_, a))| a.kv_layer == *i)
            .map(|(_, (&attention, a))| LayerKv {
                attention,
                n_kv_heads: a.n_kv_heads,
                head_dim_k: a.head_dim_k,
                head_dim_v: a.head_dim_v,
            })
            .collect();
        KvShape { layers, element }
    }

    fn bytes_where(&self, full: bool) -> u64 {
        self.layers
            .iter()
            .filter(|l| match l.attention {
                AttentionKind::Full => full,
                AttentionKind::SlidingWindow { .. } => !full,
                AttentionKind::Recurrent => false,
            })
            .map(|l| l.bytes_per_position(self.element))
            .sum()
    }

    /// Bytes per position summed over full-attention layers.
    pub fn full_bytes_per_position(&self) -> u64 {
        self.bytes_where(true)
    }

    /// Bytes per position summed over sliding-window layers.
    pub fn window_bytes_per_position(&self) -> u64 {
        self.bytes_where(false)
    }

    /// The largest sliding window of any layer.
    pub fn window(&self) -> Option<usize> {
        self.layers
            .iter()
            .filter_map(|l| match l.attention {
                AttentionKind::SlidingWindow { window } => Some(window),
                AttentionKind::Full | AttentionKind::Recurrent => None,
            })
            .max()
    }

    /// Positions a window layer is priced at for one request at most (SPEC S10): its
    /// window plus one prefill chunk (0 without window layers). The pages it holds
    /// are [`window_pages_per_request`], which adds page rounding.
    pub fn window_price_positions(&self, prefill_chunk: usize) -> u64 {
        self.window().map_or(0, |w| (w + prefill_chunk) as u64)
    }

    /// KV bytes of one request of `positions` token positions (SPEC S10 pricing).
    pub fn request_bytes(&self, positions: u64, prefill_chunk: usize) -> u64 {
        let windowed = positions.min(self.window_price_positions(prefill_chunk));
        positions
            .saturating_mul(self.full_bytes_per_position())
            .saturating_add(windowed * self.window_bytes_per_position())
    }
}

/// How a KV budget is laid out in blocks and window seats.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct KvPlan {
    /// Token positions per block.
    pub block_size: usize,
    /// Blocks in the pool.
    pub n_blocks: u64,
    /// Bytes of one block (all full-attention layers).
    pub block_bytes: u64,
    /// Request slots, each with one window seat.
    pub max_seqs: usize,
    /// Token budget of one step (sizes the window seats).
    pub prefill_chunk: usize,
    /// Window pages of one request slot's seat (0 without window layers).
    pub seat_pages: u64,
    /// Bytes of one window seat (0 without window layers).
    pub seat_bytes: u64,
}

impl KvPlan {
    fn check(block_size: usize, max_seqs: usize, prefill_chunk: usize) -> Result<(), KvPlanError> {
        for (name, v) in [
            ("block size", block_size),
            ("max seqs", max_seqs),
            ("prefill chunk", prefill_chunk),
        ] {
            if v == 0 {
                return Err(KvPlanError::ZeroKnob(name));
            }
        }
        Ok(())
    }

    /// Window pages of one request slot (0 without window layers).
    pub fn seat_pages(shape: &KvShape, block_size: usize, prefill_chunk: usize) -> u64 {
        shape.window().map_or(0, |w| {
            window_pages_per_request(w, prefill_chunk, block_size)
        })
    }

    fn seat_bytes(shape: &KvShape, block_size: usize, prefill_chunk: usize) -> u64 {
        Self::seat_pages(shape, block_size, prefill_chunk)
            * block_size as u64
            * shape.window_bytes_per_position()
    }

    /// Window pages in the pool: one seat per request slot.
    pub fn window_pages(&self) -> u64 {
        self.seat_pages * self.max_seqs as u64
    }

    fn block_bytes(shape: &KvShape, block_size: usize) -> Result<u64, KvPlanError> {
        match shape.full_bytes_per_position() {
            0 => Err(KvPlanError::NothingToPage),
            bpp => Ok(bpp * block_size as u64),
        }
    }

    /// The plan that fits in `memory` bytes: window seats for `max_seqs` requests
    /// first, then as many whole blocks as the rest holds.
    pub fn from_memory(
        shape: &KvShape,
        memory: u64,
        block_size: usize,
        max_seqs: usize,
        prefill_chunk: usize,
    ) -> Result<KvPlan, KvPlanError> {
        Self::check(block_size, max_seqs, prefill_chunk)?;
        let seat_bytes = Self::seat_bytes(shape, block_size, prefill_chunk);
        let block_bytes = Self::block_bytes(shape, block_size)?;
        let seats = seat_bytes.saturating_mul(max_seqs as u64);
        let Some(rest) = memory.checked_sub(seats) else {
            return Err(KvPlanError::SeatsDoNotFit {
                memory,
                max_seqs,
                seat_bytes,
            });
        };
        Ok(KvPlan {
            block_size,
            n_blocks: rest / block_bytes,
            block_bytes,
            max_seqs,
            prefill_chunk,
            seat_pages: Self::seat_pages(shape, block_size, prefill_chunk),
            seat_bytes,
        })
    }

    /// The plan with exactly `n_blocks` blocks.
    pub fn from_blocks(
        shape: &KvShape,
        n_blocks: u64,
        block_size: usize,
        max_seqs: usize,
        prefill_chunk: usize,
    ) -> Result<KvPlan, KvPlanError> {
        Self::check(block_size, max_seqs, prefill_chunk)?;
        Ok(KvPlan {
            block_size,
            n_blocks,
            block_bytes: Self::block_bytes(shape, block_size)?,
            max_seqs,
            prefill_chunk,
            seat_pages: Self::seat_pages(shape, block_size, prefill_chunk),
            seat_bytes: Self::seat_bytes(shape, block_size, prefill_chunk),
        })
    }

    /// Blocks a request of `positions` positions reserves (SPEC S7).
    pub fn blocks_for(&self, positions: u64) -> u64 {
        blocks_for(positions, self.block_size)
    }

    /// Requests of `positions` positions that fit at once (both caps, SPEC S8).
    pub fn requests_that_fit(&self, positions: u64) -> u64 {
        (self.n_blocks / self.blocks_for(positions)).min(self.max_seqs as u64)
    }

    /// Bytes of the whole pool: blocks plus every seat.
    pub fn total_bytes(&self) -> u64 {
        self.n_blocks * self.block_bytes + self.seat_bytes * self.max_seqs as u64
    }

    /// The KV bytes of the largest request the pool could ever hold: every block
    /// plus one seat (the `limit_bytes` of a `device_memory_budget_exceeded`).
    pub fn request_limit_bytes(&self) -> u64 {
        self.n_blocks * self.block_bytes + self.seat_bytes
    }

    /// Positions of the largest request the pool could ever hold.
    pub fn request_limit_positions(&self) -> u64 {
        self.n_blocks * self.block_size as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(kinds: &[AttentionKind]) -> KvShape {
        KvShape {
            layers: kinds
                .iter()
                .map(|&attention| LayerKv {
                    attention,
                    n_kv_heads: 2,
                    head_dim_k: 8,
                    head_dim_v: 8,
                })
                .collect(),
            element: KvElement::F16,
        }
    }

    const FULL: AttentionKind = AttentionKind::Full;
    const WIN: AttentionKind = AttentionKind::SlidingWindow { window: 32 };

    #[test]
    fn full_layers_price_every_position_and_windows_cap_at_window_plus_chunk() {
        let s = shape(&[WIN, WIN, FULL]);
        assert_eq!(s.full_bytes_per_position(), 64);
        assert_eq!(s.window_bytes_per_position(), 128);
        assert_eq!(s.window_price_positions(16), 48);
        assert_eq!(s.request_bytes(10, 16), 10 * 64 + 10 * 128);
        assert_eq!(s.request_bytes(1000, 16), 1000 * 64 + 48 * 128);
    }

    #[test]
    fn blocks_round_up_and_one_token_holds_one_block() {
        let plan = KvPlan::from_blocks(&shape(&[FULL]), 10, 16, 4, 8).unwrap();
        assert_eq!(plan.blocks_for(0), 1);
        assert_eq!(plan.blocks_for(1), 1);
        assert_eq!(plan.blocks_for(16), 1);
        assert_eq!(plan.blocks_for(17), 2);
        assert_eq!(plan.requests_that_fit(32), 4, "max_seqs binds");
        assert_eq!(plan.requests_that_fit(64), 2, "blocks bind");
    }

    #[test]
    fn memory_sets_aside_window_seats_before_counting_blocks() {
        let s = shape(&[WIN, FULL]);
        // seat = 4 window pages ((32 + 16 - 2) / 16 + 2) of 16 positions * 64 B =
        // 4096 per request, block = 16 * 64 = 1024.
        let plan = KvPlan::from_memory(&s, 3 * 4096 + 10 * 1024 + 1000, 16, 3, 16).unwrap();
        assert_eq!(
            (
                plan.seat_pages,
                plan.seat_bytes,
                plan.block_bytes,
                plan.n_blocks
            ),
            (4, 4096, 1024, 10)
        );
        assert_eq!(plan.window_pages(), 12);
        assert_eq!(plan.total_bytes(), 3 * 4096 + 10 * 1024);
        assert_eq!(plan.request_limit_bytes(), 10 * 1024 + 4096);
        assert!(
            KvPlan::from_memory(&s, 3 * 4096 - 1, 16, 3, 16)
                .unwrap_err()
                .to_string()
                .contains("--kv-memory")
        );
    }

    /// The window seat bound holds for every span start and length: brute force over
    /// small geometries.
    #[test]
    fn a_span_never_touches_more_window_pages_than_a_seat() {
        for ps in 1..6 {
            for window in 1..20 {
                for c in 1..12 {
                    for n in 0..40usize {
                        let first = (n + 1).saturating_sub(window) / ps;
                        let last = (n + c - 1) / ps;
                        let touched = (last - first + 1) as u64;
                        assert!(
                            touched <= window_pages_per_request(window, c, ps),
                            "ps {ps} window {window} span {c} at {n}: {touched}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn zero_knobs_are_refused() {
        let s = shape(&[FULL]);
        assert!(KvPlan::from_blocks(&s, 1, 0, 1, 1).is_err());
        assert!(KvPlan::from_memory(&s, 1 << 20, 16, 0, 1).is_err());
    }
}
