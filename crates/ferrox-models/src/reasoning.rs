//! Reasoning models (Qwen3, QwQ, DeepSeek-R1 and its distills) think before they
//! answer, between `<think>` and `</think>`. The thinking is split from the
//! answer, as vLLM's reasoning parsers and llama-server's `--reasoning-format`
//! do, into OpenAI's `reasoning_content`.
//!
//! Where the thinking starts depends on the prompt: DeepSeek-R1's template opens
//! `<think>` itself at the end of the generation prompt; Qwen3's with
//! `enable_thinking: false` writes an empty `<think></think>` there; otherwise the
//! answer may open with `<think>`. [`AnswerPhase::after_prompt`] reads that from the end
//! of the rendered prompt.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Whether a chat template writes thinking in `<think>` tags.
pub fn template_thinks(source: &str) -> bool {
    source.contains(OPEN) && source.contains(CLOSE)
}

/// Where an answer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerPhase {
    /// Nothing seen yet: a `<think>` may open.
    Start,
    /// Inside the thinking.
    Thinking,
    /// In the answer.
    Answering,
}

impl AnswerPhase {
    /// The phase an answer starts in, after a prompt that ends with `prompt_tail`.
    pub fn after_prompt(prompt_tail: &str) -> AnswerPhase {
        let tail = prompt_tail.trim_end();
        if tail.ends_with(OPEN) {
            AnswerPhase::Thinking
        } else if tail.ends_with(CLOSE) {
            AnswerPhase::Answering
        } else {
            AnswerPhase::Start
        }
    }
}

/// A finished answer split into its thinking (if any) and its answer.
pub fn split(text: &str, start: AnswerPhase) -> (Option<String>, String) {
    let mut s = ReasoningStream::new(start);
    let (mut r, mut c) = s.push(text);
    let (r2, c2) = s.finish();
    r.push_str(&r2);
    c.push_str(&c2);
    let thought = s.thought;
    (thought.then_some(r), c)
}

/// Streamed text split into thinking and answer, holding back what may be the
/// start of a marker.
#[derive(Debug)]
pub struct ReasoningStream {
    phase: AnswerPhase,
    pending: String,
    /// Whether there was thinking at all.
    thought: bool,
    /// Whether the thinking's and the answer's first text have been shown
    /// (leading newlines after `<think>` and `</think>` are dropped).
    reasoned: bool,
    answered: bool,
}

impl ReasoningStream {
    pub fn new(start: AnswerPhase) -> ReasoningStream {
        ReasoningStream {
            phase: start,
            pending: String::new(),
            thought: start == AnswerPhase::Thinking,
            reasoned: false,
            answered: false,
        }
    }

    /// Adds `piece`; returns the thinking and the answer text that can be shown.
    pub fn push(&mut self, piece: &str) -> (String, String) {
        self.pending.push_str(piece);
        let (mut reasoning, mut content) = (String::new(), String::new());
        loop {
            match self.phase {
                AnswerPhase::Start => {
                    let t = self.pending.trim_start();
                    if let Some(rest) = t.strip_prefix(OPEN) {
                        self.pending = rest.to_string();
                        self.phase = AnswerPhase::Thinking;
                        self.thought = true;
                    } else if OPEN.starts_with(t) {
                        return (reasoning, content);
                    } else {
                        self.phase = AnswerPhase::Answering;
                    }
                }
                AnswerPhase::Thinking => match self.pending.find(CLOSE) {
                    Some(i) => {
                        let thought: String = self.pending.drain(..i + CLOSE.len()).collect();
                        self.think(&thought[..i], &mut reasoning);
                        self.phase = AnswerPhase::Answering;
                    }
                    None => {
                        let keep = partial_suffix(&self.pending, CLOSE);
                        let cut = self.pending.len() - keep;
                        let thought: String = self.pending.drain(..cut).collect();
                        self.think(&thought, &mut reasoning);
                        return (reasoning, content);
                    }
                },
                AnswerPhase::Answering => {
                    let text = std::mem::take(&mut self.pending);
                    let text = if self.answered {
                        text.as_str()
                    } else {
                        text.trim_start_matches('\n')
                    };
                    self.answered |= !text.is_empty();
                    content.push_str(text);
                    return (reasoning, content);
                }
            }
        }
    }

    fn think(&mut self, text: &str, out: &mut String) {
        let text = if self.reasoned {
            text
        } else {
            text.trim_start_matches('\n')
        };
        self.reasoned |= !text.is_empty();
        out.push_str(text);
    }

    /// The end of the answer: what was held back.
    pub fn finish(&mut self) -> (String, String) {
        let rest = std::mem::take(&mut self.pending);
        match self.phase {
            AnswerPhase::Thinking => (rest, String::new()),
            _ => (String::new(), rest),
        }
    }
}

/// The longest end of `text` that is a proper start of `marker` (what a stream
/// holds back until it knows whether the marker follows).
pub(crate) fn partial_suffix(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_split_by_where_the_prompt_left_off() {
        let cases = [
            (
                "<think>\nLet me see.\n</think>\n\nParis.",
                AnswerPhase::Start,
                Some("Let me see.\n"),
                "Paris.",
            ),
            (
                "Let me see.\n</think>\n\nParis.",
                AnswerPhase::Thinking,
                Some("Let me see.\n"),
                "Paris.",
            ),
            ("Paris.", AnswerPhase::Answering, None, "Paris."),
            ("Paris.", AnswerPhase::Start, None, "Paris."),
            (
                "<think>\nStill thinking",
                AnswerPhase::Start,
                Some("Still thinking"),
                "",
            ),
        ];
        for (text, start, reasoning, content) in cases {
            let (r, c) = split(text, start);
            assert_eq!((r.as_deref(), c.as_str()), (reasoning, content), "{text:?}");
        }
        assert_eq!(
            AnswerPhase::after_prompt("<|im_start|>assistant\n<think>\n"),
            AnswerPhase::Thinking
        );
        assert_eq!(
            AnswerPhase::after_prompt("assistant\n<think>\n\n</think>\n\n"),
            AnswerPhase::Answering
        );
        assert_eq!(
            AnswerPhase::after_prompt("<|im_start|>assistant\n"),
            AnswerPhase::Start
        );
    }

    #[test]
    fn a_stream_splits_the_same_whatever_the_pieces() {
        let text = "<think>\nHmm, 2+2.\n</think>\n\nIt is 4.";
        for size in 1..text.len() {
            let mut s = ReasoningStream::new(AnswerPhase::Start);
            let (mut r, mut c) = (String::new(), String::new());
            let chars: Vec<char> = text.chars().collect();
            for piece in chars.chunks(size) {
                let (a, b) = s.push(&piece.iter().collect::<String>());
                r += &a;
                c += &b;
            }
            let (a, b) = s.finish();
            r += &a;
            c += &b;
            assert_eq!(
                (r.as_str(), c.as_str()),
                ("Hmm, 2+2.\n", "It is 4."),
                "pieces of {size}"
            );
        }
    }
}
