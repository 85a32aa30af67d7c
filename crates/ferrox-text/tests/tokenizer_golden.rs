//! Tokenization against llama.cpp on both real models (`shared/golden/tokenize-*.jsonl`),
//! and the round trip through the decoder and the streaming decoder.

use ferrox_gguf::GgufFile;
use ferrox_testkit::{golden_rows, real_model};
use ferrox_text::Tokenizer;
use ferrox_text::tokenizer::Utf8Stream;

fn load(model: &str) -> Option<Tokenizer> {
    let file = GgufFile::open(real_model(model)?).unwrap();
    Some(Tokenizer::from_metadata(&file.header().metadata).unwrap())
}

fn check(model: &str, golden: &str) {
    let Some(tok) = load(model) else { return };
    let Some(rows) = golden_rows(golden) else {
        return;
    };
    let mut failures = Vec::new();
    for row in &rows {
        let text = row["text"].as_str().unwrap();
        let parse_special = row["parse_special"].as_bool().unwrap();
        let want: Vec<u32> = row["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(text, true, parse_special);
        if got != want {
            failures.push(format!(
                "{text:?} (parse_special {parse_special}):\n  got  {got:?}\n  want {want:?}"
            ));
            continue;
        }
        let body: &[u32] = if tok.adds_bos() { &got[1..] } else { &got };
        assert_eq!(
            tok.decode(body, parse_special),
            text,
            "round trip of {text:?}"
        );
        let mut stream = Utf8Stream::new();
        let mut streamed: String = body
            .iter()
            .map(|&id| stream.push(&tok.token_bytes(id, parse_special)))
            .collect();
        streamed += &stream.finish();
        assert_eq!(streamed, text, "streamed round trip of {text:?}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows differ from llama.cpp:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}

#[test]
fn real_model_smollm2_tokenizes_exactly_like_llama_cpp() {
    check("smollm2-135m", "tokenize-smollm2-135m.jsonl");
}

#[test]
fn real_model_gemma3_tokenizes_exactly_like_llama_cpp() {
    check("gemma3-270m", "tokenize-gemma3-270m.jsonl");
}

#[test]
fn real_model_end_of_generation_sets_include_end_of_turn_tokens() {
    if let Some(smol) = load("smollm2-135m") {
        let eog: Vec<String> = smol
            .end_of_generation()
            .iter()
            .map(|&id| smol.decode(&[id], true))
            .collect();
        assert!(
            eog.contains(&"<|im_end|>".to_string()) && eog.contains(&"<|endoftext|>".to_string()),
            "{eog:?}"
        );
    }
    if let Some(gemma) = load("gemma3-270m") {
        let eog: Vec<String> = gemma
            .end_of_generation()
            .iter()
            .map(|&id| gemma.decode(&[id], true))
            .collect();
        assert!(
            eog.contains(&"<eos>".to_string()) && eog.contains(&"<end_of_turn>".to_string()),
            "{eog:?}"
        );
    }
}

#[test]
fn real_model_smollm2_chat_template_renders_byte_identically() {
    use ferrox_text::chat::{ChatMessage, ChatTemplate};
    let Some(path) = real_model("smollm2-135m") else {
        return;
    };
    let Some(rows) = golden_rows("chat-template-smollm2-135m.jsonl") else {
        return;
    };
    let file = GgufFile::open(path).unwrap();
    let m = &file.header().metadata;
    let tok = Tokenizer::from_metadata(m).unwrap();
    let (bos, eos) = (
        tok.decode(&[tok.bos().unwrap()], true),
        tok.decode(&[tok.eos().unwrap()], true),
    );
    let t = ChatTemplate::for_model(
        m.string_opt("tokenizer.chat_template").unwrap().as_deref(),
        None,
        &bos,
        &eos,
    )
    .unwrap()
    .expect("SmolLM2 has a template");
    assert!(!rows.is_empty());
    for row in rows {
        let messages: Vec<ChatMessage> = serde_json::from_value(row["messages"].clone()).unwrap();
        let got = t
            .render(&messages, row["add_generation_prompt"].as_bool().unwrap())
            .unwrap();
        assert_eq!(got, row["prompt"].as_str().unwrap());
    }
}

/// A byte-level vocabulary with control tokens `specials` after printable ASCII.
fn vocab_with(specials: &[&str]) -> Tokenizer {
    use ferrox_gguf::{Array, Metadata, Value};
    let mut tokens: Vec<String> = (0x21u8..=0x7E).map(|b| (b as char).to_string()).collect();
    let mut types = vec![1i32; tokens.len()];
    tokens.extend(specials.iter().map(|s| s.to_string()));
    types.extend(std::iter::repeat_n(3, specials.len()));
    let mut m = Metadata::default();
    for (k, v) in [
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String("gpt-4o".into())),
        ("tokenizer.ggml.tokens", Value::Array(Array::String(tokens))),
        ("tokenizer.ggml.token_type", Value::Array(Array::I32(types))),
        ("tokenizer.ggml.merges", Value::Array(Array::String(vec![]))),
    ] {
        m.insert(k.into(), v).unwrap();
    }
    Tokenizer::from_metadata(&m).unwrap()
}

/// gpt-oss's harmony: `<|end|>` closes a message (the thinking before the
/// answer), so with `<|return|>` and `<|call|>` present it does not end
/// generation; they do. Elsewhere `<|end|>` (Phi-3) still does.
#[test]
fn harmony_vocabularies_end_on_return_and_call_not_on_end() {
    let texts = |t: &Tokenizer| -> Vec<String> {
        t.end_of_generation()
            .iter()
            .map(|&id| t.decode(&[id], true))
            .collect()
    };
    let harmony = vocab_with(&["<|start|>", "<|end|>", "<|return|>", "<|call|>"]);
    assert_eq!(texts(&harmony), ["<|return|>", "<|call|>"]);
    let phi = vocab_with(&["<|end|>", "<|user|>"]);
    assert_eq!(texts(&phi), ["<|end|>"]);
}
