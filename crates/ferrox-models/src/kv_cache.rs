//! The KV cache in the paged layout the engine allocates from.
//!
//! * Full-attention layers: a pool of blocks of `block_size` token positions; one
//!   block holds those positions for every full layer. A sequence reaches its
//!   positions through its block table (`SeqKv::blocks`): position `p` lives in block
//!   `blocks[p / block_size]`, slot `p % block_size`.
//! * Sliding-window layers: each sequence holds one seat, a ring of
//!   `window + max_span` positions (slot `p % seat_positions`), so these layers
//!   never hold more than their window plus the span being written.
//!
//! Layouts (f32 elements):
//! * block: `[n_full_layers][n_kv_heads][block_size][head_dim_k]` keys, then the
//!   same with `head_dim_v` for values.
//! * seat: `[n_window_layers][n_kv_heads][seat_positions][head_dim_k]` keys, then values.
//!
//! Invariants: a block or seat id is owned by at most one `SeqKv` at a time
//! (`alloc`/`free` keep free lists); nothing here reads a position a sequence has
//! not written (the model only attends to positions `<` its own).

use crate::error::ModelError;
use crate::hparams::{AttentionKind, HyperParams};

/// Where each layer's KV lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerSlot {
    /// Index among full-attention layers (paged blocks).
    Full(usize),
    /// Index among sliding-window layers (seats), with the window.
    Window(usize, usize),
}

/// The KV storage geometry of a model.
#[derive(Clone, Debug)]
pub struct KvLayout {
    pub n_kv_heads: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    /// `[n_layers]`
    pub layers: Vec<LayerSlot>,
    pub n_full: usize,
    pub n_window: usize,
    pub window: usize,
}

impl KvLayout {
    /// The layout of a model.
    pub fn new(hp: &HyperParams) -> KvLayout {
        let (mut n_full, mut n_window, mut window) = (0, 0, 0);
        let layers = hp
            .layers
            .iter()
            .map(|k| match *k {
                AttentionKind::Full => {
                    n_full += 1;
                    LayerSlot::Full(n_full - 1)
                }
                AttentionKind::SlidingWindow { window: w } => {
                    n_window += 1;
                    window = window.max(w);
                    LayerSlot::Window(n_window - 1, w)
                }
            })
            .collect();
        KvLayout { n_kv_heads: hp.n_kv_heads, head_dim_k: hp.head_dim_k, head_dim_v: hp.head_dim_v, layers, n_full, n_window, window }
    }

    fn per_position_layer(&self) -> usize {
        self.n_kv_heads * (self.head_dim_k + self.head_dim_v)
    }
}

/// One sequence's share of the cache.
#[derive(Debug, Default)]
pub struct SeqKv {
    /// Block table: block ids in position order.
    pub blocks: Vec<u32>,
    /// Window seat, for models with window layers.
    pub seat: Option<u32>,
}

/// The cache: a block pool and a seat pool, with their free lists.
pub struct KvCache {
    layout: KvLayout,
    block_size: usize,
    n_blocks: usize,
    blocks: Vec<f32>,
    free_blocks: Vec<u32>,
    seat_positions: usize,
    seats: Vec<f32>,
    free_seats: Vec<u32>,
}

impl KvCache {
    /// A cache of `n_blocks` blocks of `block_size` positions and `n_seats` window
    /// seats that accept spans of up to `max_span` positions at a time.
    pub fn new(layout: KvLayout, block_size: usize, n_blocks: usize, n_seats: usize, max_span: usize) -> Result<KvCache, ModelError> {
        if block_size == 0 || max_span == 0 {
            return Err(ModelError::KvPlan("block size and span must be at least 1".into()));
        }
        let seat_positions = if layout.n_window > 0 { layout.window + max_span } else { 0 };
        let block_floats = layout.n_full * layout.per_position_layer() * block_size;
        let seat_floats = layout.n_window * layout.per_position_layer() * seat_positions;
        let too_big = || ModelError::KvPlan(format!("{n_blocks} blocks and {n_seats} seats overflow memory"));
        let blocks = vec![0.0; block_floats.checked_mul(n_blocks).ok_or_else(too_big)?];
        let seats = vec![0.0; seat_floats.checked_mul(if layout.n_window > 0 { n_seats } else { 0 }).ok_or_else(too_big)?];
        Ok(KvCache {
            block_size,
            n_blocks,
            blocks,
            free_blocks: (0..n_blocks as u32).rev().collect(),
            seat_positions,
            seats,
            free_seats: if layout.n_window > 0 { (0..n_seats as u32).rev().collect() } else { Vec::new() },
            layout,
        })
    }

    /// The layout.
    pub fn layout(&self) -> &KvLayout {
        &self.layout
    }

    /// Positions per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the pool.
    pub fn n_blocks(&self) -> usize {
        self.n_blocks
    }

    /// Blocks not held by any sequence.
    pub fn free_blocks(&self) -> usize {
        self.free_blocks.len()
    }

    /// The longest span one forward call may write per sequence (`None`: unbounded).
    pub fn max_span(&self) -> Option<usize> {
        (self.layout.n_window > 0).then(|| self.seat_positions - self.layout.window)
    }

    /// Positions `seq` can hold without growing.
    pub fn capacity(&self, seq: &SeqKv) -> usize {
        seq.blocks.len() * self.block_size
    }

    /// A new sequence with room for `positions` positions; `None` if the pool cannot
    /// supply the blocks or a seat (nothing is taken then).
    pub fn alloc(&mut self, positions: usize) -> Option<SeqKv> {
        let mut seq = SeqKv::default();
        if self.layout.n_window > 0 {
            seq.seat = Some(self.free_seats.pop()?);
        }
        if !self.grow(&mut seq, positions) {
            self.free(seq);
            return None;
        }
        Some(seq)
    }

    /// Grows `seq` to hold `positions` positions; false (and no change) if the pool
    /// cannot supply the blocks.
    pub fn grow(&mut self, seq: &mut SeqKv, positions: usize) -> bool {
        let need = positions.div_ceil(self.block_size).saturating_sub(seq.blocks.len());
        if need > self.free_blocks.len() {
            return false;
        }
        let at = self.free_blocks.len() - need;
        seq.blocks.extend(self.free_blocks.drain(at..).rev());
        true
    }

    /// Returns every block and the seat of `seq` to the pool.
    pub fn free(&mut self, seq: SeqKv) {
        self.free_blocks.extend(seq.blocks.into_iter().rev());
        if let Some(s) = seq.seat {
            self.free_seats.push(s);
        }
    }

    /// Offsets of position `pos` of `seq` in `layer`: (storage is seats?, key offset,
    /// value offset) for kv head 0; heads follow at a fixed stride.
    #[inline]
    fn locate(&self, seq: &SeqKv, layer: usize, pos: usize) -> (bool, usize, usize, usize, usize) {
        let l = &self.layout;
        let (dk, dv, h) = (l.head_dim_k, l.head_dim_v, l.n_kv_heads);
        match l.layers[layer] {
            LayerSlot::Full(fi) => {
                let block = seq.blocks[pos / self.block_size] as usize;
                let slot = pos % self.block_size;
                let base = block * l.n_full * l.per_position_layer() * self.block_size;
                let keys = base + fi * h * self.block_size * dk;
                let values = base + l.n_full * h * self.block_size * dk + fi * h * self.block_size * dv;
                (false, keys + slot * dk, values + slot * dv, self.block_size * dk, self.block_size * dv)
            }
            LayerSlot::Window(wi, _) => {
                let seat = seq.seat.expect("window models give every sequence a seat") as usize;
                let sp = self.seat_positions;
                let slot = pos % sp;
                let base = seat * l.n_window * l.per_position_layer() * sp;
                let keys = base + wi * h * sp * dk;
                let values = base + l.n_window * h * sp * dk + wi * h * sp * dv;
                (true, keys + slot * dk, values + slot * dv, sp * dk, sp * dv)
            }
        }
    }

    /// Stores the keys `k` (`[n_kv_heads][head_dim_k]`) and values `v` of position `pos`.
    pub fn write(&mut self, seq: &SeqKv, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let (dk, dv) = (self.layout.head_dim_k, self.layout.head_dim_v);
        let (in_seats, ko, vo, ks, vs) = self.locate(seq, layer, pos);
        let store = if in_seats { &mut self.seats } else { &mut self.blocks };
        for h in 0..self.layout.n_kv_heads {
            store[ko + h * ks..ko + h * ks + dk].copy_from_slice(&k[h * dk..(h + 1) * dk]);
            store[vo + h * vs..vo + h * vs + dv].copy_from_slice(&v[h * dv..(h + 1) * dv]);
        }
    }

    /// The key and value of kv head `head` at position `pos` of `seq` in `layer`.
    #[inline]
    pub fn read(&self, seq: &SeqKv, layer: usize, pos: usize, head: usize) -> (&[f32], &[f32]) {
        let (dk, dv) = (self.layout.head_dim_k, self.layout.head_dim_v);
        let (in_seats, ko, vo, ks, vs) = self.locate(seq, layer, pos);
        let store = if in_seats { &self.seats } else { &self.blocks };
        (&store[ko + head * ks..ko + head * ks + dk], &store[vo + head * vs..vo + head * vs + dv])
    }
}
