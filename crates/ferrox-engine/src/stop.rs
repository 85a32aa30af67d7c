//! Stop strings on decoded text (SPEC S15): the one stop matcher every path uses.
//!
//! Invariants:
//! * Text that could still be the start of a stop string is withheld, and released
//!   as soon as it cannot be; nothing is ever emitted early.
//! * A stop string and everything after it are never emitted; the earliest match in
//!   the text wins (on a tie at one position, the longest stop).
//! * `finish` flushes what is withheld when the row ends for another reason: no text
//!   is lost.
//! * Input is whole UTF-8 text (the caller runs a `Utf8Stream` first), and every
//!   cut is at a character boundary.

/// What a piece of text did to the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopOutcome {
    /// Keep generating; `emit` is safe to show now.
    Continue { emit: String },
    /// A stop string matched; `emit` is the text before it, and the row is done.
    Stopped { emit: String },
}

/// Matches stop strings across token boundaries.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    /// The non-empty stop strings, with their index in the list given.
    stops: Vec<(usize, String)>,
    held: String,
    stopped: bool,
    matched: Option<usize>,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: impl IntoIterator<Item = String>) -> StopMatcher {
        StopMatcher {
            stops: stops
                .into_iter()
                .enumerate()
                .filter(|(_, s)| !s.is_empty())
                .collect(),
            held: String::new(),
            stopped: false,
            matched: None,
        }
    }

    /// Whether a stop string has matched.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Which stop string matched (its index in the list given).
    pub fn matched(&self) -> Option<usize> {
        self.matched
    }

    /// Text withheld because it may begin a stop string.
    pub fn held(&self) -> &str {
        &self.held
    }

    /// Feeds decoded text.
    pub fn push(&mut self, text: &str) -> StopOutcome {
        if self.stopped {
            return StopOutcome::Stopped {
                emit: String::new(),
            };
        }
        self.held.push_str(text);
        let earliest = self
            .stops
            .iter()
            .filter_map(|(i, s)| {
                self.held
                    .find(s.as_str())
                    .map(|at| (at, std::cmp::Reverse(s.len()), *i))
            })
            .min();
        if let Some((at, _, i)) = earliest {
            let emit = self.held[..at].to_string();
            self.held.clear();
            self.stopped = true;
            self.matched = Some(i);
            return StopOutcome::Stopped { emit };
        }
        let keep = self.longest_partial_suffix();
        let cut = self.held.len() - keep;
        let emit = self.held[..cut].to_string();
        self.held.drain(..cut);
        StopOutcome::Continue { emit }
    }

    /// Bytes at the end of the held text that are a proper prefix of some stop.
    fn longest_partial_suffix(&self) -> usize {
        let h = self.held.as_bytes();
        let mut best = 0;
        for (_, s) in &self.stops {
            let s = s.as_bytes();
            for len in (best + 1..s.len().min(h.len() + 1)).rev() {
                if h.ends_with(&s[..len]) {
                    best = len;
                    break;
                }
            }
        }
        best
    }

    /// Ends the stream: the withheld text (empty after a stop).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()));
        let mut out = String::new();
        for p in pieces {
            match m.push(p) {
                StopOutcome::Continue { emit } => out += &emit,
                StopOutcome::Stopped { emit } => {
                    out += &emit;
                    return (out, true);
                }
            }
        }
        out += &m.finish();
        (out, false)
    }

    /// SPEC S15: a stop string spanning tokens truncates the output before it.
    #[test]
    fn a_stop_string_spanning_tokens_truncates() {
        assert_eq!(
            run(&["END"], &["Hello E", "N", "D and more"]),
            ("Hello ".into(), true)
        );
    }

    /// SPEC S15: text that may begin a stop is withheld, then released when it cannot.
    #[test]
    fn possible_prefixes_are_withheld_until_they_cannot_match() {
        let mut m = StopMatcher::new(["###".to_string()]);
        assert_eq!(m.push("a#"), StopOutcome::Continue { emit: "a".into() });
        assert_eq!(m.held(), "#");
        assert_eq!(m.push("#"), StopOutcome::Continue { emit: "".into() });
        assert_eq!(m.push("x"), StopOutcome::Continue { emit: "##x".into() });
    }

    /// SPEC S15: a row that never matches loses no output, withheld text included.
    #[test]
    fn a_row_that_never_matches_loses_no_output() {
        assert_eq!(
            run(&["</s>"], &["abc", "</", "t"]),
            ("abc</t".into(), false)
        );
        assert_eq!(run(&["</s>"], &["abc", "</"]), ("abc</".into(), false));
    }

    #[test]
    fn the_earliest_of_several_stops_wins_and_multibyte_text_is_cut_cleanly() {
        assert_eq!(run(&["bb", "ab"], &["xxabb"]), ("xx".into(), true));
        assert_eq!(run(&["→stop"], &["é→", "sto", "p!"]), ("é".into(), true));
        assert_eq!(run(&["→stop"], &["é→", "x"]), ("é→x".into(), false));
        assert_eq!(run(&[""], &["a"]), ("a".into(), false));
    }
}
