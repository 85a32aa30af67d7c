//! What one request's generated tokens become: text deltas and a finish reason.
//! Shared by the batched worker and every single-request path (SPEC S14-S16).
//!
//! Invariants:
//! * A stop token (the model's end-of-generation set or the request's
//!   `stop_token_ids`) ends the row and is neither output nor counted (S14).
//! * Text passes a UTF-8 stream first (no broken characters), then the stop matcher
//!   (S15); whatever either holds is flushed when the row ends for any reason other
//!   than a stop string.
//! * On the last budgeted token a stop (token or string) wins over `length` (S16).

use ferrox_text::tokenizer::Utf8Stream;

use crate::stop::{StopMatcher, StopOutcome};

/// Why a request ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// End-of-generation token or stop token.
    Stop,
    /// Stop string number `.0` of the request's list matched.
    StopString(usize),
    /// `max_tokens` reached.
    Length,
    /// Cancelled by its client or the server.
    Cancelled,
}

impl FinishReason {
    /// The OpenAI `finish_reason` string.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop | FinishReason::StopString(_) => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// The result of one token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenOutput {
    /// Text safe to show now (may be empty).
    pub text: String,
    /// Whether the token counts as a completion token (stop tokens do not).
    pub counted: bool,
    /// Set when the row is done.
    pub finished: Option<FinishReason>,
}

/// One request's output stage.
#[derive(Debug, Clone)]
pub struct OutputStage {
    stop_tokens: Vec<u32>,
    utf8: Utf8Stream,
    matcher: StopMatcher,
    max_tokens: usize,
    generated: usize,
    finished: Option<FinishReason>,
}

impl OutputStage {
    /// A stage that ends on any of `stop_tokens` or `stop_strings`, or after
    /// `max_tokens` counted tokens.
    pub fn new(
        stop_tokens: impl IntoIterator<Item = u32>,
        stop_strings: impl IntoIterator<Item = String>,
        max_tokens: usize,
    ) -> OutputStage {
        let mut stop_tokens: Vec<u32> = stop_tokens.into_iter().collect();
        stop_tokens.sort_unstable();
        stop_tokens.dedup();
        OutputStage {
            stop_tokens,
            utf8: Utf8Stream::new(),
            matcher: StopMatcher::new(stop_strings),
            max_tokens,
            generated: 0,
            finished: None,
        }
    }

    /// Most counted tokens (`max_tokens`).
    pub fn limit(&self) -> usize {
        self.max_tokens
    }

    /// Whether `token` ends the request (a stop token).
    pub fn is_stop_token(&self, token: u32) -> bool {
        self.stop_tokens.binary_search(&token).is_ok()
    }

    /// Counted tokens so far.
    pub fn generated(&self) -> usize {
        self.generated
    }

    /// How the row ended, once it has.
    pub fn finished(&self) -> Option<FinishReason> {
        self.finished
    }

    fn flush(&mut self) -> String {
        let rest = self.utf8.finish();
        let mut text = match self.matcher.push(&rest) {
            StopOutcome::Continue { emit } | StopOutcome::Stopped { emit } => emit,
        };
        text += &self.matcher.finish();
        text
    }

    /// Feeds the sampled `token`, whose bytes are `piece`.
    pub fn on_token(&mut self, token: u32, piece: &[u8]) -> TokenOutput {
        if let Some(f) = self.finished {
            return TokenOutput {
                text: String::new(),
                counted: false,
                finished: Some(f),
            };
        }
        if self.is_stop_token(token) {
            self.finished = Some(FinishReason::Stop);
            return TokenOutput {
                text: self.flush(),
                counted: false,
                finished: self.finished,
            };
        }
        self.generated += 1;
        let text = self.utf8.push(piece);
        match self.matcher.push(&text) {
            StopOutcome::Stopped { emit } => {
                self.finished = Some(FinishReason::StopString(
                    self.matcher.matched().expect("a stop string matched"),
                ));
                TokenOutput {
                    text: emit,
                    counted: true,
                    finished: self.finished,
                }
            }
            StopOutcome::Continue { mut emit } => {
                if self.generated >= self.max_tokens {
                    self.finished = Some(FinishReason::Length);
                    emit += &self.flush();
                }
                TokenOutput {
                    text: emit,
                    counted: true,
                    finished: self.finished,
                }
            }
        }
    }

    /// Ends the row for `reason` (cancellation, context full): the withheld text.
    pub fn end(&mut self, reason: FinishReason) -> String {
        if self.finished.is_some() {
            return String::new();
        }
        self.finished = Some(reason);
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPEC S14: a token-level stop ends the row without the stop token.
    #[test]
    fn a_stop_token_ends_the_row_uncounted_and_unprinted() {
        let mut o = OutputStage::new([2], [], 10);
        assert_eq!(o.on_token(5, b"hi").text, "hi");
        let t = o.on_token(2, b"</s>");
        assert_eq!(
            (t.text.as_str(), t.counted, t.finished),
            ("", false, Some(FinishReason::Stop))
        );
        assert_eq!(o.generated(), 1);
    }

    /// SPEC S16: stop beats length on the last budgeted token.
    #[test]
    fn stop_beats_length_on_the_last_budgeted_token() {
        let mut o = OutputStage::new([], ["".to_string(), "?".to_string(), "!".to_string()], 2);
        o.on_token(5, b"a");
        let t = o.on_token(6, b"b!");
        // The stop string's index is its place in the list given (empty ones too).
        assert_eq!(
            (t.text.as_str(), t.finished),
            ("b", Some(FinishReason::StopString(2)))
        );
        let mut o = OutputStage::new([], ["!".to_string()], 2);
        o.on_token(5, b"a");
        assert_eq!(o.on_token(6, b"b").finished, Some(FinishReason::Length));
    }

    /// SPEC S15: withheld text and split characters are flushed when the row ends.
    #[test]
    fn withheld_text_is_flushed_at_length_and_on_cancel() {
        let mut o = OutputStage::new([], ["xyz".to_string()], 2);
        assert_eq!(o.on_token(1, b"ab x").text, "ab ");
        let t = o.on_token(2, &[0xE2, 0x82]);
        assert_eq!(
            (t.text.as_str(), t.finished),
            ("x\u{FFFD}", Some(FinishReason::Length))
        );
        let mut o = OutputStage::new([], ["xyz".to_string()], 9);
        o.on_token(1, b"ab xy");
        assert_eq!(o.end(FinishReason::Cancelled), "xy");
        assert_eq!(o.finished(), Some(FinishReason::Cancelled));
    }

    #[test]
    fn a_character_split_across_tokens_is_emitted_whole() {
        let mut o = OutputStage::new([], [], 9);
        let euro = "€".as_bytes();
        assert_eq!(o.on_token(1, &euro[..2]).text, "");
        assert_eq!(o.on_token(2, &euro[2..]).text, "€");
    }
}
