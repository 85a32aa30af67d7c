//! The engine against SPEC S1-S19 on a tiny random model (and SmolLM2 where named).

use std::sync::Arc;

use ferrox_engine::OutputStage;
use ferrox_engine::ceiling::CeilingKind;
use ferrox_engine::kv_plan::{KvShape, defaults};
use ferrox_engine::{
    EngineConfig, EngineHandle, Event, Failure, FinishReason, GenerationParams, SubmitError, Usage,
    start,
};
use ferrox_gguf::GgufFile;
use ferrox_models::decoder::{Decoder, Span, Want};
use ferrox_models::kv_store::KvStore;
use ferrox_models::{Architecture, Transformer};
use ferrox_sampling::sampler::Sampler;
use ferrox_testkit::{TinyModel, real_model};
use ferrox_text::Tokenizer;

mod common;
use common::wait_idle;

fn tiny_file() -> GgufFile {
    GgufFile::from_bytes(TinyModel::new(Architecture::Llama).gguf()).unwrap()
}

fn tiny_tokenizer() -> Arc<Tokenizer> {
    Arc::new(Tokenizer::from_metadata(&tiny_file().header().metadata).unwrap())
}

fn engine(config: EngineConfig) -> EngineHandle {
    let m = Transformer::new(tiny_file(), 1).unwrap();
    start(Box::new(m), tiny_tokenizer(), config).unwrap()
}

/// Greedy parameters that never end on the model's end token (bias it away), so
/// lengths are exact.
fn long_greedy(max_tokens: usize) -> GenerationParams {
    let mut p = GenerationParams::greedy(max_tokens);
    p.sampling.logit_bias = vec![(1, -100.0)];
    p
}

fn prompt(n: usize, salt: usize) -> Vec<u32> {
    (0..n)
        .map(|i| ((i * 7 + salt * 13) % 94 + 2) as u32)
        .collect()
}

/// The plain sequential loop: one request, one forward per token, no batcher.
fn sequential(
    m: &Transformer,
    tok: &Tokenizer,
    prompt: &[u32],
    params: &GenerationParams,
) -> Vec<u32> {
    let mut cache = KvStore::new(m.kv_layout(), 16);
    let seq = cache.fresh_table(prompt.len() + params.max_tokens + 1);
    let mut logits = m
        .forward(
            &mut cache,
            &[Span {
                pages: &seq,
                start: 0,
                tokens: prompt,
                want: Want::Last,
            }],
        )
        .unwrap()
        .logits
        .last_of(0)
        .unwrap()
        .to_vec();
    let mut sampler = Sampler::new(params.sampling.clone(), prompt);
    let mut out = OutputStage::new(
        tok.end_of_generation()
            .iter()
            .copied()
            .chain(params.stop_token_ids.iter().copied()),
        params.stop.clone(),
        params.max_tokens,
    );
    let mut ids = Vec::new();
    let mut pos = prompt.len();
    loop {
        let t = sampler.sample(&logits);
        sampler.accept(t);
        let o = out.on_token(t, &tok.token_bytes(t, false));
        if o.counted {
            ids.push(t);
        }
        if o.finished.is_some() {
            return ids;
        }
        logits = m
            .forward(
                &mut cache,
                &[Span {
                    pages: &seq,
                    start: pos,
                    tokens: &[t],
                    want: Want::Last,
                }],
            )
            .unwrap()
            .logits
            .last_of(0)
            .unwrap()
            .to_vec();
        pos += 1;
    }
}

fn tokens_of(events: &[Event]) -> Vec<u32> {
    events
        .iter()
        .filter_map(|e| {
            if let Event::Token { id, .. } = e {
                Some(*id)
            } else {
                None
            }
        })
        .collect()
}

fn finish_of(events: &[Event]) -> (FinishReason, Usage) {
    match events.last() {
        Some(Event::Finished { reason, usage, .. }) => (*reason, *usage),
        other => panic!("no finish: {other:?}"),
    }
}

/// SPEC S3: two concurrent jobs produce exactly the sequential greedy outputs.
#[test]
fn two_concurrent_jobs_match_sequential_greedy() {
    let m = Transformer::new(tiny_file(), 1).unwrap();
    let tok = tiny_tokenizer();
    let h = engine(EngineConfig::default());
    let (p1, p2) = (prompt(9, 1), prompt(23, 2));
    let params = long_greedy(17);
    let a = h.submit(p1.clone(), params.clone()).unwrap();
    let b = h.submit(p2.clone(), params.clone()).unwrap();
    let (ea, eb) = (a.collect_blocking(), b.collect_blocking());
    assert_eq!(tokens_of(&ea), sequential(&m, &tok, &p1, &params));
    assert_eq!(tokens_of(&eb), sequential(&m, &tok, &p2, &params));
    assert_eq!(
        finish_of(&ea),
        (
            FinishReason::Length,
            Usage {
                prompt_tokens: 9,
                completion_tokens: 17,
                cached_tokens: 0,
                ..Usage::default()
            }
        )
    );
}

/// SPEC S2, S3: prefill in chunks of 1 does not change the sampled ids.
#[test]
fn prefill_in_chunks_of_one_does_not_change_the_sampled_ids() {
    let p = prompt(40, 3);
    let whole = engine(EngineConfig::default())
        .submit(p.clone(), long_greedy(12))
        .unwrap()
        .collect_blocking();
    let h1 = engine(EngineConfig {
        prefill_chunk: 1,
        ..Default::default()
    });
    let ones = h1.submit(p, long_greedy(12)).unwrap().collect_blocking();
    assert_eq!(tokens_of(&whole), tokens_of(&ones));
    assert_eq!(h1.stats().prefill_chunks, 40, "one chunk per prompt token");
}

/// SPEC S2: a long prompt is observed part-way through prefill while another
/// request keeps taking decode steps.
#[test]
fn a_long_prompt_is_chunked_while_another_request_keeps_decoding() {
    let h = engine(EngineConfig {
        prefill_chunk: 4,
        ..Default::default()
    });
    let long = h.submit(prompt(400, 4), long_greedy(2)).unwrap();
    let short = h.submit(prompt(3, 5), long_greedy(20)).unwrap();
    let events = short.collect_blocking();
    let at_short_end = h.stats();
    assert_eq!(tokens_of(&events).len(), 20);
    assert!(at_short_end.decode_steps >= 19, "{at_short_end:?}");
    assert!(
        at_short_end.prefill_tokens < 403,
        "the long prompt was still prefilling: {at_short_end:?}"
    );
    assert!(at_short_end.prefill_chunks > 1);
    let long_events = long.collect_blocking();
    assert_eq!(finish_of(&long_events).0, FinishReason::Length);
    assert!(
        h.stats().prefill_chunks >= 100,
        "400 tokens in chunks of at most 4"
    );
}

/// SPEC S8: max_seqs = 1 still serves two jobs, in order.
#[test]
fn max_seqs_one_still_serves_two_jobs_in_order() {
    let h = engine(EngineConfig {
        max_seqs: 1,
        ..Default::default()
    });
    let a = h.submit(prompt(5, 6), long_greedy(8)).unwrap();
    let mut b = h.submit(prompt(5, 7), long_greedy(8)).unwrap();
    // The worker counts a finished request before it sends its last event, and
    // admits the next one only after: when b is admitted, a is done. (b may have
    // finished too by the time the stats are read: its 8 steps are quick.)
    assert!(matches!(b.blocking_recv(), Some(Event::Admitted)));
    assert!(
        h.stats().finished_length >= 1,
        "b was admitted only after a finished"
    );
    let (ea, eb) = (a.collect_blocking(), b.collect_blocking());
    assert_eq!(tokens_of(&ea).len(), 8);
    assert_eq!(tokens_of(&eb).len(), 8);
    assert!(
        h.stats().peak_blocks_held <= 1,
        "one request at a time: {:?}",
        h.stats()
    );
}

/// SPEC S4, S13: removing a row (cancel) never reassigns another row's state, and
/// a stale id resolves to nothing; cancelling one request leaves its neighbour's
/// output identical to running alone.
#[test]
fn cancelling_one_request_leaves_its_neighbour_identical_and_stale_ids_do_nothing() {
    let p = prompt(11, 8);
    let alone = tokens_of(
        &engine(EngineConfig::default())
            .submit(p.clone(), long_greedy(30))
            .unwrap()
            .collect_blocking(),
    );
    let h = engine(EngineConfig::default());
    let victim = h.submit(prompt(6, 9), long_greedy(200)).unwrap();
    let keep = h.submit(p, long_greedy(30)).unwrap();
    h.cancel(victim.id());
    h.cancel(999_999);
    let ev = victim.collect_blocking();
    assert_eq!(finish_of(&ev).0, FinishReason::Cancelled);
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, Event::Finished { .. }))
            .count(),
        1,
        "replied to exactly once"
    );
    assert_eq!(tokens_of(&keep.collect_blocking()), alone);
    wait_idle(&h);
    assert_eq!(h.stats().aborted, 1);
}

/// SPEC S13: cancellation while queued: the request is never prefilled.
#[test]
fn a_request_cancelled_while_queued_is_never_prefilled() {
    let h = engine(EngineConfig {
        max_seqs: 1,
        ..Default::default()
    });
    let busy = h.submit(prompt(4, 10), long_greedy(300)).unwrap();
    let queued = h.submit(prompt(50, 11), long_greedy(5)).unwrap();
    h.cancel(queued.id());
    let ev = queued.collect_blocking();
    assert_eq!(
        finish_of(&ev),
        (
            FinishReason::Cancelled,
            Usage {
                prompt_tokens: 50,
                completion_tokens: 0,
                cached_tokens: 0,
                ..Usage::default()
            }
        )
    );
    drop(busy);
    wait_idle(&h);
    assert!(
        h.stats().prefill_tokens < 50,
        "the queued prompt never ran: {:?}",
        h.stats()
    );
}

/// SPEC S13: cancellation while prefilling: the remaining chunks never run and
/// the blocks come back.
#[test]
fn a_request_cancelled_while_prefilling_runs_no_more_chunks() {
    let h = engine(EngineConfig {
        prefill_chunk: 2,
        kv_blocks: Some(64),
        ..Default::default()
    });
    let s = h.submit(prompt(600, 12), long_greedy(4)).unwrap();
    while h.stats().prefill_chunks < 3 {
        std::thread::yield_now();
    }
    h.cancel(s.id());
    let ev = s.collect_blocking();
    assert_eq!(finish_of(&ev).0, FinishReason::Cancelled);
    wait_idle(&h);
    let st = h.stats();
    assert!(st.prefill_tokens < 600, "{st:?}");
    assert_eq!(st.kv_blocks_free, 64, "blocks came back");
}

/// SPEC S13: cancellation while decoding stops at the next step with the tokens
/// produced so far; a dropped stream cancels too.
#[test]
fn a_request_cancelled_while_decoding_keeps_its_tokens_and_a_dropped_stream_cancels() {
    let h = engine(EngineConfig {
        kv_blocks: Some(64),
        ..Default::default()
    });
    let mut s = h.submit(prompt(5, 13), long_greedy(900)).unwrap();
    let mut got = 0;
    while got < 3 {
        if let Some(Event::Token { .. }) = s.blocking_recv() {
            got += 1;
        }
    }
    h.cancel(s.id());
    let rest = s.collect_blocking();
    let (reason, usage) = finish_of(&rest);
    assert_eq!(reason, FinishReason::Cancelled);
    assert!(usage.completion_tokens >= 3);
    let dropped = h.submit(prompt(5, 14), long_greedy(900)).unwrap();
    drop(dropped);
    wait_idle(&h);
    assert_eq!(h.stats().aborted, 2);
    assert_eq!(h.stats().kv_blocks_free, 64);
}

/// SPEC S13: a cancel that arrives before its own job is not lost.
#[test]
fn a_cancel_that_arrives_before_its_job_is_not_lost() {
    let h = engine(EngineConfig::default());
    // Ids are handed out in order: the next submission gets the next id.
    let probe = h.submit(prompt(2, 15), long_greedy(1)).unwrap();
    let next = probe.id() + 1;
    probe.collect_blocking();
    h.cancel(next);
    let s = h.submit(prompt(5, 16), long_greedy(3000)).unwrap();
    assert_eq!(s.id(), next);
    assert_eq!(
        finish_of(&s.collect_blocking()),
        (
            FinishReason::Cancelled,
            Usage {
                prompt_tokens: 5,
                completion_tokens: 0,
                cached_tokens: 0,
                ..Usage::default()
            }
        )
    );
}

/// SPEC S11: a full queue refuses with queue_full and a retry-after of 1, and the
/// refused request holds nothing; the depth returns to 0 after serving.
#[test]
fn a_full_queue_refuses_with_queue_full_and_holds_nothing() {
    let h = engine(EngineConfig {
        max_seqs: 1,
        max_queue: 1,
        kv_blocks: Some(64),
        ..Default::default()
    });
    let running = h.submit(prompt(3, 17), long_greedy(400)).unwrap();
    while h.stats().running == 0 {
        std::thread::yield_now();
    }
    let waiting = h.submit(prompt(3, 18), long_greedy(3)).unwrap();
    match h.submit(prompt(3, 19), long_greedy(3)) {
        Err(SubmitError::QueueFull { retry_after_s, .. }) => assert_eq!(retry_after_s, 1),
        other => panic!("expected queue_full, got {:?}", other.map(|s| s.id())),
    }
    assert_eq!(h.stats().queue_rejections, 1);
    drop(running);
    assert_eq!(
        finish_of(&waiting.collect_blocking()).0,
        FinishReason::Length
    );
    wait_idle(&h);
    let st = h.stats();
    assert_eq!((st.queue_depth, st.kv_blocks_free), (0, 64));
}

/// SPEC S11 (issue F2): `queue_full` only when running plus waiting really are at
/// `max_seqs + max_queue`. Eleven clients that resend the moment their answer
/// arrives never exceed 4 + 8, so none of their 154 requests is refused, although
/// a finished request's row is taken over only at the worker's next step.
#[test]
fn clients_that_resend_at_once_are_never_refused_below_the_bound() {
    let h = engine(EngineConfig {
        max_seqs: 4,
        max_queue: 8,
        ..Default::default()
    });
    assert_eq!(h.capacity(), 12);
    let clients: Vec<_> = (0..11)
        .map(|c| {
            let h = h.clone();
            std::thread::spawn(move || {
                let mut refused = 0;
                for r in 0..14 {
                    match h.submit(prompt(3 + r % 5, 200 + c), long_greedy(2 + r % 3)) {
                        Ok(s) => assert_eq!(tokens_of(&s.collect_blocking()).len(), 2 + r % 3),
                        Err(SubmitError::QueueFull { .. }) => refused += 1,
                        Err(e) => panic!("{e}"),
                    }
                }
                refused
            })
        })
        .collect();
    let refused: usize = clients.into_iter().map(|c| c.join().unwrap()).sum();
    assert_eq!(refused, 0, "{:?}", h.stats());
    assert_eq!(h.stats().queue_rejections, 0);
}

fn ceiling_engine(kv_blocks: Option<usize>, max_context: Option<usize>) -> EngineHandle {
    engine(EngineConfig {
        block_size: 4,
        kv_blocks,
        max_context,
        ..Default::default()
    })
}

/// SPEC S10: a request bigger than the whole budget is refused, not queued, priced
/// by the model's KV shape; exactly at the ceiling is admitted.
#[test]
fn a_request_bigger_than_the_whole_budget_is_refused_with_its_price() {
    let h = ceiling_engine(Some(4), None);
    let shape = KvShape::new(
        &Transformer::new(tiny_file(), 1)
            .unwrap()
            .hyper_params()
            .clone(),
        ferrox_models::kv_store::KvElement::F32,
    );
    match h.submit(prompt(10, 20), long_greedy(7)) {
        Err(SubmitError::Kv(r)) => {
            assert_eq!(r.kind, CeilingKind::DeviceMemoryBudget);
            assert_eq!((r.positions, r.positions_limit), (17, 16));
            assert_eq!(
                r.estimated_bytes,
                shape.request_bytes(17, defaults::PREFILL_CHUNK)
            );
            assert_eq!(
                r.limit_bytes,
                shape.request_bytes(16, defaults::PREFILL_CHUNK)
            );
            assert!(r.message.contains("--kv-memory"), "{}", r.message);
        }
        other => panic!("expected a refusal, got {:?}", other.map(|s| s.id())),
    }
    let st = h.stats();
    assert_eq!((st.refusals_too_large, st.queue_depth), (1, 0));
    let exact = h.submit(prompt(10, 21), long_greedy(6)).unwrap();
    assert_eq!(
        finish_of(&exact.collect_blocking()).0,
        FinishReason::Length,
        "16 positions on a 16-position budget is admitted"
    );
}

/// SPEC S10: the context ceiling is reported before the device ceiling.
#[test]
fn the_context_ceiling_is_reported_before_the_device_ceiling() {
    let h = ceiling_engine(Some(2), Some(20));
    match h.submit(prompt(10, 22), long_greedy(11)) {
        Err(SubmitError::Kv(r)) => {
            assert_eq!(
                (r.kind, r.positions, r.positions_limit),
                (CeilingKind::ContextLength, 21, 20)
            );
            assert!(r.message.contains("--max-context"), "{}", r.message);
        }
        other => panic!("expected a refusal, got {:?}", other.map(|s| s.id())),
    }
    assert_eq!(h.stats().refusals_context_length, 1);
    assert_eq!(h.stats().refusals_too_large, 0);
}

/// SPEC S7, S12, S19: six concurrent two-block requests on a four-block budget never
/// hold more than four blocks (peak measured from the rows); those that do not fit
/// yet wait instead of failing (S12); every block comes back, also after a request
/// rejected at validation.
#[test]
fn six_two_block_requests_on_four_blocks_never_hold_more_than_four() {
    let h = ceiling_engine(Some(4), None);
    let streams: Vec<_> = (0..6)
        .map(|i| h.submit(prompt(3, 30 + i), long_greedy(5)).unwrap())
        .collect();
    assert!(matches!(
        h.submit(vec![9999], long_greedy(2)),
        Err(SubmitError::Invalid(_))
    ));
    for s in streams {
        assert_eq!(finish_of(&s.collect_blocking()).0, FinishReason::Length);
    }
    wait_idle(&h);
    let st = h.stats();
    assert!(
        st.peak_blocks_held <= 4 && st.peak_blocks_held >= 2,
        "{st:?}"
    );
    assert_eq!(
        (st.kv_blocks_free, st.blocks_held, st.refusals_invalid),
        (4, 0, 1)
    );
}

/// SPEC S14, S15: a stop token ends the row without it; a row that stops on a
/// string mid-batch does not shift its neighbours' outputs.
#[test]
fn stops_end_rows_cleanly_and_leave_neighbours_untouched() {
    let tok = tiny_tokenizer();
    let m = Transformer::new(tiny_file(), 1).unwrap();
    let p = prompt(8, 40);
    let free = sequential(&m, &tok, &p, &long_greedy(12));
    let stop_id = free[4];
    let h = engine(EngineConfig::default());
    let neighbour = h.submit(prompt(9, 41), long_greedy(12)).unwrap();
    let mut by_token = long_greedy(12);
    by_token.stop_token_ids = vec![stop_id];
    let s1 = h.submit(p.clone(), by_token).unwrap();
    let text = tok.decode(&free[..6], false);
    let mut by_string = long_greedy(12);
    by_string.stop = vec![text[text.len().saturating_sub(2)..].to_string()];
    let s2 = h.submit(p.clone(), by_string).unwrap();
    let e1 = s1.collect_blocking();
    let cut = free.iter().position(|&t| t == stop_id).unwrap();
    assert_eq!(
        tokens_of(&e1),
        free[..cut].to_vec(),
        "ends before the stop token, without it"
    );
    assert_eq!(finish_of(&e1).0, FinishReason::Stop);
    let e2 = s2.collect_blocking();
    assert_eq!(finish_of(&e2).0, FinishReason::StopString(0));
    let streamed: String = e2
        .iter()
        .map(|e| match e {
            Event::Token { text, .. } | Event::Finished { text, .. } => text.as_str(),
            _ => "",
        })
        .collect();
    assert!(text.len() >= 2, "the premise: six tokens spell two bytes");
    let full = tok.decode(&free, false);
    let stop = &text[text.len() - 2..];
    assert_eq!(
        streamed,
        full[..full.find(stop).expect("the stop occurs")],
        "the text up to the stop string, without it"
    );
    assert_eq!(
        tokens_of(&neighbour.collect_blocking()),
        sequential(&m, &tok, &prompt(9, 41), &long_greedy(12))
    );
}

/// SPEC S1: after shutdown, submissions fail at once with a typed error and open
/// streams are answered.
#[test]
fn after_shutdown_submissions_fail_and_nobody_waits_forever() {
    let h = engine(EngineConfig::default());
    let s = h.submit(prompt(5, 50), long_greedy(3000)).unwrap();
    h.shutdown();
    let ev = s.collect_blocking();
    assert_eq!(
        ev.last(),
        Some(&Event::Failed(Failure::Shutdown)),
        "a cut-off is a failure a client can see, never a finish"
    );
    assert!(
        !ev.iter().any(|e| matches!(e, Event::Finished { .. })),
        "{ev:?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(
        h.submit(prompt(3, 51), long_greedy(2)).err(),
        Some(SubmitError::Stopped)
    );
}

/// SPEC S6: an empty prompt runs one forward pass and reports 0 prompt tokens.
#[test]
fn an_empty_prompt_still_generates_and_reports_zero_prompt_tokens() {
    let h = engine(EngineConfig::default());
    let ev = h.submit(vec![], long_greedy(3)).unwrap().collect_blocking();
    assert_eq!(
        finish_of(&ev),
        (
            FinishReason::Length,
            Usage {
                prompt_tokens: 0,
                completion_tokens: 3,
                cached_tokens: 0,
                ..Usage::default()
            }
        )
    );
}

/// SPEC S3 on SmolLM2: 16 concurrent greedy requests of different lengths produce
/// exactly their sequential outputs, and the ledger is full again afterwards.
#[test]
fn real_model_smollm2_sixteen_concurrent_requests_match_sequential() {
    let Some(path) = real_model("smollm2-135m") else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let tok = Arc::new(Tokenizer::from_metadata(&file.header().metadata).unwrap());
    let m = Transformer::new(GgufFile::open(&path).unwrap(), 2).unwrap();
    let h = start(
        Box::new(Transformer::new(file, 2).unwrap()),
        Arc::clone(&tok),
        EngineConfig {
            kv_blocks: Some(256),
            ..Default::default()
        },
    )
    .unwrap();
    let texts = [
        "The capital of France is",
        "Once upon a time",
        "def fib(n):",
        "1, 2, 3, 4,",
        "The sun",
        "Water boils at",
        "SELECT",
        "My favourite colour is",
    ];
    let jobs: Vec<(Vec<u32>, GenerationParams)> = (0..16)
        .map(|i| {
            (
                tok.encode(texts[i % 8], true, true),
                GenerationParams::greedy(4 + i),
            )
        })
        .collect();
    let streams: Vec<_> = jobs
        .iter()
        .map(|(p, g)| h.submit(p.clone(), g.clone()).unwrap())
        .collect();
    for ((p, g), s) in jobs.iter().zip(streams) {
        assert_eq!(tokens_of(&s.collect_blocking()), sequential(&m, &tok, p, g));
    }
    wait_idle(&h);
    assert_eq!(h.stats().kv_blocks_free, 256);
}

/// SPEC S5: each request's seeded sampler is its own: the same seed gives the same
/// tokens alone and beside other sampled requests.
#[test]
fn a_seeded_request_samples_the_same_alone_and_in_company() {
    let mut p = long_greedy(25);
    p.sampling.temperature = 1.3;
    p.sampling.top_k = 0;
    p.sampling.top_p = 1.0;
    p.sampling.min_p = 0.0;
    p.sampling.seed = Some(77);
    let alone = tokens_of(
        &engine(EngineConfig::default())
            .submit(prompt(6, 60), p.clone())
            .unwrap()
            .collect_blocking(),
    );
    let h = engine(EngineConfig::default());
    let others: Vec<_> = (0..5)
        .map(|i| {
            let mut q = p.clone();
            q.sampling.seed = Some(100 + i);
            h.submit(prompt(4 + i as usize, 61), q).unwrap()
        })
        .collect();
    let mine = h.submit(prompt(6, 60), p).unwrap();
    assert_eq!(tokens_of(&mine.collect_blocking()), alone);
    drop(others);
}

/// A decoder that panics on its third forward call.
struct Panicky {
    inner: Transformer,
    calls: std::sync::atomic::AtomicUsize,
}

impl Decoder for Panicky {
    fn forward(
        &self,
        cache: &mut KvStore,
        spans: &[Span<'_>],
    ) -> Result<ferrox_models::decoder::Output, ferrox_models::ModelError> {
        if self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 2 {
            panic!("simulated worker crash");
        }
        self.inner.forward(cache, spans)
    }
    fn hyper_params(&self) -> &ferrox_models::HyperParams {
        self.inner.hyper_params()
    }
}

/// SPEC S1: if the worker dies, every waiting caller is answered and later
/// submissions fail at once with a typed error.
#[test]
fn a_dead_worker_answers_everyone_and_refuses_new_work() {
    let d = Panicky {
        inner: Transformer::new(tiny_file(), 1).unwrap(),
        calls: Default::default(),
    };
    let h = start(Box::new(d), tiny_tokenizer(), EngineConfig::default()).unwrap();
    let s = h.submit(prompt(5, 70), long_greedy(50)).unwrap();
    let ev = s.collect_blocking();
    assert!(
        matches!(ev.last(), Some(Event::Failed(Failure::EngineDown(m))) if m.contains("panicked")),
        "{:?}",
        ev.last()
    );
    assert!(
        !h.is_healthy(),
        "a panicked worker makes the engine unhealthy"
    );
    let mut refused = false;
    for _ in 0..200 {
        if let Err(SubmitError::Stopped) = h.submit(prompt(3, 71), long_greedy(2)) {
            refused = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(
        refused,
        "submissions after the worker died must fail with Stopped"
    );
}

/// Log-probabilities come with each token when asked: the greedy token is the most
/// likely one, and the alternatives are sorted.
#[test]
fn logprobs_are_reported_when_asked() {
    let h = engine(EngineConfig::default());
    let mut p = long_greedy(5);
    p.sampling.logit_bias.clear();
    p.logprobs = Some(3);
    let ev = h.submit(prompt(7, 80), p).unwrap().collect_blocking();
    let mut seen = 0;
    for e in &ev {
        if let Event::Token {
            id,
            logprob: Some(lp),
            ..
        } = e
        {
            seen += 1;
            assert_eq!(lp.top.len(), 3);
            assert_eq!(lp.top[0].0, *id, "greedy picks the most likely token");
            assert!(lp.logprob <= 0.0 && (lp.logprob - lp.top[0].1).abs() < 1e-6);
            assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1));
        }
    }
    assert_eq!(seen, 5, "every token carries its log-probabilities");
    let none = h
        .submit(prompt(7, 80), long_greedy(2))
        .unwrap()
        .collect_blocking();
    assert!(none.iter().all(|e| !matches!(
        e,
        Event::Token {
            logprob: Some(_),
            ..
        }
    )));
}
