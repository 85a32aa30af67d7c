//! The engine's knobs and what they must satisfy before it starts.

use crate::kv_plan::defaults;
use ferrox_models::kv_store::KvElement;

use crate::ledger::StatePools;
use crate::states::slots_per_request;

/// Engine knobs (SPEC "Knobs").
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Requests in flight at once, prompts still prefilling included.
    pub max_seqs: usize,
    /// Prompt tokens per step.
    pub prefill_chunk: usize,
    /// Requests that may wait for admission beyond `max_seqs` running ones (the
    /// engine holds at most `max_seqs + max_queue`, SPEC S11).
    pub max_queue: usize,
    /// Positions per KV block (page).
    pub block_size: usize,
    /// KV blocks in the pool (`None`: no budget, grow on demand).
    pub kv_blocks: Option<usize>,
    /// Longest request in positions (`None`: the model's context length).
    pub max_context: Option<usize>,
    /// Share written KV pages between requests with a common prompt prefix.
    pub prefix_cache: bool,
    /// Recurrent-state slots of a hybrid model's pool, three per request, four
    /// with speculation ([`crate::states::slots_per_request`]; `None`: that
    /// many per request row, so the slots never bind first).
    pub recurrent_slots: Option<usize>,
    /// The KV cache's element type.
    pub kv_element: KvElement,
    /// Speculative decoding by prompt lookup (`None`: off).
    pub speculation: Option<crate::speculation::Speculation>,
    /// Where the prefix cache's events go (`None`: nobody follows them).
    pub kv_events: Option<crate::kv_events::KvEventSink>,
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
            prefix_cache: true,
            recurrent_slots: None,
            kv_element: KvElement::F32,
            speculation: None,
            kv_events: None,
        }
    }
}

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0} must be at least 1")]
    ZeroKnob(&'static str),
    /// A window model's chunks end on pages (SPEC S22): a step must hold one.
    #[error(
        "the prefill chunk ({chunk} tokens) is smaller than a KV block ({block} positions); a model with sliding-window layers prefills whole blocks, so raise --prefill-chunk / FERROX_CB_PREFILL_CHUNK or lower --kv-block-size / FERROX_CB_KV_BLOCK_SIZE"
    )]
    ChunkBelowPage { chunk: usize, block: usize },
    /// The pool cannot hold the smallest request: every request would be refused.
    #[error(
        "the KV pool holds {blocks} blocks, but the smallest request (one prompt token and one generated) needs {need}; raise --kv-memory / FERROX_CB_KV_MEMORY or --kv-blocks / FERROX_CB_KV_BLOCKS"
    )]
    PoolTooSmall { blocks: u64, need: u64 },
    /// A hybrid model's state pool cannot hold one request's slots.
    #[error(
        "the recurrent-state pool holds {slots} slots, but a request of this hybrid model holds {need}; raise --recurrent-slots / FERROX_CB_RECURRENT_SLOTS"
    )]
    StatePoolTooSmall { slots: usize, need: u64 },
    #[error(transparent)]
    Plan(#[from] crate::kv_plan::KvPlanError),
    #[error(transparent)]
    KvElement(#[from] ferrox_models::kv_store::KvElementUnfit),
    /// A draft model proposes token ids: they must mean the same tokens.
    #[error(
        "--draft-model: the draft's vocabulary differs from the model's ({draft} tokens against {target}; first at token id {at}); a draft model must share the model's tokenizer"
    )]
    DraftVocabulary {
        target: usize,
        draft: usize,
        at: u32,
    },
    /// `--spec mtp` on a model whose file has no multi-token-prediction block.
    #[error(
        "--spec mtp: the model's file has no multi-token-prediction head (no `nextn_predict_layers` blocks); use --spec ngram or a --draft-model"
    )]
    NoDraftHead,
    /// The file's head could not be loaded.
    #[error("--spec mtp: the model's multi-token-prediction head cannot be loaded: {0}")]
    DraftHead(String),
    /// The KV cache's key offsets could not be computed (`--kv-type` q8_0 or
    /// q4_0 runs the model over a fixed text at start).
    #[error("--kv-type {element}: the model's key offsets cannot be computed: {source}")]
    KeyOffsets {
        element: ferrox_models::kv_store::KvElement,
        source: ferrox_models::ModelError,
    },
    #[error("cannot start the engine thread: {0}")]
    Thread(std::io::Error),
}

pub(super) fn check_knobs(config: &EngineConfig) -> Result<(), StartError> {
    for (name, v) in [
        ("max seqs", config.max_seqs),
        ("prefill chunk", config.prefill_chunk),
        ("KV block size", config.block_size),
    ] {
        if v == 0 {
            return Err(StartError::ZeroKnob(name));
        }
    }
    Ok(())
}

/// The recurrent-state pools of a hybrid model: its request slots
/// ([`slots_per_request`] per request row unless set) and one snapshot per
/// request's worth of them with the prefix cache (`None` without recurrent
/// layers).
pub(super) fn state_pools(
    config: &EngineConfig,
    recurrent: bool,
) -> Result<Option<StatePools>, StartError> {
    if !recurrent {
        return Ok(None);
    }
    let spare = config.speculation.is_some();
    let need = slots_per_request(spare);
    let slots = config
        .recurrent_slots
        .unwrap_or(config.max_seqs * need as usize);
    if (slots as u64) < need {
        return Err(StartError::StatePoolTooSmall { slots, need });
    }
    let snapshots = if config.prefix_cache {
        slots as u64 / need
    } else {
        0
    };
    Ok(Some(StatePools {
        request_slots: slots as u32,
        spare,
        snapshots: snapshots as u32,
    }))
}
