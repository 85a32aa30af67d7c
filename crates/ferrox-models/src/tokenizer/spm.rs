//! SentencePiece-style tokenization as llama.cpp does it (`llm_tokenizer_spm`):
//! start from single characters, repeatedly merge the adjacent pair whose
//! concatenation is a token with the highest score (leftmost on ties), then map each
//! final symbol to its token, falling back to `<0xNN>` byte tokens.
//!
//! Invariants: symbols are always contiguous byte ranges of the input, so every
//! lookup is of a slice (no allocation per candidate); a stale queue entry (one of
//! whose sides has since merged) is recognised by its length and skipped.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::vocab::Vocab;

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Candidate {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
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
    /// Higher score first; on equal scores the leftmost pair first.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.left.cmp(&self.left))
    }
}

/// Appends the tokens of `text` (already whitespace-escaped with `▁`) to `out`.
pub fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    if text.is_empty() {
        return;
    }
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    for (i, (start, c)) in text.char_indices().enumerate() {
        symbols.push(Symbol { start, len: c.len_utf8(), prev: i.checked_sub(1), next: Some(i + 1) });
    }
    if let Some(last) = symbols.last_mut() {
        last.next = None;
    }
    // Which two symbols each merged range came from, to re-split ranges that are not tokens.
    let mut merged_from: HashMap<(usize, usize), (usize, usize)> = HashMap::new();
    let mut queue = BinaryHeap::new();
    let try_pair = |queue: &mut BinaryHeap<Candidate>, symbols: &[Symbol], left: usize, right: usize| {
        let (l, r) = (symbols[left], symbols[right]);
        let piece = &text[l.start..r.start + r.len];
        if let Some(id) = vocab.id_of(piece) {
            queue.push(Candidate { score: vocab.score(id), left, right, len: piece.len() });
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
        merged_from.insert((l.start, c.len), (l.len, r.len));
        symbols[c.left].len += r.len;
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
    let mut i = Some(0);
    while let Some(s) = i {
        let sym = symbols[s];
        resegment(vocab, text, sym.start, sym.len, &merged_from, out);
        i = sym.next;
    }
}

fn resegment(vocab: &Vocab, text: &str, start: usize, len: usize, merged_from: &HashMap<(usize, usize), (usize, usize)>, out: &mut Vec<u32>) {
    let piece = &text[start..start + len];
    if let Some(id) = vocab.id_of(piece) {
        out.push(id);
        return;
    }
    match merged_from.get(&(start, len)) {
        Some(&(l, r)) => {
            resegment(vocab, text, start, l, merged_from, out);
            resegment(vocab, text, start + l, r, merged_from, out);
        }
        None => out.extend(piece.bytes().filter_map(|b| vocab.byte_token(b))),
    }
}
