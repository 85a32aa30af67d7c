//! The grammars of `ferrox-text`'s tool-call formats, compiled by
//! `ferrox-sampling`: a forced harmony call is made of control tokens.

use ferrox_sampling::grammar::{Constraint, GrammarSpec, Grammars};
use ferrox_text::Tokenizer;
use ferrox_text::tools::{Tool, ToolFormat};
use serde_json::json;

/// A byte-level vocabulary with harmony's control tokens.
fn harmony_tokenizer() -> Tokenizer {
    use ferrox_gguf::{Array, Metadata, Value as G};
    let mut tokens: Vec<String> = [
        "<|channel|>",
        "<|constrain|>",
        "<|message|>",
        "<|call|>",
        "<|return|>",
        "<|end|>",
    ]
    .map(String::from)
    .to_vec();
    let controls = tokens.len();
    tokens.push("\u{120}".into()); // the byte-level space
    tokens.extend((0x21u8..=0x7E).map(|b| (b as char).to_string()));
    let mut types = vec![3i32; controls];
    types.resize(tokens.len(), 1);
    let mut m = Metadata::default();
    for (k, v) in [
        ("tokenizer.ggml.model", G::String("gpt2".into())),
        ("tokenizer.ggml.pre", G::String("gpt2".into())),
        ("tokenizer.ggml.tokens", G::Array(Array::String(tokens))),
        ("tokenizer.ggml.token_type", G::Array(Array::I32(types))),
        ("tokenizer.ggml.merges", G::Array(Array::String(vec![]))),
        ("tokenizer.ggml.eos_token_id", G::U32(4)),
    ] {
        m.insert(k.into(), v).unwrap();
    }
    Tokenizer::from_metadata(&m).unwrap()
}

/// The forced call begins with the channel *token* (text `<|channel|>`
/// spelled in bytes is not allowed), names an offered function and is
/// constrained to JSON by the `<|constrain|>` and `<|message|>` tokens.
#[test]
fn a_harmony_call_grammar_forces_the_control_tokens() {
    let tok = harmony_tokenizer();
    let grammars = Grammars::new(&tok).unwrap();
    let tools = [Tool {
        name: "f".into(),
        description: None,
        parameters: json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}),
    }];
    let spec = GrammarSpec::Lark(ToolFormat::Harmony.call_grammar(&tools, true));
    let mut c = grammars.compile(&spec).unwrap().start();
    let only = |c: &mut Constraint, id: u32| {
        let m = c.allowed().unwrap();
        assert!(m.allows(id) && m.count() == 1, "{} allowed", m.count());
        c.commit(id).unwrap();
    };
    only(&mut c, 0);
    for t in tok.encode("commentary to=functions.f ", false, false) {
        c.commit(t).unwrap();
    }
    only(&mut c, 1);
    for t in tok.encode("json", false, false) {
        c.commit(t).unwrap();
    }
    only(&mut c, 2);
    for t in tok.encode("{\"x\": 42}", false, false) {
        c.commit(t).unwrap();
    }
    let end = c.allowed().unwrap();
    assert!(end.allows(4) && !end.allows(7), "the call ends there");
    let text = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\": 42}";
    let (_, calls) = ToolFormat::Harmony.parse(text, &mut || "call_1".to_string());
    assert_eq!(calls[0].arguments, json!({"x": 42}));
}

/// `valid_prefix` says how much of a draft the grammar takes, and takes none
/// of it: speculation cuts drafts there.
#[test]
fn a_constraint_measures_a_drafts_valid_prefix_without_taking_it() {
    let tok = harmony_tokenizer();
    let grammars = Grammars::new(&tok).unwrap();
    let mut c = grammars
        .compile(&GrammarSpec::Lark("start: /[ab]+/".into()))
        .unwrap()
        .start();
    let ids = |s: &str| tok.encode(s, false, false);
    assert_eq!(c.valid_prefix(&ids("abba")), 4);
    assert_eq!(c.valid_prefix(&ids("abcab")), 2);
    assert_eq!(c.valid_prefix(&ids("cab")), 0);
    // Nothing was taken: the state is the start's.
    c.commit(ids("b")[0]).unwrap();
    assert_eq!(c.valid_prefix(&ids("aac")), 2);
}
