//! The `EngineHandle`: how other threads submit requests and cancel them (SPEC S1).
//! Refusals (S10, S11, S17) are decided here, before anything is queued.
//!
//! Invariants: ids are handed out once, increasing, never reused (S4); a refused
//! request holds no queue slot and no blocks; a stream that is dropped before its
//! request finished cancels it (S13); if the worker is gone, `submit` fails at once
//! and every open stream ends with `Event::Failed` (nobody waits forever).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;

use tokio::sync::mpsc as reply;

use crate::ceiling::{CeilingKind, KvCeiling, KvRefusal};
use crate::queue_gate::{QueueGate, QueueSlot};
use crate::request::{Event, Failure, GenerationParams, RequestId};
use crate::stats::{EngineStats, StatsSnapshot};
use crate::validate::{InvalidRequest, validate};

/// Why a submission was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// Malformed (SPEC S17).
    #[error("invalid {}: {}", .0.param, .0.message)]
    Invalid(InvalidRequest),
    /// Over a KV ceiling (SPEC S10).
    #[error("{}: {}", .0.kind.code(), .0.message)]
    Kv(KvRefusal),
    /// Running plus waiting requests are at their bound (SPEC S11); retry after
    /// this many seconds.
    #[error(
        "queue_full: {held} requests are running or waiting, the bound of --max-seqs plus --max-queue (FERROX_CB_MAX_SEQS + FERROX_CB_MAX_QUEUE); retry later"
    )]
    QueueFull { held: usize, retry_after_s: u64 },
    /// The worker is gone (SPEC S1).
    #[error("the engine has stopped")]
    Stopped,
}

/// What the worker receives.
pub(crate) enum Msg {
    Job(Box<Job>),
    Cancel(RequestId),
    /// Asks for the chained hash of every page the prefix cache holds.
    CachedBlocks(tokio::sync::oneshot::Sender<Vec<u64>>),
    Shutdown,
}

/// An accepted request on its way to the worker.
pub(crate) struct Job {
    pub id: RequestId,
    pub prompt: Vec<u32>,
    pub params: GenerationParams,
    pub reply: reply::UnboundedSender<Event>,
    /// Held until the request ends (SPEC S11).
    pub place: QueueSlot,
}

/// Shared by every clone of a handle.
pub(crate) struct Shared {
    pub inbox: mpsc::Sender<Msg>,
    pub next_id: AtomicU64,
    pub gate: Arc<QueueGate>,
    pub stats: Arc<EngineStats>,
    pub ceiling: KvCeiling,
    pub vocab: usize,
    /// Whether the model generates (an encoder only embeds).
    pub generates: bool,
    /// Cleared when the worker ends for any reason but a requested shutdown.
    pub healthy: Arc<AtomicBool>,
}

/// Submits to and cancels in one engine; cheap to clone.
#[derive(Clone)]
pub struct EngineHandle {
    pub(crate) shared: Arc<Shared>,
}

impl EngineHandle {
    /// Submits `prompt` for generation; refusals come back before anything is queued.
    pub fn submit(
        &self,
        prompt: Vec<u32>,
        params: GenerationParams,
    ) -> Result<RequestStream, SubmitError> {
        let s = &self.shared;
        // A failed worker may still be draining its inbox: refuse at once.
        if !s.healthy.load(Ordering::Acquire) {
            return Err(SubmitError::Stopped);
        }
        if let Err(e) = validate(&prompt, &params, s.vocab, s.generates) {
            EngineStats::add(&s.stats.refusals_invalid, 1);
            return Err(SubmitError::Invalid(e));
        }
        if let Err(r) = s.ceiling.check(prompt.len(), params.max_tokens) {
            let counter = match r.kind {
                CeilingKind::ContextLength => &s.stats.refusals_context_length,
                CeilingKind::DeviceMemoryBudget => &s.stats.refusals_too_large,
            };
            EngineStats::add(counter, 1);
            return Err(SubmitError::Kv(r));
        }
        let Some(place) = s.gate.try_reserve() else {
            EngineStats::add(&s.stats.queue_rejections, 1);
            return Err(SubmitError::QueueFull {
                held: s.gate.depth(),
                retry_after_s: 1,
            });
        };
        let id = s.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = reply::unbounded_channel();
        s.inbox
            .send(Msg::Job(Box::new(Job {
                id,
                prompt,
                params,
                reply: tx,
                place,
            })))
            .map_err(|_| SubmitError::Stopped)?;
        Ok(RequestStream {
            id,
            events: rx,
            inbox: s.inbox.clone(),
            done: false,
        })
    }

    /// Cancels request `id` wherever it is (SPEC S13); a stale id resolves to nothing.
    pub fn cancel(&self, id: RequestId) {
        let _ = self.shared.inbox.send(Msg::Cancel(id));
    }

    /// The counters now (SPEC S19).
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot(self.shared.gate.depth())
    }

    /// The chained hash of every page the prefix cache holds now, in no order
    /// (what a follower of the KV events should hold); `None` once the worker
    /// is gone.
    pub async fn cached_blocks(&self) -> Option<Vec<u64>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.shared.inbox.send(Msg::CachedBlocks(tx)).ok()?;
        rx.await.ok()
    }

    /// The most requests the engine holds, running or waiting (S11).
    pub fn capacity(&self) -> usize {
        self.shared.gate.cap()
    }

    /// The ceilings requests are held to.
    pub fn ceiling(&self) -> &KvCeiling {
        &self.shared.ceiling
    }

    /// Whether the worker is serving: false once it has panicked or ended
    /// without being asked to (a server's `/health` reports it).
    pub fn is_healthy(&self) -> bool {
        self.shared.healthy.load(Ordering::Acquire)
    }

    /// Asks the worker to end every request with [`Failure::Shutdown`] and stop.
    pub fn shutdown(&self) {
        let _ = self.shared.inbox.send(Msg::Shutdown);
    }
}

/// The events of one request. Dropping it before the request finished cancels it.
pub struct RequestStream {
    id: RequestId,
    events: reply::UnboundedReceiver<Event>,
    inbox: mpsc::Sender<Msg>,
    done: bool,
}

impl RequestStream {
    /// The request's id.
    pub fn id(&self) -> RequestId {
        self.id
    }

    fn seen(&mut self, e: Option<Event>) -> Option<Event> {
        if self.done {
            return None;
        }
        match e {
            Some(ev) => {
                if matches!(ev, Event::Finished { .. } | Event::Failed(_)) {
                    self.done = true;
                }
                Some(ev)
            }
            None => {
                self.done = true;
                Some(Event::Failed(Failure::EngineDown(
                    "its worker ended before the request finished".into(),
                )))
            }
        }
    }

    /// The next event (async).
    pub async fn recv(&mut self) -> Option<Event> {
        if self.done {
            return None;
        }
        let e = self.events.recv().await;
        self.seen(e)
    }

    /// The next event, blocking the thread (not for async contexts).
    pub fn blocking_recv(&mut self) -> Option<Event> {
        if self.done {
            return None;
        }
        let e = self.events.blocking_recv();
        self.seen(e)
    }

    /// Every remaining event, blocking.
    pub fn collect_blocking(mut self) -> Vec<Event> {
        let mut v = Vec::new();
        while let Some(e) = self.blocking_recv() {
            v.push(e);
        }
        v
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.inbox.send(Msg::Cancel(self.id));
        }
    }
}
