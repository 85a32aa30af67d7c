//! ferrox's tokenizers against llama.cpp's own test vectors: the vocab-only GGUFs
//! of real models in llama.cpp's `models/` folder with their
//! `.inp` / `.out` pairs (inputs split by `__ggml_vocab_test__`, ids per line),
//! tokenized as `tests/test-tokenizer-0.cpp` does: no special tokens added, none
//! parsed. Every vector of every family ferrox supports must match.

use ferrox_gguf::GgufFile;
use ferrox_testkit::{llama_refs_dir, vocab_file};
use ferrox_text::Tokenizer;

/// `(input, expected ids)` of `ggml-vocab-NAME.gguf.{inp,out}`.
fn vectors(name: &str) -> Vec<(String, Vec<u32>)> {
    let base = llama_refs_dir().join(format!("ggml-vocab-{name}.gguf"));
    let read = |ext: &str| {
        let p = base.with_extension(format!("gguf.{ext}"));
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let (inp, out) = (read("inp"), read("out"));
    let sep = "\n__ggml_vocab_test__\n";
    let mut inputs = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        match rest.find(sep) {
            Some(i) => {
                inputs.push(rest[..i].to_string());
                rest = &rest[i + sep.len()..];
            }
            None => {
                inputs.push(rest.to_string());
                rest = "";
            }
        }
    }
    let outputs: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(inputs.len(), outputs.len(), "{name}: inputs and outputs");
    inputs.into_iter().zip(outputs).collect()
}

fn check(name: &str) {
    let Some(path) = vocab_file(name) else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let tok = Tokenizer::from_metadata(&file.header().metadata).unwrap();
    let cases = vectors(name);
    let failed: Vec<String> = cases
        .iter()
        .filter_map(|(text, want)| {
            let got = tok.encode(text, false, false);
            (&got != want).then(|| format!("{text:?}: got {got:?}, want {want:?}"))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{name}: {} of {} vectors differ:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
}

#[test]
fn llama3_bpe_vectors() {
    check("llama-bpe");
}

#[test]
fn deepseek_coder_vectors() {
    check("deepseek-coder");
}

#[test]
fn qwen2_vectors() {
    check("qwen2");
}

#[test]
fn phi3_vectors() {
    check("phi-3");
}

#[test]
fn llama_spm_vectors() {
    check("llama-spm");
}

#[test]
fn gpt2_vectors() {
    check("gpt-2");
}

#[test]
fn qwen35_vectors() {
    check("qwen35");
}

#[test]
fn gemma4_vectors() {
    check("gemma-4");
}

#[test]
fn starcoder_vectors() {
    check("starcoder");
}

#[test]
fn refact_vectors() {
    check("refact");
}

#[test]
fn bert_bge_vectors() {
    check("bert-bge");
}

/// WordPiece's special tokens: `[CLS]` first and `[SEP]` last (llama.cpp's
/// `add_special` for BERT vocabularies, which carry no add_bos key).
#[test]
fn bert_special_tokens_wrap_the_text() {
    let Some(path) = vocab_file("bert-bge") else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let tok = Tokenizer::from_metadata(&file.header().metadata).unwrap();
    let plain = tok.encode("Hello world", false, false);
    let wrapped = tok.encode("Hello world", true, false);
    assert_eq!(wrapped.first(), Some(&101));
    assert_eq!(wrapped.last(), Some(&102));
    assert_eq!(&wrapped[1..wrapped.len() - 1], &plain[..]);
    assert_eq!(
        tok.encode("[CLS] hi [SEP]", false, true)[0],
        101,
        "specials parse"
    );
    assert_eq!(tok.decode(&plain, false), " hello world");
}

/// The corpus of our own (`scripts/tokenizers/corpus.jsonl`: several scripts,
/// combining marks, emoji, code, whitespace runs) against llama-tokenize's ids
/// for it (`tests/golden/tokenize-vocab-NAME.jsonl`, by
/// `scripts/tokenizers/make-golden`), special tokens added as the metadata says.
fn check_corpus(name: &str) {
    check_corpus_as(name, name, None);
}

/// [`check_corpus`] on the vocabulary `vocab` with its pre-tokenizer replaced
/// by `pre` when given, against `tokenize-vocab-{name}.jsonl`.
fn check_corpus_as(name: &str, vocab: &str, pre: Option<&str>) {
    let Some(rows) = ferrox_testkit::golden_rows(&format!("tokenize-vocab-{name}.jsonl")) else {
        return;
    };
    let Some(tok) = tokenizer_as(vocab, pre) else {
        return;
    };
    assert!(
        rows.len() >= 20,
        "{name}: the corpus has {} texts",
        rows.len()
    );
    let failed: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            let text = row["text"].as_str().unwrap();
            let want: Vec<u32> = serde_json::from_value(row["ids"].clone()).unwrap();
            let got = tok.encode(text, true, false);
            let round_trip = tok.decode(&got, false);
            (got != want || round_trip != text)
                .then(|| format!("{text:?}: got {got:?}, want {want:?}, decodes to {round_trip:?}"))
        })
        .collect();
    assert!(failed.is_empty(), "{name}:\n{}", failed.join("\n"));
}

/// The tokenizer of `ggml-vocab-{vocab}.gguf`, its pre-tokenizer replaced by
/// `pre` when given.
fn tokenizer_as(vocab: &str, pre: Option<&str>) -> Option<Tokenizer> {
    let path = vocab_file(vocab)?;
    let file = GgufFile::open(&path).unwrap();
    let mut metadata = ferrox_gguf::Metadata::default();
    for (k, v) in file.header().metadata.iter() {
        let v = match pre {
            Some(p) if k == "tokenizer.ggml.pre" => ferrox_gguf::Value::String(p.into()),
            _ => v.clone(),
        };
        metadata.insert(k.to_string(), v).unwrap();
    }
    Some(Tokenizer::from_metadata(&metadata).unwrap())
}

#[test]
fn qwen35_matches_llama_tokenize_on_our_corpus() {
    check_corpus("qwen35");
}

#[test]
fn gemma4_matches_llama_tokenize_on_our_corpus() {
    check_corpus("gemma-4");
}

/// gpt-oss's `gpt-4o` pre-tokenizer (o200k's cased words, `/` after
/// punctuation), over the Qwen2 vocabulary as the gpt-oss family file carries
/// it: no o200k vocabulary file is at hand, and the splits are the pre-
/// tokenizer's alone. The golden ids are llama-tokenize's on that family file.
#[test]
fn gpt4o_pre_tokenizer_matches_llama_tokenize_on_our_corpus() {
    check_corpus_as("gpt-4o", "qwen2", Some("gpt-4o"));
}

/// Special tokens in text (`scripts/tokenizers/specials.jsonl`: chat markup of
/// many families, special tokens beside whitespace, `</s>` and user-defined
/// tokens written as text) against llama-tokenize's ids for them
/// (`tests/golden/tokenize-specials-NAME.jsonl`), with special-token parsing on
/// and off: which tokens are matched, which only when parsing, and the
/// whitespace Phi-3's tokens strip after them.
fn check_specials(name: &str, tok: Option<Tokenizer>) {
    let Some(rows) = ferrox_testkit::golden_rows(&format!("tokenize-specials-{name}.jsonl")) else {
        return;
    };
    let Some(tok) = tok else {
        return;
    };
    assert!(rows.len() >= 40, "{name}: {} rows", rows.len());
    let failed: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            let text = row["text"].as_str().unwrap();
            let parse = row["parse_special"].as_bool().unwrap();
            let want: Vec<u32> = serde_json::from_value(row["ids"].clone()).unwrap();
            let got = tok.encode(text, true, parse);
            (got != want).then(|| format!("{text:?} (parse {parse}): got {got:?}, want {want:?}"))
        })
        .collect();
    assert!(failed.is_empty(), "{name}:\n{}", failed.join("\n"));
}

#[test]
fn special_tokens_in_text_match_llama_tokenize_on_every_vocabulary() {
    for name in [
        "llama-spm",
        "llama-bpe",
        "phi-3",
        "qwen2",
        "qwen35",
        "gpt-2",
        "gemma-4",
    ] {
        check_specials(name, tokenizer_as(name, None));
    }
    check_specials("gpt-4o", tokenizer_as("qwen2", Some("gpt-4o")));
    for model in ["smollm2-135m", "gemma3-270m"] {
        let tok = ferrox_testkit::real_model(model).map(|path| {
            let file = GgufFile::open(&path).unwrap();
            Tokenizer::from_metadata(&file.header().metadata).unwrap()
        });
        check_specials(model, tok);
    }
}
