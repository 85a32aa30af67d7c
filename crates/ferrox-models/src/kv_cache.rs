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
//! not written (the model only attends to positions `<` its own). Memory for a
//! block or seat is allocated the first time it is handed out and reused after;
//! a pool may be unbounded (`n_blocks = None`), growing on demand.

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
        KvLayout {
            n_kv_heads: hp.n_kv_heads,
            head_dim_k: hp.head_dim_k,
            head_dim_v: hp.head_dim_v,
            layers,
            n_full,
            n_window,
            window,
        }
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

/// A pool of equal-sized buffers handed out by id, allocated on first use.
struct Pool {
    floats: usize,
    cap: Option<usize>,
    buffers: Vec<Box<[f32]>>,
    free: Vec<u32>,
}

impl Pool {
    fn new(floats: usize, cap: Option<usize>) -> Pool {
        Pool {
            floats,
            cap,
            buffers: Vec::new(),
            free: Vec::new(),
        }
    }

    fn available(&self) -> Option<usize> {
        self.cap.map(|c| c - self.buffers.len() + self.free.len())
    }

    fn take(&mut self, n: usize) -> Option<Vec<u32>> {
        if self.available().is_some_and(|a| a < n) {
            return None;
        }
        let mut ids = Vec::with_capacity(n);
        while ids.len() < n {
            match self.free.pop() {
                Some(id) => ids.push(id),
                None => {
                    ids.push(self.buffers.len() as u32);
                    self.buffers.push(vec![0.0; self.floats].into_boxed_slice());
                }
            }
        }
        Some(ids)
    }

    fn give_back(&mut self, ids: impl IntoIterator<Item = u32>) {
        self.free.extend(ids);
    }
}

/// The cache: a block pool and a seat pool, with their free lists.
pub struct KvCache {
    layout: KvLayout,
    block_size: usize,
    blocks: Pool,
    seat_positions: usize,
    seats: Pool,
}

impl KvCache {
    /// A cache of `n_blocks` blocks of `block_size` positions (`None`: as many as
    /// requested) and `n_seats` window seats that accept spans of up to `max_span`
    /// positions at a time.
    pub fn new(
        layout: KvLayout,
        block_size: usize,
        n_blocks: impl Into<Option<usize>>,
        n_seats: usize,
        max_span: usize,
    ) -> Result<KvCache, ModelError> {
        if block_size == 0 || max_span == 0 {
            return Err(ModelError::KvPlan(
                "block size and span must be at least 1".into(),
            ));
        }
        let seat_positions = if layout.n_window > 0 {
            layout.window + max_span
        } else {
            0
        };
        let block_floats = layout.n_full * layout.per_position_layer() * block_size;
        let seat_floats = layout.n_window * layout.per_position_layer() * seat_positions;
        let n_seats = if layout.n_window > 0 { n_seats } else { 0 };
        Ok(KvCache {
            block_size,
            blocks: Pool::new(block_floats, n_blocks.into()),
            seat_positions,
            seats: Pool::new(seat_floats, Some(n_seats)),
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

    /// Blocks in the pool (`None`: unbounded).
    pub fn n_blocks(&self) -> Option<usize> {
        self.blocks.cap
    }

    /// Blocks not held by any sequence (`None`: unbounded).
    pub fn free_blocks(&self) -> Option<usize> {
        self.blocks.available()
    }

    /// Blocks held by sequences now.
    pub fn used_blocks(&self) -> usize {
        self.blocks.buffers.len() - self.blocks.free.len()
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
            seq.seat = Some(self.seats.take(1)?[0]);
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
        let need = positions
            .div_ceil(self.block_size)
            .saturating_sub(seq.blocks.len());
        match self.blocks.take(need) {
            Some(ids) => {
                seq.blocks.extend(ids);
                true
            }
            None => false,
        }
    }

    /// Returns every block and the seat of `seq` to the pool.
    pub fn free(&mut self, seq: SeqKv) {
        self.blocks.give_back(seq.blocks.into_iter().rev());
        if let Some(s) = seq.seat {
            self.seats.give_back([s]);
        }
    }

    /// Where position `pos` of `seq` lives in `layer`: (in a seat?, buffer id, key
    /// offset, value offset, key stride between heads, value stride between heads).
    #[inline]
    fn locate(
        &self,
        seq: &SeqKv,
        layer: usize,
        pos: usize,
    ) -> (bool, usize, usize, usize, usize, usize) {
        let l = &self.layout;
        let (dk, dv, h) = (l.head_dim_k, l.head_dim_v, l.n_kv_heads);
        let (in_seat, id, index, n_kind, positions, slot) = match l.layers[layer] {
            LayerSlot::Full(fi) => (
                false,
                seq.blocks[pos / self.block_size] as usize,
                fi,
                l.n_full,
                self.block_size,
                pos % self.block_size,
            ),
            LayerSlot::Window(wi, _) => (
                true,
                seq.seat.expect("window models give every sequence a seat") as usize,
                wi,
                l.n_window,
                self.seat_positions,
                pos % self.seat_positions,
            ),
        };
        let keys = index * h * positions * dk;
        let values = n_kind * h * positions * dk + index * h * positions * dv;
        (
            in_seat,
            id,
            keys + slot * dk,
            values + slot * dv,
            positions * dk,
            positions * dv,
        )
    }

    /// Stores the keys `k` (`[n_kv_heads][head_dim_k]`) and values `v` of position `pos`.
    pub fn write(&mut self, seq: &SeqKv, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let (dk, dv) = (self.layout.head_dim_k, self.layout.head_dim_v);
        let (in_seat, id, ko, vo, ks, vs) = self.locate(seq, layer, pos);
        let store = if in_seat {
            &mut self.seats.buffers[id]
        } else {
            &mut self.blocks.buffers[id]
        };
        for h in 0..self.layout.n_kv_heads {
            store[ko + h * ks..ko + h * ks + dk].copy_from_slice(&k[h * dk..(h + 1) * dk]);
            store[vo + h * vs..vo + h * vs + dv].copy_from_slice(&v[h * dv..(h + 1) * dv]);
        }
    }

    /// Calls `f(first position, keys, values)` for each contiguous run of the
    /// positions `from..to` of kv head `head` of `seq` in `layer`, in position order;
    /// `keys` holds `run * head_dim_k` values, `values` `run * head_dim_v`.
    pub fn for_each_run(
        &self,
        seq: &SeqKv,
        layer: usize,
        head: usize,
        from: usize,
        to: usize,
        mut f: impl FnMut(usize, &[f32], &[f32]),
    ) {
        let (dk, dv) = (self.layout.head_dim_k, self.layout.head_dim_v);
        let run_len = match self.layout.layers[layer] {
            LayerSlot::Full(_) => self.block_size,
            LayerSlot::Window(..) => self.seat_positions,
        };
        let mut p = from;
        while p < to {
            let (in_seat, id, ko, vo, ks, vs) = self.locate(seq, layer, p);
            let n = (run_len - p % run_len).min(to - p);
            let store = if in_seat {
                &self.seats.buffers[id]
            } else {
                &self.blocks.buffers[id]
            };
            let (k0, v0) = (ko + head * ks, vo + head * vs);
            f(p, &store[k0..k0 + n * dk], &store[v0..v0 + n * dv]);
            p += n;
        }
    }

    /// The key and value of kv head `head` at position `pos` of `seq` in `layer`.
    #[inline]
    pub fn read(&self, seq: &SeqKv, layer: usize, pos: usize, head: usize) -> (&[f32], &[f32]) {
        let (dk, dv) = (self.layout.head_dim_k, self.layout.head_dim_v);
        let (in_seat, id, ko, vo, ks, vs) = self.locate(seq, layer, pos);
        let store = if in_seat {
            &self.seats.buffers[id]
        } else {
            &self.blocks.buffers[id]
        };
        (
            &store[ko + head * ks..ko + head * ks + dk],
            &store[vo + head * vs..vo + head * vs + dv],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TinyModel;

    fn layout() -> KvLayout {
        let file =
            ferrox_gguf::GgufFile::from_bytes(TinyModel::new(crate::Architecture::Gemma3).gguf())
                .unwrap();
        KvLayout::new(&HyperParams::from_metadata(&file.header().metadata).unwrap())
    }

    #[test]
    fn a_bounded_pool_refuses_what_it_cannot_supply_and_takes_nothing() {
        let mut c = KvCache::new(layout(), 4, 3, 1, 8).unwrap();
        assert!(c.alloc(13).is_none(), "4 blocks wanted, 3 exist");
        assert_eq!(c.free_blocks(), Some(3));
        let s = c.alloc(12).unwrap();
        assert_eq!(
            (s.blocks.len(), c.free_blocks(), c.used_blocks()),
            (3, Some(0), 3)
        );
        assert!(c.alloc(1).is_none(), "the only seat is taken");
        c.free(s);
        assert_eq!((c.free_blocks(), c.used_blocks()), (Some(3), 0));
    }

    #[test]
    fn an_unbounded_pool_grows_and_reuses_what_comes_back() {
        let mut c = KvCache::new(layout(), 4, None, 2, 8).unwrap();
        let a = c.alloc(40).unwrap();
        assert_eq!(
            (a.blocks.len(), c.free_blocks(), c.used_blocks()),
            (10, None, 10)
        );
        c.free(a);
        let b = c.alloc(8).unwrap();
        assert_eq!(c.used_blocks(), 2);
        assert_eq!(
            c.blocks.buffers.len(),
            10,
            "freed blocks are reused, not reallocated"
        );
        c.free(b);
    }

    #[test]
    fn positions_written_read_back_per_head_in_blocks_and_seats() {
        let mut c = KvCache::new(layout(), 4, None, 1, 8).unwrap();
        let s = c.alloc(20).unwrap();
        let l = c.layout().clone();
        let (kd, vd) = (l.n_kv_heads * l.head_dim_k, l.n_kv_heads * l.head_dim_v);
        for layer in 0..l.layers.len() {
            for pos in [0, 5, 19] {
                let k: Vec<f32> = (0..kd)
                    .map(|i| (layer * 1000 + pos * 10 + i) as f32)
                    .collect();
                let v: Vec<f32> = (0..vd)
                    .map(|i| -((layer * 1000 + pos * 10 + i) as f32))
                    .collect();
                c.write(&s, layer, pos, &k, &v);
            }
            for pos in [0, 5, 19] {
                for h in 0..l.n_kv_heads {
                    let (k, v) = c.read(&s, layer, pos, h);
                    assert_eq!(k[0], (layer * 1000 + pos * 10 + h * l.head_dim_k) as f32);
                    assert_eq!(v[0], -((layer * 1000 + pos * 10 + h * l.head_dim_v) as f32));
                }
            }
            // Runs visit the same values as position-by-position reads.
            for h in 0..l.n_kv_heads {
                let mut seen = Vec::new();
                c.for_each_run(&s, layer, h, 3, 20, |p0, k, v| {
                    for j in 0..k.len() / l.head_dim_k {
                        let (rk, rv) = c.read(&s, layer, p0 + j, h);
                        assert_eq!(
                            (
                                &k[j * l.head_dim_k..(j + 1) * l.head_dim_k],
                                &v[j * l.head_dim_v..(j + 1) * l.head_dim_v]
                            ),
                            (rk, rv)
                        );
                        seen.push(p0 + j);
                    }
                });
                assert_eq!(seen, (3..20).collect::<Vec<_>>());
            }
        }
    }
}
