//! Tokenizers read from GGUF metadata, matching llama.cpp token for token.
//!
//! * `tokenizer.ggml.model = "gpt2"`: byte-level BPE with merges and the
//!   pre-tokenizer named by `tokenizer.ggml.pre` ([`bpe`], [`pretokenize`]).
//! * `tokenizer.ggml.model = "gemma4"`: SentencePiece-style BPE with merges
//!   over raw UTF-8 lines, spaces as `▁`, `<0xNN>` byte fallback, BOS always
//!   added (as llama.cpp forces it).
//! * `tokenizer.ggml.model = "llama"`: SentencePiece by scores with `<0xNN>` byte
//!   fallback; spaces become `▁`, with a leading one when `add_space_prefix` ([`spm`]).
//! * `tokenizer.ggml.model = "bert"`: WordPiece over BERT's normalized words
//!   ([`wordpiece`]); special tokens add `[CLS]` first and `[SEP]` last.
//!
//! Invariants: special tokens are found before either algorithm runs
//! ([`vocab::Vocab::partition`]); BOS / EOS are added exactly when asked and the
//! metadata says so; decoding a token never fails (unknown ids decode to nothing)
//! and `decode(encode(s)) == s` for text the vocabulary covers.

pub mod bpe;
pub mod merge;
pub mod pretokenize;
pub mod specials;
pub mod spm;
pub mod stream;
pub mod vocab;
pub mod wordpiece;

use std::borrow::Cow;
use std::collections::HashMap;

use ferrox_gguf::Metadata;

use crate::error::TextError;
use bpe::{Fallback, Merges};
use pretokenize::PreTokenizer;
use specials::VocabFacts;
pub use vocab::TokenType;
use vocab::{Fragment, Vocab};

pub use stream::Utf8Stream;

/// The tokenization algorithm and its tables.
#[derive(Clone, Debug)]
enum Algorithm {
    SentencePiece {
        add_space_prefix: bool,
    },
    WordPiece {
        normalizer: wordpiece::Normalizer,
        unk: u32,
        /// The longest piece, in bytes.
        longest: usize,
    },
    BytePairs {
        pre: PreTokenizer,
        merges: Merges,
        /// GPT-2's byte map; `None` for SentencePiece-style BPE (Gemma 4).
        bytes: Option<ByteLevel>,
        ignore_merges: bool,
    },
}

/// GPT-2's byte <-> printable character map.
#[derive(Clone, Debug)]
struct ByteLevel {
    byte_chars: Box<[char; 256]>,
    char_bytes: HashMap<char, u8>,
}

impl ByteLevel {
    fn new() -> ByteLevel {
        let byte_chars = Box::new(bpe::byte_to_char_table());
        let char_bytes = byte_chars
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        ByteLevel {
            byte_chars,
            char_bytes,
        }
    }
}

/// Which tokenizer family a model uses.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenizerKind {
    SentencePiece,
    BytePairs,
    WordPiece,
}

/// A tokenizer: text to ids and back.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    vocab: Vocab,
    algorithm: Algorithm,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    /// The separator WordPiece's special tokens end with (`[SEP]`).
    sep: Option<u32>,
    end_of_generation: Vec<u32>,
    fim: specials::FimTokens,
}

/// llama.cpp's ids of BERT's `[UNK]`, `[CLS]` and `[SEP]` when the file names
/// none.
const BERT_UNK: u32 = 100;
const BERT_CLS: u32 = 101;
const BERT_SEP: u32 = 102;

/// What the vocabulary's special tokens depend on besides their types.
fn vocab_facts(m: &Metadata, n: usize) -> Result<VocabFacts, TextError> {
    let text =
        |key: &str| -> Result<String, TextError> { Ok(m.string_opt(key)?.unwrap_or_default()) };
    let mut declared_ends = Vec::new();
    for key in [
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",
    ] {
        declared_ends.extend(id_key(m, key, n)?);
    }
    let mut declared_fim = [None; 6];
    for (slot, key) in declared_fim.iter_mut().zip(specials::fim_keys()) {
        *slot = id_key(m, key, n)?;
    }
    Ok(VocabFacts {
        model_name: text("general.name")?,
        pre: text("tokenizer.ggml.pre")?,
        architecture: text("general.architecture")?,
        declared_ends,
        declared_fim,
    })
}

fn id_key(m: &Metadata, key: &str, n: usize) -> Result<Option<u32>, TextError> {
    match m.count_opt(key)? {
        Some(id) if id < n => Ok(Some(id as u32)),
        Some(id) => Err(TextError::InvalidMetadata {
            key: key.into(),
            reason: format!("token {id} is outside the vocabulary of {n}"),
        }),
        None => Ok(None),
    }
}

impl Tokenizer {
    /// Builds the tokenizer the metadata describes.
    pub fn from_metadata(m: &Metadata) -> Result<Tokenizer, TextError> {
        let model = m.str("tokenizer.ggml.model")?;
        let n = m.string_array("tokenizer.ggml.tokens")?.len();
        let (vocab, end_of_generation, fim) = Vocab::from_metadata(m, &vocab_facts(m, n)?)?;
        let algorithm = match model {
            "llama" => Algorithm::SentencePiece {
                add_space_prefix: m
                    .bool_opt("tokenizer.ggml.add_space_prefix")?
                    .unwrap_or(true),
            },
            "gpt2" => {
                let pre_name = m
                    .string_opt("tokenizer.ggml.pre")?
                    .unwrap_or_else(|| "default".into());
                let pre = PreTokenizer::from_name(&pre_name)?;
                let merges = Merges::new(&vocab, m.string_array("tokenizer.ggml.merges")?);
                Algorithm::BytePairs {
                    pre,
                    merges,
                    bytes: Some(ByteLevel::new()),
                    ignore_merges: pre == PreTokenizer::Llama3 && pre_name != "default",
                }
            }
            "bert" => {
                let lowercase = m
                    .bool_opt("tokenizer.ggml.normalizer.lowercase")?
                    .unwrap_or(true);
                Algorithm::WordPiece {
                    normalizer: wordpiece::Normalizer {
                        lowercase,
                        strip_accents: m
                            .bool_opt("tokenizer.ggml.normalizer.strip_accents")?
                            .unwrap_or(lowercase),
                    },
                    unk: id_key(m, "tokenizer.ggml.unknown_token_id", n)?.unwrap_or(BERT_UNK),
                    longest: (0..n as u32)
                        .filter_map(|id| vocab.piece(id).map(str::len))
                        .max()
                        .unwrap_or(0),
                }
            }
            "gemma4" => Algorithm::BytePairs {
                pre: PreTokenizer::Gemma4,
                merges: Merges::new(&vocab, m.string_array("tokenizer.ggml.merges")?),
                bytes: None,
                ignore_merges: false,
            },
            other => {
                return Err(TextError::InvalidMetadata {
                    key: "tokenizer.ggml.model".into(),
                    reason: format!(
                        "unsupported tokenizer {other:?}; supported: llama (SentencePiece), gpt2 (byte-level BPE), gemma4 (SentencePiece-style BPE), bert (WordPiece)"
                    ),
                });
            }
        };
        // BOS when the metadata is silent, as llama.cpp defaults it: SentencePiece
        // vocabularies and the Llama 3 pre-tokenizer names (the same names for
        // which it ignores merges).
        let bos_by_default = matches!(
            algorithm,
            Algorithm::SentencePiece { .. }
                | Algorithm::BytePairs {
                    ignore_merges: true,
                    ..
                }
        );
        // llama.cpp adds BOS for Gemma 4 whatever its metadata says.
        let forced_bos = model == "gemma4";
        let bert = model == "bert";
        // WordPiece's specials: [CLS] opens, [SEP] closes (llama.cpp's default
        // ids when the file names none).
        let bos = match id_key(m, "tokenizer.ggml.bos_token_id", n)? {
            None if bert => id_key(m, "tokenizer.ggml.cls_token_id", n)?.or(Some(BERT_CLS)),
            b => b,
        };
        let sep = match bert {
            true => id_key(m, "tokenizer.ggml.seperator_token_id", n)?.or(Some(BERT_SEP)),
            false => None,
        };
        let eos = id_key(m, "tokenizer.ggml.eos_token_id", n)?;
        Ok(Tokenizer {
            vocab,
            algorithm,
            bos,
            eos,
            add_bos: forced_bos
                || bert
                || m.bool_opt("tokenizer.ggml.add_bos_token")?
                    .unwrap_or(bos_by_default),
            add_eos: m.bool_opt("tokenizer.ggml.add_eos_token")?.unwrap_or(false),
            sep,
            end_of_generation,
            fim,
        })
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    /// Number of tokens.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The tokenizer family.
    pub fn kind(&self) -> TokenizerKind {
        match self.algorithm {
            Algorithm::SentencePiece { .. } => TokenizerKind::SentencePiece,
            Algorithm::BytePairs { .. } => TokenizerKind::BytePairs,
            Algorithm::WordPiece { .. } => TokenizerKind::WordPiece,
        }
    }

    /// Beginning-of-sequence token.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence token.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The fill-in-the-middle tokens, declared or found by text as llama.cpp
    /// finds them.
    pub fn fim(&self) -> specials::FimTokens {
        self.fim
    }

    /// Whether encoding with specials adds BOS.
    pub fn adds_bos(&self) -> bool {
        self.add_bos && self.bos.is_some()
    }

    /// Whether special tokens end a text with EOS.
    pub fn adds_eos(&self) -> bool {
        self.add_eos && self.eos.is_some()
    }

    /// The separator special tokens close a WordPiece text with (`[SEP]`).
    pub fn sep(&self) -> Option<u32> {
        self.sep
    }

    /// A query and a document as one input to a cross-encoder, as llama.cpp
    /// joins them without a rerank template: `BOS query EOS SEP document EOS`,
    /// each special where the vocabulary adds it (`[CLS] query [SEP] document`
    /// for BERT); neither text's special tokens are parsed.
    pub fn encode_pair(&self, query: &str, document: &str) -> Vec<u32> {
        let mut out = Vec::new();
        if self.adds_bos()
            && let Some(b) = self.bos
        {
            out.push(b);
        }
        let end = self.adds_eos().then_some(self.eos).flatten();
        out.extend(self.encode(query, false, false));
        out.extend(end);
        out.extend(self.sep);
        out.extend(self.encode(document, false, false));
        out.extend(end);
        out
    }

    /// Every token that ends generation: EOS and the end-of-turn tokens (SPEC S14).
    pub fn end_of_generation(&self) -> &[u32] {
        &self.end_of_generation
    }

    /// Whether `id` ends generation.
    pub fn is_end_of_generation(&self, id: u32) -> bool {
        self.end_of_generation.binary_search(&id).is_ok()
    }

    /// Token ids of `text`. `add_special` adds BOS / EOS as the metadata asks;
    /// `parse_special` lets text spell control tokens.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special
            && self.add_bos
            && let Some(b) = self.bos
        {
            out.push(b);
        }
        let mut prev_special = true;
        let mut word = String::new();
        for frag in self.vocab.partition(text, parse_special) {
            match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                // No text, no tokens (not even SentencePiece's space prefix).
                Fragment::Text("") => {}
                Fragment::Text(t) => {
                    match &self.algorithm {
                        Algorithm::SentencePiece { add_space_prefix } => {
                            let mut escaped = String::with_capacity(t.len() + 3);
                            if *add_space_prefix && prev_special {
                                escaped.push('▁');
                            }
                            for c in t.chars() {
                                escaped.push(if c == ' ' { '▁' } else { c });
                            }
                            spm::tokenize(&self.vocab, &escaped, &mut out);
                        }
                        Algorithm::WordPiece {
                            normalizer,
                            unk,
                            longest,
                        } => wordpiece::tokenize(
                            &self.vocab,
                            t,
                            *normalizer,
                            *unk,
                            *longest,
                            &mut out,
                        ),
                        Algorithm::BytePairs {
                            pre,
                            merges,
                            bytes: Some(level),
                            ignore_merges,
                        } => pre.split(t, |w| {
                            word.clear();
                            word.extend(w.bytes().map(|b| level.byte_chars[b as usize]));
                            bpe::tokenize_word(
                                &self.vocab,
                                merges,
                                &word,
                                *ignore_merges,
                                Fallback::Chars,
                                &mut out,
                            );
                        }),
                        Algorithm::BytePairs {
                            pre,
                            merges,
                            bytes: None,
                            ignore_merges,
                        } => {
                            let escaped = t.replace(' ', "▁");
                            pre.split(&escaped, |w| {
                                // A run of newlines that is a token is taken whole.
                                match self.vocab.id_of(w) {
                                    Some(id) if w.bytes().all(|b| b == b'\n') => out.push(id),
                                    _ => bpe::tokenize_word(
                                        &self.vocab,
                                        merges,
                                        w,
                                        *ignore_merges,
                                        Fallback::HexBytes,
                                        &mut out,
                                    ),
                                }
                            });
                        }
                    }
                    prev_special = false;
                }
            }
        }
        if add_special
            && self.add_eos
            && let Some(e) = self.eos
        {
            out.push(e);
        }
        if add_special && let Some(s) = self.sep {
            out.push(s);
        }
        out
    }

    /// The bytes token `id` stands for. Control tokens render as their text only with
    /// `render_special`; ids outside the vocabulary render as nothing.
    pub fn token_bytes(&self, id: u32, render_special: bool) -> Cow<'_, [u8]> {
        let (Some(piece), Some(ty)) = (self.vocab.piece(id), self.vocab.token_type(id)) else {
            return Cow::Borrowed(&[]);
        };
        match ty {
            TokenType::Control | TokenType::Unused if !render_special => Cow::Borrowed(&[]),
            TokenType::Control | TokenType::Unused | TokenType::UserDefined => {
                Cow::Borrowed(piece.as_bytes())
            }
            TokenType::Unknown => Cow::Borrowed(if render_special {
                piece.as_bytes()
            } else {
                "\u{2585}".as_bytes()
            }),
            TokenType::Byte => match piece
                .strip_prefix("<0x")
                .and_then(|h| h.strip_suffix('>'))
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                Some(b) => Cow::Owned(vec![b]),
                None => Cow::Borrowed(piece.as_bytes()),
            },
            TokenType::Normal => match &self.algorithm {
                Algorithm::SentencePiece { .. }
                | Algorithm::WordPiece { .. }
                | Algorithm::BytePairs { bytes: None, .. } => {
                    if piece.contains('▁') {
                        Cow::Owned(piece.replace('▁', " ").into_bytes())
                    } else {
                        Cow::Borrowed(piece.as_bytes())
                    }
                }
                Algorithm::BytePairs {
                    bytes: Some(level), ..
                } => {
                    let mut v = Vec::with_capacity(piece.len());
                    for c in piece.chars() {
                        match level.char_bytes.get(&c) {
                            Some(&b) => v.push(b),
                            None => v.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                        }
                    }
                    Cow::Owned(v)
                }
            },
        }
    }

    /// Whether decoding drops one leading space (SentencePiece with a space prefix).
    pub fn strips_leading_space(&self) -> bool {
        matches!(
            self.algorithm,
            Algorithm::SentencePiece {
                add_space_prefix: true
            }
        )
    }

    /// The bytes of a sequence of ids.
    pub fn decode_bytes(&self, ids: &[u32], render_special: bool) -> Vec<u8> {
        let mut out = Vec::new();
        for &id in ids {
            out.extend_from_slice(&self.token_bytes(id, render_special));
        }
        if self.strips_leading_space() && out.first() == Some(&b' ') {
            out.remove(0);
        }
        out
    }

    /// The text of a sequence of ids (invalid UTF-8 becomes U+FFFD).
    pub fn decode(&self, ids: &[u32], render_special: bool) -> String {
        String::from_utf8_lossy(&self.decode_bytes(ids, render_special)).into_owned()
    }
}
