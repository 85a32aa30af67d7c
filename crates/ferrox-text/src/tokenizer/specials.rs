//! Which tokens are special, and how, as llama.cpp derives it when it loads a
//! vocabulary (`llama_vocab::impl::load` in `src/llama-vocab.cpp`): the
//! attributes that decide how text around a special token is split, and the
//! set of tokens that end generation.
//!
//! The file's token types are only the start:
//! * every token whose text is on [`END_OF_GENERATION_TEXTS`] ends generation
//!   and becomes a control token whatever its type (Phi-3's user-defined
//!   `</s>`, Qwen2's normal `</s>`), as do the fill-in-the-middle tokens
//!   llama.cpp finds by text when the metadata names none;
//! * gpt-oss's `<|channel|>`, `<|message|>`, `<|start|>` and `<|constrain|>`
//!   are user-defined (split out of text even without special-token parsing);
//! * in harmony vocabularies `<|end|>` is user-defined and does not end
//!   generation; where `<|tool_response>` ends generation (Gemma 4) `</s>` is a
//!   normal token;
//! * models named Phi-3 strip the whitespace after their special tokens
//!   (RSTRIP), but not after `<unk>`, `<s>` and `<|endoftext|>`; some BERT-style
//!   vocabularies strip it before `<mask>` (LSTRIP).
//!
//! Invariants: [`SpecialTokens::matched`] holds exactly the control,
//! user-defined and unknown tokens (after the rules above) with a non-empty
//! text, longest text first; a token matched without special-token parsing is
//! one that is neither control nor unknown; `end_of_generation` is sorted and
//! free of duplicates.

use super::vocab::{TokenType, Vocab};

/// Texts of tokens that end generation wherever a vocabulary has them, of any
/// type (llama.cpp's list, SPEC S14).
pub const END_OF_GENERATION_TEXTS: [&str; 22] = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// A fill-in-the-middle role: its metadata key and the texts llama.cpp finds
/// it by when the key is absent; `ends` when the role ends generation.
struct FimRole {
    key: &'static str,
    texts: &'static [&'static str],
    ends: bool,
}

const FIM_ROLES: [FimRole; 6] = [
    FimRole {
        key: "tokenizer.ggml.fim_pre_token_id",
        texts: &[
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<｜fim▁begin｜>",
            "<PRE>",
            "▁<PRE>",
            "<|code_prefix|>",
            "<|prefix|>",
        ],
        ends: false,
    },
    FimRole {
        key: "tokenizer.ggml.fim_suf_token_id",
        texts: &[
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<｜fim▁hole｜>",
            "<SUF>",
            "▁<SUF>",
            "<|code_suffix|>",
            "<|suffix|>",
        ],
        ends: false,
    },
    FimRole {
        key: "tokenizer.ggml.fim_mid_token_id",
        texts: &[
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<｜fim▁end｜>",
            "<MID>",
            "▁<MID>",
            "<|code_middle|>",
            "<|middle|>",
        ],
        ends: false,
    },
    FimRole {
        key: "tokenizer.ggml.fim_pad_token_id",
        texts: &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
        ends: true,
    },
    FimRole {
        key: "tokenizer.ggml.fim_rep_token_id",
        texts: &[
            "<|fim_repo|>",
            "<|repo_name|>",
            "<fim-repo>",
            "<REPO>",
            "<reponame>",
        ],
        ends: true,
    },
    FimRole {
        key: "tokenizer.ggml.fim_sep_token_id",
        texts: &["<|file_sep|>"],
        ends: true,
    },
];

/// The metadata keys of the fill-in-the-middle token ids.
pub fn fim_keys() -> impl Iterator<Item = &'static str> {
    FIM_ROLES.iter().map(|r| r.key)
}

/// gpt-oss's message-structure tokens, always split out of text.
const HARMONY_STRUCTURE: [&str; 4] = ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// What a vocabulary's special tokens depend on besides their types.
#[derive(Clone, Debug, Default)]
pub struct VocabFacts {
    /// `general.name`.
    pub model_name: String,
    /// `tokenizer.ggml.pre`.
    pub pre: String,
    /// `general.architecture`.
    pub architecture: String,
    /// EOS, EOT and EOM ids the metadata declares.
    pub declared_ends: Vec<u32>,
    /// The fill-in-the-middle ids the metadata declares, in [`fim_keys`] order.
    pub declared_fim: [Option<u32>; 6],
}

/// One token matched in raw text.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Special {
    pub id: u32,
    /// Matched only when special-token parsing is on (control and unknown tokens).
    pub parse_only: bool,
    /// Whitespace before the token is dropped.
    pub lstrip: bool,
    /// Whitespace after the token is dropped.
    pub rstrip: bool,
}

/// The special tokens of a vocabulary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Tokens matched in raw text, longest text first.
    pub matched: Vec<Special>,
    /// Tokens that end generation, sorted.
    pub end_of_generation: Vec<u32>,
    pub fim: FimTokens,
}

/// A vocabulary's fill-in-the-middle tokens, declared or found by text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FimTokens {
    /// Before the code's prefix.
    pub pre: Option<u32>,
    /// Before its suffix.
    pub suf: Option<u32>,
    /// Where the middle is generated.
    pub mid: Option<u32>,
    pub pad: Option<u32>,
    /// Before a repository's name (repo-level FIM).
    pub rep: Option<u32>,
    /// Before each file of a repository.
    pub sep: Option<u32>,
}

#[derive(Copy, Clone, Debug, Default)]
struct Attr {
    control: bool,
    user_defined: bool,
    unknown: bool,
    lstrip: bool,
    rstrip: bool,
}

impl Attr {
    fn of(t: TokenType) -> Attr {
        Attr {
            control: t == TokenType::Control,
            user_defined: t == TokenType::UserDefined,
            unknown: t == TokenType::Unknown,
            ..Attr::default()
        }
    }

    fn only_user_defined() -> Attr {
        Attr {
            user_defined: true,
            ..Attr::default()
        }
    }

    fn special(&self) -> bool {
        self.control || self.user_defined || self.unknown
    }
}

impl SpecialTokens {
    /// Derives the special tokens of `vocab` as llama.cpp does.
    pub fn derive(vocab: &Vocab, facts: &VocabFacts) -> SpecialTokens {
        let mut attrs: Vec<Attr> = (0..vocab.len() as u32)
            .map(|id| Attr::of(vocab.token_type(id).unwrap_or(TokenType::Normal)))
            .collect();
        let mut ends: Vec<u32> = facts.declared_ends.clone();
        let mut fim = [None; 6];
        for ((role, declared), slot) in FIM_ROLES.iter().zip(facts.declared_fim).zip(&mut fim) {
            let found = declared.or_else(|| {
                let id = role.texts.iter().filter_map(|t| vocab.id_of(t)).min()?;
                attrs[id as usize].control = true;
                Some(id)
            });
            if role.ends {
                ends.extend(found);
            }
            *slot = found;
        }
        let [pre, suf, mid, pad, rep, sep] = fim;
        for id in END_OF_GENERATION_TEXTS
            .iter()
            .filter_map(|t| vocab.id_of(t))
        {
            attrs[id as usize].control = true;
            ends.push(id);
        }
        for id in HARMONY_STRUCTURE.iter().filter_map(|t| vocab.id_of(t)) {
            attrs[id as usize] = Attr::only_user_defined();
        }
        ends.sort_unstable();
        ends.dedup();
        let ends_with = |ends: &[u32], text: &str| {
            vocab
                .id_of(text)
                .filter(|id| ends.binary_search(id).is_ok())
        };
        // Harmony: `<|end|>` closes a message (the thinking before the answer).
        let has_call = ends_with(&ends, "<|call|>").or(ends_with(&ends, "<|calls|>"));
        let has_end_marker = ends_with(&ends, "<|return|>").or(ends_with(&ends, "<|flush|>"));
        if let (Some(_), Some(_), Some(end)) =
            (has_call, has_end_marker, ends_with(&ends, "<|end|>"))
        {
            ends.retain(|&id| id != end);
            attrs[end as usize] = Attr::only_user_defined();
        }
        // Gemma 4: `</s>` is a normal token.
        if ends_with(&ends, "<|tool_response>").is_some()
            && let Some(s) = ends_with(&ends, "</s>")
        {
            ends.retain(|&id| id != s);
            attrs[s as usize] = Attr::default();
        }
        strip_rules(vocab, facts, &mut attrs);
        SpecialTokens {
            matched: matched(vocab, &attrs),
            end_of_generation: ends,
            fim: FimTokens {
                pre,
                suf,
                mid,
                pad,
                rep,
                sep,
            },
        }
    }
}

/// The whitespace-stripping attributes llama.cpp sets by model, tokenizer or
/// architecture name.
fn strip_rules(vocab: &Vocab, facts: &VocabFacts, attrs: &mut [Attr]) {
    let name = facts.model_name.to_lowercase();
    let contains_any = |s: &str, parts: &[&str]| parts.iter().any(|p| s.contains(p));
    if contains_any(&facts.pre, &["jina-v2-de", "jina-v2-es", "jina-v2-code"])
        || contains_any(&facts.architecture, &["nomic-bert-moe", "jina-bert-v3"])
    {
        set(vocab, attrs, "<mask>", |a| a.lstrip = true);
    } else if contains_any(&name, &["phi-3", "phi3"]) {
        for a in attrs.iter_mut().filter(|a| a.special()) {
            a.rstrip = true;
        }
        set(vocab, attrs, "</s>", |a| a.rstrip = true);
        for t in ["<unk>", "<s>", "<|endoftext|>"] {
            set(vocab, attrs, t, |a| a.rstrip = false);
        }
    } else if name.contains("modern-bert") {
        set(vocab, attrs, "[MASK]", |a| a.lstrip = true);
    }
}

/// Applies `f` to the attributes of the token whose text is `text`, if any.
fn set(vocab: &Vocab, attrs: &mut [Attr], text: &str, f: impl FnOnce(&mut Attr)) {
    if let Some(id) = vocab.id_of(text) {
        f(&mut attrs[id as usize]);
    }
}

/// The tokens matched in raw text, longest text first (ties by id).
fn matched(vocab: &Vocab, attrs: &[Attr]) -> Vec<Special> {
    let text_len = |id: u32| vocab.piece(id).map_or(0, str::len);
    let mut out: Vec<Special> = attrs
        .iter()
        .enumerate()
        .map(|(id, a)| (id as u32, a))
        .filter(|&(id, a)| a.special() && text_len(id) > 0)
        .map(|(id, a)| Special {
            id,
            parse_only: a.control || a.unknown,
            lstrip: a.lstrip,
            rstrip: a.rstrip,
        })
        .collect();
    out.sort_by(|a, b| text_len(b.id).cmp(&text_len(a.id)).then(a.id.cmp(&b.id)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(tokens: &[(&str, TokenType)]) -> Vocab {
        Vocab::new(
            tokens.iter().map(|(t, _)| t.to_string()).collect(),
            tokens.iter().map(|&(_, ty)| ty).collect(),
            vec![0.0; tokens.len()],
        )
    }

    fn named(name: &str) -> VocabFacts {
        VocabFacts {
            model_name: name.into(),
            ..VocabFacts::default()
        }
    }

    #[test]
    fn end_of_generation_texts_become_control_whatever_their_type() {
        use TokenType::*;
        let v = vocab(&[("a", Normal), ("</s>", UserDefined), ("<|im_end|>", Normal)]);
        let s = SpecialTokens::derive(&v, &VocabFacts::default());
        assert_eq!(s.end_of_generation, [1, 2]);
        assert!(s.matched.iter().all(|m| m.parse_only && !m.rstrip));
    }

    #[test]
    fn phi3_strips_after_its_specials_but_not_after_unk_bos_and_endoftext() {
        use TokenType::*;
        let v = vocab(&[
            ("<unk>", Unknown),
            ("<s>", Control),
            ("</s>", UserDefined),
            ("<|endoftext|>", Control),
            ("<|user|>", Control),
        ]);
        let rstrip = |name: &str| -> Vec<u32> {
            let s = SpecialTokens::derive(&v, &named(name));
            let mut ids: Vec<u32> = s
                .matched
                .iter()
                .filter(|m| m.rstrip)
                .map(|m| m.id)
                .collect();
            ids.sort();
            ids
        };
        assert_eq!(rstrip("Phi3"), [2, 4]);
        assert_eq!(rstrip("Phi-3.5 Mini"), [2, 4]);
        assert!(rstrip("Phi 4 Mini").is_empty());
    }

    #[test]
    fn harmony_structure_is_user_defined_and_end_does_not_end() {
        use TokenType::*;
        let v = vocab(&[
            ("<|start|>", Control),
            ("<|end|>", Control),
            ("<|return|>", Control),
            ("<|call|>", Control),
        ]);
        let s = SpecialTokens::derive(&v, &VocabFacts::default());
        assert_eq!(s.end_of_generation, [2, 3]);
        let always: Vec<u32> = s
            .matched
            .iter()
            .filter(|m| !m.parse_only)
            .map(|m| m.id)
            .collect();
        assert_eq!(always, [0, 1]);
    }

    #[test]
    fn gemma4_keeps_its_close_tag_normal() {
        use TokenType::*;
        let v = vocab(&[("<|tool_response>", UserDefined), ("</s>", Normal)]);
        let s = SpecialTokens::derive(&v, &VocabFacts::default());
        assert_eq!(s.end_of_generation, [0]);
        assert_eq!(s.matched.len(), 1);
    }

    #[test]
    fn fim_tokens_found_by_text_only_when_the_metadata_names_none() {
        use TokenType::*;
        let v = vocab(&[("<|fim_prefix|>", Normal), ("<|fim_pad|>", Normal)]);
        let s = SpecialTokens::derive(&v, &VocabFacts::default());
        assert_eq!(s.end_of_generation, [1]);
        assert_eq!(s.matched.len(), 2);
        let declared = VocabFacts {
            declared_fim: [Some(0), None, None, Some(0), None, None],
            ..VocabFacts::default()
        };
        let s = SpecialTokens::derive(&v, &declared);
        assert_eq!(s.end_of_generation, [0]);
        assert!(s.matched.is_empty());
    }
}
