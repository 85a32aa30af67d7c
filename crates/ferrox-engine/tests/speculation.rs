//! Speculative decoding by prompt lookup and by a draft model: every request
//! gives the tokens it gives without speculation (greedy and seeded sampling,
//! stops and `max_tokens`, beside other requests), drafts are run and some
//! are kept (on a hybrid model too, whose recurrent state a refused draft
//! takes back, as a hybrid draft takes back its own), and a draft with
//! another vocabulary is refused at start.

use std::sync::Arc;

use ferrox_engine::speculation::Speculation;
use ferrox_engine::{
    Drafter, EngineConfig, EngineHandle, Event, GenerationParams, StartError, start,
    start_with_draft,
};
use ferrox_gguf::GgufFile;
use ferrox_models::{Architecture, Transformer};
use ferrox_testkit::{TinyModel, real_model};
use ferrox_text::Tokenizer;

mod common;
use common::wait_idle;

fn engine(file: impl Fn() -> GgufFile, speculation: Option<Speculation>) -> EngineHandle {
    let tokenizer = Arc::new(Tokenizer::from_metadata(&file().header().metadata).unwrap());
    let m = Transformer::new(file(), 2).unwrap();
    let config = EngineConfig {
        speculation,
        ..EngineConfig::default()
    };
    start(Box::new(m), tokenizer, config).unwrap()
}

fn tokens_of(events: &[Event]) -> (Vec<u32>, String) {
    let ids = events
        .iter()
        .filter_map(|e| match e {
            Event::Token { id, .. } => Some(*id),
            _ => None,
        })
        .collect();
    let text = events
        .iter()
        .map(|e| match e {
            Event::Token { text, .. } => text.clone(),
            Event::Finished { text, reason, .. } => format!("{text}<{reason:?}>"),
            _ => String::new(),
        })
        .collect();
    (ids, text)
}

/// Runs `jobs` on one engine, all submitted at once, and their outputs.
fn run(h: &EngineHandle, jobs: &[(Vec<u32>, GenerationParams)]) -> Vec<(Vec<u32>, String)> {
    let streams: Vec<_> = jobs
        .iter()
        .map(|(p, g)| h.submit(p.clone(), g.clone()).unwrap())
        .collect();
    let out = streams
        .into_iter()
        .map(|s| tokens_of(&s.collect_blocking()))
        .collect();
    wait_idle(h);
    out
}

/// Prompts that repeat themselves, so that their suffixes have earlier
/// occurrences to draft from, with greedy and seeded sampled parameters.
fn jobs() -> Vec<(Vec<u32>, GenerationParams)> {
    let pattern = |salt: u32| -> Vec<u32> {
        (0..40)
            .map(|i| 2 + (i % (5 + salt) * 7 + salt) % 90)
            .collect()
    };
    let mut out = Vec::new();
    for salt in 0..3 {
        let mut greedy = GenerationParams::greedy(40);
        greedy.sampling.logit_bias = vec![(1, -100.0)];
        out.push((pattern(salt), greedy.clone()));
        let mut sampled = greedy;
        sampled.sampling.temperature = 0.7;
        sampled.sampling.top_k = 0;
        sampled.sampling.top_p = 1.0;
        sampled.sampling.min_p = 0.0;
        sampled.sampling.seed = Some(9 + salt as u64);
        out.push((pattern(salt), sampled));
    }
    // A stop string and a short max_tokens end a request inside a draft.
    let mut stopped = GenerationParams::greedy(40);
    stopped.stop = vec!["q".into()];
    out.push((pattern(1), stopped));
    out.push((pattern(2), GenerationParams::greedy(3)));
    out
}

#[test]
fn speculation_gives_every_request_the_tokens_it_gives_without() {
    for arch in [
        Architecture::Llama,
        Architecture::Gemma3,
        Architecture::Qwen35,
    ] {
        let file = || GgufFile::from_bytes(TinyModel::new(arch).gguf()).unwrap();
        let plain = run(&engine(file, None), &jobs());
        let h = engine(
            file,
            Some(Speculation {
                max_batch: 16,
                ..Speculation::default()
            }),
        );
        // Alone and all together.
        for (job, want) in jobs().into_iter().zip(&plain) {
            assert_eq!(&run(&h, &[job])[0], want, "{arch:?} alone");
        }
        assert_eq!(run(&h, &jobs()), plain, "{arch:?} together");
        let s = h.stats();
        assert!(s.drafted_tokens > 0, "{arch:?}: nothing drafted");
        // Some drafts are kept and some refused: on Qwen3.5 a refusal takes
        // the recurrent state back, and the kept tokens run again.
        assert!(
            0 < s.accepted_tokens && s.accepted_tokens < s.drafted_tokens,
            "{arch:?}: {} kept of {} drafted",
            s.accepted_tokens,
            s.drafted_tokens
        );
    }
}

#[test]
fn speculation_backs_off_when_more_requests_decode_than_its_batch() {
    let file = || GgufFile::from_bytes(TinyModel::new(Architecture::Llama).gguf()).unwrap();
    let h = engine(
        file,
        Some(Speculation {
            max_batch: 0,
            ..Speculation::default()
        }),
    );
    run(&h, &jobs());
    assert_eq!(h.stats().drafted_tokens, 0);
}

/// On SmolLM2, a prompt whose answer copies it: the greedy answer is the
/// same, and the drafted tokens are kept but one or two. (The copy ends the
/// prompt's turn: a draft ends at the end-of-turn token, where it ran on
/// into the template's next turn, 14 more tokens refused.)
#[test]
fn real_model_smollm2_copies_with_speculation_and_keeps_drafts() {
    let Some(path) = real_model("smollm2-135m") else {
        return;
    };
    let file = || GgufFile::open(&path).unwrap();
    let tok = Tokenizer::from_metadata(&file().header().metadata).unwrap();
    let text = "<|im_start|>user\nRepeat this sentence exactly: The lighthouse keeper climbed the stairs every evening to light the lamp for the ships at sea.<|im_end|>\n<|im_start|>assistant\n";
    let prompt = tok.encode(text, false, true);
    let job = (prompt, GenerationParams::greedy(40));
    let plain = run(&engine(file, None), std::slice::from_ref(&job));
    let h = engine(file, Some(Speculation::default()));
    let events = h.submit(job.0, job.1).unwrap().collect_blocking();
    assert_eq!(tokens_of(&events), plain[0]);
    wait_idle(&h);
    let s = h.stats();
    // The request's own counts, for its log line, are the engine's.
    match events.last() {
        Some(Event::Finished { usage, .. }) => assert_eq!(
            (usage.drafted_tokens, usage.accepted_tokens),
            (s.drafted_tokens as usize, s.accepted_tokens as usize)
        ),
        other => panic!("no finish: {other:?}"),
    }
    assert!(
        s.drafted_tokens - s.accepted_tokens <= 2 && s.accepted_tokens >= 10,
        "{} kept of {} drafted: {:?}",
        s.accepted_tokens,
        s.drafted_tokens,
        plain[0].1
    );
}

fn drafted(
    target: impl Fn() -> GgufFile,
    draft: GgufFile,
    tokenizer: Tokenizer,
) -> Result<EngineHandle, StartError> {
    let t = Arc::new(Tokenizer::from_metadata(&target().header().metadata).unwrap());
    // Every guess run is as long as the draft budget, so that guesses past
    // a refused one are taken back, and no request rests.
    let config = EngineConfig {
        speculation: Some(Speculation {
            max_batch: 16,
            draft_p_min: 0.0,
            max_rest: 0,
            ..Speculation::default()
        }),
        ..EngineConfig::default()
    };
    let drafter = Drafter::Model {
        decoder: Box::new(Transformer::new(draft, 1).unwrap()),
        tokenizer: Arc::new(tokenizer),
    };
    start_with_draft(
        Box::new(Transformer::new(target(), 2).unwrap()),
        t,
        config,
        Some(drafter),
    )
}

/// A draft model's guesses are checked as prompt lookup's are: the target's
/// own tokens, alone and beside other requests, with every draft kept when
/// the draft is the target itself and fewer when it is another model.
#[test]
fn a_draft_model_gives_every_request_the_tokens_it_gives_without() {
    // Qwen3.5 drafts for itself too: a refused guess takes the draft's
    // recurrent state back as well as the target's.
    for arch in [
        Architecture::Llama,
        Architecture::Gemma3,
        Architecture::Qwen35,
    ] {
        let target = || GgufFile::from_bytes(TinyModel::new(arch).gguf()).unwrap();
        // Another model: a Llama, or for Qwen3.5 another Qwen3.5, whose
        // refused guesses take the draft's own recurrent state back.
        let other = || {
            let like = match arch {
                Architecture::Qwen35 => arch,
                _ => Architecture::Llama,
            };
            let tiny = TinyModel {
                seed: 77,
                ..TinyModel::new(like)
            };
            GgufFile::from_bytes(tiny.gguf()).unwrap()
        };
        let plain = run(&engine(target, None), &jobs());
        let tok = || Tokenizer::from_metadata(&target().header().metadata).unwrap();
        let greedy: Vec<_> = jobs()
            .into_iter()
            .filter(|j| j.1.sampling.temperature == 0.0 && j.1.max_tokens > 3)
            .collect();
        let mut kept = Vec::new();
        for draft in [target(), other()] {
            let h = drafted(target, draft, tok()).unwrap();
            for (job, want) in jobs().into_iter().zip(&plain) {
                assert_eq!(&run(&h, &[job])[0], want, "{arch:?} alone");
            }
            assert_eq!(run(&h, &jobs()), plain, "{arch:?} together");
            let before = h.stats();
            assert!(before.drafted_tokens > 0, "{arch:?}: nothing drafted");
            let answers = run(&h, &greedy);
            let s = h.stats();
            let drafted = s.drafted_tokens - before.drafted_tokens;
            // Every step drafts a whole budget (`draft_p_min` 0), k >= 1
            // guesses for at most k + 1 tokens: a draft model that failed
            // mid-run would draft nothing after.
            let generated: usize = answers.iter().map(|a| a.0.len()).sum();
            assert!(
                2 * drafted as usize >= generated,
                "{arch:?}: {drafted} drafted for {generated} tokens"
            );
            kept.push((s.accepted_tokens - before.accepted_tokens) as f64 / drafted as f64);
        }
        // Greedy requests keep (almost) every guess of the target itself (a
        // guess is greedy without the request's logit bias), fewer of
        // another model's.
        assert!(
            kept[0] > 0.9 && kept[0] > kept[1],
            "{arch:?}: kept {kept:?}"
        );
    }
}

/// A transformer drafts for a hybrid target (Qwen3.5): each refused guess
/// takes the target's recurrent state back, and the answers are unchanged.
#[test]
fn a_draft_model_drafts_for_a_hybrid_target() {
    let target = || GgufFile::from_bytes(TinyModel::new(Architecture::Qwen35).gguf()).unwrap();
    let draft = GgufFile::from_bytes(TinyModel::new(Architecture::Llama).gguf()).unwrap();
    let plain = run(&engine(target, None), &jobs());
    let tok = Tokenizer::from_metadata(&target().header().metadata).unwrap();
    let h = drafted(target, draft, tok).unwrap();
    assert_eq!(run(&h, &jobs()), plain);
    let s = h.stats();
    assert!(s.drafted_tokens > s.accepted_tokens, "{s:?}");
}

/// A draft's ids must mean the target's tokens: another vocabulary is
/// refused at start, naming the flag and the first differing id.
#[test]
fn a_draft_with_another_vocabulary_is_refused_at_start() {
    let file = || GgufFile::from_bytes(TinyModel::new(Architecture::Llama).gguf()).unwrap();
    let mut meta = ferrox_gguf::metadata::Metadata::default();
    for (k, v) in file().header().metadata.iter() {
        let v = match (k, v) {
            (
                "tokenizer.ggml.tokens",
                ferrox_gguf::value::Value::Array(ferrox_gguf::value::Array::String(t)),
            ) => {
                let mut t = t.clone();
                t[7] = "different".into();
                ferrox_gguf::value::Value::Array(ferrox_gguf::value::Array::String(t))
            }
            _ => v.clone(),
        };
        meta.insert(k.to_string(), v).unwrap();
    }
    let other = Tokenizer::from_metadata(&meta).unwrap();
    match drafted(file, file(), other) {
        Err(e) => {
            let e = e.to_string();
            assert!(
                e.contains("--draft-model") && e.contains("token id 7"),
                "{e}"
            );
        }
        Ok(_) => panic!("a draft with another vocabulary started"),
    }
}

/// An engine drafting with the model's own multi-token-prediction head,
/// resting at most `max_rest` steps after refused drafts.
fn with_head(file: impl Fn() -> GgufFile, max_rest: usize) -> Result<EngineHandle, StartError> {
    let t = Arc::new(Tokenizer::from_metadata(&file().header().metadata).unwrap());
    let config = EngineConfig {
        speculation: Some(Speculation {
            max_batch: 16,
            draft_p_min: 0.0,
            max_rest,
            ..Speculation::default()
        }),
        ..EngineConfig::default()
    };
    let m = Transformer::new(file(), 2).unwrap();
    start_with_draft(Box::new(m), t, config, Some(Drafter::Mtp))
}

/// Qwen3.5's MTP head drafts from the target's hidden states: every request
/// gives its tokens without speculation, alone and beside others, while the
/// head guesses a whole budget every step (prompt chunks fill its KV, refused
/// guesses take the target's recurrent state back).
#[test]
fn an_mtp_head_gives_every_request_the_tokens_it_gives_without() {
    let tiny = TinyModel {
        draft_blocks: 1,
        ..TinyModel::new(Architecture::Qwen35)
    };
    let file = || GgufFile::from_bytes(tiny.gguf()).unwrap();
    let plain = run(&engine(file, None), &jobs());
    let h = with_head(file, 0).unwrap();
    for (job, want) in jobs().into_iter().zip(&plain) {
        assert_eq!(&run(&h, &[job])[0], want, "alone");
    }
    assert_eq!(run(&h, &jobs()), plain, "together");
    let s = h.stats();
    let generated: usize = plain.iter().map(|p| p.0.len()).sum();
    // Every step guesses, alone and together (a head that failed would
    // guess no more); this random head is seldom right, but sometimes.
    assert!(
        s.drafted_tokens as usize >= 2 * generated,
        "{} drafted for {generated} tokens",
        s.drafted_tokens
    );
    assert!(s.accepted_tokens > 0, "{s:?}");
    // Resting after refused drafts, the head guesses far less often, and
    // the answers are the same.
    let resting = with_head(file, 16).unwrap();
    assert_eq!(run(&resting, &jobs()), plain, "resting");
    let (rested, once) = (resting.stats().drafted_tokens, s.drafted_tokens / 2);
    assert!(4 * rested < once, "{rested} drafted resting, {once} not");
}

/// `--spec mtp` on a model without a head is refused at start, naming it.
#[test]
fn an_mtp_head_is_refused_on_a_model_without_one() {
    let file = || GgufFile::from_bytes(TinyModel::new(Architecture::Qwen35).gguf()).unwrap();
    match with_head(file, 0) {
        Err(e) => assert!(e.to_string().contains("--spec mtp"), "{e}"),
        Ok(_) => panic!("a model without a head drafted with one"),
    }
}
