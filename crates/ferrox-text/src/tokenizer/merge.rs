//! The merge loop both tokenizer families share: symbols are contiguous byte
//! ranges of a word in a linked list; the adjacent pair with the best priority is
//! merged (the leftmost on ties) until no mergeable pair remains.
//!
//! Invariants: a queued candidate whose sides have changed since it was queued is
//! recognised (its length no longer matches, or its sides are no longer
//! neighbours) and skipped; symbols always cover the word exactly, in order.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One symbol of a word.
#[derive(Clone, Copy, Debug)]
pub struct Symbol {
    /// Byte offset in the word.
    pub start: usize,
    /// Byte length (0 once merged into its left neighbour).
    pub len: usize,
    /// The token of this range, when it is one.
    pub id: Option<u32>,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Candidate {
    /// Higher merges first.
    priority: f64,
    left: usize,
    right: usize,
    len: usize,
    merged: u32,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority
            .total_cmp(&other.priority)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Merges the characters of `word` and returns the final symbols in order.
/// `id_of` gives the token of a single character; `pair(left, right, text of both)`
/// says whether two neighbours merge, with what priority and into which token;
/// `on_merge(start, left_len, right_len)` is told of every merge.
pub fn merge(
    word: &str,
    id_of: impl Fn(&str) -> Option<u32>,
    pair: impl Fn(&Symbol, &Symbol, &str) -> Option<(f64, u32)>,
    mut on_merge: impl FnMut(usize, usize, usize),
) -> Vec<Symbol> {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(word.len());
    for (i, (start, c)) in word.char_indices().enumerate() {
        let len = c.len_utf8();
        symbols.push(Symbol {
            start,
            len,
            id: id_of(&word[start..start + len]),
            prev: i.checked_sub(1),
            next: Some(i + 1),
        });
    }
    if let Some(last) = symbols.last_mut() {
        last.next = None;
    }
    let mut queue = BinaryHeap::new();
    let try_pair =
        |queue: &mut BinaryHeap<Candidate>, symbols: &[Symbol], left: usize, right: usize| {
            let (l, r) = (&symbols[left], &symbols[right]);
            if let Some((priority, merged)) = pair(l, r, &word[l.start..r.start + r.len]) {
                queue.push(Candidate {
                    priority,
                    left,
                    right,
                    len: l.len + r.len,
                    merged,
                });
            }
        };
    for i in 1..symbols.len() {
        try_pair(&mut queue, &symbols, i - 1, i);
    }
    while let Some(c) = queue.pop() {
        let (l, r) = (symbols[c.left], symbols[c.right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != c.len || l.next != Some(c.right) {
            continue;
        }
        on_merge(l.start, l.len, r.len);
        symbols[c.left].len = c.len;
        symbols[c.left].id = Some(c.merged);
        symbols[c.right].len = 0;
        symbols[c.left].next = r.next;
        if let Some(n) = r.next {
            symbols[n].prev = Some(c.left);
        }
        if let Some(p) = l.prev {
            try_pair(&mut queue, &symbols, p, c.left);
        }
        if let Some(n) = r.next {
            try_pair(&mut queue, &symbols, c.left, n);
        }
    }
    symbols.retain(|s| s.len > 0);
    symbols
}
