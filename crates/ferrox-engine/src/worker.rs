//! The engine worker (SPEC S1): one thread owns every in-flight request, the KV
//! ledger and the KV storage. Between forward passes it takes in jobs and
//! cancellations, runs one prefill pass (admissions and prompt chunks) and one
//! decode step, and turns logits into events.
//!
//! Invariants:
//! * Requests are kept by id (a `BTreeMap`), never by batch position (S4); leaving
//!   the batch cannot shift anyone's sampler, stops, KV or reply channel.
//! * A request's pages are promised at admission (S7, S20) and taken as its
//!   positions are written; every way it can end goes through `release`, which
//!   gives back its pages, its promise and its request slot exactly once.
//! * Cancellation only records an id; it is applied here, at a step boundary (S13),
//!   whether the request is queued, prefilling or decoding, or not yet arrived.
//! * Blocks held are measured from the in-flight requests' own tables (S19).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use ferrox_models::decoder::{Decoder, Span};
use ferrox_models::kv_store::KvStore;
use ferrox_models::pooling::Pool;
use ferrox_sampling::grammar::Constraint;
use ferrox_sampling::sampler::Sampler;
use ferrox_text::tokenizer::Tokenizer;

mod config;
mod draft;
mod mtp;
mod prompt_rows;
mod rows;
mod speculate;
mod start;

use rows::{Row, span};

use prompt_rows::{PromptScores, runs_whole};

pub use config::{EngineConfig, StartError};
pub use draft::Drafter;
pub use start::{start, start_with_draft};

use crate::admission::{Candidate, Chunking, PassCapacity, PrefillPass, Refusal, SlotTable};
use crate::ceiling::KvCeiling;
use crate::handle::{Job, Msg};
use crate::ledger::{KvLedger, PageNeed, PrefixHit};
use crate::output::{FinishReason, OutputStage};
use crate::queue_gate::QueueSlot;
use crate::request::{Event, Failure, RequestId, TokenLogprob, Usage};
use crate::scheduler::{Admissions, Prefilling, admissions_first, admit_fifo, plan_continuations};
use crate::stats::EngineStats;

/// Where an in-flight request is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Prompt tokens `..prefilled` are in the KV.
    Prefilling { prefilled: usize },
    /// The whole prompt and every generated token but `pending` are in the KV.
    Decoding { pending: u32 },
}

struct Active {
    phase: Phase,
    /// The prompt as run (`[BOS]` for an empty one, SPEC S6), then every generated
    /// token that has been run.
    tokens: Vec<u32>,
    /// Length of the prompt as run.
    prompt_len: usize,
    /// Prompt tokens as submitted (usage).
    prompt_tokens: usize,
    /// Prompt tokens the prefix cache supplied.
    cached_tokens: usize,
    /// Request row (SPEC S25).
    slot: usize,
    /// The request's place in the engine's bound (S11), given back when it ends.
    _place: QueueSlot,
    sampler: Sampler,
    /// The request's output grammar, if it has one.
    constraint: Option<Constraint>,
    output: OutputStage,
    logprobs: Option<usize>,
    /// The prompt's scores so far, when it is scored.
    prompt_scores: Option<PromptScores>,
    /// The prompt's embedding so far, when it is embedded.
    embedding: Option<Pool>,
    /// The prompt runs whole ([`runs_whole`]).
    whole: bool,
    /// Tokens speculation drafted, and those kept.
    drafted: usize,
    accepted: usize,
    /// Most tokens the next draft may hold ([`crate::speculation::next_budget`]).
    draft_budget: usize,
    /// Drafts in a row refused whole, and the steps left that a draft model
    /// or head does not guess for the request ([`crate::speculation::rest_after`]).
    refused: u32,
    rest: usize,
    /// Where a hybrid model's prompt ends a chunk so that its state there
    /// becomes a snapshot ([`KvLedger::share_point`]), until it is reached.
    share_at: Option<usize>,
    /// The last `replay` of `tokens` are in the KV but not in the recurrent
    /// state, which was taken back to before them when a draft was refused
    /// (hybrid models): the next decode row runs them again first.
    replay: usize,
    reply: tokio::sync::mpsc::UnboundedSender<Event>,
}

impl Active {
    /// Whether a forward of `r` ends at the next-token distribution: a decode
    /// step, or the prompt's last chunk.
    fn samples_after(&self, r: &Row) -> bool {
        r.decode || r.start + r.len == self.prompt_len
    }
}

struct Worker {
    decoder: Box<dyn Decoder>,
    tokenizer: Arc<Tokenizer>,
    store: KvStore,
    ledger: KvLedger,
    slots: SlotTable,
    config: EngineConfig,
    stats: Arc<EngineStats>,
    queue: VecDeque<Job>,
    running: BTreeMap<RequestId, Active>,
    early_cancels: BTreeSet<RequestId>,
    cursor: usize,
    peak: u64,
    /// Prompt chunks end on pages (decided once at start).
    /// Where prompt chunks may end (SPEC S22).
    chunking: Chunking,
    /// The handle's health flag, cleared if this worker ends unasked.
    healthy: Arc<AtomicBool>,
    /// The draft model or head, when speculation drafts with one.
    draft: Option<draft::Draft>,
}

/// Most remembered cancellations of requests not yet seen (oldest forgotten first).
const EARLY_CANCEL_MEMORY: usize = 4096;

/// The text of a panic's payload.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_string())
}

impl Worker {
    /// Runs until shutdown or until every handle is gone. A panic anywhere in a
    /// step (the forward pass included) is caught: every request held, queued or
    /// still in the inbox fails with [`Failure::EngineDown`], the handle turns
    /// unhealthy, and later submissions fail with `Stopped` (SPEC S1).
    fn serve(mut self, rx: mpsc::Receiver<Msg>) {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run(&rx)));
        // The cache goes with the worker, however it ends.
        if let Some(sink) = &self.config.kv_events {
            sink.send(vec![crate::kv_events::KvEvent::Cleared]);
        }
        let Err(payload) = run else { return };
        self.healthy.store(false, Ordering::Release);
        let failure =
            Failure::EngineDown(format!("the worker panicked: {}", panic_text(&*payload)));
        for job in std::mem::take(&mut self.queue) {
            let _ = job.reply.send(Event::Failed(failure.clone()));
        }
        for (_, a) in std::mem::take(&mut self.running) {
            let _ = a.reply.send(Event::Failed(failure.clone()));
        }
        while let Ok(m) = rx.try_recv() {
            if let Msg::Job(job) = m {
                let _ = job.reply.send(Event::Failed(failure.clone()));
            }
        }
    }

    fn run(&mut self, rx: &mpsc::Receiver<Msg>) {
        loop {
            let idle = self.queue.is_empty() && self.running.is_empty();
            let first = if idle {
                match rx.recv() {
                    Ok(m) => Some(m),
                    Err(_) => {
                        // Every handle and stream is gone: nothing is left to serve.
                        self.healthy.store(false, Ordering::Release);
                        return;
                    }
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
                    Msg::Job(job) => self.take_job(*job),
                    Msg::Cancel(id) => self.cancel(id),
                    Msg::CachedBlocks(reply) => {
                        let _ = reply.send(self.ledger.cached_hashes());
                    }
                    Msg::Shutdown => stop = true,
                }
            }
            if stop {
                self.shutdown();
                return;
            }
            self.step();
            self.update_gauges();
            self.publish_events();
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
            ..Usage::default()
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

    /// The prompt a job runs: `[BOS]` (or token 0) for an empty one (SPEC S6).
    fn run_prompt<'a>(&self, prompt: &'a [u32]) -> Cow<'a, [u32]> {
        if prompt.is_empty() {
            Cow::Owned(vec![self.tokenizer.bos().unwrap_or(0)])
        } else {
            Cow::Borrowed(prompt)
        }
    }

    /// The queue's head as admission sees it, with its prefix hit (at most as many
    /// as there are free slots: no more could be admitted).
    fn candidates(&self) -> Vec<(Candidate, PrefixHit)> {
        let ps = self.ledger.page_size();
        self.queue
            .iter()
            .take(self.slots.free())
            .map(|job| {
                let prompt = self.run_prompt(&job.prompt);
                // Cached positions have neither logits nor hidden states.
                let hit = match runs_whole(&job.params) {
                    false => self.ledger.lookup(&prompt),
                    true => PrefixHit::default(),
                };
                let positions = KvCeiling::positions(job.prompt.len(), job.params.max_tokens);
                let need = self.ledger.need(positions, &hit);
                // The first chunk stops at the share point, if any.
                let first_stop = self.ledger.share_point(&hit).unwrap_or(prompt.len());
                let c = Candidate {
                    prompt: first_stop.min(prompt.len()),
                    hit: hit.tokens(ps),
                    need,
                };
                (c, hit)
            })
            .collect()
    }

    /// Admits from the queue's head (S9, S20) and returns the first chunks.
    fn admit(&mut self, pass: &mut PrefillPass) -> Vec<(RequestId, usize)> {
        let candidates = self.candidates();
        let queue: Vec<Candidate> = candidates.iter().map(|c| c.0).collect();
        let Admissions { admitted, waiting } = admit_fifo(pass, &queue);
        if waiting == Some(Refusal::RecurrentBudget) {
            EngineStats::add(&self.stats.recurrent_waits, 1);
        }
        let mut chunks = Vec::with_capacity(admitted.len());
        for (a, (c, hit)) in admitted.iter().zip(candidates) {
            let job = self.queue.pop_front().expect("a candidate per job");
            chunks.push((job.id, a.first_chunk));
            self.start_request(job, c.need, &hit);
        }
        chunks
    }

    fn start_request(&mut self, job: Job, need: PageNeed, hit: &PrefixHit) {
        let Job {
            id,
            prompt,
            params,
            reply,
            place,
            ..
        } = job;
        let tokens = self.run_prompt(&prompt).into_owned();
        let cached_tokens = hit.tokens(self.ledger.page_size());
        let share_at = self.ledger.share_point(hit).filter(|&p| p < tokens.len());
        let restore = self
            .ledger
            .admit(id, need, hit)
            .expect("admission checked the recurrent-state slots");
        if let Some(c) = restore {
            self.store.copy_state(c.from, c.to);
        }
        let slot = self.slots.take().expect("admission checked the slots");
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
        let sampler = Sampler::new(params.sampling.clone(), &tokens);
        let width = self.decoder.hyper_params().n_embd;
        EngineStats::add(&self.stats.prompt_tokens, prompt.len() as u64);
        EngineStats::add(&self.stats.prefix_queries, 1);
        EngineStats::add(&self.stats.prefix_hit_tokens, cached_tokens as u64);
        let _ = reply.send(Event::Admitted);
        self.running.insert(
            id,
            Active {
                phase: Phase::Prefilling {
                    prefilled: cached_tokens,
                },
                prompt_len: tokens.len(),
                tokens,
                prompt_tokens: prompt.len(),
                cached_tokens,
                slot,
                _place: place,
                sampler,
                constraint: params.grammar.as_ref().map(|g| g.start()),
                output,
                logprobs: params.logprobs,
                prompt_scores: params.prompt_logprobs.map(|top| PromptScores {
                    top,
                    scores: Vec::new(),
                }),
                embedding: params.embed.map(|p| Pool::new(p, width)),
                whole: runs_whole(&params),
                drafted: 0,
                accepted: 0,
                draft_budget: self.config.speculation.map_or(0, |s| s.first_budget()),
                refused: 0,
                rest: 0,
                share_at,
                replay: 0,
                reply,
            },
        );
    }

    /// Prompts in prefill, in admission (id) order.
    fn prefilling(&self) -> Vec<Prefilling> {
        self.running
            .iter()
            .filter_map(|(&id, a)| match a.phase {
                Phase::Prefilling { prefilled } => Some(Prefilling {
                    id,
                    prefilled,
                    // A chunk ends at the share point (unless a late hit
                    // passed it).
                    remaining: a
                        .share_at
                        .filter(|&p| p > prefilled)
                        .unwrap_or(a.prompt_len)
                        - prefilled,
                }),
                Phase::Decoding { .. } => None,
            })
            .collect()
    }

    /// Prompts in prefill take the cached pages other requests wrote since they
    /// were admitted (the ledger's late hits).
    fn catch_up(&mut self) {
        for (&id, a) in self.running.iter_mut() {
            let Phase::Prefilling { prefilled } = a.phase else {
                continue;
            };
            if a.whole {
                continue;
            }
            let caught = self
                .ledger
                .catch_up(id, &a.tokens[..a.prompt_len], prefilled);
            if let Some(c) = caught.copy {
                self.store.copy_state(c.from, c.to);
            }
            let now = caught.prefilled;
            if now > prefilled {
                a.phase = Phase::Prefilling { prefilled: now };
                // A late hit at or past the share point has its state there.
                a.share_at = a.share_at.filter(|&p| p > now);
                a.cached_tokens += now - prefilled;
                EngineStats::add(&self.stats.prefix_hit_tokens, (now - prefilled) as u64);
            }
        }
    }

    /// The prefill pass of this step: admissions and prompt chunks (S2, S20-S22).
    fn prefill_pass(&mut self) -> Vec<(RequestId, usize)> {
        let capacity = PassCapacity {
            slots: self.slots.free(),
            kv_pages: self.ledger.kv_available(),
            recurrent_seqs: self.ledger.recurrent_seqs(),
            window_pages: self.ledger.window_available(),
        };
        let mut pass = PrefillPass::new(
            self.config.prefill_chunk,
            capacity,
            self.config.block_size,
            self.chunking,
        );
        self.catch_up();
        let prefilling = self.prefilling();
        let cursor = self.cursor;
        self.cursor = self.cursor.wrapping_add(1);
        if admissions_first(cursor, prefilling.len()) {
            let mut chunks = self.admit(&mut pass);
            chunks.extend(plan_continuations(&mut pass, &prefilling, cursor));
            chunks
        } else {
            let mut chunks = plan_continuations(&mut pass, &prefilling, cursor);
            chunks.extend(self.admit(&mut pass));
            chunks
        }
    }

    /// This step's rows: decodes by id (S24), then prompt chunks; pages taken.
    fn plan_rows(&mut self) -> Vec<Row> {
        let chunks = self.prefill_pass();
        let speculation = self.speculation_now();
        let mut drafted = match (&mut self.draft, &speculation) {
            (Some(d), Some(s)) => {
                let drafts = d.drafts(&self.running, s);
                // A resting request sat this draft out.
                for a in self.running.values_mut() {
                    a.rest = a.rest.saturating_sub(1);
                }
                Some(drafts)
            }
            _ => None,
        };
        let mut rows: Vec<Row> = self
            .running
            .iter_mut()
            .filter_map(|(&id, a)| match a.phase {
                Phase::Decoding { pending } => {
                    let mut run: Vec<u32> = match drafted.as_mut() {
                        Some(d) => std::iter::once(pending)
                            .chain(d.remove(&id).unwrap_or_default())
                            .collect(),
                        None => a.decode_run(pending, speculation.as_ref()),
                    };
                    // A draft ends at a token that would end the request:
                    // nothing after one can be kept (a copy of the prompt's
                    // last sentence drafts on into the template's next turn).
                    if let Some(i) = run[1..].iter().position(|&t| a.output.is_stop_token(t)) {
                        run.truncate(i + 2);
                    }
                    // A grammar cuts the draft where it stops following it.
                    if let Some(c) = a.constraint.as_mut().filter(|_| run.len() > 1) {
                        run.truncate(1 + c.valid_prefix(&run[1..]));
                    }
                    let start = a.tokens.len() - a.replay;
                    run.splice(0..0, a.tokens[start..].iter().copied());
                    Some(Row {
                        id,
                        start,
                        len: run.len(),
                        decode: true,
                        replay: a.replay,
                        run,
                    })
                }
                Phase::Prefilling { .. } => None,
            })
            .collect();
        for (id, len) in chunks {
            let Phase::Prefilling { prefilled } = self.running[&id].phase else {
                unreachable!("chunks are planned for prompts in prefill");
            };
            rows.push(Row {
                id,
                start: prefilled,
                len,
                decode: false,
                replay: 0,
                run: Vec::new(),
            });
        }
        let mut ready = Vec::with_capacity(rows.len());
        for row in rows {
            match self.ledger.prepare(row.id, row.start, row.start + row.len) {
                Ok(()) => ready.push(row),
                Err(e) => self.fail(row.id, Failure::Kv(e.to_string())),
            }
        }
        ready
    }

    fn step(&mut self) {
        let rows = self.plan_rows();
        if rows.is_empty() {
            return;
        }
        let result = {
            let spans: Vec<Span<'_>> = rows
                .iter()
                .map(|r| span(&self.running, &self.ledger, r))
                .collect();
            self.decoder.forward(&mut self.store, &spans)
        };
        let out = match result {
            Ok(o) => o,
            Err(e) => {
                for r in rows {
                    self.fail(r.id, Failure::Model(e.to_string()));
                }
                return;
            }
        };
        if rows.iter().any(|r| r.decode) {
            EngineStats::add(&self.stats.decode_steps, 1);
        }
        if let Some(d) = &mut self.draft {
            d.observe(&self.running, &rows, &out.hidden);
        }
        for (i, r) in rows.iter().enumerate() {
            if !r.draft().is_empty() {
                self.verify(i, r, &out.logits);
                continue;
            }
            let Some(samples) = self.running.get(&r.id).map(|a| a.samples_after(r)) else {
                continue;
            };
            self.score_prompt(i, r, &out.logits);
            self.after_forward(r);
            if self.pool_prompt(i, r, &out.hidden) {
                continue;
            }
            if samples && let Some(row) = out.logits.last_of(i) {
                self.on_logits(r.id, row);
            }
        }
    }

    /// The row's KV is written: advance the request and tell the ledger.
    fn after_forward(&mut self, r: &Row) {
        let Some(a) = self.running.get_mut(&r.id) else {
            return;
        };
        match a.phase {
            Phase::Decoding { pending } => {
                a.tokens.push(pending);
                a.replay = 0;
                // Guesses a grammar cut from the row are not kept.
                if let Some(d) = &mut self.draft {
                    d.cut_back(r.id, a.tokens.len());
                }
            }
            Phase::Prefilling { prefilled } => {
                EngineStats::add(&self.stats.prefill_chunks, 1);
                EngineStats::add(&self.stats.prefill_tokens, r.len as u64);
                a.phase = Phase::Prefilling {
                    prefilled: prefilled + r.len,
                };
            }
        }
        let written = r.start + r.len;
        self.ledger.advance(r.id, &a.tokens[..written]);
        if a.share_at == Some(written) {
            a.share_at = None;
            if let Some(c) = self.ledger.share_state(r.id, written) {
                self.store.copy_state(c.from, c.to);
            }
        }
        if let Some(c) = self
            .ledger
            .checkpoint(r.id, written, written > a.prompt_len)
        {
            self.store.copy_state(c.from, c.to);
        }
    }

    fn on_logits(&mut self, id: RequestId, logits: &[f32]) {
        let Some(a) = self.running.get_mut(&id) else {
            return;
        };
        let allowed = match a.constraint.as_mut().map(Constraint::allowed).transpose() {
            Ok(mask) => mask,
            Err(e) => return self.fail(id, Failure::Constraint(e)),
        };
        let tok = a.sampler.sample_within(logits, allowed.as_ref());
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
            None => {
                a.phase = Phase::Decoding { pending: tok };
                match a
                    .constraint
                    .as_mut()
                    .map(|c| c.commit(tok).map(|()| c.is_complete()))
                {
                    Some(Err(e)) => self.fail(id, Failure::Constraint(e)),
                    // The grammar is complete: nothing may follow, whatever
                    // `ignore_eos` says.
                    Some(Ok(true)) => self.finish(id, FinishReason::Stop),
                    None | Some(Ok(false)) => {}
                }
            }
        }
    }

    /// Takes `id` out of the batch, giving back its pages, promise and slot.
    fn release(&mut self, id: RequestId) -> Option<Active> {
        let a = self.running.remove(&id)?;
        self.ledger.release(id);
        if let Some(d) = &mut self.draft {
            d.forget(id);
        }
        self.slots.give_back(a.slot);
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
            FinishReason::Stop | FinishReason::StopString(_) => {
                EngineStats::add(&self.stats.finished_stop, 1)
            }
            FinishReason::Length => EngineStats::add(&self.stats.finished_length, 1),
            FinishReason::Cancelled => {}
        }
        let usage = Usage {
            prompt_tokens: a.prompt_tokens,
            completion_tokens: a.output.generated(),
            cached_tokens: a.cached_tokens,
            drafted_tokens: a.drafted,
            accepted_tokens: a.accepted,
        };
        let _ = a.reply.send(Event::Finished {
            reason,
            usage,
            text,
        });
    }

    fn fail(&mut self, id: RequestId, failure: Failure) {
        if let Some(a) = self.release(id) {
            let _ = a.reply.send(Event::Failed(failure));
        }
    }

    /// Ends every request, queued or running, with [`Failure::Shutdown`]: a cut-off
    /// is never reported as a finish.
    fn shutdown(&mut self) {
        for job in std::mem::take(&mut self.queue) {
            let _ = job.reply.send(Event::Failed(Failure::Shutdown));
        }
        let ids: Vec<RequestId> = self.running.keys().copied().collect();
        for id in ids {
            self.fail(id, Failure::Shutdown);
        }
        self.update_gauges();
        self.publish_events();
    }

    /// Hands this step's prefix-cache events to whoever follows them.
    fn publish_events(&mut self) {
        if let Some(sink) = &self.config.kv_events {
            sink.send(self.ledger.take_events());
        }
    }

    fn update_gauges(&mut self) {
        let held: u64 = self
            .running
            .keys()
            .map(|&id| self.ledger.held(id) as u64)
            .sum();
        self.peak = self.peak.max(held);
        let s = &self.stats;
        EngineStats::set(&s.blocks_held, held);
        EngineStats::set(&s.peak_blocks_held, self.peak);
        EngineStats::set(&s.kv_blocks_in_use, self.ledger.full_in_use());
        EngineStats::set(&s.kv_blocks_cached, self.ledger.full_evictable());
        EngineStats::set(&s.prefix_evictions, self.ledger.counters().evictions);
        if let Some(f) = self.ledger.kv_available() {
            EngineStats::set(&s.kv_blocks_free, f);
        }
        if let Some(f) = self.ledger.recurrent_available() {
            EngineStats::set(&s.recurrent_slots_free, f);
            EngineStats::set(&s.state_snapshots, self.ledger.state_snapshots() as u64);
        }
        // Last: a reader that sees the request count sees the pages that go with it.
        EngineStats::set(&s.running, self.running.len() as u64);
    }
}
