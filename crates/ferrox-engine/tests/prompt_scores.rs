//! Prompt scoring through the engine (`GenerationParams::prompt_logprobs`): the
//! scores of a prompt prefilled in small chunks are the bits of one prefilled
//! whole (SPEC S3), a scored prompt runs whole even when the prefix cache holds
//! it, and `max_tokens: 0` ends the request once the prompt is scored.

use std::sync::Arc;

use ferrox_engine::{EngineConfig, EngineHandle, Event, GenerationParams, TokenLogprob, start};
use ferrox_gguf::GgufFile;
use ferrox_models::{Architecture, Transformer};
use ferrox_testkit::TinyModel;
use ferrox_text::Tokenizer;

fn engine(prefill_chunk: usize) -> EngineHandle {
    let file = GgufFile::from_bytes(TinyModel::new(Architecture::Llama).gguf()).unwrap();
    let tok = Arc::new(Tokenizer::from_metadata(&file.header().metadata).unwrap());
    let config = EngineConfig {
        prefill_chunk,
        block_size: 4,
        kv_blocks: Some(128),
        prefix_cache: true,
        ..Default::default()
    };
    start(Box::new(Transformer::new(file, 1).unwrap()), tok, config).unwrap()
}

/// The prompt's scores, the generated tokens, and the usage's cached tokens.
fn scored(
    e: &EngineHandle,
    prompt: &[u32],
    max_tokens: usize,
) -> (Vec<TokenLogprob>, usize, usize) {
    let params = GenerationParams {
        prompt_logprobs: Some(3),
        ..GenerationParams::greedy(max_tokens)
    };
    let events = e
        .submit(prompt.to_vec(), params)
        .unwrap()
        .collect_blocking();
    let scores = events.iter().find_map(|e| match e {
        Event::PromptLogprobs(s) => Some(s.clone()),
        _ => None,
    });
    let tokens = events
        .iter()
        .filter(|e| matches!(e, Event::Token { .. }))
        .count();
    let Some(Event::Finished { usage, .. }) = events.last() else {
        panic!("no finish: {events:?}");
    };
    (
        scores.expect("the prompt is scored"),
        tokens,
        usage.cached_tokens,
    )
}

fn prompt() -> Vec<u32> {
    (0..37u32).map(|i| (i * 7919) % 90 + 3).collect()
}

#[test]
fn chunked_and_whole_prefills_score_a_prompt_with_the_same_bits() {
    let p = prompt();
    let (whole, _, _) = scored(&engine(512), &p, 1);
    let (chunked, _, _) = scored(&engine(8), &p, 1);
    assert_eq!(whole.len(), p.len() - 1, "every token after the first");
    let bits = |s: &[TokenLogprob]| -> Vec<u32> { s.iter().map(|t| t.logprob.to_bits()).collect() };
    assert_eq!(bits(&whole), bits(&chunked));
    assert!(whole.iter().all(|t| t.top.len() == 3 && t.rank >= 1));
    // A token's rank is 1 exactly when it is the best alternative.
    for t in &whole {
        assert_eq!(t.rank == 1, t.logprob >= t.top[0].1, "{t:?}");
    }
}

#[test]
fn a_scored_prompt_runs_whole_past_the_prefix_cache_and_may_generate_nothing() {
    let e = engine(8);
    let p = prompt();
    let (first, generated, cached) = scored(&e, &p, 0);
    assert_eq!(
        (generated, cached),
        (0, 0),
        "max_tokens 0 generates nothing"
    );
    // The same prompt again: its pages are cached, yet every token is scored.
    let (again, _, cached) = scored(&e, &p, 2);
    assert_eq!(cached, 0, "a scored prompt takes nothing from the cache");
    assert_eq!(first, again);
    // The pages were there to take: a plain request takes them.
    let events = e
        .submit(p.clone(), GenerationParams::greedy(1))
        .unwrap()
        .collect_blocking();
    let Some(Event::Finished { usage, .. }) = events.last() else {
        panic!("no finish: {events:?}");
    };
    assert!(usage.cached_tokens > 0, "{usage:?}");
}
