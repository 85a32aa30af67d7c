//! Pre-tokenizers of byte-level BPE vocabularies, selected by `tokenizer.ggml.pre`.
//!
//! Each splits text into words exactly as the regular expressions llama.cpp uses
//! for that pre-tokenizer would (hand-written scanners, as llama.cpp's own
//! `unicode_regex_split_custom_*`, so no regex engine runs per word):
//! * `gpt2`: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
//! * `llama3` (also `llama-bpe`, `default`): case-insensitive contractions,
//!   `[^\r\n\p{L}\p{N}]?\p{L}+`, `\p{N}{1,3}`, ` ?[^\s\p{L}\p{N}]+[\r\n]*`,
//!   `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`
//! * `qwen2`: as llama3 with single digits `\p{N}`
//! * `qwen35`: as qwen2 with combining marks (`\p{M}`) counted as letters:
//!   `[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+`, ` ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*`
//! * `gpt-4o` (gpt-oss's o200k): cased words, `[^\r\n\p{L}\p{N}]?` then
//!   `U*L+` or `U+L*` with a trailing contraction, where on llama.cpp's
//!   collapsed text an upper letter is any letter but `a-z` and a lower one any
//!   but `A-Z`; `\p{N}{1,3}`; ` ?[^\s\p{L}\p{N}]+[\r\n/]*`; then llama3's
//!   whitespace rules
//! * `smollm` (also `starcoder` and `refact`, which llama.cpp splits alike):
//!   every digit its own piece (`\p{N}`), then gpt2 on the rest.
//! * `gemma4`: runs of non-newlines and runs of newlines (`[^\n]+|[\n]+`); the
//!   BPE then merges over a whole line (SentencePiece-style BPE).
//! * `deepseek-coder`: llama.cpp's five expressions applied in turn, each
//!   splitting every piece the ones before left (what an expression does not
//!   match stays a piece): `[\r\n]`, `\s?\p{L}+`, `\s?\p{P}+`,
//!   `[一-龥ࠀ-一가-퟿]+`, `\p{N}`.
//!
//! Invariant: the words concatenate back to the input (nothing dropped or added).

use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

use crate::error::TextError;

/// A pre-tokenizer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    Gpt2,
    Llama3,
    Qwen2,
    Qwen35,
    SmolLm,
    Gemma4,
    Gpt4o,
    DeepSeekCoder,
}

impl PreTokenizer {
    /// Names accepted in `tokenizer.ggml.pre`, for error messages.
    pub const NAMES: &'static str = "gpt2, default, llama3, llama-bpe, qwen2, qwen35, smollm, starcoder, refact, gemma4, gpt-4o, deepseek-coder";

    /// The pre-tokenizer named by `tokenizer.ggml.pre`.
    pub fn from_name(name: &str) -> Result<PreTokenizer, TextError> {
        Ok(match name {
            "gpt2" | "gpt-2" => PreTokenizer::Gpt2,
            "default" | "llama3" | "llama-bpe" | "llama-v3" => PreTokenizer::Llama3,
            "qwen2" => PreTokenizer::Qwen2,
            "qwen35" => PreTokenizer::Qwen35,
            "gemma4" => PreTokenizer::Gemma4,
            "smollm" | "starcoder" | "refact" => PreTokenizer::SmolLm,
            "gpt-4o" | "llama4" => PreTokenizer::Gpt4o,
            "deepseek-coder" => PreTokenizer::DeepSeekCoder,
            _ => {
                return Err(TextError::InvalidMetadata {
                    key: "tokenizer.ggml.pre".into(),
                    reason: format!("unknown pre-tokenizer {name:?}; supported: {}", Self::NAMES),
                });
            }
        })
    }

    /// Calls `word` with each word of `text`, in order.
    pub fn split<'a>(self, text: &'a str, mut word: impl FnMut(&'a str)) {
        match self {
            PreTokenizer::Gpt2 => split_gpt2(text, &mut word),
            PreTokenizer::Llama3 => {
                split_llama3(Chars::new(text, false), text, 3, Letters::Plain, &mut word)
            }
            PreTokenizer::Qwen2 => {
                split_llama3(Chars::new(text, false), text, 1, Letters::Plain, &mut word)
            }
            PreTokenizer::Qwen35 => {
                split_llama3(Chars::new(text, true), text, 1, Letters::Plain, &mut word)
            }
            PreTokenizer::Gpt4o => {
                split_llama3(Chars::new(text, false), text, 3, Letters::Cased, &mut word)
            }
            PreTokenizer::Gemma4 => split_lines(text, &mut word),
            PreTokenizer::DeepSeekCoder => split_in_turn(text, &DEEPSEEK_CODER, &mut word),
            PreTokenizer::SmolLm => {
                let mut rest = text;
                while let Some((at, c)) = rest
                    .char_indices()
                    .find(|&(_, c)| class(c, false) == Class::Number)
                {
                    if at > 0 {
                        split_gpt2(&rest[..at], &mut word);
                    }
                    word(&rest[at..at + c.len_utf8()]);
                    rest = &rest[at + c.len_utf8()..];
                }
                if !rest.is_empty() {
                    split_gpt2(rest, &mut word);
                }
            }
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Class {
    Letter,
    Number,
    Space,
    Other,
    /// Past the end of the text.
    End,
}

/// The class of `c`; combining marks are letters when `marks_are_letters`.
fn class(c: char, marks_are_letters: bool) -> Class {
    if c.is_ascii() {
        return match c {
            'a'..='z' | 'A'..='Z' => Class::Letter,
            '0'..='9' => Class::Number,
            ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c' => Class::Space,
            _ => Class::Other,
        };
    }
    if c.is_whitespace() {
        return Class::Space;
    }
    match c.general_category_group() {
        GeneralCategoryGroup::Letter => Class::Letter,
        GeneralCategoryGroup::Number => Class::Number,
        GeneralCategoryGroup::Mark if marks_are_letters => Class::Letter,
        _ => Class::Other,
    }
}

/// The text as (byte offset, char, class), with an `End` sentinel.
struct Chars {
    offsets: Vec<usize>,
    chars: Vec<char>,
    classes: Vec<Class>,
}

impl Chars {
    fn new(text: &str, marks_are_letters: bool) -> Chars {
        let n = text.len();
        let (mut offsets, mut chars, mut classes) = (
            Vec::with_capacity(n + 1),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for (i, c) in text.char_indices() {
            offsets.push(i);
            chars.push(c);
            classes.push(class(c, marks_are_letters));
        }
        offsets.push(n);
        Chars {
            offsets,
            chars,
            classes,
        }
    }
    fn len(&self) -> usize {
        self.chars.len()
    }
    fn class(&self, i: usize) -> Class {
        self.classes.get(i).copied().unwrap_or(Class::End)
    }
    fn char(&self, i: usize) -> Option<char> {
        self.chars.get(i).copied()
    }
    fn lower(&self, i: usize) -> Option<char> {
        self.char(i).map(|c| c.to_ascii_lowercase())
    }
}

/// Length in chars of a contraction at `pos` (`'s`, `'ll`, ...), if one starts there.
fn contraction(cs: &Chars, pos: usize, case_insensitive: bool) -> usize {
    if cs.char(pos) != Some('\'') {
        return 0;
    }
    let get = |i| {
        if case_insensitive {
            cs.lower(i)
        } else {
            cs.char(i)
        }
    };
    match (get(pos + 1), get(pos + 2)) {
        (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l')) => 3,
        (Some('s' | 't' | 'm' | 'd'), _) => 2,
        _ => 0,
    }
}

/// `\s+(?!\S)` then `\s+`: a whitespace run, less its last char when a non-space follows.
fn whitespace_run(cs: &Chars, pos: usize) -> usize {
    let mut n = 0;
    while cs.class(pos + n) == Class::Space {
        n += 1;
    }
    if n > 1 && cs.class(pos + n) != Class::End {
        n - 1
    } else {
        n
    }
}

fn emit<'a>(text: &'a str, cs: &Chars, from: usize, to: usize, word: &mut impl FnMut(&'a str)) {
    if to > from {
        word(&text[cs.offsets[from]..cs.offsets[to]]);
    }
}

fn split_gpt2<'a>(text: &'a str, word: &mut impl FnMut(&'a str)) {
    let cs = Chars::new(text, false);
    let mut pos = 0;
    while pos < cs.len() {
        let start = pos;
        let c = cs.char(pos);
        let n = contraction(&cs, pos, false);
        if n > 0 {
            pos += n;
        } else {
            let lead = usize::from(c == Some(' '));
            let k = cs.class(pos + lead);
            if matches!(k, Class::Letter | Class::Number) {
                pos += lead;
                while cs.class(pos) == k {
                    pos += 1;
                }
            } else if k == Class::Other {
                pos += lead;
                while cs.class(pos) == Class::Other {
                    pos += 1;
                }
            } else {
                let ws = whitespace_run(&cs, pos);
                pos += ws.max(1);
            }
        }
        emit(text, &cs, start, pos, word);
    }
}

/// `[^\n]+|[\n]+`.
fn split_lines<'a>(text: &'a str, word: &mut impl FnMut(&'a str)) {
    let mut rest = text;
    while let Some(first) = rest.chars().next() {
        let newlines = first == '\n';
        let end = rest
            .find(|c: char| (c == '\n') != newlines)
            .unwrap_or(rest.len());
        word(&rest[..end]);
        rest = &rest[end..];
    }
}

/// One expression of a pre-tokenizer that applies several in turn: where
/// its leftmost match in `text` starts and ends.
type Expression = fn(&str) -> Option<(usize, usize)>;

/// deepseek-coder's expressions, in llama.cpp's order.
const DEEPSEEK_CODER: [Expression; 5] = [
    |t| first_run(t, |c| c == '\r' || c == '\n', false, Some(1)),
    |t| first_run(t, |c| class(c, false) == Class::Letter, true, None),
    |t| {
        first_run(
            t,
            |c| c.general_category_group() == GeneralCategoryGroup::Punctuation,
            true,
            None,
        )
    },
    |t| {
        first_run(
            t,
            |c| matches!(c, '\u{0800}'..='\u{9FA5}' | '\u{AC00}'..='\u{D7FF}'),
            false,
            None,
        )
    },
    |t| first_run(t, |c| class(c, false) == Class::Number, false, Some(1)),
];

/// The leftmost match of `\s?X+` (`\s?` only when `space_first`; at most
/// `most` characters of X), where X is the characters `is` holds for.
fn first_run(
    text: &str,
    is: impl Fn(char) -> bool,
    space_first: bool,
    most: Option<usize>,
) -> Option<(usize, usize)> {
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let run = if is(c) {
            at
        } else if space_first && c.is_whitespace() && chars.peek().is_some_and(|&(_, n)| is(n)) {
            at + c.len_utf8()
        } else {
            continue;
        };
        let end = text[run..]
            .char_indices()
            .take_while(|&(_, ch)| is(ch))
            .take(most.unwrap_or(usize::MAX))
            .last()
            .map_or(run, |(i, ch)| run + i + ch.len_utf8());
        return Some((at, end));
    }
    None
}

/// Splits `text` by each expression in turn: every piece is split by the
/// next expression into its matches and what lies between them.
fn split_in_turn<'a>(text: &'a str, expressions: &[Expression], word: &mut impl FnMut(&'a str)) {
    let mut pieces = vec![text];
    for find in expressions {
        let mut next = Vec::with_capacity(pieces.len());
        for piece in pieces {
            let mut rest = piece;
            while let Some((start, end)) = find(rest).filter(|&(s, e)| e > s) {
                if start > 0 {
                    next.push(&rest[..start]);
                }
                next.push(&rest[start..end]);
                rest = &rest[end..];
            }
            if !rest.is_empty() {
                next.push(rest);
            }
        }
        pieces = next;
    }
    pieces.into_iter().for_each(word);
}

/// How a llama3-like pre-tokenizer takes words of letters.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Letters {
    /// A contraction `(?i:'s|'t|'re|'ve|'m|'ll|'d)` first, then
    /// `[^\r\n\p{L}\p{N}]?\p{L}+`; punctuation runs take trailing `[\r\n]*`.
    Plain,
    /// gpt-4o: `[^\r\n\p{L}\p{N}]?` then a cased word ([`cased_word`]) and its
    /// contraction; punctuation runs take trailing `[\r\n/]*`.
    Cased,
}

/// The end of gpt-4o's `U*L+(?:'s|..)?|U+L*(?:'s|..)?` from the letter at `p`,
/// as llama.cpp's regex matches it on collapsed text: an upper letter is any
/// letter but `a-z`, a lower one any but `A-Z` (so a non-ASCII letter is both).
/// The first alternative wins where it matches: the greedy `U*` gives back
/// letters until a lower one can start `L+`.
fn cased_word(cs: &Chars, p: usize) -> usize {
    let letter = |i: usize, not: fn(&char) -> bool| {
        cs.class(i) == Class::Letter && cs.char(i).is_some_and(|c| !not(&c))
    };
    let upper = |i| letter(i, char::is_ascii_lowercase);
    let lower = |i| letter(i, char::is_ascii_uppercase);
    let mut k = p;
    while upper(k) {
        k += 1;
    }
    let end = match (p..=k).rev().find(|&i| lower(i)) {
        Some(mut e) => {
            while lower(e) {
                e += 1;
            }
            e
        }
        // `U+L*`: the uppers are all ASCII and no lower follows them.
        None => k,
    };
    end + contraction(cs, end, true)
}

fn split_llama3<'a>(
    cs: Chars,
    text: &'a str,
    max_digits: usize,
    letters: Letters,
    word: &mut impl FnMut(&'a str),
) {
    let is_newline = |c: Option<char>| matches!(c, Some('\r' | '\n'));
    let trails = |c: Option<char>| is_newline(c) || (letters == Letters::Cased && c == Some('/'));
    let mut pos = 0;
    while pos < cs.len() {
        let start = pos;
        let (c, k) = (cs.char(pos), cs.class(pos));
        let n = match letters {
            Letters::Plain => contraction(&cs, pos, true),
            Letters::Cased => 0,
        };
        if n > 0 {
            pos += n;
            emit(text, &cs, start, pos, word);
            continue;
        }
        // [^\r\n\p{L}\p{N}]? then \p{L}+ or a cased word
        if !is_newline(c)
            && k != Class::Number
            && (k == Class::Letter || cs.class(pos + 1) == Class::Letter)
        {
            let first = pos + usize::from(k != Class::Letter);
            pos = match letters {
                Letters::Plain => {
                    let mut end = first + 1;
                    while cs.class(end) == Class::Letter {
                        end += 1;
                    }
                    end
                }
                Letters::Cased => cased_word(&cs, first),
            };
            emit(text, &cs, start, pos, word);
            continue;
        }
        // \p{N}{1,max_digits}
        if k == Class::Number {
            let mut from = pos;
            while cs.class(pos) == Class::Number {
                pos += 1;
                if pos - from >= max_digits {
                    emit(text, &cs, from, pos, word);
                    from = pos;
                }
            }
            emit(text, &cs, from, pos, word);
            continue;
        }
        // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
        let lead = usize::from(c == Some(' '));
        if cs.class(pos + lead) == Class::Other {
            pos += lead;
            while cs.class(pos) == Class::Other {
                pos += 1;
            }
            while trails(cs.char(pos)) {
                pos += 1;
            }
            emit(text, &cs, start, pos, word);
            continue;
        }
        // \s*[\r\n]+ | \s+(?!\S) | \s+
        let mut run = 0;
        let mut after_newline = 0;
        while cs.class(pos + run) == Class::Space {
            if is_newline(cs.char(pos + run)) {
                after_newline = run + 1;
            }
            run += 1;
        }
        pos += if after_newline > 0 {
            after_newline
        } else {
            whitespace_run(&cs, pos).max(1)
        };
        emit(text, &cs, start, pos, word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deepseek_coder_applies_its_expressions_in_turn() {
        let mut words = Vec::new();
        PreTokenizer::DeepSeekCoder.split("a += b\n你好123 안녕", |w| words.push(w));
        assert_eq!(
            words,
            ["a", " +=", " b", "\n", "你好", "1", "2", "3", " ", "안녕"]
        );
    }

    fn words(p: PreTokenizer, text: &str) -> Vec<&str> {
        let mut v = Vec::new();
        p.split(text, |w| v.push(w));
        assert_eq!(v.concat(), text, "words must concatenate to the input");
        v
    }

    #[test]
    fn gpt2_splits_like_its_regex() {
        let p = PreTokenizer::Gpt2;
        assert_eq!(
            words(p, "Hello, world! I'm 42"),
            ["Hello", ",", " world", "!", " I", "'m", " 42"]
        );
        assert_eq!(
            words(p, "  leading spaces   "),
            [" ", " leading", " spaces", "   "]
        );
        assert_eq!(words(p, "a\n\nb"), ["a", "\n", "\n", "b"]);
        assert_eq!(words(p, "x  = 3"), ["x", " ", " =", " 3"]);
    }

    #[test]
    fn smollm_isolates_every_digit() {
        assert_eq!(
            words(PreTokenizer::SmolLm, "Numbers: 12 x3"),
            ["Numbers", ":", " ", "1", "2", " x", "3"]
        );
    }

    #[test]
    fn llama3_groups_digits_by_three_and_keeps_newlines_together() {
        let p = PreTokenizer::Llama3;
        assert_eq!(words(p, "12345 abc"), ["123", "45", " abc"]);
        assert_eq!(
            words(p, "I'M here.\n\nok"),
            ["I", "'M", " here", ".\n\n", "ok"]
        );
        assert_eq!(words(p, "a \n b"), ["a", " \n", " b"]);
        assert_eq!(words(PreTokenizer::Qwen2, "123"), ["1", "2", "3"]);
    }

    #[test]
    fn qwen35_counts_combining_marks_as_letters() {
        // "é" written as e + U+0301, after a space and after a mark alone.
        let text = "cafe\u{301} \u{301}x";
        assert_eq!(
            words(PreTokenizer::Qwen35, text),
            ["cafe\u{301}", " \u{301}x"]
        );
        assert_eq!(
            words(PreTokenizer::Qwen2, text),
            ["cafe", "\u{301}", " \u{301}", "x"]
        );
    }

    #[test]
    fn gemma4_splits_lines_from_newline_runs() {
        assert_eq!(
            words(PreTokenizer::Gemma4, "a b\n\nc\n"),
            ["a b", "\n\n", "c", "\n"]
        );
    }

    #[test]
    fn unknown_pre_tokenizers_are_named_in_the_error() {
        let e = PreTokenizer::from_name("jais").unwrap_err().to_string();
        assert!(e.contains("gpt-4o"), "{e}");
        assert!(e.contains("\"jais\"") && e.contains("smollm"), "{e}");
    }
}
