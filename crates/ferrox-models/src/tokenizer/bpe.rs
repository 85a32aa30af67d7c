//! Byte-level BPE as GPT-2 defined it and llama.cpp runs it (`llm_tokenizer_bpe`):
//! each byte of a pre-tokenized word is mapped to a printable character, then the
//! adjacent pair with the lowest merge rank is merged (leftmost on ties) until no
//! ranked pair remains.
//!
//! Invariants: the byte <-> char mapping is a bijection on all 256 bytes; symbols
//! are contiguous ranges of the mapped word, looked up as slices.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::vocab::Vocab;

/// GPT-2's printable stand-in for each byte.
pub fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        let c = if printable {
            b
        } else {
            next += 1;
            next - 1
        };
        table[b as usize] = char::from_u32(c).expect("below 0x200 is valid");
    }
    table
}

/// Merge ranks: `(left id, right id) -> (rank, merged id)`.
#[derive(Clone, Debug, Default)]
pub struct Merges {
    ranks: HashMap<(u32, u32), (u32, u32)>,
}

impl Merges {
    /// Reads `"left right"` merge lines; merges whose parts or result are not tokens
    /// can never apply and are skipped.
    pub fn new(vocab: &Vocab, lines: &[String]) -> Merges {
        let mut ranks = HashMap::with_capacity(lines.len());
        for (rank, line) in lines.iter().enumerate() {
            let Some((l, r)) = line.split_once(' ') else { continue };
            let (Some(li), Some(ri), Some(mi)) = (vocab.id_of(l), vocab.id_of(r), vocab.id_of(&format!("{l}{r}"))) else {
                continue;
            };
            ranks.entry((li, ri)).or_insert((rank as u32, mi));
        }
        Merges { ranks }
    }

    fn get(&self, l: u32, r: u32) -> Option<(u32, u32)> {
        self.ranks.get(&(l, r)).copied()
    }
}

#[derive(Clone, Copy)]
struct Symbol {
    /// Token of this range, `None` for a lone character that is not a token.
    id: Option<u32>,
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

#[derive(PartialEq, Eq)]
struct Candidate {
    rank: u32,
    left: usize,
    right: usize,
    merged: u32,
    len: usize,
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    /// Lowest rank first, then leftmost (reversed for a max-heap).
    fn cmp(&self, other: &Self) -> Ordering {
        other.rank.cmp(&self.rank).then_with(|| other.left.cmp(&self.left))
    }
}

/// Appends the tokens of one byte-mapped word to `out`. With `ignore_merges` (the
/// llama3 tokenizer), a word that is itself a token is taken whole.
pub fn tokenize_word(vocab: &Vocab, merges: &Merges, word: &str, ignore_merges: bool, out: &mut Vec<u32>) {
    if let Some(id) = vocab.id_of(word)
        && (ignore_merges || word.chars().nth(1).is_none())
    {
        out.push(id);
        return;
    }
    let mut symbols: Vec<Symbol> = Vec::with_capacity(word.len());
    for (i, (start, c)) in word.char_indices().enumerate() {
        let len = c.len_utf8();
        symbols.push(Symbol { id: vocab.id_of(&word[start..start + len]), start, len, prev: i.checked_sub(1), next: Some(i + 1) });
    }
    if let Some(last) = symbols.last_mut() {
        last.next = None;
    }
    let mut queue = BinaryHeap::new();
    let try_pair = |queue: &mut BinaryHeap<Candidate>, symbols: &[Symbol], left: usize, right: usize| {
        let (l, r) = (symbols[left], symbols[right]);
        if let (Some(li), Some(ri)) = (l.id, r.id)
            && let Some((rank, merged)) = merges.get(li, ri)
        {
            queue.push(Candidate { rank, left, right, merged, len: l.len + r.len });
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
    let mut i = if symbols.is_empty() { None } else { Some(0) };
    while let Some(s) = i {
        let sym = symbols[s];
        match sym.id {
            Some(id) => out.push(id),
            // A character the vocabulary lacks: its UTF-8 bytes, each as a one-char piece.
            None => {
                for ch in word[sym.start..sym.start + sym.len].chars() {
                    if let Some(id) = vocab.id_of(ch.encode_utf8(&mut [0; 4])) {
                        out.push(id);
                    }
                }
            }
        }
        i = sym.next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_map_is_a_bijection_onto_printable_chars() {
        let t = byte_to_char_table();
        let mut seen = std::collections::HashSet::new();
        for c in t {
            assert!(!c.is_control() && c != ' ', "{c:?}");
            assert!(seen.insert(c));
        }
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'a' as usize], 'a');
    }
}
