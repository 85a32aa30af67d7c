//! Ollama's model routes over the served model and the model cache:
//! `tags` and `ps` list the served model, `show` describes it from its file,
//! `version` names the Ollama API these routes follow, and `delete` removes
//! a model from the cache (`pull`, which fetches one, is [`super::pull`]).

use std::path::Path;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use ferrox_hub::HubError;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{OllamaError, body_json};
use crate::error::ApiError;
use crate::model_card::ModelCard;
use crate::request::typed;
use crate::state::AppState;

/// The Ollama release whose API these routes follow (clients gate features on
/// `/api/version`).
pub const OLLAMA_API_VERSION: &str = "0.12.0";

#[derive(Serialize)]
struct Details {
    parent_model: &'static str,
    format: &'static str,
    family: String,
    families: Vec<String>,
    parameter_size: String,
    quantization_level: String,
}

impl Details {
    fn of(card: &ModelCard) -> Details {
        Details {
            parent_model: "",
            format: "gguf",
            family: card.family.clone(),
            families: vec![card.family.clone()],
            parameter_size: card.parameter_size(),
            quantization_level: card.quantization.clone(),
        }
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn modified_at(card: &ModelCard) -> String {
    rfc3339(card.modified.map_or_else(Utc::now, DateTime::<Utc>::from))
}

#[derive(Serialize)]
struct ListedModel {
    name: String,
    model: String,
    modified_at: String,
    size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    digest: Option<String>,
    details: Details,
}

fn listed(st: &AppState) -> ListedModel {
    let card = &st.facts.card;
    ListedModel {
        name: st.model_id.clone(),
        model: st.model_id.clone(),
        modified_at: modified_at(card),
        size: card.file_bytes,
        digest: card.digest.clone(),
        details: Details::of(card),
    }
}

/// `GET /api/tags`: the models served here.
pub(super) async fn tags(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(serde_json::json!({ "models": [listed(&st)] }))
}

#[derive(Serialize)]
struct Running {
    #[serde(flatten)]
    model: ListedModel,
    /// The model stays loaded while the server runs.
    expires_at: String,
    size_vram: u64,
    /// The context the server serves (not the file's training context).
    context_length: u64,
}

/// `GET /api/ps`: the models loaded now.
pub(super) async fn ps(State(st): State<Arc<AppState>>) -> Json<Value> {
    let running = Running {
        model: listed(&st),
        expires_at: rfc3339(Utc::now() + chrono::Duration::days(365 * 290)),
        size_vram: 0,
        context_length: st.engine.ceiling().max_context,
    };
    Json(serde_json::json!({ "models": [running] }))
}

/// `GET /api/version`.
pub(super) async fn version() -> Json<Value> {
    Json(serde_json::json!({
        "version": OLLAMA_API_VERSION,
        "ferrox": env!("CARGO_PKG_VERSION"),
    }))
}

/// A body naming a model: `model`, or `name` as older clients send it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Named {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    name: Option<String>,
    /// `show`'s full vocabulary switch: the vocabulary is never listed.
    #[serde(default)]
    #[allow(dead_code)]
    verbose: Option<bool>,
    /// `pull` only: whether progress streams (the default).
    #[serde(default)]
    pub(super) stream: Option<bool>,
    /// `pull` only: the Hub is reached over HTTPS whatever this says.
    #[serde(default)]
    #[allow(dead_code)]
    insecure: Option<bool>,
}

pub(super) fn named(body: Result<Bytes, BytesRejection>) -> Result<(String, Named), ApiError> {
    let n: Named = typed(&body_json(body)?)?;
    let name = n
        .model
        .clone()
        .or_else(|| n.name.clone())
        .filter(|m| !m.is_empty())
        .ok_or(crate::invalid::Invalid::Missing { field: "model" })?;
    Ok((name, n))
}

#[derive(Serialize)]
struct Shown<'a> {
    modelfile: String,
    parameters: String,
    template: &'a str,
    details: Details,
    model_info: &'a Map<String, Value>,
    capabilities: Vec<&'static str>,
    modified_at: String,
}

/// `POST /api/show`: the served model, from its file (one model is served, so
/// any name describes it, as any name is answered).
pub(super) async fn show(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if let Err(e) = named(body) {
        return OllamaError(e).into_response();
    }
    let card = &st.facts.card;
    let mut capabilities = vec!["completion"];
    if st.chat.is_some() {
        capabilities.push("tools");
    }
    if st.thinks() {
        capabilities.push("thinking");
    }
    Json(Shown {
        modelfile: format!("# Served by ferrox\nFROM {}\n", st.facts.model_path),
        parameters: "temperature 0.8\ntop_k 40\ntop_p 0.9\nrepeat_penalty 1.1\nrepeat_last_n 64"
            .into(),
        template: st.facts.chat_template.as_deref().unwrap_or("{{ .Prompt }}"),
        details: Details::of(card),
        model_info: &card.info,
        capabilities,
        modified_at: modified_at(card),
    })
    .into_response()
}

/// The status of a Hub failure: a name that names nothing is 404, a bad
/// file 422, the network or the disk 502 / 500.
fn hub_status(e: &HubError) -> StatusCode {
    match e {
        HubError::UnknownModel { .. } | HubError::NoSuchFile(_) | HubError::Directory { .. } => {
            StatusCode::NOT_FOUND
        }
        HubError::Hf(h) => match h {
            ferrox_hub::hf::HfError::Api(_) => StatusCode::BAD_GATEWAY,
            ferrox_hub::hf::HfError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::NOT_FOUND,
        },
        HubError::Corrupt(_) | HubError::Wheel { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        HubError::Http { .. } | HubError::Index(_) => StatusCode::BAD_GATEWAY,
        HubError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

pub(super) fn hub_error(e: &HubError) -> ApiError {
    ApiError::new(
        hub_status(e),
        "invalid_request_error",
        "model_unavailable",
        e.to_string(),
    )
}

/// `DELETE /api/delete`: removes a fetched model from the cache; the served
/// model's file is kept while it is served.
pub(super) async fn delete(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let name = match named(body) {
        Ok((name, _)) => name,
        Err(e) => return OllamaError(e).into_response(),
    };
    let served = Path::new(&st.facts.model_path);
    let installed = match ferrox_hub::model_ref::installed(&name) {
        Ok(p) => p,
        Err(e) => return OllamaError(hub_error(&e)).into_response(),
    };
    let Some(path) = installed else {
        return OllamaError(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "model_not_found",
            format!("model {name:?} not found"),
        ))
        .into_response();
    };
    if same_file(&path, served) {
        return OllamaError(ApiError::new(
            StatusCode::CONFLICT,
            "invalid_request_error",
            "model_in_use",
            format!(
                "model {name:?} is the model this server serves; stop the server to delete {}",
                path.display()
            ),
        ))
        .into_response();
    }
    match tokio::task::spawn_blocking(move || ferrox_hub::model_ref::delete(&name)).await {
        Ok(Ok(_)) => StatusCode::OK.into_response(),
        Ok(Err(e)) => OllamaError(hub_error(&e)).into_response(),
        Err(e) => {
            OllamaError(ApiError::internal(format!("the delete failed: {e}"))).into_response()
        }
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
