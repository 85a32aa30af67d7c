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
struct Settings {
    id: usize,
    id_task: i64,
    n_ctx: u64,
    speculative: bool,
    is_processing: bool,
    params: Params,
    prompt: &'static str,
}

/// The sampling a request that gives none gets, in llama-server's names.
#[derive(Serialize)]
struct Params {
    n_predict: i64,
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
    stop: [&'static str; 0],
    max_tokens: usize,
    ignore_eos: bool,
    stream: bool,
    n_probs: usize,
    /// The order ferrox applies them in.
    samplers: [&'static str; 5],
}

#[derive(Serialize)]
struct Modalities {
    vision: bool,
    audio: bool,
}

/// `GET /props`.
pub async fn props(State(st): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let d = SamplingParams::default();
    let facts = &st.facts;
    let props = Props {
        default_generation_settings: Settings {
            id: 0,
            id_task: -1,
            n_ctx: st.engine.ceiling().max_context,
            speculative: false,
            is_processing: st.engine.stats().running > 0,
            params: Params {
                n_predict: -1,
                temperature: d.temperature,
                top_k: d.top_k,
                top_p: d.top_p,
                min_p: d.min_p,
                xtc_probability: 0.0,
                typical_p: 1.0,
                repeat_last_n: d.penalty_last_n,
                repeat_penalty: d.repetition_penalty,
                presence_penalty: d.presence_penalty,
                frequency_penalty: d.frequency_penalty,
                dry_multiplier: 0.0,
                mirostat: 0,
                stop: [],
                max_tokens: st.default_max_tokens,
                ignore_eos: false,
                stream: false,
                n_probs: 0,
                samplers: ["penalties", "top_k", "top_p", "min_p", "temperature"],
            },
            prompt: "",
        },
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
