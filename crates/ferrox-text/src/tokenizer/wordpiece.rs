//! WordPiece, as llama.cpp runs BERT's vocabularies (`tokenizer.ggml.model =
//! "bert"`): the text is normalized and split into words (BERT's basic
//! tokenizer), then each word, with a leading `▁` (the converter's mark of a
//! word's first piece; continuation pieces have no `##`), is covered by the
//! longest pieces from its start. A word some position of which no piece
//! covers becomes the unknown token.
//!
//! llama.cpp's normalization is followed to the letter: its "NFD" keeps the
//! first code point of each character's decomposition (so accents go even
//! without `strip_accents`, and a Hangul syllable becomes its first jamo), and
//! lowercasing is the simple one-to-one mapping.

use unicode_normalization::char::decompose_canonical;
use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

use super::vocab::Vocab;

/// BERT's normalizer options (`tokenizer.ggml.normalizer.*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Normalizer {
    pub lowercase: bool,
    pub strip_accents: bool,
}

/// The words of `text`: whitespace splits, punctuation, ASCII symbols and
/// CJK ideographs stand alone, control characters go.
pub fn words(text: &str, n: Normalizer) -> Vec<String> {
    let mut words = vec![String::new()];
    for c in text.chars() {
        let c = if n.strip_accents { first_of_nfd(c) } else { c };
        if c.is_whitespace() {
            if !words.last().is_some_and(String::is_empty) {
                words.push(String::new());
            }
            continue;
        }
        let group = c.general_category_group();
        if c == '\0' || c == '\u{FFFD}' || is_control(c) {
            continue;
        }
        if n.strip_accents && group == GeneralCategoryGroup::Mark {
            continue;
        }
        let c = if n.lowercase { simple_lowercase(c) } else { c };
        let alone = group == GeneralCategoryGroup::Punctuation
            || ((c as u32) < 0x7F && group == GeneralCategoryGroup::Symbol)
            || is_cjk(c);
        let last = words.last_mut().expect("never empty");
        if alone {
            if !last.is_empty() {
                words.push(String::new());
            }
            words.last_mut().expect("never empty").push(c);
            words.push(String::new());
        } else {
            last.push(c);
        }
    }
    if words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    words
}

/// Control, format, private-use and surrogate code points (llama.cpp's
/// `\p{C}` without the unassigned ones).
fn is_control(c: char) -> bool {
    use unicode_properties::GeneralCategory::*;
    matches!(
        c.general_category(),
        Control | Format | PrivateUse | Surrogate
    )
}

/// The first code point of `c`'s canonical decomposition (`c` itself when it
/// has none).
fn first_of_nfd(c: char) -> char {
    let mut first = None;
    decompose_canonical(c, |d| {
        first.get_or_insert(d);
    });
    first.unwrap_or(c)
}

/// The one-to-one lowercase of `c` (UnicodeData's simple mapping: where the
/// full mapping is longer, as for U+0130, its first code point).
fn simple_lowercase(c: char) -> char {
    c.to_lowercase().next().unwrap_or(c)
}

/// CJK ideographs, as BERT (and llama.cpp, with its extension-range quirk)
/// tells them.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

/// Appends the pieces of `text`'s words to `out`: longest match first, `unk`
/// for a word that cannot be covered. `longest` is the longest piece in
/// bytes.
pub fn tokenize(
    vocab: &Vocab,
    text: &str,
    n: Normalizer,
    unk: u32,
    longest: usize,
    out: &mut Vec<u32>,
) {
    for word in words(text, n) {
        let word = format!("\u{2581}{word}");
        let start = out.len();
        let mut i = 0;
        while i < word.len() {
            let found = (i + 1..=word.len().min(i + longest))
                .rev()
                .filter(|&j| word.is_char_boundary(j))
                .find_map(|j| vocab.id_of(&word[i..j]).map(|id| (id, j)));
            match found {
                Some((id, j)) => {
                    out.push(id);
                    i = j;
                }
                None => {
                    out.truncate(start);
                    break;
                }
            }
        }
        if out.len() == start {
            out.push(unk);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BERT: Normalizer = Normalizer {
        lowercase: true,
        strip_accents: true,
    };

    #[test]
    fn words_split_as_berts_basic_tokenizer() {
        assert_eq!(
            words("Hello, World!  Café\tnaïve 中文", BERT),
            ["hello", ",", "world", "!", "cafe", "naive", "中", "文"]
        );
        assert_eq!(words("a$b", BERT), ["a", "$", "b"]);
        assert_eq!(
            words("a€b", BERT),
            ["a€b"],
            "a non-ASCII symbol joins its word"
        );
        assert_eq!(
            words("x\u{200B}y\u{0}", BERT),
            ["xy"],
            "format and control characters go"
        );
        let cased = Normalizer {
            lowercase: false,
            strip_accents: false,
        };
        assert_eq!(words("Café", cased), ["Café"]);
        assert_eq!(words("  ", BERT), Vec::<String>::new());
    }
}
