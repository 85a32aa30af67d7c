//! The KV ledger: which pages each sequence owns or shares, the prefix cache, and
//! what admission may still promise. Pure (no locks, channels, clocks or memory):
//! it hands out page ids; the model's `KvStore` holds the bytes at those ids.
//!
//! * Two pools ([`PagePool`]): full-attention pages, and window pages for models
//!   with sliding-window layers. Pages are taken on demand, as a sequence's
//!   positions are about to be written.
//! * Prefix cache ([`PrefixIndex`]): every full page a sequence has written is
//!   entered under its chained hash; a later prompt starting with the same tokens
//!   shares those pages by reference count. Unreferenced cached pages stay until
//!   a page is needed, least recently used first. A hit on a window model also
//!   needs the window pages of the last `window` positions before it, so it is
//!   cut back to what both pools hold.
//! * Promises. Full pool: a sequence owes at most `blocks_for(positions)` pages
//!   minus its hit; `free + evictable >= sum of what is owed` always holds, so a
//!   sequence admitted never runs out (SPEC S7). Window pool: each sequence has a
//!   seat of [`window_pages_per_request`] pages, the most it can hold at once;
//!   seats never exceed the pool, so neither does what sequences reference.
//!   Window pages a sequence has slid past are given back after each step (SPEC
//!   S23), into the cache if it holds them.

use std::collections::BTreeMap;

use crate::kv_events::{EventLog, KvEvent};
use crate::kv_plan::{blocks_for, window_pages_per_request};
use ferrox_models::kv_store::{NO_PAGE, PageTable};

use crate::pages::PagePool;
use crate::prefix_index::{Inserted, PrefixIndex};
use crate::request::RequestId;
use crate::states::{OutOfSlots, StateCopy, StateLedger};

/// How a ledger is laid out.
#[derive(Clone, Debug)]
pub struct LedgerConfig {
    /// Positions per page.
    pub page_size: usize,
    /// Full-attention pages (`None`: unbounded).
    pub full_pages: Option<u64>,
    /// The window of window layers (`None`: the model has none).
    pub window: Option<usize>,
    /// Window pages (`None`: unbounded); unused without window layers.
    pub window_pages: Option<u64>,
    /// Longest span one step writes per sequence (the prefill chunk).
    pub max_span: usize,
    /// Whether written pages enter the prefix cache.
    pub prefix_cache: bool,
    /// The recurrent-state pools of a hybrid model (`None`: no recurrent layers).
    pub states: Option<StatePools>,
}

/// Sizes of a hybrid model's recurrent-state pools ([`StateLedger`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StatePools {
    /// Slots for requests, [`crate::states::slots_per_request`] each.
    pub request_slots: u32,
    /// Each request also holds a spare slot (speculation).
    pub spare: bool,
    /// Snapshots kept for prefix hits.
    pub snapshots: u32,
}

/// The cached pages a prompt can start from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrefixHit {
    /// Full pages, in position order.
    pub full: Vec<u32>,
    /// Window pages of the last `window` positions of the hit, in position order,
    /// starting at page `window_from`.
    pub window: Vec<u32>,
    pub window_from: usize,
    /// Full hit pages no sequence references now: sharing them takes them out of
    /// what can be evicted.
    pub evictable: u64,
    /// Full pages of the prompt the prefix cache holds, whether or not their
    /// hit can be taken (a hybrid model's needs a state snapshot at its end):
    /// at least `full.len()`.
    pub cached: usize,
}

impl PrefixHit {
    /// Prompt positions the hit covers.
    pub fn tokens(&self, page_size: usize) -> usize {
        self.full.len() * page_size
    }
}

/// A prompt in prefill after [`KvLedger::catch_up`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CatchUp {
    /// Prompt tokens now in the KV.
    pub prefilled: usize,
    /// On a hybrid model that took pages, the state to copy into its live
    /// slot before it runs.
    pub copy: Option<StateCopy>,
}

/// What one request asks of the pools at admission.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PageNeed {
    /// Full pages it may still take (its pages minus the hit).
    pub owed: u64,
    /// `owed` plus the evictable hit pages it locks: what it costs admission.
    pub kv_pages: u64,
    /// Its window seat (0 without window layers).
    pub window_pages: u64,
}

/// A pool ran out although the promises said it could not (a ledger bug).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the KV {pool} pool ran out of pages for request {id}")]
pub struct OutOfPages {
    pub id: RequestId,
    pub pool: &'static str,
}

#[derive(Clone, Debug)]
struct SeqPages {
    table: PageTable,
    /// Full pages still to take at most.
    owed: u64,
    /// Window pages it may hold at once.
    seat: u64,
    /// Full pages entered into the prefix index (or chained past).
    registered: usize,
    /// Hash and page of the last registered page (what the next one chains on).
    tail: (u64, Option<u32>),
    /// Window pages before this one were given back.
    slid: usize,
}

/// Counters of what the cache did, for the metrics.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheCounters {
    /// Cached pages evicted to make room.
    pub evictions: u64,
}

/// Pages of both pools, the prefix cache and every sequence's tables.
#[derive(Clone, Debug)]
pub struct KvLedger {
    cfg: LedgerConfig,
    full: PagePool,
    window: PagePool,
    index: PrefixIndex,
    seqs: BTreeMap<RequestId, SeqPages>,
    owed: u64,
    seats: u64,
    counters: CacheCounters,
    /// A hybrid model's recurrent-state slots.
    states: Option<StateLedger>,
    /// What the prefix cache did, while someone follows it.
    events: Option<EventLog>,
}

impl KvLedger {
    /// An empty ledger.
    pub fn new(cfg: LedgerConfig) -> KvLedger {
        assert!(cfg.page_size > 0 && cfg.max_span > 0);
        let window_cap = if cfg.window.is_some() {
            cfg.window_pages
        } else {
            Some(0)
        };
        let states = cfg
            .states
            .map(|p| StateLedger::new(p.request_slots, p.snapshots, p.spare));
        KvLedger {
            full: PagePool::new(cfg.full_pages),
            window: PagePool::new(window_cap),
            cfg,
            index: PrefixIndex::default(),
            seqs: BTreeMap::new(),
            owed: 0,
            seats: 0,
            counters: CacheCounters::default(),
            states,
            events: None,
        }
    }

    /// The same ledger, recording what its prefix cache does ([`Self::take_events`]).
    pub fn recording_events(mut self) -> KvLedger {
        self.events = Some(EventLog::default());
        self
    }

    /// The prefix-cache events since the last call (none unless recording).
    pub fn take_events(&mut self) -> Vec<KvEvent> {
        self.events.as_mut().map(EventLog::take).unwrap_or_default()
    }

    /// The chained hashes of every cached full page.
    pub fn cached_hashes(&self) -> Vec<u64> {
        self.index.hashes().collect()
    }

    /// Free recurrent-state slots (`None`: the model has no recurrent layers).
    pub fn recurrent_available(&self) -> Option<u64> {
        self.states.as_ref().map(StateLedger::available)
    }

    /// Requests the recurrent-state pool can still seat (`None`: the model
    /// has no recurrent layers).
    pub fn recurrent_seqs(&self) -> Option<u64> {
        self.states.as_ref().map(StateLedger::seats)
    }

    /// Sequence `id`'s spare recurrent-state slot, where the state before a
    /// verified draft is kept (with speculation on a hybrid model).
    pub fn spare_state(&self, id: RequestId) -> Option<u32> {
        self.states.as_ref().and_then(|s| s.spare(id))
    }

    /// Sequence `id`'s draft was refused: its spare slot, holding the state
    /// kept before the draft, becomes its live one (and the live one its
    /// spare). Whether it had one.
    pub fn take_back_state(&mut self, id: RequestId) -> bool {
        let live = self.states.as_mut().and_then(|s| s.swap_spare(id));
        match (live, self.seqs.get_mut(&id)) {
            (Some(live), Some(s)) => {
                s.table.state = Some(live);
                true
            }
            _ => false,
        }
    }

    /// Recurrent-state snapshots kept for prefix hits.
    pub fn state_snapshots(&self) -> usize {
        self.states.as_ref().map_or(0, StateLedger::snapshots)
    }

    /// Positions per page.
    pub fn page_size(&self) -> usize {
        self.cfg.page_size
    }

    /// Full pages admission can still promise: free plus evictable minus what
    /// running sequences are owed (`None`: unbounded).
    pub fn kv_available(&self) -> Option<u64> {
        self.full.available().map(|a| a - self.owed)
    }

    /// Window pages admission can still seat (`None`: unbounded or no window).
    pub fn window_available(&self) -> Option<u64> {
        self.cfg.window?;
        self.window.capacity().map(|c| c - self.seats)
    }

    /// Full pages referenced by sequences.
    pub fn full_in_use(&self) -> u64 {
        self.full.in_use()
    }

    /// Full pages the cache keeps that no sequence references.
    pub fn full_evictable(&self) -> u64 {
        self.full.evictable()
    }

    /// Cached full pages (referenced or not).
    pub fn cached_pages(&self) -> usize {
        self.index.len()
    }

    /// What the cache did so far.
    pub fn counters(&self) -> CacheCounters {
        self.counters
    }

    /// The page tables of sequence `id`.
    pub fn table(&self, id: RequestId) -> Option<&PageTable> {
        self.seqs.get(&id).map(|s| &s.table)
    }

    /// Full pages sequence `id` holds now.
    pub fn held(&self, id: RequestId) -> usize {
        self.seqs.get(&id).map_or(0, |s| s.table.full.len())
    }

    /// Window pages sequence `id` holds now.
    pub fn window_held(&self, id: RequestId) -> usize {
        self.seqs.get(&id).map_or(0, |s| {
            s.table.window.iter().filter(|&&p| p != NO_PAGE).count()
        })
    }

    /// The cached pages `prompt` can start from: whole pages, leaving at least one
    /// prompt token to run (its logits are needed), cut back on window models to
    /// what the window pool holds for the last `window` positions of the hit, and
    /// on hybrid models to a last page with a state snapshot.
    pub fn lookup(&self, prompt: &[u32]) -> PrefixHit {
        let ps = self.cfg.page_size;
        if !self.cfg.prefix_cache || prompt.is_empty() {
            return PrefixHit::default();
        }
        let matched = self.index.matched(prompt, ps, (prompt.len() - 1) / ps);
        let cached = matched.len();
        let mut n = matched.len();
        let (mut from, mut window) = (0, Vec::new());
        if let Some(w) = self.cfg.window {
            let lo = |n: usize| (n * ps + 1).saturating_sub(w) / ps;
            while n > 0 && matched[lo(n)..n].iter().any(|m| m.1.is_none()) {
                n -= 1;
            }
            from = lo(n);
            window = matched[from..n].iter().filter_map(|m| m.1).collect();
        }
        if let Some(states) = &self.states {
            while n > 0 && !states.has_snapshot(matched[n - 1].0) {
                n -= 1;
            }
        }
        let full: Vec<u32> = matched[..n].iter().map(|m| m.0).collect();
        PrefixHit {
            evictable: full.iter().filter(|&&p| self.full.is_evictable(p)).count() as u64,
            window,
            window_from: from,
            full,
            cached,
        }
    }

    /// Where a hybrid model's prompt with prefix hit `hit` should end a chunk
    /// so that the state there can be snapshotted ([`KvLedger::share_state`]):
    /// the end of the pages the cache holds for it, when its hit stops short
    /// of them for want of a snapshot. The prompts that follow with the same
    /// prefix (a system prompt) then start there.
    pub fn share_point(&self, hit: &PrefixHit) -> Option<usize> {
        let has_snapshots = self.states.as_ref().is_some_and(|s| s.snapshots_kept());
        (has_snapshots && hit.cached > hit.full.len()).then(|| hit.cached * self.cfg.page_size)
    }

    /// Sequence `id` of a hybrid model has written its prompt up to its share
    /// point `written` ([`KvLedger::share_point`]): its live state becomes the
    /// snapshot of the cached page ending there at once (the copy returned),
    /// unless that page has one.
    pub fn share_state(&mut self, id: RequestId, written: usize) -> Option<StateCopy> {
        let states = self.states.as_mut()?;
        let s = self.seqs.get(&id)?;
        let page = s
            .tail
            .1
            .filter(|_| written.is_multiple_of(self.cfg.page_size))
            .filter(|_| s.registered == written / self.cfg.page_size)?;
        states.snapshot(id, page)
    }

    /// What a request of `positions` positions (prompt + output budget) asks of the
    /// pools when it starts from `hit`.
    pub fn need(&self, positions: u64, hit: &PrefixHit) -> PageNeed {
        let pages = blocks_for(positions, self.cfg.page_size);
        let owed = pages - hit.full.len() as u64;
        PageNeed {
            owed,
            kv_pages: owed + hit.evictable,
            window_pages: self.cfg.window.map_or(0, |w| {
                window_pages_per_request(w, self.cfg.max_span, self.cfg.page_size).min(pages)
            }),
        }
    }

    /// Takes sequence `id` in with the pages of `hit` shared and `need` promised,
    /// and on a hybrid model its recurrent-state slots: the copy returned (the
    /// hit's snapshot into its live slot) must be made before it runs. The caller
    /// checked `need` against [`Self::kv_available`], [`Self::window_available`]
    /// and [`Self::recurrent_seqs`].
    pub fn admit(
        &mut self,
        id: RequestId,
        need: PageNeed,
        hit: &PrefixHit,
    ) -> Result<Option<StateCopy>, OutOfSlots> {
        let (state, copy) = match &mut self.states {
            Some(st) => {
                let (live, copy) = st.admit(id, hit.full.last().copied())?;
                (Some(live), copy)
            }
            None => (None, None),
        };
        for &p in &hit.full {
            self.full.retain(p);
        }
        for &p in &hit.window {
            self.window.retain(p);
        }
        let mut window = Vec::new();
        if self.cfg.window.is_some() {
            window = vec![NO_PAGE; hit.window_from];
            window.extend(&hit.window);
        }
        let tail = match hit.full.last() {
            Some(&p) => (
                self.index.entry(p).expect("hit pages are cached").hash,
                Some(p),
            ),
            None => (0, None),
        };
        self.owed += need.owed;
        self.seats += need.window_pages;
        let old = self.seqs.insert(
            id,
            SeqPages {
                table: PageTable {
                    full: hit.full.clone(),
                    window,
                    state,
                },
                owed: need.owed,
                seat: need.window_pages,
                registered: hit.full.len(),
                tail,
                slid: hit.window_from,
            },
        );
        assert!(old.is_none(), "request {id} admitted twice");
        Ok(copy)
    }

    /// Sequence `id`, in prefill with `prefilled` tokens of `prompt` in its KV, takes
    /// the cached pages that continue it, written meanwhile by another sequence
    /// with the same prompt start ("late hits": requests that arrive together
    /// compute a shared prefix once). Only on models without window layers and
    /// at a page boundary. On a hybrid model the hit ends where a slot holds
    /// the state after its last page (a snapshot, or another sequence's
    /// checkpoint), copied into the sequence's live slot by the caller.
    pub fn catch_up(&mut self, id: RequestId, prompt: &[u32], prefilled: usize) -> CatchUp {
        let ps = self.cfg.page_size;
        let none = CatchUp {
            prefilled,
            copy: None,
        };
        let late_hits = self.cfg.prefix_cache && self.cfg.window.is_none();
        if !late_hits || !prefilled.is_multiple_of(ps) {
            return none;
        }
        let k = prefilled / ps;
        let Some(s) = self.seqs.get(&id) else {
            return none;
        };
        if s.table.full.len() != k || s.registered != k || prompt.is_empty() {
            return none;
        }
        let mut matched = self.index.matched(prompt, ps, (prompt.len() - 1) / ps);
        let mut copy = None;
        if let (Some(states), Some(live)) = (&mut self.states, s.table.state) {
            let restorable = (k + 1..=matched.len())
                .rev()
                .find_map(|m| states.state_after(matched[m - 1].0).map(|from| (m, from)));
            let Some((m, from)) = restorable else {
                return none;
            };
            matched.truncate(m);
            copy = Some(StateCopy { from, to: live });
        }
        if matched.len() <= k {
            return none;
        }
        let s = self.seqs.get_mut(&id).expect("checked");
        for &(page, _) in &matched[k..] {
            self.full.retain(page);
            s.table.full.push(page);
            s.owed -= 1;
            self.owed -= 1;
        }
        let last = matched.last().expect("longer than k").0;
        s.tail = (self.index.entry(last).expect("matched").hash, Some(last));
        s.registered = matched.len();
        CatchUp {
            prefilled: matched.len() * ps,
            copy,
        }
    }

    /// Takes the pages sequence `id` needs to write positions `start..end` and to
    /// read the window before `start`.
    pub fn prepare(&mut self, id: RequestId, start: usize, end: usize) -> Result<(), OutOfPages> {
        let ps = self.cfg.page_size;
        let pages = end.div_ceil(ps);
        let s = self
            .seqs
            .get_mut(&id)
            .expect("prepare of a running request");
        while s.table.full.len() < pages {
            let t = self.full.take().ok_or(OutOfPages { id, pool: "full" })?;
            if t.evicted {
                self.counters.evictions += 1;
                if let Some(e) = self.index.remove(t.id) {
                    if let Some(log) = &mut self.events {
                        log.removed(e.hash);
                    }
                    if let Some(w) = e.window {
                        self.window.forget(w);
                    }
                }
                if let Some(st) = &mut self.states {
                    st.page_evicted(t.id);
                }
            }
            assert!(
                s.owed > 0,
                "request {id} takes more pages than it was promised"
            );
            s.owed -= 1;
            self.owed -= 1;
            s.table.full.push(t.id);
        }
        if let Some(w) = self.cfg.window {
            let lo = (start + 1).saturating_sub(w) / ps;
            if s.table.window.len() < pages {
                s.table.window.resize(pages, NO_PAGE);
            }
            for page in lo..pages {
                if s.table.window[page] != NO_PAGE {
                    continue;
                }
                let t = self
                    .window
                    .take()
                    .ok_or(OutOfPages { id, pool: "window" })?;
                if t.evicted {
                    self.counters.evictions += 1;
                    self.index.detach_window(t.id);
                }
                s.table.window[page] = t.id;
            }
        }
        Ok(())
    }

    /// Sequence `id` has written the KV of `tokens` (positions `0..tokens.len()`):
    /// its full pages enter the prefix cache, and the window pages it has slid past
    /// are given back (kept by the cache if it holds them).
    pub fn advance(&mut self, id: RequestId, tokens: &[u32]) {
        let ps = self.cfg.page_size;
        if self.cfg.prefix_cache {
            self.register(id, tokens);
        }
        let Some(w) = self.cfg.window else { return };
        let s = self
            .seqs
            .get_mut(&id)
            .expect("advance of a running request");
        let first_needed = (tokens.len() + 1).saturating_sub(w) / ps;
        for page in s.slid..first_needed.min(s.table.window.len()) {
            let p = std::mem::replace(&mut s.table.window[page], NO_PAGE);
            if p != NO_PAGE {
                self.window.release(p);
            }
        }
        s.slid = s.slid.max(first_needed);
    }

    fn register(&mut self, id: RequestId, tokens: &[u32]) {
        let ps = self.cfg.page_size;
        let s = self
            .seqs
            .get_mut(&id)
            .expect("advance of a running request");
        let full_pages = (tokens.len() / ps).min(s.table.full.len());
        for k in s.registered..full_pages {
            let page = s.table.full[k];
            let window = s.table.window.get(k).copied().filter(|&p| p != NO_PAGE);
            let chunk = &tokens[k * ps..(k + 1) * ps];
            let (hash, how) = self.index.insert(page, s.tail.1, s.tail.0, chunk, window);
            if let Some(log) = &mut self.events {
                let parent = s.tail.1.map(|_| s.tail.0);
                match how {
                    Inserted::Duplicate(_) => {}
                    Inserted::Replaced(..) => {
                        log.removed(hash);
                        log.stored(hash, parent, chunk);
                    }
                    Inserted::New => log.stored(hash, parent, chunk),
                }
            }
            match how {
                Inserted::Duplicate(existing) => {
                    s.tail = (hash, Some(existing));
                    continue;
                }
                Inserted::Replaced(old, old_window) => {
                    self.full.forget(old);
                    if let Some(st) = &mut self.states {
                        st.page_evicted(old);
                    }
                    if let Some(w) = old_window {
                        self.window.forget(w);
                    }
                }
                Inserted::New => {}
            }
            self.full.keep(page);
            if let Some(w) = window {
                self.window.keep(w);
            }
            s.tail = (hash, Some(page));
        }
        s.registered = s.registered.max(full_pages);
    }

    /// Sequence `id` of a hybrid model has written positions `..written` (in
    /// its `answer`, or its prompt): at a page boundary whose page the prefix
    /// cache holds, its live state is to be checkpointed (the copy returned,
    /// to make at once).
    pub fn checkpoint(&mut self, id: RequestId, written: usize, answer: bool) -> Option<StateCopy> {
        let ps = self.cfg.page_size;
        let states = self.states.as_mut()?;
        let s = self.seqs.get(&id)?;
        if !self.cfg.prefix_cache || written == 0 || !written.is_multiple_of(ps) {
            return None;
        }
        // `tail` is the cached page at the end of the registered prefix.
        let page = s.tail.1.filter(|_| s.registered == written / ps)?;
        states.checkpoint(id, page, answer)
    }

    /// Sequence `id` ends: every page reference goes back (deepest pages first, so
    /// they are evicted before the prefixes they extend), and so does what it was
    /// still owed, its seat, and its recurrent-state slots (a checkpoint kept as
    /// a snapshot if its page is still cached).
    pub fn release(&mut self, id: RequestId) {
        let Some(s) = self.seqs.remove(&id) else {
            return;
        };
        if let Some(st) = &mut self.states {
            let index = &self.index;
            st.release(id, |p| index.entry(p).is_some());
        }
        for &p in s.table.full.iter().rev() {
            self.full.release(p);
        }
        for &p in s.table.window.iter().rev().filter(|&&p| p != NO_PAGE) {
            self.window.release(p);
        }
        self.owed -= s.owed;
        self.seats -= s.seat;
    }
}

#[cfg(test)]
mod tests;
