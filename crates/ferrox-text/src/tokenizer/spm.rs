//! SentencePiece-style tokenization as llama.cpp does it (`llm_tokenizer_spm`):
//! start from single characters, repeatedly merge the adjacent pair whose
//! concatenation is a token with the highest score (leftmost on ties), then map each
//! final symbol to its token, falling back to `<0xNN>` byte tokens.
//!
//! Invariants: symbols are always contiguous byte ranges of the input, so every
//! lookup is of a slice (no allocation per candidate); a stale queue entry (one of
//! whose sides has since merged) is recognised by its length and skipped.

use std::collections::HashMap;

use super::merge::merge;
use super::vocab::Vocab;

/// Appends the tokens of `text` (already whitespace-escaped with `▁`) to `out`.
pub fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    if text.is_empty() {
        return;
    }
    // Which two symbols each merged range came from, to re-split ranges that are not tokens.
    let mut merged_from: HashMap<(usize, usize), (usize, usize)> = HashMap::new();
    let symbols = merge(
        text,
        |c| vocab.id_of(c),
        |_, _, both| vocab.id_of(both).map(|id| (vocab.score(id) as f64, id)),
        |start, l, r| {
            merged_from.insert((start, l + r), (l, r));
        },
    );
    for sym in symbols {
        resegment(vocab, text, sym.start, sym.len, &merged_from, out);
    }
}

fn resegment(
    vocab: &Vocab,
    text: &str,
    start: usize,
    len: usize,
    merged_from: &HashMap<(usize, usize), (usize, usize)>,
    out: &mut Vec<u32>,
) {
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
