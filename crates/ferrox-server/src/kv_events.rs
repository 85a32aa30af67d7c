//! vLLM's KV events on the wire (`--kv-events`): the prefix cache's
//! [`KvEvent`]s published over ZMQ PUB for routers that score replicas by what
//! they hold (vllm-router's `kv_aware`, llm-d's precise prefix scorer).
//!
//! * Each engine step's events are one message of three frames: the topic, a
//!   sequence number (8 bytes, big-endian, from 0) and a msgpack batch
//!   `[ts, [event, ...]]`. An event is a map tagged by `type`, with vLLM's
//!   field names and order: `BlockStored {block_hashes, parent_block_hash,
//!   token_ids, block_size, lora_id, medium, lora_name}`, `BlockRemoved
//!   {block_hashes, medium}`, `AllBlocksCleared {}`.
//! * Block hashes are the prefix cache's chained hashes (unsigned 64-bit
//!   integers, the same on every replica for the same tokens); `medium` is
//!   nil: ferrox has one tier, which consumers read as the device tier.
//! * The optional replay socket (ROUTER) answers `[start_seq]` with every
//!   buffered message from that number on, `[seq, batch]` each, then `[-1,
//!   ""]`, as vLLM's does; it keeps the last [`REPLAY_BUFFER`] batches.

use std::collections::VecDeque;

use bytes::Bytes;
use ferrox_engine::kv_events::KvEvent;
use serde::Serialize;
use tokio::sync::mpsc::UnboundedReceiver;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

/// Batches the replay socket can still send.
pub const REPLAY_BUFFER: usize = 10_000;

/// The end of a replay: sequence number -1.
const END_SEQ: [u8; 8] = (-1i64).to_be_bytes();

/// Where and how to publish.
#[derive(Clone, Debug)]
pub struct KvEventsConfig {
    /// `tcp://HOST:PORT` to bind the PUB socket to (`*` for every interface).
    pub endpoint: String,
    /// `tcp://HOST:PORT` for the replay socket, if any.
    pub replay: Option<String>,
    /// The first frame of every message (vLLM's default is empty).
    pub topic: String,
    /// Positions per KV block, stated in every `BlockStored`.
    pub block_size: u32,
}

/// Why publishing could not start.
#[derive(Debug, thiserror::Error)]
pub enum KvEventsError {
    #[error("{flag} {endpoint:?}: expected tcp://HOST:PORT")]
    NotTcp {
        flag: &'static str,
        endpoint: String,
    },
    #[error("{flag} {endpoint}: cannot bind: {source}")]
    Bind {
        flag: &'static str,
        endpoint: String,
        source: zeromq::ZmqError,
    },
}

/// One event as vLLM's msgspec structs encode it (a map, tagged).
#[derive(Serialize)]
#[serde(tag = "type")]
enum Wire<'a> {
    BlockStored {
        block_hashes: &'a [u64],
        parent_block_hash: Option<u64>,
        token_ids: &'a [u32],
        block_size: u32,
        lora_id: Option<i64>,
        medium: Option<&'a str>,
        lora_name: Option<&'a str>,
    },
    BlockRemoved {
        block_hashes: &'a [u64],
        medium: Option<&'a str>,
    },
    AllBlocksCleared {},
}

fn wire(e: &KvEvent, block_size: u32) -> Wire<'_> {
    match e {
        KvEvent::Stored {
            hashes,
            parent,
            tokens,
        } => Wire::BlockStored {
            block_hashes: hashes,
            parent_block_hash: *parent,
            token_ids: tokens,
            block_size,
            lora_id: None,
            medium: None,
            lora_name: None,
        },
        KvEvent::Removed { hashes } => Wire::BlockRemoved {
            block_hashes: hashes,
            medium: None,
        },
        KvEvent::Cleared => Wire::AllBlocksCleared {},
    }
}

/// The msgpack batch `[ts, [event, ...]]` of `events` at `ts` (seconds since
/// the epoch).
pub fn encode(events: &[KvEvent], ts: f64, block_size: u32) -> Vec<u8> {
    let events: Vec<Wire<'_>> = events.iter().map(|e| wire(e, block_size)).collect();
    rmp_serde::to_vec_named(&(ts, events)).expect("a batch always encodes")
}

/// `tcp://*:P` as the socket library binds it.
fn bind_address(flag: &'static str, endpoint: &str) -> Result<String, KvEventsError> {
    let Some(rest) = endpoint.strip_prefix("tcp://") else {
        return Err(KvEventsError::NotTcp {
            flag,
            endpoint: endpoint.to_string(),
        });
    };
    Ok(match rest.strip_prefix("*:") {
        Some(port) => format!("tcp://0.0.0.0:{port}"),
        None => endpoint.to_string(),
    })
}

async fn bind<S: Socket>(flag: &'static str, endpoint: &str) -> Result<(S, String), KvEventsError> {
    let mut socket = S::new();
    let bound = socket
        .bind(&bind_address(flag, endpoint)?)
        .await
        .map_err(|source| KvEventsError::Bind {
            flag,
            endpoint: endpoint.to_string(),
            source,
        })?;
    Ok((socket, bound.to_string()))
}

/// The bound sockets, publishing once [`Publisher::run`] is spawned.
pub struct Publisher {
    events: PubSocket,
    replay: Option<RouterSocket>,
    topic: Bytes,
    block_size: u32,
    next_seq: u64,
    sent: VecDeque<(u64, Bytes)>,
    /// Where the sockets listen (ports resolved).
    pub bound: (String, Option<String>),
}

impl Publisher {
    /// Binds the sockets of `cfg`.
    pub async fn bind(cfg: &KvEventsConfig) -> Result<Publisher, KvEventsError> {
        let (events, at) = bind::<PubSocket>("--kv-events", &cfg.endpoint).await?;
        let (replay, replay_at) = match &cfg.replay {
            Some(ep) => {
                let (s, at) = bind::<RouterSocket>("--kv-events-replay", ep).await?;
                (Some(s), Some(at))
            }
            None => (None, None),
        };
        Ok(Publisher {
            events,
            replay,
            topic: Bytes::from(cfg.topic.clone().into_bytes()),
            block_size: cfg.block_size,
            next_seq: 0,
            sent: VecDeque::new(),
            bound: (at, replay_at),
        })
    }

    /// Publishes every batch `rx` brings until its sender (the engine) is gone,
    /// answering replay requests meanwhile.
    pub async fn run(mut self, mut rx: UnboundedReceiver<Vec<KvEvent>>) {
        let mut replay = self.replay.take();
        loop {
            tokio::select! {
                batch = rx.recv() => match batch {
                    Some(events) => self.publish(&events).await,
                    None => return,
                },
                request = recv_replay(&mut replay) => {
                    if let (Some(socket), Ok(request)) = (replay.as_mut(), request) {
                        self.answer_replay(socket, request).await;
                    }
                }
            }
        }
    }

    async fn publish(&mut self, events: &[KvEvent]) {
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let payload = Bytes::from(encode(events, ts, self.block_size));
        let seq = self.next_seq;
        self.next_seq += 1;
        let frames = vec![
            self.topic.clone(),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            payload.clone(),
        ];
        if let Ok(m) = ZmqMessage::try_from(frames)
            && let Err(e) = self.events.send(m).await
        {
            tracing::warn!("--kv-events: batch {seq} not sent: {e}");
        }
        if self.sent.len() == REPLAY_BUFFER {
            self.sent.pop_front();
        }
        self.sent.push_back((seq, payload));
    }

    /// `[identity, "", start]` (or `[identity, start]`): every buffered batch
    /// from `start` on, then the end marker.
    async fn answer_replay(&self, socket: &mut RouterSocket, request: ZmqMessage) {
        let frames = request.into_vec();
        let (Some(id), Some(start)) = (frames.first(), frames.last()) else {
            return;
        };
        let Ok(start) = <[u8; 8]>::try_from(start.as_ref()).map(u64::from_be_bytes) else {
            tracing::warn!("--kv-events-replay: a request without an 8-byte start sequence");
            return;
        };
        let reply = |seq: Bytes, payload: Bytes| {
            ZmqMessage::try_from(vec![id.clone(), Bytes::new(), seq, payload])
        };
        for (seq, payload) in self.sent.iter().filter(|(s, _)| *s >= start) {
            let m = reply(Bytes::copy_from_slice(&seq.to_be_bytes()), payload.clone());
            if let Ok(m) = m
                && socket.send(m).await.is_err()
            {
                return;
            }
        }
        if let Ok(m) = reply(Bytes::copy_from_slice(&END_SEQ), Bytes::new()) {
            let _ = socket.send(m).await;
        }
    }
}

/// The next replay request, or never without a replay socket.
async fn recv_replay(socket: &mut Option<RouterSocket>) -> zeromq::ZmqResult<ZmqMessage> {
    match socket {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_vllms_array_of_ts_and_tagged_maps() {
        let events = [
            KvEvent::Stored {
                hashes: vec![7, u64::MAX],
                parent: None,
                tokens: vec![1, 2, 3, 4],
            },
            KvEvent::Removed { hashes: vec![7] },
            KvEvent::Cleared,
        ];
        let bytes = encode(&events, 1.5, 2);
        let v: serde_json::Value = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(
            v,
            serde_json::json!([1.5, [
                {"type": "BlockStored", "block_hashes": [7, u64::MAX], "parent_block_hash": null,
                 "token_ids": [1, 2, 3, 4], "block_size": 2, "lora_id": null, "medium": null, "lora_name": null},
                {"type": "BlockRemoved", "block_hashes": [7], "medium": null},
                {"type": "AllBlocksCleared"},
            ]])
        );
        // A two-element array, a float64, then maps whose first key is the tag.
        assert_eq!(&bytes[..2], &[0x92, 0xcb]);
        let first_map = &bytes[10..];
        assert_eq!(&first_map[..7], b"\x93\x88\xa4type");
    }

    #[test]
    fn only_tcp_endpoints_bind_and_a_star_means_every_interface() {
        assert_eq!(
            bind_address("--kv-events", "tcp://*:5557").unwrap(),
            "tcp://0.0.0.0:5557"
        );
        let e = bind_address("--kv-events", "ipc:///tmp/x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--kv-events \"ipc:///tmp/x\": expected tcp://HOST:PORT"
        );
    }
}
