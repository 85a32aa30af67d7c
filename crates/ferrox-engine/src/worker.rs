//! The engine worker (SPEC S1): one thread owns every in-flight request and the KV
//! cache. Between forward passes it takes in jobs and cancellations, admits from
//! the queue, plans the step, runs it, and turns logits into events.
//!
//! Invariants:
//! * Requests are kept by id (a `BTreeMap`), never by batch position (S4); leaving
//!   the batch cannot shift anyone's sampler, stops, KV or reply channel.
//! * A request's blocks are reserved at admission for its whole lifetime (S7) and
//!   returned exactly once, by `release`, on every way it can end.
//! * Cancellation only records an id; it is applied here, at a step boundary (S13),
//!   whether the request is queued, prefilling or decoding, or not yet arrived.
//! * Blocks held are measured from the in-flight requests themselves (S19).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc;

use ferrox_models::decoder::{Decoder, Span, Want};
use ferrox_models::kv_cache::{KvCache, SeqKv};
use ferrox_models::kv_plan::{KvPlan, KvShape, defaults};
use ferrox_models::sampler::Sampler;
use ferrox_models::tokenizer::Tokenizer;

use crate::ceiling::KvCeiling;
use crate::handle::{EngineHandle, Job, Msg, Shared};
use crate::output::{FinishReason, OutputStage};
use crate::queue_gate::QueueGate;
use crate::request::{Event, RequestId, TokenLogprob, Usage};
use crate::scheduler::{Prefilling, admit_count, plan_step};
use crate::stats::EngineStats;

/// Engine knobs (SPEC "Knobs").
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Requests in flight at once, prompts still prefilling included.
    pub max_seqs: usize,
    /// Prompt tokens per step.
    pub prefill_chunk: usize,
    /// Requests that may wait for admission.
    pub max_queue: usize,
    /// Positions per KV block.
    pub block_size: usize,
    /// KV blocks in the pool (`None`: no budget, grow on demand).
    pub kv_blocks: Option<usize>,
    /// Longest request in positions (`None`: the model's context length).
    pub max_context: Option<usize>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_seqs: defaults::MAX_SEQS,
            prefill_chunk: defaults::PREFILL_CHUNK,
            max_queue: 512,
            block_size: defaults::KV_BLOCK_SIZE,
            kv_blocks: None,
            max_context: None,
        }
    }
}

struct Active {
    /// Tokens to run as the prompt (`[BOS]` for an empty prompt, SPEC S6).
    prompt: Vec<u32>,
    prompt_tokens: usize,
    prefilled: usize,
    /// The token sampled last, not yet run.
    pending: Option<u32>,
    seq: SeqKv,
    blocks: u64,
    sampler: Sampler,
    output: OutputStage,
    logprobs: Option<usize>,
    reply: tokio::sync::mpsc::UnboundedSender<Event>,
}

struct Worker {
    decoder: Box<dyn Decoder>,
    tokenizer: Arc<Tokenizer>,
    cache: KvCache,
    config: EngineConfig,
    stats: Arc<EngineStats>,
    queue: VecDeque<Job>,
    running: BTreeMap<RequestId, Active>,
    early_cancels: BTreeSet<RequestId>,
    cursor: usize,
    peak: u64,
}

/// Most remembered cancellations of requests not yet seen (oldest forgotten first).
const EARLY_CANCEL_MEMORY: usize = 4096;

/// Starts an engine for `decoder` on its own worker thread.
pub fn start(
    decoder: Box<dyn Decoder>,
    tokenizer: Arc<Tokenizer>,
    config: EngineConfig,
) -> Result<EngineHandle, String> {
    let hp = decoder.hyper_params().clone();
    let bad = |what: &str| Err(format!("{what} must be at least 1"));
    if config.max_seqs == 0 {
        return bad("max seqs");
    }
    if config.prefill_chunk == 0 {
        return bad("prefill chunk");
    }
    if config.block_size == 0 {
        return bad("KV block size");
    }
    let shape = KvShape::new(&hp, defaults::KV_ELEMENT_BYTES);
    let plan = match config.kv_blocks {
        Some(n) => Some(
            KvPlan::from_blocks(
                &shape,
                n as u64,
                config.block_size,
                config.max_seqs,
                config.prefill_chunk,
            )
            .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let max_context = config
        .max_context
        .unwrap_or(hp.context_length)
        .min(hp.context_length) as u64;
    let ceiling = KvCeiling {
        max_context,
        shape,
        plan,
        prefill_chunk: config.prefill_chunk,
        block_size: config.block_size,
    };
    let cache = KvCache::new(
        decoder.kv_layout(),
        config.block_size,
        config.kv_blocks,
        config.max_seqs,
        config.prefill_chunk,
    )
    .map_err(|e| e.to_string())?;
    let stats = Arc::new(EngineStats::default());
    EngineStats::set(&stats.kv_blocks_total, config.kv_blocks.unwrap_or(0) as u64);
    EngineStats::set(&stats.kv_blocks_free, config.kv_blocks.unwrap_or(0) as u64);
    EngineStats::set(&stats.kv_block_size, config.block_size as u64);
    let (inbox, rx) = mpsc::channel();
    let gate = QueueGate::new(config.max_queue);
    let shared = Arc::new(Shared {
        inbox,
        next_id: AtomicU64::new(1),
        gate,
        stats: Arc::clone(&stats),
        ceiling,
        vocab: hp.vocab_size,
    });
    let worker = Worker {
        decoder,
        tokenizer,
        cache,
        config,
        stats,
        queue: VecDeque::new(),
        running: BTreeMap::new(),
        early_cancels: BTreeSet::new(),
        cursor: 0,
        peak: 0,
    };
    std::thread::Builder::new()
        .name("ferrox-engine".into())
        .spawn(move || worker.run(rx))
        .map_err(|e| format!("cannot start the engine thread: {e}"))?;
    Ok(EngineHandle { shared })
}

impl Worker {
    fn run(mut self, rx: mpsc::Receiver<Msg>) {
        loop {
            let idle = self.queue.is_empty() && self.running.is_empty();
            let first = if idle {
                match rx.recv() {
                    Ok(m) => Some(m),
                    Err(_) => return,
                }
            } else {
                None
            };
            let mut stop = false;
            for m in first
                .into_iter()
                .chain(std::iter::from_fn(|| rx.try_recv().ok()))
            {
                match m {
                    Msg::Job(job) => self.take_job(job),
                    Msg::Cancel(id) => self.cancel(id),
                    Msg::Shutdown => stop = true,
                }
            }
            if stop {
                self.shutdown();
                return;
            }
            self.admit();
            self.step();
            self.update_gauges();
        }
    }

    fn take_job(&mut self, job: Job) {
        if self.early_cancels.remove(&job.id) {
            self.cancel_unstarted(job);
            return;
        }
        self.queue.push_back(job);
    }

    /// Ends a request that never started (cancelled in the queue or before it
    /// arrived): counted as aborted, finished with no tokens.
    fn cancel_unstarted(&self, job: Job) {
        EngineStats::add(&self.stats.aborted, 1);
        let usage = Usage {
            prompt_tokens: job.prompt.len(),
            completion_tokens: 0,
        };
        let _ = job.reply.send(Event::Finished {
            reason: FinishReason::Cancelled,
            usage,
            text: String::new(),
        });
    }

    fn cancel(&mut self, id: RequestId) {
        if let Some(i) = self.queue.iter().position(|j| j.id == id) {
            let job = self.queue.remove(i).expect("index found");
            self.cancel_unstarted(job);
        } else if self.running.contains_key(&id) {
            EngineStats::add(&self.stats.aborted, 1);
            self.finish(id, FinishReason::Cancelled);
        } else {
            self.early_cancels.insert(id);
            while self.early_cancels.len() > EARLY_CANCEL_MEMORY {
                self.early_cancels.pop_first();
            }
        }
    }

    fn admit(&mut self) {
        let needs: Vec<u64> = self.queue.iter().map(|j| j.blocks).collect();
        let free = self.cache.free_blocks().map(|f| f as u64);
        let n = admit_count(&needs, self.running.len(), self.config.max_seqs, free);
        for _ in 0..n {
            let job = self.queue.pop_front().expect("counted");
            let positions = (job.blocks as usize) * self.config.block_size;
            let Some(seq) = self.cache.alloc(positions) else {
                // The pool disagrees with the plan (cannot happen while the ledger is
                // the allocator); keep the request waiting at the head.
                self.queue.push_front(job);
                return;
            };
            let Job {
                id,
                prompt,
                params,
                blocks,
                reply,
                slot,
            } = job;
            drop(slot);
            let prompt_tokens = prompt.len();
            let run_prompt = if prompt.is_empty() {
                vec![self.tokenizer.bos().unwrap_or(0)]
            } else {
                prompt
            };
            let eog: &[u32] = if params.ignore_eos {
                &[]
            } else {
                self.tokenizer.end_of_generation()
            };
            let stops = eog
                .iter()
                .copied()
                .chain(params.stop_token_ids.iter().copied());
            let output = OutputStage::new(stops, params.stop.clone(), params.max_tokens);
            let sampler = Sampler::new(params.sampling.clone(), &run_prompt);
            EngineStats::add(&self.stats.prompt_tokens, prompt_tokens as u64);
            let _ = reply.send(Event::Admitted);
            self.running.insert(
                id,
                Active {
                    prompt: run_prompt,
                    prompt_tokens,
                    prefilled: 0,
                    pending: None,
                    seq,
                    blocks,
                    sampler,
                    output,
                    logprobs: params.logprobs,
                    reply,
                },
            );
        }
    }

    fn step(&mut self) {
        if self.running.is_empty() {
            return;
        }
        let decoding: Vec<RequestId> = self
            .running
            .iter()
            .filter(|(_, a)| a.pending.is_some())
            .map(|(&id, _)| id)
            .collect();
        let prefilling: Vec<Prefilling> = self
            .running
            .iter()
            .filter(|(_, a)| a.prefilled < a.prompt.len())
            .map(|(&id, a)| Prefilling {
                id,
                remaining: a.prompt.len() - a.prefilled,
            })
            .collect();
        let plan = plan_step(
            &decoding,
            &prefilling,
            self.config.prefill_chunk,
            self.cursor,
        );
        self.cursor = self.cursor.wrapping_add(1);
        if plan.decode.is_empty() && plan.prefill.is_empty() {
            return;
        }
        // (request, span) in a fixed order: decodes by id, then prompt chunks.
        let mut rows: Vec<(RequestId, bool)> = plan.decode.iter().map(|&id| (id, true)).collect();
        rows.extend(plan.prefill.iter().map(|&(id, _)| (id, false)));
        let pending_tokens: Vec<[u32; 1]> = plan
            .decode
            .iter()
            .map(|id| [self.running[id].pending.expect("decoding")])
            .collect();
        let result = {
            let mut spans = Vec::with_capacity(rows.len());
            for (i, &id) in plan.decode.iter().enumerate() {
                let a = &self.running[&id];
                spans.push(Span {
                    seq: &a.seq,
                    start: a.prompt.len() + a.output.generated() - 1,
                    tokens: &pending_tokens[i],
                    want: Want::Last,
                });
            }
            for &(id, n) in &plan.prefill {
                let a = &self.running[&id];
                let last = a.prefilled + n == a.prompt.len();
                spans.push(Span {
                    seq: &a.seq,
                    start: a.prefilled,
                    tokens: &a.prompt[a.prefilled..a.prefilled + n],
                    want: if last { Want::Last } else { Want::Nothing },
                });
            }
            self.decoder.forward(&mut self.cache, &spans)
        };
        let logits = match result {
            Ok(l) => l,
            Err(e) => {
                for (id, _) in rows {
                    self.fail(id, format!("the model failed: {e}"));
                }
                return;
            }
        };
        if !plan.decode.is_empty() {
            EngineStats::add(&self.stats.decode_steps, 1);
        }
        for &(id, n) in &plan.prefill {
            EngineStats::add(&self.stats.prefill_chunks, 1);
            EngineStats::add(&self.stats.prefill_tokens, n as u64);
            if let Some(a) = self.running.get_mut(&id) {
                a.prefilled += n;
            }
        }
        for (span, (id, _)) in rows.iter().enumerate() {
            if let Some(row) = logits.last_of(span) {
                self.on_logits(*id, row);
            }
        }
    }

    fn on_logits(&mut self, id: RequestId, logits: &[f32]) {
        let Some(a) = self.running.get_mut(&id) else {
            return;
        };
        let tok = a.sampler.sample(logits);
        a.sampler.accept(tok);
        let logprob = a.logprobs.map(|n| TokenLogprob::of(logits, tok, n));
        let out = a
            .output
            .on_token(tok, &self.tokenizer.token_bytes(tok, false));
        if out.counted {
            EngineStats::add(&self.stats.generated_tokens, 1);
            let _ = a.reply.send(Event::Token {
                id: tok,
                text: out.text.clone(),
                logprob,
            });
        }
        match out.finished {
            Some(reason) => {
                let text = if out.counted { String::new() } else { out.text };
                self.finish_with(id, reason, text);
            }
            None => a.pending = Some(tok),
        }
    }

    fn release(&mut self, id: RequestId) -> Option<Active> {
        let mut a = self.running.remove(&id)?;
        self.cache.free(std::mem::take(&mut a.seq));
        Some(a)
    }

    fn finish(&mut self, id: RequestId, reason: FinishReason) {
        let text = match self.running.get_mut(&id) {
            Some(a) => a.output.end(reason),
            None => return,
        };
        self.finish_with(id, reason, text);
    }

    fn finish_with(&mut self, id: RequestId, reason: FinishReason, text: String) {
        let Some(a) = self.release(id) else { return };
        match reason {
            FinishReason::Stop => EngineStats::add(&self.stats.finished_stop, 1),
            FinishReason::Length => EngineStats::add(&self.stats.finished_length, 1),
            FinishReason::Cancelled => {}
        }
        let usage = Usage {
            prompt_tokens: a.prompt_tokens,
            completion_tokens: a.output.generated(),
        };
        let _ = a.reply.send(Event::Finished {
            reason,
            usage,
            text,
        });
    }

    fn fail(&mut self, id: RequestId, message: String) {
        if let Some(a) = self.release(id) {
            let _ = a.reply.send(Event::Failed { message });
        }
    }

    fn shutdown(&mut self) {
        for job in std::mem::take(&mut self.queue) {
            let usage = Usage {
                prompt_tokens: job.prompt.len(),
                completion_tokens: 0,
            };
            let _ = job.reply.send(Event::Finished {
                reason: FinishReason::Cancelled,
                usage,
                text: String::new(),
            });
        }
        let ids: Vec<RequestId> = self.running.keys().copied().collect();
        for id in ids {
            self.finish(id, FinishReason::Cancelled);
        }
        self.update_gauges();
    }

    fn update_gauges(&mut self) {
        let held: u64 = self.running.values().map(|a| a.blocks).sum();
        self.peak = self.peak.max(held);
        EngineStats::set(&self.stats.blocks_held, held);
        EngineStats::set(&self.stats.peak_blocks_held, self.peak);
        EngineStats::set(&self.stats.running, self.running.len() as u64);
        if let Some(f) = self.cache.free_blocks() {
            EngineStats::set(&self.stats.kv_blocks_free, f as u64);
        }
    }
}
