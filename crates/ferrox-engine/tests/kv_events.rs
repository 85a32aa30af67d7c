//! The prefix cache's events through the engine (vLLM's KV events, issue 31): a
//! follower that applies them holds exactly the pages the engine's cache holds,
//! through concurrent requests, shared prefixes and evictions, and the cache is
//! cleared when the engine stops.

use std::collections::BTreeSet;
use std::sync::Arc;

use ferrox_engine::kv_events::{self, KvEvent, KvEventSink};
use ferrox_engine::{EngineConfig, GenerationParams, start};
use ferrox_gguf::GgufFile;
use ferrox_models::{Architecture, Transformer};
use ferrox_testkit::TinyModel;
use ferrox_text::Tokenizer;

mod common;
use common::wait_idle;

fn prompt(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 31 + salt * 7) % 80 + 8)
        .collect()
}

#[test]
fn a_follower_of_the_events_holds_exactly_the_cached_pages() {
    let file = GgufFile::from_bytes(TinyModel::new(Architecture::Llama).gguf()).unwrap();
    let tok = Arc::new(Tokenizer::from_metadata(&file.header().metadata).unwrap());
    let (sink, mut rx) = KvEventSink::channel();
    let config = EngineConfig {
        kv_blocks: Some(48),
        block_size: 4,
        kv_events: Some(sink),
        ..Default::default()
    };
    let h = start(Box::new(Transformer::new(file, 2).unwrap()), tok, config).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut view = BTreeSet::new();
    let mut stored = 0;
    let mut removed = 0;
    for round in 0..6u32 {
        // Four prompts at once, two sharing a prefix with an earlier round's.
        let streams: Vec<_> = (0..4u32)
            .map(|i| {
                let mut p = prompt(40, round % 2);
                p.extend(prompt(20 + 4 * i as usize, round * 4 + i + 9));
                h.submit(p, GenerationParams::greedy(6)).unwrap()
            })
            .collect();
        for s in streams {
            s.collect_blocking();
        }
        wait_idle(&h);
        while let Ok(batch) = rx.try_recv() {
            for e in &batch {
                match e {
                    KvEvent::Stored { hashes, tokens, .. } => {
                        assert_eq!(tokens.len(), hashes.len() * 4, "a page's tokens each");
                        stored += hashes.len();
                    }
                    KvEvent::Removed { hashes } => removed += hashes.len(),
                    KvEvent::Cleared => panic!("cleared while serving"),
                }
            }
            kv_events::apply(&mut view, &batch);
        }
        let cached: BTreeSet<u64> = rt
            .block_on(h.cached_blocks())
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(view, cached, "round {round}");
    }
    assert!(
        stored > 48 && removed > 0,
        "{stored} stored, {removed} removed"
    );
    h.shutdown();
    let last = rt.block_on(async {
        let mut last = None;
        while let Some(b) = rx.recv().await {
            last = b.last().cloned();
        }
        last
    });
    assert_eq!(last, Some(KvEvent::Cleared));
}
