//! Embeddings through the engine (`GenerationParams::embed`): the pooled
//! hidden states equal the model's own rows (one forward of the whole prompt,
//! pooled by hand), whether the prompt was prefilled whole or in chunks beside
//! other requests (SPEC S3); mean pooling runs the prompt whole past the prefix
//! cache, last pooling may start from it; the request generates nothing and
//! keeps no pages.

use std::sync::Arc;

use ferrox_engine::{EngineConfig, EngineHandle, Event, GenerationParams, start};
use ferrox_gguf::GgufFile;
use ferrox_models::decoder::{Decoder, Span, Want};
use ferrox_models::kv_store::KvStore;
use ferrox_models::{Architecture, Pooling, Transformer};
use ferrox_testkit::TinyModel;
use ferrox_text::Tokenizer;

fn file() -> GgufFile {
    GgufFile::from_bytes(TinyModel::new(Architecture::Llama).gguf()).unwrap()
}

fn engine(prefill_chunk: usize) -> EngineHandle {
    let f = file();
    let tok = Arc::new(Tokenizer::from_metadata(&f.header().metadata).unwrap());
    let config = EngineConfig {
        prefill_chunk,
        block_size: 4,
        kv_blocks: Some(128),
        prefix_cache: true,
        ..Default::default()
    };
    start(Box::new(Transformer::new(f, 1).unwrap()), tok, config).unwrap()
}

/// The embedding rows and the usage's cached tokens of `prompt`.
fn embedded(e: &EngineHandle, prompt: &[u32], pooling: Pooling) -> (Vec<Vec<f32>>, usize) {
    let params = GenerationParams {
        embed: Some(pooling),
        ..GenerationParams::greedy(0)
    };
    let events = e
        .submit(prompt.to_vec(), params)
        .unwrap()
        .collect_blocking();
    assert!(
        !events.iter().any(|e| matches!(e, Event::Token { .. })),
        "an embedding generates nothing: {events:?}"
    );
    let rows = events.iter().find_map(|e| match e {
        Event::Embedding(r) => Some(r.clone()),
        _ => None,
    });
    let Some(Event::Finished { usage, .. }) = events.last() else {
        panic!("no finish: {events:?}");
    };
    assert_eq!(usage.completion_tokens, 0);
    (rows.expect("an embedding"), usage.cached_tokens)
}

/// Every token's hidden state of `prompt`, from one forward call.
fn model_rows(prompt: &[u32]) -> Vec<Vec<f32>> {
    let m = Transformer::new(file(), 1).unwrap();
    let mut store = KvStore::new(m.kv_layout(), 4);
    let pages = store.fresh_table(prompt.len());
    let out = m
        .forward(
            &mut store,
            &[Span {
                pages: &pages,
                start: 0,
                tokens: prompt,
                want: Want::Hidden,
            }],
        )
        .unwrap();
    assert!(out.logits.data.is_empty(), "no logits asked for");
    out.hidden.rows_of(0).map(|(_, r)| r.to_vec()).collect()
}

fn prompt() -> Vec<u32> {
    (0..23u32).map(|i| (i * 7919) % 90 + 3).collect()
}

fn bits(rows: &[Vec<f32>]) -> Vec<Vec<u32>> {
    rows.iter()
        .map(|r| r.iter().map(|v| v.to_bits()).collect())
        .collect()
}

#[test]
fn each_pooling_gives_the_models_rows_pooled() {
    let p = prompt();
    let rows = model_rows(&p);
    let e = engine(512);
    let (none, _) = embedded(&e, &p, Pooling::None);
    assert_eq!(bits(&none), bits(&rows), "unpooled: every token's row");
    let (cls, _) = embedded(&e, &p, Pooling::Cls);
    assert_eq!(bits(&cls), bits(&rows[..1]));
    let (last, _) = embedded(&e, &p, Pooling::Last);
    assert_eq!(bits(&last), bits(&rows[p.len() - 1..]));
    let (mean, _) = embedded(&e, &p, Pooling::Mean);
    assert_eq!(mean.len(), 1);
    for (i, &v) in mean[0].iter().enumerate() {
        let want = rows.iter().map(|r| r[i] as f64).sum::<f64>() / p.len() as f64;
        assert!((v as f64 - want).abs() < 1e-6, "dim {i}: {v} vs {want}");
    }
}

#[test]
fn chunked_prefill_beside_other_requests_gives_the_same_bits() {
    let p = prompt();
    let (whole, _) = embedded(&engine(512), &p, Pooling::Mean);
    let e = engine(4);
    // Generation and other embeddings share the steps.
    let busy = e
        .submit((1..30).collect(), GenerationParams::greedy(16))
        .unwrap();
    let other = e
        .submit(
            vec![9, 8, 7, 6, 5],
            GenerationParams {
                embed: Some(Pooling::Last),
                ..GenerationParams::greedy(0)
            },
        )
        .unwrap();
    let (chunked, _) = embedded(&e, &p, Pooling::Mean);
    assert_eq!(bits(&whole), bits(&chunked));
    drop((busy.collect_blocking(), other.collect_blocking()));
}

#[test]
fn mean_pooling_runs_past_the_prefix_cache_and_last_pooling_reads_it() {
    let p = prompt();
    let e = engine(8);
    // A generation caches the prompt's whole pages.
    e.submit(p.clone(), GenerationParams::greedy(1))
        .unwrap()
        .collect_blocking();
    let (mean, cached) = embedded(&e, &p, Pooling::Mean);
    assert_eq!(cached, 0, "mean pools every position: none from the cache");
    let (last, cached) = embedded(&e, &p, Pooling::Last);
    assert!(cached > 0, "last pooling may start from cached pages");
    let (alone_last, _) = embedded(&engine(8), &p, Pooling::Last);
    assert_eq!(
        bits(&last),
        bits(&alone_last),
        "a cached prefix changes no bit"
    );
    let (alone_mean, _) = embedded(&engine(8), &p, Pooling::Mean);
    assert_eq!(bits(&mean), bits(&alone_mean));
    assert_eq!(e.stats().blocks_held, 0, "no pages kept");
}

#[test]
fn an_embedding_asks_for_no_tokens() {
    let e = engine(8);
    let params = GenerationParams {
        embed: Some(Pooling::Mean),
        ..GenerationParams::greedy(4)
    };
    let Err(err) = e.submit(prompt(), params) else {
        panic!("an embedding with max_tokens 4 was accepted");
    };
    assert!(err.to_string().contains("max_tokens must be 0"), "{err}");
}
