//! Knobs shared by several commands: the KV layout (`inspect`, `serve`, `run`) and
//! the activation path (`run`, `serve`, `bench`). Each is a flag and an environment variable (the flag wins);
//! the defaults live in `ferrox_engine::kv_plan::defaults`.

use anyhow::{Context, Result};
use clap::Args;
use ferrox_engine::byte_size::parse_byte_size;
use ferrox_engine::kv_plan::defaults;
use ferrox_models::ActivationPath;

/// A parser for a positive count whose error names the environment variable too,
/// since a malformed value may have come from either.
pub fn count_knob(
    env: &'static str,
) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync + 'static {
    move |s: &str| match s.trim().parse::<usize>() {
        Ok(0) => Err(format!("must be at least 1 (set by the flag or by {env})")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "not a positive integer (set by the flag or by {env})"
        )),
    }
}

/// Threads to run on: `--threads` as given, else one per core the process
/// may use.
pub fn threads_or_all(threads: Option<usize>) -> usize {
    threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// A `--spec` type.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SpecType {
    None,
    /// Prompt lookup.
    Ngram,
    /// The model's multi-token-prediction head.
    Mtp,
}

/// Speculative decoding (`serve` and `run`).
#[derive(Args, Debug, Clone)]
pub struct SpecArgs {
    /// Speculative decoding, checked in one step: the output is the output
    /// without it, token for token. `ngram` drafts the tokens that followed
    /// the last earlier occurrence of the text's last few tokens (prompt
    /// lookup, llama-server's `--spec-type ngram-simple`); it helps where the
    /// answer copies its input (edits, quotes, code). `mtp` drafts with the
    /// model's own multi-token-prediction head (llama-server's `draft-mtp`;
    /// Qwen3.5 files carry one). Either turns itself off while more requests
    /// decode than --spec-max-batch. `none` is off.
    #[arg(long, visible_alias = "spec-type", env = "FERROX_SPEC", value_parser = parse_spec, default_value = "none", value_name = "none|ngram|mtp")]
    pub spec: SpecType,
    /// Most tokens drafted a step (llama-server's `--draft-max`). Each
    /// request's drafts start at 8 tokens (or this, if fewer), double while a
    /// whole draft is kept, and fall back to one past the tokens kept when one
    /// is refused.
    #[arg(long, visible_aliases = ["spec-draft-n-max", "draft", "draft-n"], env = "FERROX_DRAFT_MAX", value_parser = count_knob("FERROX_DRAFT_MAX"), default_value_t = ferrox_engine::speculation::Speculation::default().max_draft, value_name = "N")]
    pub draft_max: usize,
    /// Speculation runs only while at most this many requests decode.
    #[arg(long, env = "FERROX_SPEC_MAX_BATCH", value_parser = count_knob("FERROX_SPEC_MAX_BATCH"), default_value_t = ferrox_engine::speculation::Speculation::default().max_batch, value_name = "N")]
    pub spec_max_batch: usize,
    /// A smaller model that drafts for this one (llama-server's `-md`): its
    /// greedy guesses are checked in one step, so the output is the output
    /// without it, token for token. It must share the model's vocabulary.
    /// Its KV is its own, outside --kv-memory.
    #[arg(
        long,
        visible_alias = "model-draft",
        env = "FERROX_DRAFT_MODEL",
        value_name = "MODEL"
    )]
    pub draft_model: Option<String>,
    /// The draft model stops guessing for a request at a guess less likely
    /// than this under the draft (llama-server's `--draft-p-min`).
    #[arg(long, env = "FERROX_DRAFT_P_MIN", value_parser = probability, default_value_t = ferrox_engine::speculation::Speculation::default().draft_p_min, value_name = "P")]
    pub draft_p_min: f32,
}

/// A probability, 0 to 1.
fn probability(s: &str) -> Result<f32, String> {
    match s.trim().parse::<f32>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("{s:?}: a probability, from 0 to 1")),
    }
}

/// `--spec`'s names, llama-server's included.
fn parse_spec(v: &str) -> Result<SpecType, String> {
    match v {
        "none" | "off" => Ok(SpecType::None),
        "ngram" | "ngram-simple" => Ok(SpecType::Ngram),
        "mtp" | "draft-mtp" => Ok(SpecType::Mtp),
        _ => Err(format!(
            "{v:?} is not a speculation type here: none, ngram (llama-server's ngram-simple) or mtp (draft-mtp); a draft model is given with --draft-model (-md)"
        )),
    }
}

impl SpecArgs {
    /// The engine's speculation, if on (a draft model turns it on).
    pub fn speculation(&self) -> Option<ferrox_engine::speculation::Speculation> {
        (self.spec != SpecType::None || self.draft_model.is_some()).then(|| {
            ferrox_engine::speculation::Speculation {
                max_draft: self.draft_max,
                max_batch: self.spec_max_batch,
                draft_p_min: self.draft_p_min,
                ..Default::default()
            }
        })
    }
}

impl SpecArgs {
    /// The drafter: the draft model, loaded, if one is named, or the model's
    /// own head with `--spec mtp`.
    pub fn drafter(
        &self,
        threads: usize,
        activations: ActivationPath,
    ) -> Result<Option<ferrox_engine::Drafter>> {
        let Some(name) = &self.draft_model else {
            return Ok((self.spec == SpecType::Mtp).then_some(ferrox_engine::Drafter::Mtp));
        };
        if self.spec == SpecType::Mtp {
            anyhow::bail!("--spec mtp drafts with the model's own head: it takes no --draft-model");
        }
        let path = ferrox_hub::model_ref::resolve(Some(name)).context("--draft-model")?;
        let model = ferrox_models::model::Model::load_with(&path, threads, activations)
            .with_context(|| format!("--draft-model {}", path.display()))?;
        let decoder = model.net.generator().context("--draft-model")?;
        Ok(Some(ferrox_engine::Drafter::Model {
            decoder: Box::new(decoder),
            tokenizer: std::sync::Arc::new(model.tokenizer),
        }))
    }
}

/// llama-server's and llama-cli's flags for where a model comes from and runs.
#[derive(Args, Debug, Clone)]
pub struct LlamaHabits {
    /// A Hugging Face Hub model, `USER/REPO[:QUANT]` (llama-server's `-hf`): the
    /// same as `-m hf.co/USER/REPO[:QUANT]`.
    #[arg(
        long = "hf-repo",
        visible_alias = "hf",
        value_name = "USER/REPO[:QUANT]"
    )]
    pub hf_repo: Option<String>,
    /// Layers to offload to a GPU (llama.cpp's `-ngl`): accepted, and changes
    /// nothing, since ferrox runs on the CPU.
    #[arg(
        long = "n-gpu-layers",
        visible_alias = "gpu-layers",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub n_gpu_layers: Option<String>,
}

impl LlamaHabits {
    /// Makes `model` what these flags say: `-hf` names a Hub model (an error
    /// beside `-m`); `-ngl` is noted.
    pub fn apply(&self, model: &mut Option<String>) -> anyhow::Result<()> {
        if let Some(n) = &self.n_gpu_layers {
            eprintln!("note: -ngl {n} changes nothing: ferrox runs on the CPU");
        }
        if let Some(r) = &self.hf_repo {
            if let Some(m) = model {
                anyhow::bail!("give -m {m} or -hf, not both");
            }
            *model = Some(match r.starts_with("hf.co/") {
                true => r.clone(),
                false => format!("hf.co/{r}"),
            });
        }
        Ok(())
    }
}

/// The activation path of the forward pass.
#[derive(Args, Debug, Clone)]
pub struct ActivationArgs {
    /// Activations of the matrix products: `int16` (16-bit integers, ~1e-5 from
    /// exact, fast where the CPU has its kernel), `f32` (the exact function the
    /// GGUF defines) or `auto` (int16 on CPUs with AVX2 or AVX-512 VNNI, else f32).
    #[arg(
        long,
        env = "FERROX_ACTIVATIONS",
        default_value = "auto",
        value_name = "int16|f32|auto"
    )]
    pub activations: ActivationPath,
}

/// KV cache layout flags.
#[derive(Args, Debug, Clone)]
pub struct KvArgs {
    /// Token positions per KV block.
    #[arg(long, env = "FERROX_CB_KV_BLOCK_SIZE", value_parser = count_knob("FERROX_CB_KV_BLOCK_SIZE"), default_value_t = defaults::KV_BLOCK_SIZE, value_name = "N")]
    pub kv_block_size: usize,
    /// KV memory budget (e.g. 2GiB, 512MiB) [default: 1GiB].
    #[arg(long, env = "FERROX_CB_KV_MEMORY", value_name = "SIZE")]
    pub kv_memory: Option<String>,
    /// Requests in flight at once (llama-server's `-np` / `--parallel`).
    #[arg(long, visible_alias = "parallel", env = "FERROX_CB_MAX_SEQS", value_parser = count_knob("FERROX_CB_MAX_SEQS"), default_value_t = defaults::MAX_SEQS, value_name = "N")]
    pub max_seqs: usize,
    /// Token budget of one step (prefill chunk). An encoder's step takes
    /// whole sequences, so at least its context and 2048 tokens.
    #[arg(long, env = "FERROX_CB_PREFILL_CHUNK", value_parser = count_knob("FERROX_CB_PREFILL_CHUNK"), default_value_t = defaults::PREFILL_CHUNK, value_name = "N")]
    pub prefill_chunk: usize,
    /// KV cache element type: f16 (the default; half of f32's memory, so
    /// twice the positions in --kv-memory; 0.001 nats from f32), f32 (the
    /// default with --activations f32, which stays exact), q8_0 (ggml's
    /// blocks of each head's rotated vector, keys less their layer's mean
    /// key, which a 64-token pass at start computes: 34 bytes per 32 values,
    /// 0.013-0.017 nats) or q4_0 (18 bytes per 32, 0.2-0.3 nats); the block
    /// types need head dimensions that are multiples of 32. llama-server's
    /// `-ctk` / `-ctv` (`--cache-type-k`, `--cache-type-v`) are taken too, and
    /// must agree: keys and values share a type here.
    #[arg(long = "kv-type", visible_aliases = ["cache-type-k", "cache-type-v"], env = "FERROX_KV_TYPE", action = clap::ArgAction::Append, value_name = "TYPE")]
    pub kv_type: Vec<ferrox_models::kv_store::KvElement>,
}

/// Engine flags beside the KV layout: the queue, a block count, the context ceiling.
#[derive(Args, Debug, Clone)]
pub struct EngineArgs {
    #[command(flatten)]
    pub kv: KvArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Requests that may wait beyond --max-seqs running ones: new requests get
    /// 503 queue_full once running plus waiting reach max-seqs + max-queue.
    #[arg(long, env = "FERROX_CB_MAX_QUEUE", value_parser = count_knob("FERROX_CB_MAX_QUEUE"), default_value_t = 512, value_name = "N")]
    pub max_queue: usize,
    /// KV blocks in the pool (instead of --kv-memory).
    #[arg(long, env = "FERROX_CB_KV_BLOCKS", value_parser = count_knob("FERROX_CB_KV_BLOCKS"), conflicts_with = "kv_memory", value_name = "N")]
    pub kv_blocks: Option<usize>,
    /// Longest request in positions (prompt + max_tokens) [default: the model's
    /// context]. llama-server's `-c` / `--ctx-size` (there the KV of all slots
    /// together; here one request's, the KV pool being --kv-memory).
    #[arg(short = 'c', long, visible_alias = "ctx-size", env = "FERROX_CB_MAX_CONTEXT", value_parser = count_knob("FERROX_CB_MAX_CONTEXT"), value_name = "N")]
    pub max_context: Option<usize>,
    /// Turn off the shared-prefix KV cache (on by default: prompts that start like
    /// an earlier one reuse its KV pages instead of running them again).
    /// `FERROX_PREFIX_CACHE=0|off|false` turns it off, `1|on|true` keeps it on.
    #[arg(long, env = "FERROX_PREFIX_CACHE", action = clap::ArgAction::Set, value_parser = prefix_cache_off, default_value = "on", num_args = 0, default_missing_value = NO_PREFIX_CACHE_FLAG)]
    pub no_prefix_cache: bool,
    /// Recurrent-state slots of a hybrid model (Qwen3.5), three per request: its
    /// live state and two page-boundary checkpoints, and with speculation a
    /// fourth, the state before a draft [default: that many per --max-seqs].
    /// Fewer makes requests wait for slots (refusal reason "recurrent budget");
    /// one snapshot per request's slots is kept for prefix hits.
    #[arg(long, env = "FERROX_CB_RECURRENT_SLOTS", value_parser = count_knob("FERROX_CB_RECURRENT_SLOTS"), value_name = "N")]
    pub recurrent_slots: Option<usize>,
}

/// What `--no-prefix-cache` given as a flag parses.
const NO_PREFIX_CACHE_FLAG: &str = "--no-prefix-cache";

/// The flag, or `FERROX_PREFIX_CACHE`'s value (which says whether the cache is
/// on), as "the cache is off".
fn prefix_cache_off(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        NO_PREFIX_CACHE_FLAG | "0" | "off" | "no" | "false" => Ok(true),
        "1" | "on" | "yes" | "true" => Ok(false),
        _ => Err(format!(
            "FERROX_PREFIX_CACHE must be 1/on/true or 0/off/false, not {v:?}"
        )),
    }
}

impl EngineArgs {
    /// The engine configuration for a model of KV `shape`.
    pub fn config(
        &self,
        shape: &ferrox_engine::kv_plan::KvShape,
        kv_element: ferrox_models::kv_store::KvElement,
    ) -> Result<ferrox_engine::EngineConfig> {
        let kv = &self.kv;
        let kv_blocks = match self.kv_blocks {
            Some(n) => n,
            None => {
                let plan = ferrox_engine::kv_plan::KvPlan::from_memory(
                    shape,
                    kv.memory_bytes()?,
                    kv.kv_block_size,
                    kv.max_seqs,
                    kv.prefill_chunk,
                )?;
                usize::try_from(plan.n_blocks).unwrap_or(usize::MAX)
            }
        };
        Ok(ferrox_engine::EngineConfig {
            max_seqs: kv.max_seqs,
            prefill_chunk: kv.prefill_chunk,
            max_queue: self.max_queue,
            block_size: kv.kv_block_size,
            kv_blocks: Some(kv_blocks),
            max_context: self.max_context,
            prefix_cache: !self.no_prefix_cache,
            recurrent_slots: self.recurrent_slots,
            kv_element,
            speculation: self.spec.speculation(),
            kv_events: None,
        })
    }
}

impl KvArgs {
    /// The KV element type: as given (every spelling agreeing), else the
    /// default for the activation path `path`
    /// ([`ferrox_models::kv_store::KvElement::default_for`]).
    pub fn kv_element(
        &self,
        path: ferrox_models::ActivationPath,
    ) -> Result<ferrox_models::kv_store::KvElement> {
        use ferrox_models::kv_store::KvElement;
        match self.kv_type.split_first() {
            Some((first, rest)) => {
                anyhow::ensure!(
                    rest.iter().all(|t| t == first),
                    "--kv-type / -ctk / -ctv: keys and values share one type here; got {}",
                    self.kv_type
                        .iter()
                        .map(|t| t.name())
                        .collect::<Vec<_>>()
                        .join(" and ")
                );
                Ok(*first)
            }
            None => Ok(KvElement::default_for(path)),
        }
    }

    /// The KV memory budget in bytes.
    pub fn memory_bytes(&self) -> Result<u64> {
        match &self.kv_memory {
            None => Ok(defaults::KV_MEMORY_BYTES),
            Some(s) => parse_byte_size(s).context("--kv-memory / FERROX_CB_KV_MEMORY"),
        }
    }
}
