//! Reasoning models think before they answer, and the thinking is split from
//! the answer, as vLLM's reasoning parsers and llama-server's
//! `--reasoning-format` do, into OpenAI's `reasoning_content`. Two formats:
//!
//! * [`ThinkFormat::ThinkTags`]: Qwen3, QwQ, DeepSeek-R1 and its distills
//!   think between `<think>` and `</think>`;
//! * [`ThinkFormat::Harmony`]: gpt-oss writes its thinking on the `analysis`
//!   channel (`<|channel|>analysis<|message|>...<|end|>`) and its answer on the
//!   `final` channel (`<|start|>assistant<|channel|>final<|message|>...`).
//!
//! Where the thinking starts depends on the prompt: DeepSeek-R1's template opens
//! `<think>` itself at the end of the generation prompt; Qwen3's with
//! `enable_thinking: false` writes an empty `<think></think>` there; otherwise the
//! answer may open with the thinking. [`AnswerPhase::after_prompt`] reads that
//! from the end of the rendered prompt.

/// How a model marks its thinking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThinkFormat {
    /// `<think>...</think>`.
    ThinkTags,
    /// gpt-oss's harmony channels.
    Harmony,
}

impl ThinkFormat {
    /// The chat template's format, if its model thinks.
    pub fn of_template(source: &str) -> Option<ThinkFormat> {
        if source.contains("<|channel|>analysis<|message|>") {
            Some(ThinkFormat::Harmony)
        } else if source.contains("<think>") && source.contains("</think>") {
            Some(ThinkFormat::ThinkTags)
        } else {
            None
        }
    }

    /// What opens the thinking.
    fn open(self) -> &'static str {
        match self {
            ThinkFormat::ThinkTags => "<think>",
            ThinkFormat::Harmony => "<|channel|>analysis<|message|>",
        }
    }

    /// What closes it.
    fn close(self) -> &'static str {
        match self {
            ThinkFormat::ThinkTags => "</think>",
            ThinkFormat::Harmony => "<|end|>",
        }
    }

    /// The headers the answer may start with, in order (harmony's final
    /// channel), dropped from it.
    fn answer_headers(self) -> &'static [&'static str] {
        match self {
            ThinkFormat::ThinkTags => &[],
            ThinkFormat::Harmony => &["<|start|>assistant", "<|channel|>final<|message|>"],
        }
    }
}

/// Where an answer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerPhase {
    /// Nothing seen yet: the thinking may open.
    Start,
    /// Inside the thinking.
    Thinking,
    /// In the answer.
    Answering,
}

impl AnswerPhase {
    /// The phase an answer in `format` starts in, after a prompt that ends with
    /// `prompt_tail`.
    pub fn after_prompt(format: ThinkFormat, prompt_tail: &str) -> AnswerPhase {
        let tail = prompt_tail.trim_end();
        if tail.ends_with(format.open()) {
            AnswerPhase::Thinking
        } else if format == ThinkFormat::ThinkTags && tail.ends_with(format.close()) {
            AnswerPhase::Answering
        } else {
            AnswerPhase::Start
        }
    }
}

/// How an answer is split: the model's format and where the answer starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thinking {
    pub format: ThinkFormat,
    pub start: AnswerPhase,
}

/// A finished answer split into its thinking (if any) and its answer.
pub fn split(text: &str, how: Thinking) -> (Option<String>, String) {
    let mut s = ReasoningStream::new(how);
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
    format: ThinkFormat,
    phase: AnswerPhase,
    pending: String,
    /// Whether there was thinking at all.
    thought: bool,
    /// Whether the thinking's and the answer's first text have been shown
    /// (leading newlines after the markers, and the answer's headers, are
    /// dropped).
    reasoned: bool,
    answered: bool,
}

impl ReasoningStream {
    pub fn new(how: Thinking) -> ReasoningStream {
        ReasoningStream {
            format: how.format,
            phase: how.start,
            pending: String::new(),
            thought: how.start == AnswerPhase::Thinking,
            reasoned: false,
            answered: false,
        }
    }

    /// Adds `piece`; returns the thinking and the answer text that can be shown.
    pub fn push(&mut self, piece: &str) -> (String, String) {
        self.pending.push_str(piece);
        let (mut reasoning, mut content) = (String::new(), String::new());
        let (open, close) = (self.format.open(), self.format.close());
        loop {
            match self.phase {
                AnswerPhase::Start => {
                    let t = self.pending.trim_start();
                    if let Some(rest) = t.strip_prefix(open) {
                        self.pending = rest.to_string();
                        self.phase = AnswerPhase::Thinking;
                        self.thought = true;
                    } else if open.starts_with(t) {
                        return (reasoning, content);
                    } else {
                        self.phase = AnswerPhase::Answering;
                    }
                }
                AnswerPhase::Thinking => match self.pending.find(close) {
                    Some(i) => {
                        let thought: String = self.pending.drain(..i + close.len()).collect();
                        self.think(&thought[..i], &mut reasoning);
                        self.phase = AnswerPhase::Answering;
                    }
                    None => {
                        let keep = partial_suffix(&self.pending, close);
                        let cut = self.pending.len() - keep;
                        let thought: String = self.pending.drain(..cut).collect();
                        self.think(&thought, &mut reasoning);
                        return (reasoning, content);
                    }
                },
                AnswerPhase::Answering => {
                    if !self.answered && self.holds_header() {
                        return (reasoning, content);
                    }
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

    /// Drops the answer's headers from the start of what is pending; whether
    /// what is left may still be the start of one (and must wait).
    fn holds_header(&mut self) -> bool {
        for header in self.format.answer_headers() {
            let t = self.pending.trim_start();
            if let Some(rest) = t.strip_prefix(header) {
                self.pending = rest.to_string();
            } else if header.starts_with(t) {
                return true;
            }
        }
        false
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

    /// The end of the answer: what was held back (less the start of an answer
    /// header the text stopped in).
    pub fn finish(&mut self) -> (String, String) {
        if self.phase == AnswerPhase::Answering && !self.answered && self.holds_header() {
            self.pending.clear();
        }
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

    fn tags(start: AnswerPhase) -> Thinking {
        Thinking {
            format: ThinkFormat::ThinkTags,
            start,
        }
    }

    fn streamed(text: &str, how: Thinking, size: usize) -> (String, String) {
        let mut s = ReasoningStream::new(how);
        let (mut r, mut c) = (String::new(), String::new());
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(size) {
            let (a, b) = s.push(&piece.iter().collect::<String>());
            r += &a;
            c += &b;
        }
        let (a, b) = s.finish();
        (r + &a, c + &b)
    }

    /// gpt-oss: the analysis channel is the thinking, the final channel's
    /// header is dropped from the answer, however the text is cut.
    #[test]
    fn harmony_channels_split_into_thinking_and_answer() {
        let harmony = Thinking {
            format: ThinkFormat::Harmony,
            start: AnswerPhase::after_prompt(
                ThinkFormat::Harmony,
                "<|start|>user<|message|>Hi<|end|><|start|>assistant",
            ),
        };
        assert_eq!(harmony.start, AnswerPhase::Start);
        let text = "<|channel|>analysis<|message|>User greets. Reply.<|end|><|start|>assistant<|channel|>final<|message|>Hello!";
        for size in 1..text.len() {
            assert_eq!(
                streamed(text, harmony, size),
                ("User greets. Reply.".to_string(), "Hello!".to_string()),
                "pieces of {size}"
            );
        }
        let (r, c) = split("<|channel|>final<|message|>Hi there.", harmony);
        assert_eq!((r, c.as_str()), (None, "Hi there."));
        // Cut off inside the final channel's header: no header text as answer.
        let (r, c) = split(
            "<|channel|>analysis<|message|>Hm.<|end|><|start|>assi",
            harmony,
        );
        assert_eq!((r.as_deref(), c.as_str()), (Some("Hm."), ""));
        assert_eq!(
            ThinkFormat::of_template("{{ '<|channel|>analysis<|message|>' + m.thinking }}"),
            Some(ThinkFormat::Harmony)
        );
        assert_eq!(
            ThinkFormat::of_template("<think>{{ x }}</think>"),
            Some(ThinkFormat::ThinkTags)
        );
        assert_eq!(ThinkFormat::of_template("{{ x }}"), None);
    }

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
            let (r, c) = split(text, tags(start));
            assert_eq!((r.as_deref(), c.as_str()), (reasoning, content), "{text:?}");
        }
        assert_eq!(
            AnswerPhase::after_prompt(ThinkFormat::ThinkTags, "<|im_start|>assistant\n<think>\n"),
            AnswerPhase::Thinking
        );
        assert_eq!(
            AnswerPhase::after_prompt(ThinkFormat::ThinkTags, "assistant\n<think>\n\n</think>\n\n"),
            AnswerPhase::Answering
        );
        assert_eq!(
            AnswerPhase::after_prompt(ThinkFormat::ThinkTags, "<|im_start|>assistant\n"),
            AnswerPhase::Start
        );
    }

    #[test]
    fn a_stream_splits_the_same_whatever_the_pieces() {
        let text = "<think>\nHmm, 2+2.\n</think>\n\nIt is 4.";
        for size in 1..text.len() {
            assert_eq!(
                streamed(text, tags(AnswerPhase::Start), size),
                ("Hmm, 2+2.\n".to_string(), "It is 4.".to_string()),
                "pieces of {size}"
            );
        }
    }
}
