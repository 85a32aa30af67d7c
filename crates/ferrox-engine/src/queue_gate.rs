//! The bound on requests in the engine (SPEC S11): `cap` = `max_seqs +
//! max_queue` places, each held by one request from its submission until it
//! ends, running or waiting.
//!
//! Counting both together is what makes `queue_full` exact: a request that
//! finishes gives its place back before its last event is sent, so a client
//! that resends at once always finds it, although the worker has not yet
//! admitted the next waiting request into the freed row. Waiting requests
//! number at most `max_queue` plus the rows that are free at that moment.
//!
//! Invariants: a place is taken with a compare-and-swap, so no interleaving of
//! submitters ever holds more than `cap`; it is released exactly once, when its
//! [`QueueSlot`] is dropped (the worker drops it when the request ends, and every
//! other way a request can end drops it too).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts waiting requests against a cap.
#[derive(Debug)]
pub struct QueueGate {
    cap: usize,
    depth: AtomicUsize,
}

/// One held place in the queue.
#[derive(Debug)]
pub struct QueueSlot {
    gate: Arc<QueueGate>,
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.gate.depth.fetch_sub(1, Ordering::AcqRel);
    }
}

impl QueueGate {
    /// A gate admitting at most `cap` waiting requests.
    pub fn new(cap: usize) -> Arc<QueueGate> {
        Arc::new(QueueGate {
            cap,
            depth: AtomicUsize::new(0),
        })
    }

    /// Takes a slot, or `None` when the queue is full.
    pub fn try_reserve(self: &Arc<Self>) -> Option<QueueSlot> {
        let mut cur = self.depth.load(Ordering::Acquire);
        loop {
            if cur >= self.cap {
                return None;
            }
            match self.depth.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Some(QueueSlot {
                        gate: Arc::clone(self),
                    });
                }
                Err(now) => cur = now,
            }
        }
    }

    /// Requests waiting now.
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Acquire)
    }

    /// The cap.
    pub fn cap(&self) -> usize {
        self.cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPEC S11: the gate admits exactly its cap under 32 racing submitters, 64 rounds.
    #[test]
    fn the_queue_gate_admits_exactly_its_cap_under_racing_submitters() {
        for round in 0..64 {
            let cap = 1 + round % 9;
            let gate = QueueGate::new(cap);
            let barrier = Arc::new(std::sync::Barrier::new(32));
            let handles: Vec<_> = (0..32)
                .map(|_| {
                    let (g, b) = (Arc::clone(&gate), Arc::clone(&barrier));
                    std::thread::spawn(move || {
                        b.wait();
                        g.try_reserve()
                    })
                })
                .collect();
            let slots: Vec<QueueSlot> = handles
                .into_iter()
                .filter_map(|h| h.join().unwrap())
                .collect();
            assert_eq!(slots.len(), cap, "round {round}");
            assert_eq!(gate.depth(), cap);
            drop(slots);
            assert_eq!(gate.depth(), 0, "every slot came back");
        }
    }
}
