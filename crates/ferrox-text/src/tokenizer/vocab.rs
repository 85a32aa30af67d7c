//! The vocabulary of a GGUF tokenizer: pieces, token types, scores, the special
//! ids, and the partition of text around special tokens.
//!
//! Invariants:
//! * `piece(id)` exists for every id below `len()`; `id_of` is its inverse for the
//!   first id holding a piece (later duplicates are unreachable by text, as in
//!   llama.cpp).
//! * Special-token partition follows llama.cpp (`tokenizer_st_partition`): the
//!   tokens of [`SpecialTokens::matched`] are matched in text, longest text first;
//!   with parse-special off, only those that are neither control nor unknown are
//!   (control tokens such as `<|im_start|>` are then plain text); whitespace
//!   beside a token that strips it is dropped from the neighbouring text.

use std::collections::HashMap;

use ferrox_gguf::Metadata;

use super::specials::{FimTokens, Special, SpecialTokens, VocabFacts};
use crate::error::TextError;

/// GGUF `tokenizer.ggml.token_type` values.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TokenType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    fn from_gguf(v: i32) -> TokenType {
        match v {
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Normal,
        }
    }
}

/// A piece of input after special-token partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fragment<'a> {
    /// Text to run through the model's algorithm.
    Text(&'a str),
    /// A special token spelled out in the text.
    Token(u32),
}

/// Pieces, types and scores of every token.
#[derive(Clone, Debug)]
pub struct Vocab {
    pieces: Vec<String>,
    types: Vec<TokenType>,
    scores: Vec<f32>,
    by_piece: HashMap<String, u32>,
    /// Tokens matched in raw text, longest piece first.
    specials: Vec<Special>,
    /// The `<0xNN>` byte-fallback token of each byte, where the vocabulary has one.
    byte_tokens: [Option<u32>; 256],
}

impl Vocab {
    /// Reads the vocabulary arrays of `m`.
    /// Its special tokens follow llama.cpp's rules given `facts`; the tokens
    /// that end generation come with it.
    pub fn from_metadata(
        m: &Metadata,
        facts: &VocabFacts,
    ) -> Result<(Vocab, Vec<u32>, FimTokens), TextError> {
        let pieces = m.string_array("tokenizer.ggml.tokens")?.to_vec();
        let n = pieces.len();
        let bad = |key: &str, len: usize| TextError::InvalidMetadata {
            key: key.to_string(),
            reason: format!("{len} entries for {n} tokens"),
        };
        let types: Vec<TokenType> = match m.get("tokenizer.ggml.token_type") {
            None => vec![TokenType::Normal; n],
            Some(_) => m
                .i32_array("tokenizer.ggml.token_type")?
                .iter()
                .map(|&t| TokenType::from_gguf(t))
                .collect(),
        };
        if types.len() != n {
            return Err(bad("tokenizer.ggml.token_type", types.len()));
        }
        let scores = match m.get("tokenizer.ggml.scores") {
            None => vec![0.0; n],
            Some(_) => m.f32_array("tokenizer.ggml.scores")?.to_vec(),
        };
        if scores.len() != n {
            return Err(bad("tokenizer.ggml.scores", scores.len()));
        }
        Ok(Vocab::with_facts(pieces, types, scores, facts))
    }

    /// A vocabulary from its parts (all the same length), its special tokens
    /// derived from their types alone (no model-specific rules).
    pub fn new(pieces: Vec<String>, types: Vec<TokenType>, scores: Vec<f32>) -> Vocab {
        Vocab::with_facts(pieces, types, scores, &VocabFacts::default()).0
    }

    /// A vocabulary from its parts, its special tokens derived with `facts`,
    /// the tokens that end generation, and the fill-in-the-middle tokens.
    fn with_facts(
        pieces: Vec<String>,
        types: Vec<TokenType>,
        scores: Vec<f32>,
        facts: &VocabFacts,
    ) -> (Vocab, Vec<u32>, FimTokens) {
        let mut by_piece = HashMap::with_capacity(pieces.len());
        for (i, p) in pieces.iter().enumerate() {
            by_piece.entry(p.clone()).or_insert(i as u32);
        }
        let byte_tokens = std::array::from_fn(|b| by_piece.get(&format!("<0x{b:02X}>")).copied());
        let mut vocab = Vocab {
            pieces,
            types,
            scores,
            by_piece,
            specials: Vec::new(),
            byte_tokens,
        };
        let specials = SpecialTokens::derive(&vocab, facts);
        vocab.specials = specials.matched;
        (vocab, specials.end_of_generation, specials.fim)
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// Whether the vocabulary is empty.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// The stored piece of `id`.
    pub fn piece(&self, id: u32) -> Option<&str> {
        self.pieces.get(id as usize).map(String::as_str)
    }

    /// The type of `id`.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// The score of `id` (SentencePiece merge priority).
    pub fn score(&self, id: u32) -> f32 {
        self.scores
            .get(id as usize)
            .copied()
            .unwrap_or(f32::NEG_INFINITY)
    }

    /// The byte-fallback token (`<0xNN>`) of `b`.
    pub fn byte_token(&self, b: u8) -> Option<u32> {
        self.byte_tokens[b as usize]
    }

    /// The token whose piece is exactly `text`.
    pub fn id_of(&self, text: &str) -> Option<u32> {
        self.by_piece.get(text).copied()
    }

    /// Splits `text` at the special tokens it spells (SPEC: parse-special decides
    /// whether control tokens count).
    pub fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        let mut frags = vec![Fragment::Text(text)];
        if text.is_empty() {
            return frags;
        }
        for special in &self.specials {
            if special.parse_only && !parse_special {
                continue;
            }
            let piece = self.pieces[special.id as usize].as_str();
            if !frags
                .iter()
                .any(|f| matches!(f, Fragment::Text(t) if t.contains(piece)))
            {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                match f {
                    Fragment::Text(t) => split_at_token(t, piece, special, &mut next),
                    tok => next.push(tok),
                }
            }
            frags = next;
        }
        frags
    }
}

/// Pushes the fragments of `text` split at every `piece` (the text of
/// `special`), with the whitespace the token strips dropped beside it.
fn split_at_token<'a>(text: &'a str, piece: &str, special: &Special, out: &mut Vec<Fragment<'a>>) {
    let is_space = |c: char| c.is_ascii_whitespace() || c == '\x0b';
    let mut rest = text;
    while let Some(at) = rest.find(piece) {
        let mut left = &rest[..at];
        if special.lstrip {
            left = left.trim_end_matches(is_space);
        }
        if !left.is_empty() {
            out.push(Fragment::Text(left));
        }
        out.push(Fragment::Token(special.id));
        rest = &rest[at + piece.len()..];
        if special.rstrip {
            rest = rest.trim_start_matches(is_space);
        }
    }
    if !rest.is_empty() {
        out.push(Fragment::Text(rest));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab() -> Vocab {
        let pieces = ["a", "<ctl>", "<user>", "<ctl>x", "b"]
            .map(String::from)
            .to_vec();
        let types = vec![
            TokenType::Normal,
            TokenType::Control,
            TokenType::UserDefined,
            TokenType::Control,
            TokenType::Normal,
        ];
        Vocab::new(pieces, types, vec![0.0; 5])
    }

    #[test]
    fn control_tokens_split_text_only_with_parse_special() {
        let v = vocab();
        assert_eq!(
            v.partition("a<ctl>b", false),
            vec![Fragment::Text("a<ctl>b")]
        );
        assert_eq!(
            v.partition("a<ctl>b", true),
            vec![Fragment::Text("a"), Fragment::Token(1), Fragment::Text("b")]
        );
    }

    #[test]
    fn user_defined_tokens_always_split_and_longer_pieces_win() {
        let v = vocab();
        assert_eq!(
            v.partition("<user><user>", false),
            vec![Fragment::Token(2), Fragment::Token(2)]
        );
        assert_eq!(
            v.partition("<ctl>x<ctl>", true),
            vec![Fragment::Token(3), Fragment::Token(1)]
        );
    }
}
