//! Starting an engine: the knobs checked, the KV plan and ledger laid out,
//! the draft model checked, and the worker thread spawned.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::mpsc;

use ferrox_models::decoder::Decoder;
use ferrox_text::tokenizer::Tokenizer;

use super::config::{check_knobs, state_pools};
use super::{Drafter, EngineConfig, StartError, Worker, draft};
use crate::admission::{Chunking, SlotTable};
use crate::ceiling::KvCeiling;
use crate::handle::{EngineHandle, Shared};
use crate::kv_plan::{KvPlan, KvShape};
use crate::ledger::{KvLedger, LedgerConfig};
use crate::queue_gate::QueueGate;
use crate::stats::EngineStats;

/// Starts an engine for `decoder` on its own worker thread.
pub fn start(
    decoder: Box<dyn Decoder>,
    tokenizer: Arc<Tokenizer>,
    config: EngineConfig,
) -> Result<EngineHandle, StartError> {
    start_with_draft(decoder, tokenizer, config, None)
}

/// [`start`], speculating with a draft model or the model's own head when
/// one is given (its drafts take the place of prompt lookup's;
/// `config.speculation`'s bounds apply, its defaults if it is `None`).
pub fn start_with_draft(
    mut decoder: Box<dyn Decoder>,
    tokenizer: Arc<Tokenizer>,
    mut config: EngineConfig,
    drafter: Option<Drafter>,
) -> Result<EngineHandle, StartError> {
    check_knobs(&config)?;
    if drafter.is_some() && config.speculation.is_none() {
        config.speculation = Some(crate::speculation::Speculation::default());
    }
    let draft = drafter
        .map(|d| draft::Draft::new(d, decoder.as_mut(), &tokenizer, config.block_size))
        .transpose()?;
    let encoder = decoder.is_encoder();
    let config = whole_sequences(config, decoder.as_ref());
    let hp = decoder.hyper_params().clone();
    decoder.kv_layout().check_element(config.kv_element)?;
    let shape = KvShape::new(&hp, config.kv_element);
    let plan = match config.kv_blocks {
        Some(n) => Some(KvPlan::from_blocks(
            &shape,
            n as u64,
            config.block_size,
            config.max_seqs,
            config.prefill_chunk,
        )?),
        None => None,
    };
    if let Some(p) = &plan
        && p.n_blocks < p.blocks_for(2)
    {
        return Err(StartError::PoolTooSmall {
            blocks: p.n_blocks,
            need: p.blocks_for(2),
        });
    }
    let max_context = config
        .max_context
        .unwrap_or(hp.context_length)
        .min(hp.context_length) as u64;
    // The model computes for the context it serves (LongRoPE's factor set).
    decoder.limit_context(max_context as usize);
    let layout = decoder.kv_layout().with_element(config.kv_element);
    if layout.window().is_some() && config.prefill_chunk < config.block_size {
        return Err(StartError::ChunkBelowPage {
            chunk: config.prefill_chunk,
            block: config.block_size,
        });
    }
    // Chunks end on pages with a window pool (S22), and with the prefix cache
    // where a pass holds a whole page: a prompt at a page boundary can take pages
    // others wrote meanwhile.
    let whole_page = config.prefill_chunk >= config.block_size;
    let states = state_pools(&config, layout.n_recurrent > 0)?;
    // A hybrid model's state is checkpointed at page boundaries: its prompts
    // also stop at their last one, so a later prompt can start there.
    let chunking = match (layout.window(), config.prefix_cache && whole_page) {
        _ if encoder => Chunking::Whole,
        (None, true) if states.is_some() => Chunking::PagesThenTail,
        (Some(_), _) | (None, true) => Chunking::Pages,
        (None, false) => Chunking::Free,
    };
    let ledger = KvLedger::new(LedgerConfig {
        page_size: config.block_size,
        full_pages: plan.as_ref().map(|p| p.n_blocks),
        window: layout.window(),
        window_pages: plan.as_ref().map(|p| p.window_pages()),
        max_span: config.prefill_chunk,
        prefix_cache: config.prefix_cache,
        states,
    });
    let ledger = match config.kv_events {
        Some(_) => ledger.recording_events(),
        None => ledger,
    };
    let ceiling = KvCeiling {
        max_context,
        shape,
        plan,
        prefill_chunk: config.prefill_chunk,
        block_size: config.block_size,
    };
    let stats = Arc::new(EngineStats::default());
    EngineStats::set(&stats.kv_blocks_total, config.kv_blocks.unwrap_or(0) as u64);
    EngineStats::set(&stats.kv_blocks_free, config.kv_blocks.unwrap_or(0) as u64);
    EngineStats::set(&stats.kv_block_size, config.block_size as u64);
    let (inbox, rx) = mpsc::channel();
    let healthy = Arc::new(AtomicBool::new(true));
    let shared = Arc::new(Shared {
        inbox,
        next_id: AtomicU64::new(1),
        gate: QueueGate::new(config.max_seqs + config.max_queue),
        stats: Arc::clone(&stats),
        ceiling,
        vocab: hp.vocab_size,
        generates: !encoder,
        healthy: Arc::clone(&healthy),
    });
    // Last of the checks: an 8- or 4-bit cache runs the model once for its
    // key offsets.
    let store = decoder
        .kv_store(config.kv_element, config.block_size)
        .map_err(|source| StartError::KeyOffsets {
            element: config.kv_element,
            source,
        })?;
    let worker = Worker {
        store,
        slots: SlotTable::new(config.max_seqs),
        decoder,
        tokenizer,
        ledger,
        config,
        stats,
        queue: VecDeque::new(),
        running: BTreeMap::new(),
        early_cancels: BTreeSet::new(),
        cursor: 0,
        peak: 0,
        chunking,
        healthy,
        draft,
    };
    std::thread::Builder::new()
        .name("ferrox-engine".into())
        .spawn(move || worker.serve(rx))
        .map_err(StartError::Thread)?;
    Ok(EngineHandle { shared })
}

/// An encoder's engine: its sequences run whole, in one pass each (a pass
/// holds a whole context, and at least `ENCODER_PASS_TOKENS`), and never from
/// the prefix cache (a position's state depends on the tokens after it).
fn whole_sequences(mut config: EngineConfig, decoder: &dyn Decoder) -> EngineConfig {
    if decoder.is_encoder() {
        let hp = decoder.hyper_params();
        let context = config
            .max_context
            .unwrap_or(hp.context_length)
            .min(hp.context_length);
        config.prefix_cache = false;
        config.prefill_chunk = config
            .prefill_chunk
            .max(context)
            .max(crate::kv_plan::defaults::ENCODER_PASS_TOKENS);
    }
    config
}
