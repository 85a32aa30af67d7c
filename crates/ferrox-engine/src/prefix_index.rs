//! The prefix cache's index: full KV pages keyed by a hash chained over their
//! tokens, each entry linked to the page before it.
//!
//! * `hash(page k) = H(hash(page k-1), tokens of page k)`, so equal hashes mean
//!   (almost surely) equal prefixes. A hit is confirmed by comparing every page's
//!   tokens and its link to the page matched before it, never by the hash alone.
//! * An entry may hold the window page of the same positions (models with
//!   sliding-window layers), detached when the window pool evicts it.
//!
//! Invariants (pure): one entry per hash; `window_of` is the inverse of the
//! entries' window pages.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

/// The chained hash of a page whose predecessor hashed to `parent` (0 for the
/// first page).
pub fn chain_hash(parent: u64, tokens: &[u32]) -> u64 {
    let mut h = DefaultHasher::new();
    parent.hash(&mut h);
    tokens.hash(&mut h);
    h.finish()
}

/// One cached full page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub hash: u64,
    /// The full page of the positions before (`None` for the first page).
    pub parent: Option<u32>,
    pub tokens: Box<[u32]>,
    /// The window page of the same positions, while cached.
    pub window: Option<u32>,
}

/// What [`PrefixIndex::insert`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// The page is now an entry.
    New,
    /// An identical entry exists (same tokens, same parent): chain on from it.
    Duplicate(u32),
    /// Another entry held the hash (a collision, or a page whose parent was
    /// evicted) and was replaced: the caller must let go of these pages
    /// (its full page and its window page).
    Replaced(u32, Option<u32>),
}

/// Full pages by chained hash.
#[derive(Clone, Debug, Default)]
pub struct PrefixIndex {
    by_hash: HashMap<u64, u32>,
    entries: HashMap<u32, Entry>,
    window_of: HashMap<u32, u32>,
}

impl PrefixIndex {
    /// Cached full pages.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The hash of every entry.
    pub fn hashes(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_hash.keys().copied()
    }

    /// The entry of full page `page`.
    pub fn entry(&self, page: u32) -> Option<&Entry> {
        self.entries.get(&page)
    }

    /// The cached pages that hold the longest confirmed prefix of `tokens` in
    /// whole pages of `page_size`, at most `max_pages`: `(full page, window page)`
    /// in position order.
    pub fn matched(
        &self,
        tokens: &[u32],
        page_size: usize,
        max_pages: usize,
    ) -> Vec<(u32, Option<u32>)> {
        let mut out = Vec::new();
        let (mut hash, mut parent) = (0, None);
        for chunk in tokens.chunks_exact(page_size).take(max_pages) {
            hash = chain_hash(hash, chunk);
            let Some(&page) = self.by_hash.get(&hash) else {
                break;
            };
            let e = &self.entries[&page];
            if e.parent != parent || *e.tokens != *chunk {
                break;
            }
            out.push((page, e.window));
            parent = Some(page);
        }
        out
    }

    /// Enters full page `page` holding `tokens` after `parent` (whose hash is
    /// `parent_hash`), with its window page if any.
    pub fn insert(
        &mut self,
        page: u32,
        parent: Option<u32>,
        parent_hash: u64,
        tokens: &[u32],
        window: Option<u32>,
    ) -> (u64, Inserted) {
        let hash = chain_hash(parent_hash, tokens);
        let mut replaced = None;
        if let Some(&old) = self.by_hash.get(&hash) {
            let e = &self.entries[&old];
            if e.parent == parent && *e.tokens == *tokens {
                return (hash, Inserted::Duplicate(old));
            }
            let e = self.remove(old).expect("indexed");
            replaced = Some((old, e.window));
        }
        self.by_hash.insert(hash, page);
        if let Some(w) = window {
            self.window_of.insert(w, page);
        }
        self.entries.insert(
            page,
            Entry {
                hash,
                parent,
                tokens: tokens.into(),
                window,
            },
        );
        let how = match replaced {
            Some((p, w)) => Inserted::Replaced(p, w),
            None => Inserted::New,
        };
        (hash, how)
    }

    /// Removes the entry of full page `page` (evicted), returning it.
    pub fn remove(&mut self, page: u32) -> Option<Entry> {
        let e = self.entries.remove(&page)?;
        self.by_hash.remove(&e.hash);
        if let Some(w) = e.window {
            self.window_of.remove(&w);
        }
        Some(e)
    }

    /// Detaches window page `window` (evicted) from its entry.
    pub fn detach_window(&mut self, window: u32) {
        if let Some(page) = self.window_of.remove(&window)
            && let Some(e) = self.entries.get_mut(&page)
        {
            e.window = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_matches_page_by_page_and_stops_at_the_first_difference() {
        let mut ix = PrefixIndex::default();
        let t: Vec<u32> = (0..12).collect();
        let (h0, _) = ix.insert(10, None, 0, &t[0..4], Some(20));
        let (h1, _) = ix.insert(11, Some(10), h0, &t[4..8], None);
        ix.insert(12, Some(11), h1, &t[8..12], Some(22));
        assert_eq!(
            ix.matched(&t, 4, 9),
            vec![(10, Some(20)), (11, None), (12, Some(22))]
        );
        assert_eq!(ix.matched(&t, 4, 2).len(), 2, "at most max_pages");
        let mut other = t.clone();
        other[5] = 99;
        assert_eq!(ix.matched(&other, 4, 9), vec![(10, Some(20))]);
        assert!(ix.matched(&t[..3], 4, 9).is_empty(), "whole pages only");
    }

    #[test]
    fn a_hit_is_confirmed_by_tokens_and_links_not_by_the_hash() {
        let mut ix = PrefixIndex::default();
        let t: Vec<u32> = (0..8).collect();
        let (h0, _) = ix.insert(1, None, 0, &t[0..4], None);
        // Forge an entry under the right hash with the wrong tokens.
        let h1 = chain_hash(h0, &t[4..8]);
        ix.insert(2, Some(1), h0, &t[4..8], None);
        ix.entries.get_mut(&2).unwrap().tokens = vec![7, 7, 7, 7].into();
        assert_eq!(ix.by_hash[&h1], 2);
        assert_eq!(ix.matched(&t, 4, 2), vec![(1, None)]);
        // And one with the right tokens but another parent.
        ix.entries.get_mut(&2).unwrap().tokens = t[4..8].into();
        ix.entries.get_mut(&2).unwrap().parent = Some(9);
        assert_eq!(ix.matched(&t, 4, 2), vec![(1, None)]);
    }

    #[test]
    fn duplicates_chain_on_and_stale_entries_are_replaced() {
        let mut ix = PrefixIndex::default();
        let t: Vec<u32> = (0..8).collect();
        let (h0, how) = ix.insert(1, None, 0, &t[0..4], None);
        assert_eq!(how, Inserted::New);
        assert_eq!(
            ix.insert(5, None, 0, &t[0..4], None).1,
            Inserted::Duplicate(1)
        );
        ix.insert(2, Some(1), h0, &t[4..8], Some(30));
        // Page 1 is evicted and recomputed as page 6: page 2 is now an orphan, and
        // the recomputed page 7 replaces it.
        ix.remove(1);
        let (h0b, _) = ix.insert(6, None, 0, &t[0..4], None);
        assert_eq!(
            ix.insert(7, Some(6), h0b, &t[4..8], None).1,
            Inserted::Replaced(2, Some(30))
        );
        assert_eq!(ix.matched(&t, 4, 2), vec![(6, None), (7, None)]);
        ix.detach_window(30);
        assert_eq!(ix.len(), 2);
    }
}
