//! Recurrent-state slots of a hybrid model (Qwen3.5's delta-net layers), and the
//! snapshots that let a prefix-cache hit on such a model start mid-prompt.
//! Pure: slot ids only; `ferrox_models::kv_store` holds the state at each id.
//!
//! * Requests' slots: a fixed pool. Each sequence holds
//!   [`slots_per_request`] (SPEC S20): its live state, and two checkpoints,
//!   copies of the live state at the last two page boundaries it reached whose
//!   page the prefix cache holds; with speculation also a spare, where the
//!   state before a draft is kept while the draft is verified.
//! * Snapshots: a second fixed pool. When a sequence ends, its checkpoints
//!   whose pages are still cached become those pages' snapshots (the state
//!   after every position up to the end of the page), newest first, each
//!   trading its slot id with a snapshot slot, the least recently made or
//!   restored one if none is free (never the one just made). A prompt whose
//!   cached pages run past its hit (no snapshot at their end: a shared system
//!   prompt) ends a chunk there, and its state there becomes that page's
//!   snapshot at once, so the prompts after it start there. Once its answer
//!   reaches a boundary a sequence keeps its prompt's last checkpoint. A
//!   snapshot goes when its page leaves the prefix cache. Snapshots are made
//!   after a forward or when a request ends, never during an admission pass,
//!   so a hit found at the start of a pass is still restorable at its end.
//! * A hybrid model's prefix hit is cut back to the longest cached prefix whose
//!   last page has a snapshot (KV pages alone cannot restore a recurrent state);
//!   the sequence's live slot starts as a copy of it. A prompt in prefill that
//!   catches up on pages another running sequence wrote (a late hit) may also
//!   start from that sequence's checkpoint at the hit's end.
//!
//! Invariant: every slot id is a request slot (free or held) or a snapshot slot
//! (free or holding a snapshot), and each pool keeps its size.

use std::collections::BTreeMap;

use crate::request::RequestId;

/// Recurrent-state slots one request of a hybrid model holds (SPEC S20):
/// three, and a spare with speculation.
pub fn slots_per_request(spare: bool) -> u64 {
    3 + u64::from(spare)
}

/// A state copy the KV store must make: `from`'s state into `to`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StateCopy {
    pub from: u32,
    pub to: u32,
}

/// A checkpoint slot and the cached page its state ends with, once written,
/// and when it was written (the sequence's count of checkpoints then).
#[derive(Copy, Clone, Debug)]
struct Checkpoint {
    slot: u32,
    page: Option<u32>,
    order: u64,
}

#[derive(Clone, Debug)]
struct SeqStates {
    live: u32,
    checkpoints: [Checkpoint; 2],
    /// The checkpoint the next boundary overwrites (the other is the newest,
    /// or once the answer is checkpointed, the prompt's last).
    next: usize,
    /// Checkpoints written so far.
    written: u64,
    /// The answer has reached a boundary: the prompt's last checkpoint is
    /// kept, and the answer's go to the other slot.
    answering: bool,
    /// Where the state before a verified draft is kept.
    spare: Option<u32>,
}

/// Every slot and who holds it.
#[derive(Clone, Debug)]
pub struct StateLedger {
    /// Free request slots, the last given back first.
    free: Vec<u32>,
    /// Each sequence holds a spare slot.
    spare: bool,
    seqs: BTreeMap<RequestId, SeqStates>,
    /// Free snapshot slots.
    snapshot_free: Vec<u32>,
    /// Snapshots: the cached page a snapshot's prefix ends with, to its slot and
    /// the tick it was made or last restored at; and the ticks' order.
    by_page: BTreeMap<u32, (u32, u64)>,
    made: BTreeMap<u64, u32>,
    tick: u64,
}

/// A request took slots admission did not promise (a ledger bug).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the recurrent-state pool ran out of slots for request {0}")]
pub struct OutOfSlots(pub RequestId);

impl StateLedger {
    /// `request_slots` slots for requests (ids from 0), then `snapshots`;
    /// each request holds a `spare` one too when asked.
    pub fn new(request_slots: u32, snapshots: u32, spare: bool) -> StateLedger {
        StateLedger {
            free: (0..request_slots).rev().collect(),
            spare,
            seqs: BTreeMap::new(),
            snapshot_free: (request_slots..request_slots + snapshots).rev().collect(),
            by_page: BTreeMap::new(),
            made: BTreeMap::new(),
            tick: 0,
        }
    }

    /// Free request slots.
    pub fn available(&self) -> u64 {
        self.free.len() as u64
    }

    /// Requests whose slots admission can still promise.
    pub fn seats(&self) -> u64 {
        self.available() / slots_per_request(self.spare)
    }

    /// Sequence `id`'s spare slot, if it holds one.
    pub fn spare(&self, id: RequestId) -> Option<u32> {
        self.seqs.get(&id).and_then(|s| s.spare)
    }

    /// Snapshots kept.
    pub fn snapshots(&self) -> usize {
        self.by_page.len()
    }

    /// Whether the pool keeps snapshots at all.
    pub fn snapshots_kept(&self) -> bool {
        !self.snapshot_free.is_empty() || !self.by_page.is_empty()
    }

    /// Sequence `id`'s live state, which has just reached the end of cached
    /// page `page`, becomes that page's snapshot now (the copy returned), in
    /// a free snapshot slot or the least recently used one's; `None` if the
    /// page has one.
    pub fn snapshot(&mut self, id: RequestId, page: u32) -> Option<StateCopy> {
        let live = self.seqs.get(&id)?.live;
        if self.by_page.contains_key(&page) {
            return None;
        }
        let slot = self.snapshot_slot()?;
        self.tick += 1;
        self.by_page.insert(page, (slot, self.tick));
        self.made.insert(self.tick, page);
        Some(StateCopy {
            from: live,
            to: slot,
        })
    }

    /// Whether the state after cached page `page` can be restored.
    pub fn has_snapshot(&self, page: u32) -> bool {
        self.by_page.contains_key(&page)
    }

    /// A slot holding the state after cached page `page`: its snapshot (now
    /// the most recently used), or a running sequence's checkpoint there.
    pub fn state_after(&mut self, page: u32) -> Option<u32> {
        if self.by_page.contains_key(&page) {
            return self.touch(page);
        }
        self.seqs
            .values()
            .flat_map(|s| s.checkpoints)
            .find(|c| c.page == Some(page))
            .map(|c| c.slot)
    }

    /// Takes sequence `id`'s slots; its live state starts as a copy of the
    /// snapshot of `from_page` when given (a prefix hit ending there), which the
    /// caller makes before the sequence runs. Returns the live slot and the copy.
    pub fn admit(
        &mut self,
        id: RequestId,
        from_page: Option<u32>,
    ) -> Result<(u32, Option<StateCopy>), OutOfSlots> {
        if self.seats() == 0 {
            return Err(OutOfSlots(id));
        }
        let from = from_page.and_then(|p| self.touch(p));
        let (live, a, b) = (self.take(), self.take(), self.take());
        let spare = self.spare.then(|| self.take());
        let at = |slot| Checkpoint {
            slot,
            page: None,
            order: 0,
        };
        let old = self.seqs.insert(
            id,
            SeqStates {
                live,
                checkpoints: [at(a), at(b)],
                next: 0,
                written: 0,
                answering: false,
                spare,
            },
        );
        assert!(old.is_none(), "request {id} admitted twice");
        Ok((live, from.map(|from| StateCopy { from, to: live })))
    }

    /// The snapshot slot of `page`, now the most recently used.
    fn touch(&mut self, page: u32) -> Option<u32> {
        let (slot, tick) = self.by_page.get(&page).copied()?;
        self.made.remove(&tick);
        self.tick += 1;
        self.made.insert(self.tick, page);
        self.by_page.insert(page, (slot, self.tick));
        Some(slot)
    }

    fn take(&mut self) -> u32 {
        self.free.pop().expect("checked")
    }

    /// Sequence `id`'s spare slot, holding the state kept before a refused
    /// draft, becomes its live one, and the live one its spare (the state
    /// taken back without a copy). Returns the new live slot.
    pub fn swap_spare(&mut self, id: RequestId) -> Option<u32> {
        let s = self.seqs.get_mut(&id)?;
        let spare = s.spare.as_mut()?;
        std::mem::swap(&mut s.live, spare);
        Some(s.live)
    }

    /// Sequence `id`'s live state has just reached the end of cached page
    /// `page` (in its `answer`, or its prompt): it is copied into its older
    /// checkpoint (the copy returned). Once the answer reaches a boundary the
    /// prompt's last checkpoint stays (the state other prompts can share),
    /// and the answer's boundaries take the other slot.
    pub fn checkpoint(&mut self, id: RequestId, page: u32, answer: bool) -> Option<StateCopy> {
        let s = self.seqs.get_mut(&id)?;
        s.answering |= answer;
        s.written += 1;
        let c = &mut s.checkpoints[s.next];
        c.page = Some(page);
        c.order = s.written;
        let to = c.slot;
        if !s.answering {
            s.next = 1 - s.next;
        }
        Some(StateCopy { from: s.live, to })
    }

    /// Sequence `id` ends: its slots go back, its checkpoints whose pages
    /// `cached` still holds (and have none) becoming those pages' snapshots,
    /// the newest first (the second only without evicting the first).
    pub fn release(&mut self, id: RequestId, cached: impl Fn(u32) -> bool) {
        let Some(s) = self.seqs.remove(&id) else {
            return;
        };
        let mut newest_first = s.checkpoints;
        newest_first.sort_by_key(|c| std::cmp::Reverse(c.order));
        let mut back = vec![s.live, s.checkpoints[0].slot, s.checkpoints[1].slot];
        back.extend(s.spare);
        let mut made_one = false;
        for c in newest_first {
            let Some(page) = c
                .page
                .filter(|&p| cached(p) && !self.by_page.contains_key(&p))
            else {
                continue;
            };
            // The only snapshot slot left holds the one just made.
            if made_one && self.snapshot_free.is_empty() && self.made.len() < 2 {
                break;
            }
            let Some(traded) = self.snapshot_slot() else {
                break;
            };
            back.retain(|&b| b != c.slot);
            back.push(traded);
            self.tick += 1;
            self.by_page.insert(page, (c.slot, self.tick));
            self.made.insert(self.tick, page);
            made_one = true;
        }
        self.free.extend(back);
    }

    /// A snapshot slot to trade: a free one, else the least recently used
    /// snapshot's.
    fn snapshot_slot(&mut self) -> Option<u32> {
        if let Some(s) = self.snapshot_free.pop() {
            return Some(s);
        }
        let (_, page) = self.made.pop_first()?;
        self.by_page.remove(&page).map(|s| s.0)
    }

    /// Cached page `page` left the prefix cache: its snapshot goes too.
    pub fn page_evicted(&mut self, page: u32) {
        if let Some((slot, tick)) = self.by_page.remove(&page) {
            self.made.remove(&tick);
            self.snapshot_free.push(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_holds_three_slots_and_a_full_pool_refuses() {
        let mut s = StateLedger::new(7, 2, false);
        let (live, copy) = s.admit(1, None).unwrap();
        assert_eq!((live, copy), (0, None));
        s.admit(2, None).unwrap();
        assert_eq!(s.available(), 1);
        assert_eq!(s.admit(3, None), Err(OutOfSlots(3)));
        assert_eq!(s.available(), 1, "a refusal takes nothing");
        s.release(1, |_| false);
        assert_eq!(s.available(), 4);
        assert_eq!(s.spare(2), None);
    }

    /// The prompt's last checkpoint outlives the answer's boundaries, and a
    /// request that ends leaves both as snapshots: the state other prompts
    /// share, and the state the next turn of its chat starts from.
    #[test]
    fn the_prompts_last_checkpoint_stays_and_both_become_snapshots() {
        let mut s = StateLedger::new(6, 2, false);
        s.admit(1, None).unwrap();
        for (page, answer) in [(10, false), (11, false), (12, true), (13, true)] {
            s.checkpoint(1, page, answer).unwrap();
        }
        s.release(1, |_| true);
        let kept: Vec<bool> = (10..14).map(|p| s.has_snapshot(p)).collect();
        assert_eq!(kept, [false, true, false, true]);
        assert_eq!(s.available(), 6);
        // With one snapshot slot, only the newest is kept.
        let mut s = StateLedger::new(3, 1, false);
        s.admit(1, None).unwrap();
        s.checkpoint(1, 20, false).unwrap();
        s.checkpoint(1, 21, true).unwrap();
        s.release(1, |_| true);
        assert!(s.has_snapshot(21) && !s.has_snapshot(20));
        // Its newest page gone, the older checkpoint takes the full pool's
        // least recently used snapshot.
        s.admit(2, None).unwrap();
        s.checkpoint(2, 30, false).unwrap();
        s.checkpoint(2, 31, true).unwrap();
        s.release(2, |p| p != 31);
        assert!(s.has_snapshot(30) && !s.has_snapshot(21));
    }

    #[test]
    fn a_shared_prefix_state_becomes_a_snapshot_at_once_in_its_own_slot() {
        let mut s = StateLedger::new(3, 1, false);
        assert!(s.snapshots_kept());
        let (live, _) = s.admit(1, None).unwrap();
        let c = s.snapshot(1, 10).unwrap();
        assert_eq!(c.from, live);
        assert!(c.to >= 3, "a snapshot slot");
        assert!(s.has_snapshot(10));
        assert_eq!(s.snapshot(1, 10), None, "one snapshot a page");
        // The request's own slots are untouched; the next page's snapshot
        // takes the least recently used one's slot.
        assert_eq!(s.available(), 0);
        assert_eq!(s.snapshot(1, 11).map(|c| c.to), Some(c.to));
        assert!(!s.has_snapshot(10) && s.has_snapshot(11));
        assert!(!StateLedger::new(3, 0, false).snapshots_kept());
    }

    #[test]
    fn with_speculation_a_request_holds_a_spare_fourth_slot() {
        let mut s = StateLedger::new(9, 0, true);
        assert_eq!(s.seats(), 2);
        let (live, _) = s.admit(1, None).unwrap();
        let spare = s.spare(1).unwrap();
        assert_ne!(spare, live);
        s.admit(2, None).unwrap();
        assert_eq!((s.available(), s.seats()), (1, 0));
        assert_eq!(s.admit(3, None), Err(OutOfSlots(3)));
        assert_eq!(s.swap_spare(1), Some(spare));
        assert_eq!(s.spare(1), Some(live));
        assert_eq!(s.checkpoint(1, 3, false).map(|c| c.from), Some(spare));
        s.release(1, |_| false);
        assert_eq!((s.available(), s.seats(), s.spare(1)), (5, 1, None));
    }

    #[test]
    fn the_newest_cached_checkpoint_becomes_a_snapshot_that_restores() {
        let mut s = StateLedger::new(6, 1, false);
        let (live, _) = s.admit(1, None).unwrap();
        let c1 = s.checkpoint(1, 40, false).unwrap();
        let c2 = s.checkpoint(1, 41, false).unwrap();
        let c3 = s.checkpoint(1, 42, false).unwrap();
        assert_eq!((c1.from, c2.from, c3.from), (live, live, live));
        assert_eq!(c3.to, c1.to, "the older checkpoint is overwritten");
        // Page 42 (newest) left the cache: page 41's checkpoint is kept.
        s.release(1, |p| p == 41);
        assert!(s.has_snapshot(41) && !s.has_snapshot(42) && !s.has_snapshot(40));
        assert_eq!(s.available(), 6, "the traded slot went back to requests");
        let (live2, copy) = s.admit(2, Some(41)).unwrap();
        assert_eq!(
            copy,
            Some(StateCopy {
                from: c2.to,
                to: live2
            })
        );
        // Request 2 reaches page 43; its snapshot takes the only snapshot slot.
        s.checkpoint(2, 43, false).unwrap();
        s.release(2, |_| true);
        assert!(s.has_snapshot(43) && !s.has_snapshot(41));
        s.page_evicted(43);
        assert_eq!((s.snapshots(), s.available()), (0, 6));
        // Every id is still held exactly once.
        let mut ids: Vec<u32> = s.free.iter().chain(&s.snapshot_free).copied().collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..7).collect::<Vec<_>>());
    }
}
