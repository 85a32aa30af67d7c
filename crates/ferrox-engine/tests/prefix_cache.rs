//! The shared-prefix KV cache through the engine (SPEC S3, S7, S12, S20): a request
//! served from cached pages gets bit-identical logits to the same request run cold,
//! reports its cached tokens, and runs only the rest of its prompt; window models
//! share window pages too, and a small pool serves many long prompts.

use std::sync::{Arc, Mutex};

use ferrox_engine::{EngineConfig, EngineHandle, Event, GenerationParams, Usage, start};
use ferrox_gguf::GgufFile;
use ferrox_models::decoder::{Decoder, Output, Span};
use ferrox_models::kv_store::KvStore;
use ferrox_models::{Architecture, HyperParams, ModelError, Transformer};
use ferrox_testkit::{TinyModel, real_model};
use ferrox_text::Tokenizer;

mod common;
use common::wait_idle;

/// A model that keeps the bits of every logits row it returns.
struct Recording {
    inner: Transformer,
    rows: Arc<Mutex<Vec<Vec<u32>>>>,
}

impl Decoder for Recording {
    fn forward(&self, store: &mut KvStore, spans: &[Span<'_>]) -> Result<Output, ModelError> {
        let l = self.inner.forward(store, spans)?;
        let mut rows = self.rows.lock().unwrap();
        for i in 0..l.logits.index.len() {
            rows.push(l.logits.row(i).iter().map(|x| x.to_bits()).collect());
        }
        Ok(l)
    }
    fn hyper_params(&self) -> &HyperParams {
        self.inner.hyper_params()
    }
}

struct Engine {
    handle: EngineHandle,
    rows: Arc<Mutex<Vec<Vec<u32>>>>,
}

fn engine(file: GgufFile, prefix_cache: bool, config: EngineConfig) -> Engine {
    let tok = Arc::new(Tokenizer::from_metadata(&file.header().metadata).unwrap());
    let rows = Arc::new(Mutex::new(Vec::new()));
    let d = Recording {
        inner: Transformer::new(file, 2).unwrap(),
        rows: Arc::clone(&rows),
    };
    let config = EngineConfig {
        prefix_cache,
        ..config
    };
    Engine {
        handle: start(Box::new(d), tok, config).unwrap(),
        rows,
    }
}

/// Runs one request alone and returns its usage and the logits rows it produced.
fn run(e: &Engine, prompt: &[u32], max_tokens: usize) -> (Usage, Vec<Vec<u32>>) {
    let before = e.rows.lock().unwrap().len();
    let events = e
        .handle
        .submit(prompt.to_vec(), GenerationParams::greedy(max_tokens))
        .unwrap()
        .collect_blocking();
    let usage = match events.last() {
        Some(Event::Finished { usage, .. }) => *usage,
        other => panic!("no finish: {other:?}"),
    };
    (usage, e.rows.lock().unwrap()[before..].to_vec())
}

fn tokens(n: usize, salt: u32, vocab: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 7919 + salt * 104_729) % (vocab / 4 * 3) + vocab / 8)
        .collect()
}

/// SPEC S3, S20: prompts that share `shared` tokens with an earlier prompt (page
/// multiples or not) take whole cached pages, run the rest, and give the same
/// logits bit for bit as on an engine without the cache. On a hybrid model a hit
/// needs a state snapshot too: the base prompt leaves one at its last page
/// boundary, and each later prompt leaves its own.
fn check_cached_equals_cold(file: impl Fn() -> GgufFile, base_len: usize, shared: &[usize]) {
    // Requests run one at a time; four slots give the window pool room to keep
    // the window pages of every page the base prompt slid past.
    // A hybrid model keeps one state snapshot per three slots: room for the
    // base prompt's beside those of the prompts that follow it (up to three
    // each: at the end of the prefix it shares, and two when it ends).
    let config = EngineConfig {
        max_seqs: 4,
        kv_blocks: Some(4096),
        prefill_chunk: 64,
        recurrent_slots: Some(3 * 20),
        ..Default::default()
    };
    let hp_vocab = {
        let f = file();
        HyperParams::from_metadata(&f.header().metadata)
            .unwrap()
            .vocab_size as u32
    };
    let hybrid = {
        let f = file();
        HyperParams::from_metadata(&f.header().metadata)
            .unwrap()
            .delta_net
            .is_some()
    };
    // A hybrid's hit ends at a page whose state an earlier request left: the
    // base prompt's last page at least, and pages where later prompts' own
    // checkpoints were (checked by the logits alone).
    let expected = |k: usize, cached: usize| match k / 16 * 16 {
        whole if hybrid && whole != base_len / 16 * 16 => {
            cached.is_multiple_of(16) && cached <= whole
        }
        whole => cached == whole,
    };
    let warm = engine(file(), true, config.clone());
    let cold = engine(file(), false, config);
    let base = tokens(base_len, 1, hp_vocab);
    run(&warm, &base, 1);
    for &k in shared {
        let mut p = base[..k].to_vec();
        p.extend(tokens(20, 2 + k as u32, hp_vocab));
        let (wu, wrows) = run(&warm, &p, 3);
        let (cu, crows) = run(&cold, &p, 3);
        assert!(expected(k, wu.cached_tokens), "shared {k}: {wu:?}");
        assert_eq!(cu.cached_tokens, 0);
        assert_eq!(
            (wu.prompt_tokens, wu.completion_tokens),
            (cu.prompt_tokens, cu.completion_tokens)
        );
        assert!(
            wrows == crows,
            "shared {k}: logits differ from the cold run"
        );
    }
    let s = warm.handle.stats();
    assert!(s.prefix_hit_tokens > 0 && s.prefix_queries as usize == shared.len() + 1);
}

#[test]
fn tiny_models_give_bit_identical_logits_from_cached_pages() {
    for arch in Architecture::ALL {
        let tiny = TinyModel {
            context_length: 512,
            window: 24,
            ..TinyModel::new(arch)
        };
        let bytes = tiny.gguf();
        check_cached_equals_cold(
            || GgufFile::from_bytes(bytes.clone()).unwrap(),
            150,
            &[16, 37, 64, 100, 149],
        );
    }
}

#[test]
fn real_model_smollm2_gives_bit_identical_logits_from_cached_pages() {
    let Some(path) = real_model("smollm2-135m") else {
        return;
    };
    check_cached_equals_cold(|| GgufFile::open(&path).unwrap(), 300, &[37, 160, 299]);
}

/// Gemma 3's window layers (512 positions) share window pages: hits longer than
/// the window, and shorter, not on page boundaries.
#[test]
fn real_model_gemma3_gives_bit_identical_logits_from_cached_pages() {
    let Some(path) = real_model("gemma3-270m") else {
        return;
    };
    check_cached_equals_cold(|| GgufFile::open(&path).unwrap(), 800, &[100, 530, 777]);
}

/// A repeated prompt runs only what the cache does not hold, and the counters say
/// so; with the cache off everything runs again.
#[test]
fn a_repeated_prompt_runs_only_its_uncached_tail() {
    let bytes = TinyModel::new(Architecture::Llama).gguf();
    let config = EngineConfig {
        kv_blocks: Some(64),
        ..Default::default()
    };
    for on in [true, false] {
        let e = engine(
            GgufFile::from_bytes(bytes.clone()).unwrap(),
            on,
            config.clone(),
        );
        let p = tokens(100, 3, 96);
        run(&e, &p, 2);
        let before = e.handle.stats().prefill_tokens;
        let (u, _) = run(&e, &p, 2);
        wait_idle(&e.handle);
        let ran = e.handle.stats().prefill_tokens - before;
        if on {
            assert_eq!((u.cached_tokens, ran), (96, 4));
        } else {
            assert_eq!((u.cached_tokens, ran), (0, 100));
        }
        let s = e.handle.stats();
        assert_eq!(s.kv_blocks_free, 64, "cached pages count as available");
        assert_eq!(s.kv_blocks_in_use, 0);
        assert_eq!(s.kv_blocks_cached, if on { 6 } else { 0 });
    }
}

/// SPEC S7, S12, S20: on Gemma 3, 16 concurrent long prompts, half of them sharing
/// a prefix, in a KV pool far smaller than 16 full contexts (524,288 positions):
/// requests wait for pages instead of failing, and every output equals its solo
/// run. CI runs 0.4-0.9k-token prompts in 250 blocks (4,000 positions);
/// `FERROX_FULL_SIZE=1` runs the 1-2k-token prompts in 560 blocks.
#[test]
fn real_model_gemma3_sixteen_long_prompts_in_a_small_pool_match_their_solo_runs() {
    let Some(path) = real_model("gemma3-270m") else {
        return;
    };
    let full = std::env::var("FERROX_FULL_SIZE").is_ok_and(|v| v == "1");
    let (shared_len, base, step, blocks) = if full {
        (600, 1000, 20, 560)
    } else {
        (300, 500, 10, 250)
    };
    let file = || GgufFile::open(&path).unwrap();
    let shared = tokens(shared_len, 9, 200_000);
    let prompts: Vec<Vec<u32>> = (0..16)
        .map(|i| {
            let mut p = if i % 2 == 0 {
                shared.clone()
            } else {
                Vec::new()
            };
            p.extend(tokens(
                base - 100 * (i % 2) + step * i,
                20 + i as u32,
                200_000,
            ));
            p
        })
        .collect();
    let solo = engine(
        file(),
        false,
        EngineConfig {
            max_seqs: 1,
            kv_blocks: Some(200),
            ..Default::default()
        },
    );
    let want: Vec<Vec<u32>> = prompts.iter().map(|p| greedy(&solo.handle, p, 3)).collect();
    let busy = engine(
        file(),
        true,
        EngineConfig {
            kv_blocks: Some(blocks),
            ..Default::default()
        },
    );
    let streams: Vec<_> = prompts
        .iter()
        .map(|p| {
            busy.handle
                .submit(p.clone(), GenerationParams::greedy(3))
                .unwrap()
        })
        .collect();
    for (i, (s, w)) in streams.into_iter().zip(&want).enumerate() {
        let got: Vec<u32> = s
            .collect_blocking()
            .iter()
            .filter_map(|e| match e {
                Event::Token { id, .. } => Some(*id),
                _ => None,
            })
            .collect();
        assert_eq!(&got, w, "request {i}");
    }
    wait_idle(&busy.handle);
    let st = busy.handle.stats();
    let shared_pages = (shared_len / 16 * 16) as u64;
    // Under this much pressure cached pages are evicted between admissions, so
    // not every sharer finds the prefix; most do.
    assert!(
        st.prefix_hit_tokens >= 4 * shared_pages,
        "the shared prefix was reused: {st:?}"
    );
    assert_eq!(st.kv_blocks_free, blocks as u64, "every promise came back");
}

fn greedy(h: &EngineHandle, p: &[u32], n: usize) -> Vec<u32> {
    h.submit(p.to_vec(), GenerationParams::greedy(n))
        .unwrap()
        .collect_blocking()
        .iter()
        .filter_map(|e| match e {
            Event::Token { id, .. } => Some(*id),
            _ => None,
        })
        .collect()
}

/// SPEC S22: a window model prefills whole pages, so a step budget below one page
/// could never run a long prompt: refused at start, naming both knobs.
#[test]
fn a_window_model_refuses_a_prefill_chunk_below_a_page() {
    let file = GgufFile::from_bytes(TinyModel::new(Architecture::Gemma3).gguf()).unwrap();
    let tok = Arc::new(Tokenizer::from_metadata(&file.header().metadata).unwrap());
    let e = start(
        Box::new(Transformer::new(file, 1).unwrap()),
        tok,
        EngineConfig {
            prefill_chunk: 8,
            block_size: 16,
            ..Default::default()
        },
    )
    .err()
    .expect("refused");
    let msg = e.to_string();
    assert!(
        msg.contains("--prefill-chunk") && msg.contains("--kv-block-size"),
        "{msg}"
    );
}

/// With the prefix cache, a long prompt still progresses when the step budget is
/// below a page (chunks then end anywhere), and two identical prompts submitted
/// together share what the first wrote: on a hybrid model (Qwen3.5) too, whose
/// late hit starts from the other sequence's checkpoint. Both answers are the
/// prompt's answer alone.
#[test]
fn small_chunks_still_progress_and_prompts_in_prefill_catch_up() {
    for arch in [Architecture::Llama, Architecture::Qwen35] {
        let bytes = TinyModel::new(arch).gguf();
        let p = tokens(200, 4, 96);
        let solo = engine(
            GgufFile::from_bytes(bytes.clone()).unwrap(),
            false,
            EngineConfig::default(),
        );
        let (_, want) = run(&solo, &p, 2);
        for chunk in [5, 32] {
            let e = engine(
                GgufFile::from_bytes(bytes.clone()).unwrap(),
                true,
                EngineConfig {
                    prefill_chunk: chunk,
                    kv_blocks: Some(64),
                    ..Default::default()
                },
            );
            let streams: Vec<_> = (0..2)
                .map(|_| {
                    e.handle
                        .submit(p.clone(), GenerationParams::greedy(2))
                        .unwrap()
                })
                .collect();
            let usages: Vec<Usage> = streams
                .into_iter()
                .map(|s| match s.collect_blocking().last() {
                    Some(Event::Finished { usage, .. }) => *usage,
                    other => panic!("no finish: {other:?}"),
                })
                .collect();
            wait_idle(&e.handle);
            let ran = e.handle.stats().prefill_tokens;
            // Each request's rows (its last prompt row and one decode row)
            // are its solo run's.
            let rows = e.rows.lock().unwrap().clone();
            assert_eq!(rows.len(), 2 * want.len(), "{arch:?}");
            assert!(
                want.iter()
                    .all(|r| rows.iter().filter(|x| *x == r).count() == 2),
                "{arch:?}, chunks of {chunk}: an answer differs from its solo run"
            );
            if chunk == 32 {
                // They leapfrog: each runs a chunk, then takes the other's.
                let cached = usages[0].cached_tokens + usages[1].cached_tokens;
                assert_eq!(ran as usize, 400 - cached, "{arch:?}: {usages:?}");
                assert!(
                    ran < 260,
                    "{arch:?}: the shared prompt ran about once: {ran}"
                );
            } else {
                assert_eq!(ran, 400, "5-token chunks end anywhere: no late hits");
            }
        }
    }
}

/// SPEC S20 on a hybrid model: three recurrent-state slots per request. With
/// slots for one request, four concurrent ones wait their turn (the typed
/// refusal counted as `recurrent_waits`) instead of failing, and each output
/// equals its solo run; a pool below one request's slots does not start.
#[test]
fn a_hybrid_model_waits_for_recurrent_state_slots() {
    let bytes = TinyModel::new(Architecture::Qwen35).gguf();
    let file = || GgufFile::from_bytes(bytes.clone()).unwrap();
    let config = EngineConfig {
        max_seqs: 4,
        recurrent_slots: Some(3),
        kv_blocks: Some(256),
        ..Default::default()
    };
    let solo = engine(file(), false, config.clone());
    let prompts: Vec<Vec<u32>> = (0..4)
        .map(|i| tokens(30 + 7 * i, 9 + i as u32, 96))
        .collect();
    let want: Vec<Vec<Vec<u32>>> = prompts.iter().map(|p| run(&solo, p, 6).1).collect();
    let e = engine(file(), false, config.clone());
    let streams: Vec<_> = prompts
        .iter()
        .map(|p| {
            e.handle
                .submit(p.clone(), GenerationParams::greedy(6))
                .unwrap()
        })
        .collect();
    for s in streams {
        let events = s.collect_blocking();
        assert!(
            matches!(events.last(), Some(Event::Finished { .. })),
            "{events:?}"
        );
    }
    // Rows interleave across requests; each request's rows, in order, are its
    // solo run's (every request produced 1 prompt row and 5 decode rows).
    let rows = e.rows.lock().unwrap().clone();
    assert_eq!(rows.len(), want.iter().map(Vec::len).sum::<usize>());
    for w in &want {
        assert!(
            w.iter().all(|r| rows.contains(r)),
            "a request's logits differ from its solo run"
        );
    }
    wait_idle(&e.handle);
    let s = e.handle.stats();
    assert!(s.recurrent_waits > 0, "requests waited for slots");
    assert_eq!(s.recurrent_slots_free, 3);
    let tok = Arc::new(Tokenizer::from_metadata(&file().header().metadata).unwrap());
    let m = Transformer::new(file(), 1).unwrap();
    let err = start(
        Box::new(m),
        tok,
        EngineConfig {
            recurrent_slots: Some(2),
            ..config
        },
    )
    .err()
    .expect("a pool below one request's slots is refused");
    assert!(
        err.to_string().contains("FERROX_CB_RECURRENT_SLOTS"),
        "{err}"
    );
}

/// A hybrid model's prompts that share a prefix (a system prompt) but no
/// state at its end: the second ends a chunk there and leaves its state as a
/// snapshot, so the third and later start there. Their logits are those of
/// an engine without the cache, bit for bit.
#[test]
fn a_hybrid_model_keeps_the_state_at_the_end_of_a_shared_prefix() {
    let tiny = TinyModel {
        context_length: 512,
        ..TinyModel::new(Architecture::Qwen35)
    };
    let bytes = tiny.gguf();
    let file = || GgufFile::from_bytes(bytes.clone()).unwrap();
    let config = EngineConfig {
        max_seqs: 4,
        kv_blocks: Some(4096),
        prefill_chunk: 64,
        block_size: 16,
        ..Default::default()
    };
    let warm = engine(file(), true, config.clone());
    let cold = engine(file(), false, config);
    let system = tokens(48, 1, 96);
    let mut cached = Vec::new();
    for salt in 2..6 {
        let mut p = system.clone();
        p.extend(tokens(20 + salt as usize, salt, 96));
        let (wu, wrows) = run(&warm, &p, 3);
        let (_, crows) = run(&cold, &p, 3);
        assert!(
            wrows == crows,
            "prompt {salt}: logits differ from the cold run"
        );
        cached.push(wu.cached_tokens);
    }
    assert_eq!(cached, [0, 0, 48, 48]);
}
