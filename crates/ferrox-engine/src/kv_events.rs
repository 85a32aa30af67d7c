//! What the prefix cache did, as events a router can follow (vLLM's KV events:
//! `BlockStored`, `BlockRemoved`, `AllBlocksCleared`). Pure: the ledger records
//! them as pages enter and leave the cache, the worker hands each step's to a
//! [`KvEventSink`], and whoever holds the other end (the server's ZMQ publisher)
//! puts them on the wire.
//!
//! A block is named by its chained hash ([`crate::prefix_index::chain_hash`]),
//! the same on every replica for the same tokens at the same positions, so
//! `replaying the events` rebuilds exactly the set of hashes the cache holds.

use tokio::sync::mpsc;

/// One change to the set of cached full pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvEvent {
    /// Pages entered the cache: a chain, each page's parent the one before it,
    /// the first's parent `parent` (`None`: it starts the sequence).
    Stored {
        hashes: Vec<u64>,
        parent: Option<u64>,
        /// Every page's tokens, in order (`hashes.len()` pages of `block_size`).
        tokens: Vec<u32>,
    },
    /// Pages left the cache (evicted, or replaced by another holding the hash).
    Removed { hashes: Vec<u64> },
    /// The whole cache is gone (the engine stopped).
    Cleared,
}

/// The events recorded since they were last taken, runs joined: a page stored
/// right after its parent extends that parent's `Stored`, and removals in a row
/// share one `Removed`.
#[derive(Clone, Debug, Default)]
pub struct EventLog {
    events: Vec<KvEvent>,
}

impl EventLog {
    /// Page `hash` holding `tokens` entered the cache after `parent`.
    pub fn stored(&mut self, hash: u64, parent: Option<u64>, tokens: &[u32]) {
        if let Some(KvEvent::Stored {
            hashes, tokens: t, ..
        }) = self.events.last_mut()
            && parent.is_some()
            && hashes.last().copied() == parent
        {
            hashes.push(hash);
            t.extend_from_slice(tokens);
            return;
        }
        self.events.push(KvEvent::Stored {
            hashes: vec![hash],
            parent,
            tokens: tokens.to_vec(),
        });
    }

    /// Page `hash` left the cache.
    pub fn removed(&mut self, hash: u64) {
        if let Some(KvEvent::Removed { hashes }) = self.events.last_mut() {
            hashes.push(hash);
            return;
        }
        self.events.push(KvEvent::Removed { hashes: vec![hash] });
    }

    /// The events recorded so far, in order; the log starts over.
    pub fn take(&mut self) -> Vec<KvEvent> {
        std::mem::take(&mut self.events)
    }
}

/// Where the worker sends each step's events (unbounded: a step records at most
/// the pages it wrote or evicted).
#[derive(Clone, Debug)]
pub struct KvEventSink(pub mpsc::UnboundedSender<Vec<KvEvent>>);

impl KvEventSink {
    /// A sink and the receiver its batches arrive at.
    pub fn channel() -> (KvEventSink, mpsc::UnboundedReceiver<Vec<KvEvent>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (KvEventSink(tx), rx)
    }

    /// Sends one batch; a gone receiver is not the engine's concern.
    pub fn send(&self, events: Vec<KvEvent>) {
        if !events.is_empty() {
            let _ = self.0.send(events);
        }
    }
}

/// Applies `events` to the set of cached hashes a subscriber keeps: what the
/// wire format promises, stated once (tests check the ledger against it).
pub fn apply(set: &mut std::collections::BTreeSet<u64>, events: &[KvEvent]) {
    for e in events {
        match e {
            KvEvent::Stored { hashes, .. } => set.extend(hashes.iter().copied()),
            KvEvent::Removed { hashes } => {
                for h in hashes {
                    set.remove(h);
                }
            }
            KvEvent::Cleared => set.clear(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_is_one_stored_event_and_removals_in_a_row_one_removed() {
        let mut log = EventLog::default();
        log.stored(1, None, &[1, 2]);
        log.stored(2, Some(1), &[3, 4]);
        log.stored(9, Some(5), &[7, 7]);
        log.removed(1);
        log.removed(2);
        log.stored(3, Some(2), &[5, 6]);
        let got = log.take();
        assert_eq!(
            got,
            vec![
                KvEvent::Stored {
                    hashes: vec![1, 2],
                    parent: None,
                    tokens: vec![1, 2, 3, 4]
                },
                KvEvent::Stored {
                    hashes: vec![9],
                    parent: Some(5),
                    tokens: vec![7, 7]
                },
                KvEvent::Removed { hashes: vec![1, 2] },
                KvEvent::Stored {
                    hashes: vec![3],
                    parent: Some(2),
                    tokens: vec![5, 6]
                },
            ]
        );
        assert!(log.take().is_empty());
        let mut set = std::collections::BTreeSet::new();
        apply(&mut set, &got);
        assert_eq!(set.into_iter().collect::<Vec<_>>(), vec![3, 9]);
    }
}
