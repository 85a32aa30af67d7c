//! llama-server's `GET /props`: what clients of it read at start-up (the
//! context per request, the slots, the default sampling, the chat template).
//! Read-only, as llama-server's is without `--props`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use ferrox_sampling::sampler::SamplingParams;
use serde::Serialize;

use crate::state::AppState;

/// What the server was started with that `/props` reports.
#[derive(Clone, Debug, Default)]
pub struct ServerFacts {
    /// The model file.
    pub model_path: String,
    /// Requests decoded at once (`--max-seqs`, llama-server's slots).
    pub total_slots: usize,
    /// The model's Jinja chat template, as the file gives it.
    pub chat_template: Option<String>,
    /// What the model file says of itself.
    pub card: crate::model_card::ModelCard,
}

#[derive(Serialize)]
struct Props<'a> {
    default_generation_settings: Settings,
    total_slots: usize,
    model_path: &'a str,
    chat_template: &'a str,
    modalities: Modalities,
    build_info: String,
    is_sleeping: bool,
}

#[derive(Serialize)]
pub(crate) struct Settings {
    id: usize,
    id_task: i64,
    n_ctx: u64,
    speculative: bool,
    is_processing: bool,
    params: Params,
    prompt: &'static str,
}

/// The seed llama-server reports for "random" (its `LLAMA_DEFAULT_SEED`).
const RANDOM_SEED: u64 = u32::MAX as u64;

/// A request's sampling in llama-server's names (`generation_settings`).
#[derive(Serialize)]
pub(crate) struct Params {
    n_predict: i64,
    seed: u64,
    temperature: f32,
    top_k: usize,
    top_p: f32,
    min_p: f32,
    xtc_probability: f32,
    typical_p: f32,
    repeat_last_n: usize,
    repeat_penalty: f32,
    presence_penalty: f32,
    frequency_penalty: f32,
    dry_multiplier: f32,
    mirostat: u8,
    stop: Vec<String>,
    max_tokens: usize,
    ignore_eos: bool,
    stream: bool,
    n_probs: usize,
    /// The order ferrox applies them in.
    samplers: [&'static str; 5],
}

impl Settings {
    /// Slot `id` of the server, with the default sampling.
    pub(crate) fn slot(st: &AppState, id: usize, is_processing: bool) -> Settings {
        Settings {
            id,
            id_task: -1,
            n_ctx: st.engine.ceiling().max_context,
            speculative: false,
            is_processing,
            params: Params::of(
                &SamplingParams::default(),
                &Asked::default(),
                st.server.default_max_tokens,
            ),
            prompt: "",
        }
    }
}

/// What a request asked for beside its sampler.
#[derive(Default)]
pub(crate) struct Asked {
    /// `None`: no limit (-1).
    pub n_predict: Option<usize>,
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    pub stream: bool,
    pub n_probs: usize,
}

impl Params {
    /// `s` and `asked` in llama-server's names; `max_tokens` is what a
    /// request without a limit gets.
    pub(crate) fn of(s: &SamplingParams, asked: &Asked, max_tokens: usize) -> Params {
        Params {
            n_predict: asked.n_predict.map_or(-1, |n| n as i64),
            seed: s.seed.unwrap_or(RANDOM_SEED),
            temperature: s.temperature,
            top_k: s.top_k,
            top_p: s.top_p,
            min_p: s.min_p,
            xtc_probability: 0.0,
            typical_p: 1.0,
            repeat_last_n: s.penalty_last_n,
            repeat_penalty: s.repetition_penalty,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
            dry_multiplier: 0.0,
            mirostat: 0,
            stop: asked.stop.clone(),
            max_tokens: asked.n_predict.unwrap_or(max_tokens),
            ignore_eos: asked.ignore_eos,
            stream: asked.stream,
            n_probs: asked.n_probs,
            samplers: ["penalties", "top_k", "top_p", "min_p", "temperature"],
        }
    }
}

#[derive(Serialize)]
struct Modalities {
    vision: bool,
    audio: bool,
}

/// `GET /props`.
pub async fn props(State(st): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let facts = &st.facts;
    let props = Props {
        default_generation_settings: Settings::slot(&st, 0, st.engine.stats().running > 0),
        total_slots: facts.total_slots,
        model_path: &facts.model_path,
        chat_template: facts.chat_template.as_deref().unwrap_or(""),
        modalities: Modalities {
            vision: false,
            audio: false,
        },
        build_info: format!("ferrox {}", env!("CARGO_PKG_VERSION")),
        is_sleeping: false,
    };
    Json(serde_json::to_value(props).expect("props serialize"))
}
