//! Reading positions back as f32: the runs of a head's positions that lie
//! in one page, widened one run at a time, and one position.

use std::cell::RefCell;

use super::pages::KvPages;
use super::{KvStore, PageTable, Place, rotate_back};

/// The keys or the values of a head's runs.
#[derive(Clone, Copy)]
enum Half {
    Keys,
    Values,
}

thread_local! {
    /// Widened keys and values of one run of f16 or block pages.
    static WIDENED: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

impl KvStore {
    /// Calls `f(first position, keys)` for each run of the positions
    /// `from..to` of kv head `head` in `layer` that lies in one page, in
    /// position order; `keys` holds `run * head_dim_k` values. Runs end at
    /// page boundaries only, so they depend on positions alone. Runs of any
    /// type but f32 are widened first (exactly), into buffers of the calling
    /// thread; `f` must not call this again. In a rotated cache
    /// ([`Self::rotated`]) they hold every vector as stored, rotated.
    pub fn for_each_key_run(
        &self,
        table: &PageTable,
        layer: usize,
        head: usize,
        from: usize,
        to: usize,
        f: impl FnMut(usize, &[f32]),
    ) {
        self.for_each_half_run(table, layer, head, from..to, Half::Keys, f);
    }

    /// [`Self::for_each_key_run`] over the values.
    pub fn for_each_value_run(
        &self,
        table: &PageTable,
        layer: usize,
        head: usize,
        from: usize,
        to: usize,
        f: impl FnMut(usize, &[f32]),
    ) {
        self.for_each_half_run(table, layer, head, from..to, Half::Values, f);
    }

    /// [`Self::for_each_key_run`] over the keys or the values.
    fn for_each_half_run(
        &self,
        table: &PageTable,
        layer: usize,
        head: usize,
        positions: std::ops::Range<usize>,
        half: Half,
        mut f: impl FnMut(usize, &[f32]),
    ) {
        // Where the half's run starts, and its vectors' width.
        let pick = |at: &Place, (k0, v0): (usize, usize)| match half {
            Half::Keys => (k0, at.shape.head_dim_k),
            Half::Values => (v0, at.shape.head_dim_v),
        };
        let ahead = |store: &KvPages, at: &Place, n: usize, offsets| {
            let (first, width) = pick(at, offsets);
            store.prefetch(at.page, first, n * width)
        };
        self.runs(
            table,
            layer,
            head,
            positions,
            ahead,
            |store, at, p, n, offsets| {
                let (first, width) = pick(at, offsets);
                WIDENED.with_borrow_mut(|(ks, vs)| {
                    let scratch = match half {
                        Half::Keys => ks,
                        Half::Values => vs,
                    };
                    store.with(at.page, first, n * width, scratch, |run| f(p, run))
                });
            },
        );
    }

    /// Calls `f(pages, place, first position, run length, (key offset, value
    /// offset))` for each run of `positions` of kv head `head` in `layer` that
    /// lies in one page, in position order, and `ahead` with the next run's
    /// (if any) just before: each run is in another page, where the hardware
    /// prefetcher would only find it once read, so the callers ask for it
    /// while the run before is computed on.
    fn runs(
        &self,
        table: &PageTable,
        layer: usize,
        head: usize,
        positions: std::ops::Range<usize>,
        ahead: impl Fn(&KvPages, &Place, usize, (usize, usize)),
        mut f: impl FnMut(&KvPages, &Place, usize, usize, (usize, usize)),
    ) {
        let ps = self.page_size;
        let run = |p: usize| {
            let at = self.locate(table, layer, p);
            let n = (ps - p % ps).min(positions.end - p);
            let offsets = (
                at.key + head * at.key_stride,
                at.value + head * at.value_stride,
            );
            (at, n, offsets)
        };
        let mut p = positions.start;
        let mut next = (p < positions.end).then(|| run(p));
        while let Some((at, n, offsets)) = next {
            next = (p + n < positions.end).then(|| run(p + n));
            if let Some((later, m, o)) = &next {
                ahead(self.stored(later), later, *m, *o);
            }
            f(self.stored(&at), &at, p, n, offsets);
            p += n;
        }
    }

    /// The key and value of kv head `head` at position `pos` in `layer`, as
    /// f32.
    pub fn read(
        &self,
        table: &PageTable,
        layer: usize,
        pos: usize,
        head: usize,
    ) -> (Vec<f32>, Vec<f32>) {
        let at = self.locate(table, layer, pos);
        let (dk, dv) = (at.shape.head_dim_k, at.shape.head_dim_v);
        let store = self.stored(&at);
        let (k0, v0) = (
            at.key + head * at.key_stride,
            at.value + head * at.value_stride,
        );
        let mut scratch = Vec::new();
        let (mut k, mut v) = (
            store.with(at.page, k0, dk, &mut scratch, <[f32]>::to_vec),
            store.with(at.page, v0, dv, &mut scratch, <[f32]>::to_vec),
        );
        if self.rotated() {
            rotate_back(&mut k);
            rotate_back(&mut v);
        }
        if let Some(c) = self.key_offsets.of(layer) {
            k.iter_mut()
                .zip(&c[head * dk..(head + 1) * dk])
                .for_each(|(k, c)| *k += c);
        }
        (k, v)
    }
}
