//! Structured output in the engine, on the real SmolLM2: a constrained request's
//! text follows its grammar, the constraint stops it when the grammar is
//! complete, and a constrained row never changes another row's tokens (SPEC S3).

use std::sync::Arc;

use ferrox_engine::{EngineConfig, EngineHandle, Event, FinishReason, GenerationParams, start};
use ferrox_gguf::GgufFile;
use ferrox_models::Transformer;
use ferrox_sampling::grammar::{GrammarSpec, Grammars};
use ferrox_testkit::real_model;
use ferrox_text::Tokenizer;
use serde_json::{Value, json};

mod common;
use common::wait_idle;

fn smollm2() -> Option<(EngineHandle, Arc<Tokenizer>)> {
    let path = real_model("smollm2-135m")?;
    let file = GgufFile::open(&path).unwrap();
    let tok = Arc::new(Tokenizer::from_metadata(&file.header().metadata).unwrap());
    let h = start(
        Box::new(Transformer::new(file, 2).unwrap()),
        Arc::clone(&tok),
        EngineConfig {
            kv_blocks: Some(256),
            ..Default::default()
        },
    )
    .unwrap();
    Some((h, tok))
}

/// The text and finish reason of a finished stream.
fn text_of(events: &[Event]) -> (String, FinishReason) {
    let mut text = String::new();
    for e in events {
        match e {
            Event::Token { text: t, .. } => text.push_str(t),
            Event::Finished {
                reason, text: t, ..
            } => {
                text.push_str(t);
                return (text, *reason);
            }
            Event::Failed(f) => panic!("failed: {f}"),
            Event::Admitted | Event::PromptLogprobs(_) | Event::Embedding(_) => {}
        }
    }
    panic!("no finish: {events:?}")
}

fn tokens_of(events: &[Event]) -> Vec<u32> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Token { id, .. } => Some(*id),
            _ => None,
        })
        .collect()
}

fn chat(tok: &Tokenizer, question: &str) -> Vec<u32> {
    tok.encode(
        &format!("<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"),
        false,
        true,
    )
}

#[test]
fn real_model_smollm2_follows_its_grammar_and_leaves_other_rows_alone() {
    let Some((h, tok)) = smollm2() else {
        return;
    };
    let grammars = Grammars::new(&tok).unwrap();
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 3}
        },
        "required": ["name", "age", "pets"],
        "additionalProperties": false
    });
    let spec = GrammarSpec::JsonSchema {
        schema,
        strict: true,
    };
    let grammar = Arc::new(grammars.compile(&spec).unwrap());
    let question = chat(&tok, "Describe a person.");
    let plain = GenerationParams::greedy(40);
    let mut constrained = GenerationParams::greedy(120);
    constrained.grammar = Some(Arc::clone(&grammar));
    let alone = tokens_of(
        &h.submit(question.clone(), plain.clone())
            .unwrap()
            .collect_blocking(),
    );
    // The constrained request beside the same unconstrained one, and a sampled
    // constrained one too.
    let mut sampled = constrained.clone();
    sampled.sampling.temperature = 1.0;
    sampled.sampling.seed = Some(5);
    let streams = [
        h.submit(question.clone(), constrained.clone()).unwrap(),
        h.submit(question.clone(), plain).unwrap(),
        h.submit(question, sampled).unwrap(),
    ];
    let [a, b, c] = streams.map(|s| s.collect_blocking());
    assert_eq!(
        tokens_of(&b),
        alone,
        "a constrained neighbour changed a row"
    );
    for events in [a, c] {
        let (text, reason) = text_of(&events);
        assert_eq!(reason, FinishReason::Stop, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let o = v.as_object().unwrap();
        assert_eq!(o.len(), 3, "{text}");
        assert!(o["name"].as_str().unwrap().chars().count() <= 20, "{text}");
        assert!((0..=120).contains(&o["age"].as_i64().unwrap()), "{text}");
        let pets = o["pets"].as_array().unwrap();
        assert!(
            pets.len() <= 3 && pets.iter().all(|p| p == "cat" || p == "dog"),
            "{text}"
        );
    }

    // A regular expression and a Lark grammar, on raw prompts.
    for (spec, check) in [
        (
            GrammarSpec::Regex("[0-9]{3}-[0-9]{4}".into()),
            &(|t: &str| t.len() == 8 && t.as_bytes()[3] == b'-') as &dyn Fn(&str) -> bool,
        ),
        (
            GrammarSpec::Lark(r#"start: "yes" | "no""#.into()),
            &|t: &str| t == "yes" || t == "no",
        ),
    ] {
        let mut p = GenerationParams::greedy(30);
        p.grammar = Some(Arc::new(grammars.compile(&spec).unwrap()));
        let events = h
            .submit(tok.encode("My answer is", true, true), p)
            .unwrap()
            .collect_blocking();
        let (text, reason) = text_of(&events);
        assert!(
            check(&text) && reason == FinishReason::Stop,
            "{spec:?}: {text:?}"
        );
    }
    // A complete grammar ends the request even with ignore_eos (nothing may
    // follow it), and the end-of-generation token is not shown.
    let mut p = GenerationParams::greedy(30);
    p.ignore_eos = true;
    p.grammar = Some(Arc::new(
        grammars
            .compile(&GrammarSpec::Lark(r#"start: "ok""#.into()))
            .unwrap(),
    ));
    let events = h
        .submit(tok.encode("Say ok:", true, true), p)
        .unwrap()
        .collect_blocking();
    assert_eq!(text_of(&events), ("ok".to_string(), FinishReason::Stop));
    wait_idle(&h);
    assert_eq!(h.stats().kv_blocks_free, 256);
}

/// llama-server users' GBNF: every grammar llama.cpp ships compiles, and its
/// JSON grammar gives JSON.
#[test]
fn real_model_smollm2_runs_llama_cpps_gbnf_grammars() {
    let Some((h, tok)) = smollm2() else {
        return;
    };
    let grammars = Grammars::new(&tok).unwrap();
    let dir = ferrox_testkit::llama_refs_dir().join("grammars");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch-llama-refs)", dir.display()))
    {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let spec = GrammarSpec::grammar(&text);
        assert!(matches!(spec, GrammarSpec::Gbnf(_)), "{}", path.display());
        if let Err(e) = grammars.compile(&spec) {
            panic!("{}: {e}", path.display());
        }
        names.push(path.file_name().unwrap().to_string_lossy().into_owned());
    }
    names.sort();
    assert_eq!(names.len(), 8, "{names:?}");
    let json = std::fs::read_to_string(dir.join("json.gbnf")).unwrap();
    let mut p = GenerationParams::greedy(200);
    p.grammar = Some(Arc::new(
        grammars.compile(&GrammarSpec::grammar(&json)).unwrap(),
    ));
    let shots = "Cat: {\"name\": \"Tom\", \"age\": 3}\nDog: {\"name\": \"Rex\", \"age\": 5}\nBird:";
    let events = h
        .submit(tok.encode(shots, true, true), p)
        .unwrap()
        .collect_blocking();
    let (text, reason) = text_of(&events);
    assert_eq!(reason, FinishReason::Stop, "{text}");
    assert!(
        serde_json::from_str::<Value>(&text).unwrap().is_object(),
        "{text}"
    );
}

#[test]
fn real_model_smollm2_grammars_that_cannot_compile_say_why() {
    let Some(path) = real_model("smollm2-135m") else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let tok = Tokenizer::from_metadata(&file.header().metadata).unwrap();
    let grammars = Grammars::new(&tok).unwrap();
    for (spec, says) in [
        (
            GrammarSpec::JsonSchema {
                schema: json!({"type": "strin"}),
                strict: false,
            },
            "JSON schema",
        ),
        (
            GrammarSpec::JsonSchema {
                schema: json!({"type": "integer", "minimum": 5, "maximum": 1}),
                strict: true,
            },
            "JSON schema",
        ),
        (GrammarSpec::Lark("start: (".into()), "grammar"),
        (GrammarSpec::Regex("[0-9".into()), "regular expression"),
    ] {
        let e = grammars.compile(&spec).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("cannot compile the {says}: ")),
            "{e}"
        );
    }
}

/// With speculation, a constrained request gives the tokens it gives
/// without (drafts are cut where the grammar stops following them, and
/// checked under it), and drafts are still run.
#[test]
fn real_model_smollm2_speculates_within_its_grammar() {
    let Some(path) = real_model("smollm2-135m") else {
        return;
    };
    let tok = Arc::new(
        Tokenizer::from_metadata(&GgufFile::open(&path).unwrap().header().metadata).unwrap(),
    );
    let engine = |speculation| {
        let file = GgufFile::open(&path).unwrap();
        let config = EngineConfig {
            kv_blocks: Some(256),
            speculation,
            ..Default::default()
        };
        start(
            Box::new(Transformer::new(file, 2).unwrap()),
            Arc::clone(&tok),
            config,
        )
        .unwrap()
    };
    let grammars = Grammars::new(&tok).unwrap();
    let grammar = Arc::new(
        grammars
            .compile(&GrammarSpec::Lark("start: /(cat |dog |bird )+/".into()))
            .unwrap(),
    );
    let question = chat(
        &tok,
        "Repeat these words: cat dog cat dog bird cat dog cat dog bird cat dog",
    );
    let mut params = GenerationParams::greedy(40);
    params.grammar = Some(grammar);
    let plain = tokens_of(
        &engine(None)
            .submit(question.clone(), params.clone())
            .unwrap()
            .collect_blocking(),
    );
    let h = engine(Some(ferrox_engine::speculation::Speculation::default()));
    let fast = tokens_of(&h.submit(question, params).unwrap().collect_blocking());
    assert_eq!(fast, plain);
    wait_idle(&h);
    assert!(
        h.stats().drafted_tokens > 0,
        "nothing drafted: {}",
        tok.decode(&plain, false)
    );
}
