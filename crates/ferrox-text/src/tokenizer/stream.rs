//! Incremental detokenization for streaming (SPEC S15): bytes of token pieces go in,
//! text comes out only in whole UTF-8 characters.
//!
//! Invariants: `push` never returns a broken character; bytes that may still
//! complete a character (at most 3) are held; bytes that can never be valid UTF-8
//! become U+FFFD at once; `finish` flushes what is held (as U+FFFD if incomplete).
//! The concatenation of every output equals `String::from_utf8_lossy` of all input.

/// Turns a stream of byte pieces into a stream of valid UTF-8 text.
#[derive(Debug, Default, Clone)]
pub struct Utf8Stream {
    held: Vec<u8>,
}

impl Utf8Stream {
    /// A stream holding nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `bytes`; returns the text that is now complete.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.held.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.held) {
                Ok(s) => {
                    out.push_str(s);
                    self.held.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.held[..valid]).expect("valid prefix"));
                    match e.error_len() {
                        // Incomplete character at the end: hold it.
                        None => {
                            self.held.drain(..valid);
                            return out;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.held.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// Whether bytes are held back waiting for the rest of a character.
    pub fn is_holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// Ends the stream: whatever is held, as text.
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.held).into_owned();
        self.held.clear();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_across_pieces_is_emitted_whole() {
        let mut s = Utf8Stream::new();
        let euro = "€".as_bytes();
        assert_eq!(s.push(b"a"), "a");
        assert_eq!(s.push(&euro[..1]), "");
        assert_eq!(s.push(&euro[1..2]), "");
        assert!(s.is_holding());
        assert_eq!(s.push(&[euro[2], b'b']), "€b");
        assert_eq!(s.finish(), "");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters_and_nothing_is_lost() {
        let input: [&[u8]; 4] = [b"x\xff", b"\xe2\x82", b"y", b"\xf0\x9f"];
        let mut s = Utf8Stream::new();
        let mut out: String = input.iter().map(|p| s.push(p)).collect();
        out += &s.finish();
        assert_eq!(out, String::from_utf8_lossy(&input.concat()));
    }
}
