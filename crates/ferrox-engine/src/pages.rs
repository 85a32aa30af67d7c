//! One pool of KV page ids: reference counts, a free list, and the least-recently
//! used list of pages that no sequence references but the prefix cache keeps.
//!
//! Invariants (pure: no locks, clocks or I/O; ids only, never memory):
//! * every id below `created` is in exactly one state: referenced (`refs > 0`),
//!   free (in `free`), or evictable (`refs == 0`, cached, in `lru`);
//! * a referenced page is never handed out again nor evicted ("locked");
//! * `take` prefers a free page, then a never-used id, and evicts the least
//!   recently released cached page only when neither exists.

use std::collections::BTreeMap;

/// A page handed out by [`PagePool::take`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    pub id: u32,
    /// The taken page was a cached page, evicted to make room: the caller must
    /// forget its cache entry.
    pub evicted: bool,
}

/// Page ids of one pool.
#[derive(Clone, Debug)]
pub struct PagePool {
    /// Pages in the pool (`None`: unbounded, ids created on demand).
    cap: Option<u64>,
    /// `[page]` references held by sequences.
    refs: Vec<u32>,
    /// `[page]` kept by the prefix cache once unreferenced.
    cached: Vec<bool>,
    /// `[page]` key in `lru` while evictable.
    tick: Vec<u64>,
    /// Unreferenced, uncached pages (last freed first).
    free: Vec<u32>,
    /// Evictable pages by the order they became unreferenced.
    lru: BTreeMap<u64, u32>,
    next_tick: u64,
}

impl PagePool {
    /// A pool of `cap` pages (`None`: unbounded).
    pub fn new(cap: Option<u64>) -> PagePool {
        PagePool {
            cap,
            refs: Vec::new(),
            cached: Vec::new(),
            tick: Vec::new(),
            free: Vec::new(),
            lru: BTreeMap::new(),
            next_tick: 0,
        }
    }

    /// Pages in the pool (`None`: unbounded).
    pub fn capacity(&self) -> Option<u64> {
        self.cap
    }

    /// Pages referenced by at least one sequence.
    pub fn in_use(&self) -> u64 {
        (self.refs.len() - self.free.len() - self.lru.len()) as u64
    }

    /// Unreferenced pages the prefix cache keeps (evicted only when needed).
    pub fn evictable(&self) -> u64 {
        self.lru.len() as u64
    }

    /// Pages `take` can still hand out: free plus evictable (`None`: unbounded).
    pub fn available(&self) -> Option<u64> {
        self.cap.map(|c| c - self.in_use())
    }

    /// References held on `id`.
    pub fn refs(&self, id: u32) -> u32 {
        self.refs[id as usize]
    }

    /// Whether `id` is evictable (unreferenced, kept by the cache).
    pub fn is_evictable(&self, id: u32) -> bool {
        self.refs[id as usize] == 0 && self.cached[id as usize]
    }

    /// Hands out a page with one reference; `None` if every page is referenced.
    pub fn take(&mut self) -> Option<Taken> {
        let (id, evicted) = if let Some(id) = self.free.pop() {
            (id, false)
        } else if self.cap.is_none_or(|c| (self.refs.len() as u64) < c) {
            self.refs.push(0);
            self.cached.push(false);
            self.tick.push(0);
            ((self.refs.len() - 1) as u32, false)
        } else {
            let (_, id) = self.lru.pop_first()?;
            self.cached[id as usize] = false;
            (id, true)
        };
        self.refs[id as usize] = 1;
        Some(Taken { id, evicted })
    }

    /// Adds a reference to `id` (a shared page); an evictable page becomes locked.
    pub fn retain(&mut self, id: u32) {
        let i = id as usize;
        if self.refs[i] == 0 {
            let removed = self.lru.remove(&self.tick[i]);
            assert_eq!(
                removed,
                Some(id),
                "page {id} is neither referenced nor cached"
            );
        }
        self.refs[i] += 1;
    }

    /// Drops a reference to `id`. The last one makes it evictable if cached, else free.
    pub fn release(&mut self, id: u32) {
        let i = id as usize;
        assert!(self.refs[i] > 0, "page {id} released more often than held");
        self.refs[i] -= 1;
        if self.refs[i] == 0 {
            if self.cached[i] {
                self.tick[i] = self.next_tick;
                self.lru.insert(self.next_tick, id);
                self.next_tick += 1;
            } else {
                self.free.push(id);
            }
        }
    }

    /// Marks a referenced page as kept by the prefix cache.
    pub fn keep(&mut self, id: u32) {
        assert!(
            self.refs[id as usize] > 0,
            "only a held page enters the cache"
        );
        self.cached[id as usize] = true;
    }

    /// The cache lets go of `id`: an evictable page becomes free at once.
    pub fn forget(&mut self, id: u32) {
        let i = id as usize;
        if !self.cached[i] {
            return;
        }
        self.cached[i] = false;
        if self.refs[i] == 0 {
            self.lru.remove(&self.tick[i]);
            self.free.push(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_pages_come_first_then_new_ids_then_the_least_recently_released() {
        let mut p = PagePool::new(Some(3));
        let a = p.take().unwrap().id;
        let b = p.take().unwrap().id;
        let c = p.take().unwrap().id;
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!(p.take(), None, "every page is referenced");
        p.keep(a);
        p.keep(b);
        p.release(b);
        p.release(a);
        assert_eq!((p.in_use(), p.evictable(), p.available()), (1, 2, Some(2)));
        p.release(c);
        assert_eq!(
            p.take(),
            Some(Taken {
                id: c,
                evicted: false
            }),
            "a free page before any eviction"
        );
        assert_eq!(
            p.take(),
            Some(Taken {
                id: b,
                evicted: true
            }),
            "then the page released first"
        );
    }

    #[test]
    fn a_shared_page_is_locked_until_its_last_reference_goes() {
        let mut p = PagePool::new(Some(1));
        let a = p.take().unwrap().id;
        p.keep(a);
        p.release(a);
        assert!(p.is_evictable(a));
        p.retain(a);
        p.retain(a);
        assert_eq!((p.refs(a), p.evictable(), p.available()), (2, 0, Some(0)));
        assert_eq!(p.take(), None, "a referenced page is never evicted");
        p.release(a);
        assert_eq!(p.take(), None);
        p.release(a);
        assert_eq!(p.take().map(|t| t.evicted), Some(true));
    }

    #[test]
    fn forgetting_an_evictable_page_frees_it() {
        let mut p = PagePool::new(None);
        let a = p.take().unwrap().id;
        p.keep(a);
        p.release(a);
        p.forget(a);
        assert_eq!((p.evictable(), p.in_use()), (0, 0));
        assert_eq!(
            p.take(),
            Some(Taken {
                id: a,
                evicted: false
            })
        );
    }
}
