//! KV *storage*: the bytes of KV pages, addressed by the page tables it is handed.
//! Which pages a sequence owns or shares is decided elsewhere (the engine's ledger);
//! this module only stores and reads.
//!
//! * Two pools of pages, each page `page_size` token positions:
//!   full-attention pages hold those positions for every full layer, window pages
//!   for every sliding-window layer. Position `p` of a sequence lives in page
//!   `table.full[p / page_size]` (full layers) or `table.window[p / page_size]`
//!   (window layers), slot `p % page_size`.
//! * A window table may have holes ([`NO_PAGE`]) for pages the sequence has slid
//!   past and given back; the model never reads there (a window layer attends only
//!   to its last `window` positions).
//!
//! Elements are f32, f16, q8_0 or q4_0 ([`KvElement`], one type for the
//! whole cache): f16 pages are written rounded to nearest, q8_0 and q4_0
//! pages in ggml's blocks of 32 (an f16 scale and 32 codes, quantized as
//! ggml's reference quantizer does, of each head's vector rotated:
//! [`rotate`]; keys less the model's [`KeyOffsets`] first), and all are
//! widened back exactly when read, so what a position reads depends on its
//! stored bits alone (`pages.rs`; reading back by head and run: `reads.rs`). A block
//! never straddles two heads or two positions: every head dimension is a
//! multiple of 32 ([`KvLayout::check_element`]).
//!
//! Layouts (in elements): a page holds, layer after layer of its pool, the
//! layer's keys `[n_kv_heads][page_size][head_dim_k]` then its values
//! `[n_kv_heads][page_size][head_dim_v]`, each in the layer's own shape (Gemma 4's
//! window and full layers differ). A shared-KV layer keeps none and reads the
//! place of the layer whose KV it shares.
//!
//! * Recurrent (gated delta-net) layers keep no KV: a sequence's table names a
//!   state slot (`table.state`), which holds every recurrent layer's state
//!   `[n_recurrent][DeltaNetParams::state_floats]` at the position the slot
//!   records. A span starting at 0 starts from a zero state; any other span must
//!   start where the slot's state is.
//!
//! Invariants: memory for a page id or a state slot is allocated the first time
//! it is written and kept for reuse; nothing here reads a position the caller has
//! not written (the model attends only to positions `<` its own, and those are
//! written first).

use std::fmt;
use std::str::FromStr;

use ferrox_core::DType;

use crate::hparams::{AttentionKind, DeltaNetParams, HyperParams};

mod offsets;
mod pages;
mod reads;

pub use offsets::KeyOffsets;
use pages::{KvPages, PageBuffers, rotated};
pub use pages::{rotate, rotate_back};

/// The type of the KV cache's elements.
///
/// The default is f16 ([`KvElement::default_for`]): half of f32's memory,
/// 0.0008-0.0010 nats of mean top-5 error on the real models (inside the
/// 0.005 budget), and no slower (docs/PERFORMANCE.md). The exact path keeps
/// f32, so that it stays the exact function. q8_0 takes 34 bytes per 32
/// values at 0.017 / 0.013 nats (SmolLM2 / Gemma 3, with the model's
/// [`KeyOffsets`]; budget 0.02).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KvElement {
    F32,
    /// IEEE half precision, as llama.cpp's default `-ctk f16`.
    F16,
    /// ggml's Q8_0 blocks (`-ctk q8_0`): 32 values as an f16 scale and 32
    /// signed bytes.
    #[serde(rename = "q8_0")]
    Q8_0,
    /// ggml's Q4_0 blocks (`-ctk q4_0`): 32 values as an f16 scale and 32
    /// nibbles.
    #[serde(rename = "q4_0")]
    Q4_0,
}

/// The names [`KvElement`] parses.
pub const KV_ELEMENT_NAMES: &str = "f32, f16, q8_0, q4_0";

impl KvElement {
    /// The element type a cache gets when none is asked for: f32 on the exact
    /// path (`--activations f32`), else f16.
    pub fn default_for(path: crate::ActivationPath) -> KvElement {
        match path {
            crate::ActivationPath::F32 => KvElement::F32,
            crate::ActivationPath::Int16 => KvElement::F16,
        }
    }

    /// The ggml type the elements are stored as.
    pub fn dtype(self) -> DType {
        match self {
            KvElement::F32 => DType::F32,
            KvElement::F16 => DType::F16,
            KvElement::Q8_0 => DType::Q8_0,
            KvElement::Q4_0 => DType::Q4_0,
        }
    }

    /// Bytes `n` values take (`n` a multiple of [`Self::block`]).
    pub fn row_bytes(self, n: usize) -> usize {
        let t = self.dtype();
        n / t.block_len() * t.block_bytes()
    }

    /// Bytes per value, on average.
    pub fn bytes_per_value(self) -> f64 {
        let t = self.dtype();
        t.block_bytes() as f64 / t.block_len() as f64
    }

    /// The values a row's length must be a multiple of.
    pub fn block(self) -> usize {
        self.dtype().block_len()
    }

    pub fn name(self) -> &'static str {
        match self {
            KvElement::F32 => "f32",
            KvElement::F16 => "f16",
            KvElement::Q8_0 => "q8_0",
            KvElement::Q4_0 => "q4_0",
        }
    }
}

/// A KV type the model's shape cannot take.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "--kv-type {element} stores blocks of {block} values, but layer {layer} has {what} of {dim}; use f16 or f32"
)]
pub struct KvElementUnfit {
    pub element: KvElement,
    pub block: usize,
    pub layer: usize,
    pub what: &'static str,
    pub dim: usize,
}

impl fmt::Display for KvElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A KV type name that is none of [`KV_ELEMENT_NAMES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown KV type {0:?} (one of: {KV_ELEMENT_NAMES})")]
pub struct UnknownKvElement(pub String);

impl FromStr for KvElement {
    type Err = UnknownKvElement;

    fn from_str(s: &str) -> Result<KvElement, UnknownKvElement> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(KvElement::F32),
            "f16" => Ok(KvElement::F16),
            "q8_0" => Ok(KvElement::Q8_0),
            "q4_0" => Ok(KvElement::Q4_0),
            _ => Err(UnknownKvElement(s.to_string())),
        }
    }
}

/// A hole in a window page table: the page was slid past and given back.
pub const NO_PAGE: u32 = u32::MAX;

/// Where one layer's KV lies in a page of its pool, and its shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvPlace {
    /// Floats per position of the pool's layers stored before this one.
    pub offset: usize,
    pub n_kv_heads: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
}

impl KvPlace {
    /// Floats one position of this layer takes (keys and values).
    fn floats_per_position(&self) -> usize {
        self.n_kv_heads * (self.head_dim_k + self.head_dim_v)
    }
}

/// Where each layer's KV lives. A shared-KV layer has the slot of the layer
/// whose KV it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerSlot {
    /// In full-attention pages.
    Full(KvPlace),
    /// In window pages, with the window.
    Window(KvPlace, usize),
    /// Index among recurrent layers (the sequence's state slot).
    Recurrent(usize),
}

/// The KV storage geometry of a model.
#[derive(Clone, Debug)]
pub struct KvLayout {
    /// `[n_layers]`
    pub layers: Vec<LayerSlot>,
    /// Floats one position takes in a full page, over every full layer.
    pub full_floats: usize,
    /// Floats one position takes in a window page, over every window layer.
    pub window_floats: usize,
    /// The largest window of any window layer (0 without window layers).
    pub window: usize,
    pub n_recurrent: usize,
    /// Floats of one recurrent layer's state (0 without recurrent layers).
    pub state_floats: usize,
    /// The type of the KV elements (recurrent states are f32 whatever it is).
    pub element: KvElement,
}

impl KvLayout {
    /// The layout of a model.
    pub fn new(hp: &HyperParams) -> KvLayout {
        let (mut full_floats, mut window_floats, mut window, mut n_recurrent) = (0, 0, 0, 0);
        let mut layers: Vec<LayerSlot> = Vec::with_capacity(hp.n_layers);
        for (i, (kind, a)) in hp.layers.iter().zip(&hp.attention).enumerate() {
            if a.kv_layer != i {
                layers.push(layers[a.kv_layer]);
                continue;
            }
            let place = |offset: &mut usize| {
                let p = KvPlace {
                    offset: *offset,
                    n_kv_heads: a.n_kv_heads,
                    head_dim_k: a.head_dim_k,
                    head_dim_v: a.head_dim_v,
                };
                *offset += p.floats_per_position();
                p
            };
            layers.push(match *kind {
                AttentionKind::Full => LayerSlot::Full(place(&mut full_floats)),
                AttentionKind::SlidingWindow { window: w } => {
                    window = window.max(w);
                    LayerSlot::Window(place(&mut window_floats), w)
                }
                AttentionKind::Recurrent => {
                    n_recurrent += 1;
                    LayerSlot::Recurrent(n_recurrent - 1)
                }
            });
        }
        KvLayout {
            layers,
            full_floats,
            window_floats,
            window,
            n_recurrent,
            state_floats: hp
                .delta_net
                .as_ref()
                .map_or(0, DeltaNetParams::state_floats),
            element: KvElement::F32,
        }
    }

    /// This layout with KV elements of type `element`; panics where the
    /// layout cannot take it ([`Self::check_element`] says why first).
    pub fn with_element(self, element: KvElement) -> KvLayout {
        if let Err(e) = self.check_element(element) {
            panic!("{e}");
        }
        KvLayout { element, ..self }
    }

    /// Whether every head's keys and values fill whole blocks of `element`.
    pub fn check_element(&self, element: KvElement) -> Result<(), KvElementUnfit> {
        let block = element.block();
        for (layer, slot) in self.layers.iter().enumerate() {
            let (LayerSlot::Full(p) | LayerSlot::Window(p, _)) = slot else {
                continue;
            };
            for (what, dim) in [("keys", p.head_dim_k), ("values", p.head_dim_v)] {
                if !dim.is_multiple_of(block) {
                    return Err(KvElementUnfit {
                        element,
                        block,
                        layer,
                        what,
                        dim,
                    });
                }
            }
        }
        Ok(())
    }

    /// Floats of one sequence's whole recurrent state (0 without recurrent layers).
    pub fn sequence_state_floats(&self) -> usize {
        self.n_recurrent * self.state_floats
    }

    /// The window of window layers, if the model has any.
    pub fn window(&self) -> Option<usize> {
        (self.window_floats > 0).then_some(self.window)
    }

    /// Whether the model has full-attention layers.
    pub fn has_full(&self) -> bool {
        self.full_floats > 0
    }

    /// Layer `layer`'s place, if it keeps or reads KV.
    pub fn place(&self, layer: usize) -> Option<KvPlace> {
        match self.layers[layer] {
            LayerSlot::Full(p) | LayerSlot::Window(p, _) => Some(p),
            LayerSlot::Recurrent(_) => None,
        }
    }
}

/// One sequence's page tables, in position order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageTable {
    /// Full-attention pages.
    pub full: Vec<u32>,
    /// Window pages ([`NO_PAGE`] where slid past); empty without window layers.
    pub window: Vec<u32>,
    /// The recurrent-state slot (models with recurrent layers).
    pub state: Option<u32>,
}

/// The bytes of every KV page.
pub struct KvStore {
    layout: KvLayout,
    page_size: usize,
    full: KvPages,
    window: KvPages,
    /// Recurrent-state slots: `[slot]` each `[n_recurrent][state_floats]`.
    states: PageBuffers<f32>,
    /// The position each state slot's state is at (0 for one never written).
    state_at: Vec<usize>,
    /// Next id [`KvStore::fresh_table`] hands out.
    next_fresh: u32,
    /// Subtracted from keys before they are stored ([`KeyOffsets`]; none
    /// unless [`KvStore::with_key_offsets`] set them).
    key_offsets: KeyOffsets,
}

/// Why a span cannot run on the recurrent state its table names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("the sequence has no recurrent-state slot")]
    NoSlot,
    #[error("recurrent-state slot {slot} holds the state at position {at}, not at {start}")]
    Elsewhere { slot: u32, at: usize, start: usize },
}

/// Where one position of one layer lives.
struct Place {
    window: bool,
    page: u32,
    key: usize,
    value: usize,
    key_stride: usize,
    value_stride: usize,
    shape: KvPlace,
}

impl KvStore {
    /// Storage for pages of `page_size` positions (at least 1).
    pub fn new(layout: KvLayout, page_size: usize) -> KvStore {
        assert!(page_size > 0, "a KV page holds at least one position");
        KvStore {
            full: KvPages::new(layout.element, layout.full_floats * page_size),
            window: KvPages::new(layout.element, layout.window_floats * page_size),
            states: PageBuffers::new(layout.sequence_state_floats()),
            state_at: Vec::new(),
            page_size,
            layout,
            next_fresh: 0,
            key_offsets: KeyOffsets::default(),
        }
    }

    /// The store with `offsets` subtracted from every key it stores, and added
    /// back by [`Self::read`]. Only for the rotated (8- and 4-bit) elements,
    /// where they pay: panics on another element, or on an offset whose
    /// length is not its layer's `n_kv_heads * head_dim_k`.
    pub fn with_key_offsets(mut self, offsets: KeyOffsets) -> KvStore {
        assert!(
            self.rotated(),
            "key offsets are for 8- and 4-bit KV, not {}",
            self.layout.element
        );
        assert_eq!(
            offsets.n_layers(),
            self.layout.layers.len(),
            "one offset slot per layer"
        );
        for layer in 0..offsets.n_layers() {
            if let Some(c) = offsets.of(layer) {
                let p = self.layout.place(layer).expect("an offset layer keeps KV");
                assert_eq!(
                    c.len(),
                    p.n_kv_heads * p.head_dim_k,
                    "layer {layer}'s key offset"
                );
            }
        }
        self.key_offsets = offsets;
        self
    }

    /// The layout.
    pub fn layout(&self) -> &KvLayout {
        &self.layout
    }

    /// Positions per page.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// A table of never-shared pages covering `positions` positions in both pools,
    /// for callers that run one model without the engine's ledger (benchmarks,
    /// tests). Never mix it with a ledger's ids on one store.
    pub fn fresh_table(&mut self, positions: usize) -> PageTable {
        let n = positions.div_ceil(self.page_size) as u32;
        let ids: Vec<u32> = (self.next_fresh..self.next_fresh + n).collect();
        self.next_fresh += n;
        PageTable {
            window: if self.layout.window().is_some() {
                ids.clone()
            } else {
                Vec::new()
            },
            state: (self.layout.n_recurrent > 0).then(|| self.next_fresh - n),
            full: ids,
        }
    }

    /// Whether a span of `table` may start at `start` on its recurrent state: at
    /// 0 (a fresh state), or where its slot's state is. Always for models
    /// without recurrent layers.
    pub fn check_state(&self, table: &PageTable, start: usize) -> Result<(), StateError> {
        if self.layout.n_recurrent == 0 {
            return Ok(());
        }
        let slot = table.state.ok_or(StateError::NoSlot)?;
        let at = self.state_at.get(slot as usize).copied().unwrap_or(0);
        if start == 0 || start == at {
            Ok(())
        } else {
            Err(StateError::Elsewhere { slot, at, start })
        }
    }

    /// Zeroes the state of `table`'s slot (a sequence starting at position 0).
    pub fn reset_state(&mut self, table: &PageTable) {
        if let Some(slot) = table.state {
            self.states.page_mut(slot).fill(0.0);
            self.set_state_at(slot, 0);
        }
    }

    /// Records that `table`'s slot now holds the state at `pos`.
    pub fn state_reached(&mut self, table: &PageTable, pos: usize) {
        if let Some(slot) = table.state {
            self.set_state_at(slot, pos);
        }
    }

    fn set_state_at(&mut self, slot: u32, pos: usize) {
        let i = slot as usize;
        if i >= self.state_at.len() {
            self.state_at.resize(i + 1, 0);
        }
        self.state_at[i] = pos;
    }

    /// Copies slot `from`'s whole state, and the position it is at, into slot
    /// `to` (a checkpoint, or a snapshot restored). `from` must have been written.
    pub fn copy_state(&mut self, from: u32, to: u32) {
        if from == to {
            return;
        }
        let i = from as usize;
        let src = self
            .states
            .pages
            .get_mut(i)
            .and_then(Option::take)
            .expect("a state slot is written before it is copied");
        self.states.page_mut(to).copy_from_slice(&src);
        self.states.pages[i] = Some(src);
        let at = self.state_at.get(i).copied().unwrap_or(0);
        self.set_state_at(to, at);
    }

    /// Copies recurrent layer `index`'s state from `table`'s slot into slot
    /// `to`, mid-span ([`crate::decoder::Want::Verify`]); once every layer's
    /// is copied, [`Self::state_copied`] records the position.
    pub fn copy_layer_state(&mut self, table: &PageTable, index: usize, to: u32) {
        let from = table
            .state
            .expect("a recurrent model's table names a state slot");
        let f = self.layout.state_floats;
        let (src, dst) = self.states.pair_mut(from, to);
        dst[index * f..(index + 1) * f].copy_from_slice(&src[index * f..(index + 1) * f]);
    }

    /// Records that slot `slot` holds the state at `pos` (every recurrent
    /// layer's copied there by [`Self::copy_layer_state`]).
    pub fn state_copied(&mut self, slot: u32, pos: usize) {
        self.set_state_at(slot, pos);
    }

    /// Recurrent layer `index`'s state in `table`'s slot: `[state_floats]`.
    /// Panics without a slot (checked by [`Self::check_state`]).
    pub fn state_mut(&mut self, table: &PageTable, index: usize) -> &mut [f32] {
        let slot = table
            .state
            .expect("a recurrent model's table names a state slot");
        let f = self.layout.state_floats;
        &mut self.states.page_mut(slot)[index * f..(index + 1) * f]
    }

    /// Positions `[from, to)` the tables of `table` can be written and read at:
    /// `Err` names the first position without a page.
    pub fn check_covers(&self, table: &PageTable, from: usize, to: usize) -> Result<(), usize> {
        let ps = self.page_size;
        if self.layout.has_full() && to > table.full.len() * ps {
            return Err(table.full.len() * ps);
        }
        if let Some(w) = self.layout.window() {
            let lo = (from + 1).saturating_sub(w) / ps;
            for page in lo..to.div_ceil(ps) {
                if table.window.get(page).is_none_or(|&id| id == NO_PAGE) {
                    return Err(page * ps);
                }
            }
        }
        Ok(())
    }

    fn locate(&self, table: &PageTable, layer: usize, pos: usize) -> Place {
        let ps = self.page_size;
        let (window, p, page) = match self.layout.layers[layer] {
            LayerSlot::Full(p) => (false, p, table.full[pos / ps]),
            LayerSlot::Window(p, _) => (true, p, table.window[pos / ps]),
            LayerSlot::Recurrent(_) => unreachable!("a recurrent layer {layer} keeps no KV"),
        };
        assert_ne!(page, NO_PAGE, "position {pos} was slid past");
        let (dk, dv) = (p.head_dim_k, p.head_dim_v);
        let slot = pos % ps;
        let keys = p.offset * ps;
        let values = keys + p.n_kv_heads * ps * dk;
        Place {
            window,
            page,
            key: keys + slot * dk,
            value: values + slot * dv,
            key_stride: ps * dk,
            value_stride: ps * dv,
            shape: p,
        }
    }

    /// Stores the keys `k` (`[n_kv_heads][head_dim_k]`) and values `v` of
    /// position `pos`, in the layer's own shape.
    pub fn write(&mut self, table: &PageTable, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let at = self.locate(table, layer, pos);
        let (dk, dv, heads) = (
            at.shape.head_dim_k,
            at.shape.head_dim_v,
            at.shape.n_kv_heads,
        );
        assert!(
            k.len() == heads * dk && v.len() == heads * dv,
            "layer {layer} stores {heads} heads of {dk} + {dv}"
        );
        let offset = self.key_offsets.of(layer);
        let store = if at.window {
            &mut self.window
        } else {
            &mut self.full
        };
        for h in 0..heads {
            let (ko, vo) = (at.key + h * at.key_stride, at.value + h * at.value_stride);
            let key_offset = offset.map(|c| &c[h * dk..(h + 1) * dk]);
            store.put(at.page, ko, &k[h * dk..(h + 1) * dk], key_offset);
            store.put(at.page, vo, &v[h * dv..(h + 1) * dv], None);
        }
    }

    /// Whether the runs hold every key and value rotated ([`rotate`]): a
    /// query is rotated before its dot products with them, and a weighted
    /// sum of them rotated back. Their keys are also less the layer's
    /// [`KeyOffsets`], if any, which shifts every score of a query alike.
    /// [`Self::read`] rotates back and adds the offset itself.
    pub fn rotated(&self) -> bool {
        rotated(self.layout.element.dtype())
    }

    fn stored(&self, at: &Place) -> &KvPages {
        if at.window { &self.window } else { &self.full }
    }
}
