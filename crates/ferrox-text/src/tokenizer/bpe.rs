//! BPE as llama.cpp runs it (`llm_tokenizer_bpe`): the adjacent pair with the
//! lowest merge rank is merged (leftmost on ties) until no ranked pair remains.
//! Two flavours of word:
//! * byte-level (GPT-2): each byte of a pre-tokenized word is first mapped to a
//!   printable character; a piece the vocabulary lacks falls back to its
//!   characters one by one;
//! * SentencePiece-style (Gemma 4): the word is raw UTF-8 with `▁` for spaces;
//!   a piece the vocabulary lacks falls back to `<0xNN>` byte tokens.
//!
//! Invariants: the byte <-> char mapping is a bijection on all 256 bytes; symbols
//! are contiguous ranges of the mapped word, looked up as slices.

use std::collections::HashMap;

use super::merge::merge;
use super::vocab::Vocab;

/// GPT-2's printable stand-in for each byte.
pub fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..256u32 {
        let printable =
            (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
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
    /// Reads `"left right"` merge lines (split at the first space past the first
    /// byte, as llama.cpp does, so a left part may be a space); merges whose
    /// parts or result are not tokens can never apply and are skipped.
    pub fn new(vocab: &Vocab, lines: &[String]) -> Merges {
        let mut ranks = HashMap::with_capacity(lines.len());
        for (rank, line) in lines.iter().enumerate() {
            let Some(at) = line.bytes().skip(1).position(|b| b == b' ') else {
                continue;
            };
            let (l, r) = (&line[..at + 1], &line[at + 2..]);
            let (Some(li), Some(ri), Some(mi)) = (
                vocab.id_of(l),
                vocab.id_of(r),
                vocab.id_of(&format!("{l}{r}")),
            ) else {
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

/// What a piece the vocabulary lacks becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// Its characters, each as a one-character piece (byte-level words).
    Chars,
    /// Its UTF-8 bytes as `<0xNN>` tokens (SentencePiece-style words).
    HexBytes,
}

/// Appends the tokens of one word to `out`. With `ignore_merges` (the llama3
/// tokenizer), a word that is itself a token is taken whole.
pub fn tokenize_word(
    vocab: &Vocab,
    merges: &Merges,
    word: &str,
    ignore_merges: bool,
    fallback: Fallback,
    out: &mut Vec<u32>,
) {
    if let Some(id) = vocab.id_of(word)
        && (ignore_merges || word.chars().nth(1).is_none())
    {
        out.push(id);
        return;
    }
    let symbols = merge(
        word,
        |c| vocab.id_of(c),
        |l, r, _| match (l.id, r.id) {
            (Some(li), Some(ri)) => merges
                .get(li, ri)
                .map(|(rank, merged)| (-(rank as f64), merged)),
            _ => None,
        },
        |_, _, _| {},
    );
    for sym in symbols {
        match sym.id {
            Some(id) => out.push(id),
            None => {
                let piece = &word[sym.start..sym.start + sym.len];
                match fallback {
                    Fallback::Chars => {
                        for ch in piece.chars() {
                            if let Some(id) = vocab.id_of(ch.encode_utf8(&mut [0; 4])) {
                                out.push(id);
                            }
                        }
                    }
                    Fallback::HexBytes => {
                        for b in piece.bytes() {
                            if let Some(id) = vocab.id_of(&format!("<0x{b:02X}>")) {
                                out.push(id);
                            }
                        }
                    }
                }
            }
        }
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
