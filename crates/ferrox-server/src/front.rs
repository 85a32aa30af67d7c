//! The front of a server with several models ([`crate::registry`]): a
//! request names its model in the body's `model` (Ollama's, OpenAI's,
//! Anthropic's and llama-server's bodies all do), and is handed whole to that
//! model's own routes, loading it first when it is not loaded. A request that
//! names no model (`/props`, `/tokenize`, the chat page) goes to the model the
//! server started with, loaded again if it was unloaded; `GET /health` does
//! not load it, and the front answers it while the model is unloaded.
//!
//! The front answers the questions about models itself: `GET /v1/models` and
//! `/models` (every model of the folder, with llama-server's `status`),
//! `POST /models/load` and `/models/unload`, and Ollama's `GET /api/tags`
//! and `/api/ps`. A body's `keep_alive` (any route) sets how long its model
//! stays loaded; Ollama's `{"model", "keep_alive": 0}` with no prompt unloads
//! it at once.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::error::ApiError;
use crate::registry::{KeepAlive, Loaded, Registry};
use crate::routes::BODY_READ_LIMIT;
use crate::state::{AppState, Server};

/// The front's state: the server's, the id of the model it started with, and
/// the models.
pub struct Front {
    pub server: Arc<Server>,
    pub started: String,
    pub models: Arc<Registry>,
}

/// The router of a server with several models; `started` names the model
/// that answers requests naming none.
pub fn router(server: Arc<Server>, started: String, models: Arc<Registry>) -> Router {
    let front = Arc::new(Front {
        server,
        started,
        models,
    });
    Router::new()
        .route("/v1/models", get(list))
        .route("/models", get(list))
        .route("/v1/models/{*id}", get(one))
        .route("/models/load", post(load))
        .route("/models/unload", post(unload))
        .route("/api/tags", get(tags))
        .route("/api/ps", get(ps))
        .fallback(dispatch)
        .with_state(front)
}

/// The front's own routes take the API key as every route does.
fn check_key(f: &Front, req: &axum::http::request::Parts) -> Result<(), ApiError> {
    let Some(key) = &f.server.api_key else {
        return Ok(());
    };
    let header = |name: &str| req.headers.get(name).and_then(|h| h.to_str().ok());
    if key.accepts(header(header::AUTHORIZATION.as_str()))
        || header("x-api-key").is_some_and(|k| key.is(k))
    {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNAUTHORIZED,
        "invalid_request_error",
        "invalid_api_key",
        "missing or wrong API key (Authorization: Bearer KEY, or x-api-key: KEY)",
    ))
}

/// What the front reads of a body.
#[derive(Deserialize, Default)]
struct Peek {
    #[serde(default)]
    model: Option<Value>,
    #[serde(default)]
    keep_alive: Option<Value>,
    #[serde(default)]
    prompt: Option<Value>,
    #[serde(default)]
    messages: Option<Value>,
}

/// Hands the request to its model's routes.
async fn dispatch(State(f): State<Arc<Front>>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let (parts, body) = req.into_parts();
    if parts.method != Method::POST {
        if matches!(path.as_str(), "/health" | "/v1/health")
            && f.models.peek(&f.started).await.is_none()
        {
            return crate::routes::server_health(&f.server);
        }
        return on_started(&f, parts, body, &path).await;
    }
    let bytes = match axum::body::to_bytes(body, BODY_READ_LIMIT).await {
        Ok(b) => b,
        Err(_) => {
            return ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "request_too_large",
                format!("request body too large: over {BODY_READ_LIMIT} bytes"),
            )
            .response_for(&path);
        }
    };
    // The cache's routes name a model to fetch or delete, not one to serve.
    let is_cache = matches!(path.as_str(), "/api/pull" | "/api/delete");
    let peek: Peek = match is_cache {
        true => Peek::default(),
        false => serde_json::from_slice(&bytes).unwrap_or_default(),
    };
    let name = peek
        .model
        .as_ref()
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty());
    let Some(name) = name else {
        return on_started(&f, parts, Body::from(bytes), &path).await;
    };
    if let Err(e) = f.server.accepting() {
        return e.response_for(&path);
    }
    let keep = peek.keep_alive.as_ref().and_then(KeepAlive::parse);
    if keep == Some(KeepAlive::For(std::time::Duration::ZERO)) && is_ollama_load(&path, &peek) {
        return unload_now(&f, name, &path).await;
    }
    match model(&f, name, keep).await {
        Ok(app) => forward(&app, parts, Body::from(bytes)).await,
        Err(e) => e.response_for(&path),
    }
}

/// Ollama's "load" request: `/api/generate` or `/api/chat` with no prompt.
fn is_ollama_load(path: &str, p: &Peek) -> bool {
    let empty = |v: &Option<Value>| match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    };
    matches!(path, "/api/generate" | "/api/chat") && empty(&p.prompt) && empty(&p.messages)
}

/// Ollama's unload: `{"model", "keep_alive": 0}` with no prompt.
async fn unload_now(f: &Front, name: &str, path: &str) -> Response {
    match f.models.unload(name).await {
        Ok(_) => {
            let mut answer = json!({
                "model": name,
                "created_at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
                "done": true,
                "done_reason": "unload",
            });
            // Each route's answer has its own text field.
            if path == "/api/chat" {
                answer["message"] = json!({"role": "assistant", "content": ""});
            } else {
                answer["response"] = json!("");
            }
            axum::Json(answer).into_response()
        }
        Err(e) => e.response_for(path),
    }
}

/// The routes of model `name`, loaded if it is not.
async fn model(f: &Front, name: &str, keep: Option<KeepAlive>) -> Result<Router, ApiError> {
    Ok(f.models.get(name, keep).await?.app)
}

/// The routes of the started model, which answers requests that name none:
/// as it is if loaded (without counting a use), else loaded again.
async fn started(f: &Front) -> Result<Router, ApiError> {
    match f.models.peek(&f.started).await {
        Some(m) => Ok(m.app),
        None => model(f, &f.started, None).await,
    }
}

/// The request answered by the started model.
async fn on_started(
    f: &Front,
    parts: axum::http::request::Parts,
    body: Body,
    path: &str,
) -> Response {
    match started(f).await {
        Ok(app) => forward(&app, parts, body).await,
        Err(e) => e.response_for(path),
    }
}

/// The request, body restored, answered by `app`.
async fn forward(app: &Router, parts: axum::http::request::Parts, body: Body) -> Response {
    let req = Request::from_parts(parts, body);
    match app.clone().oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// One model as `/v1/models` lists it, with llama-server's `status`.
fn listed(id: &str, loaded: bool) -> Value {
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    json!({"id": id, "object": "model", "created": created, "owned_by": "ferrox",
           "status": {"value": if loaded { "loaded" } else { "unloaded" }}})
}

/// Every model, the started one first, and whether it is loaded.
async fn all(f: &Front) -> Vec<(String, bool)> {
    let loaded: Vec<String> = f.models.loaded().await.into_iter().map(|m| m.id).collect();
    f.models
        .available()
        .into_iter()
        .map(|(id, _)| {
            let is_loaded = loaded.contains(&id);
            (id, is_loaded)
        })
        .collect()
}

/// `GET /v1/models` and `/models`.
async fn list(State(f): State<Arc<Front>>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    if let Err(e) = check_key(&f, &parts) {
        return e.response_for(parts.uri.path());
    }
    let data: Vec<Value> = all(&f).await.iter().map(|(id, l)| listed(id, *l)).collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// `GET /v1/models/{id}`.
async fn one(State(f): State<Arc<Front>>, Path(id): Path<String>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    if let Err(e) = check_key(&f, &parts) {
        return e.response_for(parts.uri.path());
    }
    match all(&f).await.into_iter().find(|(m, _)| *m == id) {
        Some((m, l)) => axum::Json(listed(&m, l)).into_response(),
        None => ApiError::model_not_found(&id, &f.started).into_response(),
    }
}

#[derive(Deserialize)]
struct Named {
    model: String,
}

async fn named(f: &Front, req: Request) -> Result<String, ApiError> {
    let (parts, body) = req.into_parts();
    check_key(f, &parts)?;
    let bytes = axum::body::to_bytes(body, BODY_READ_LIMIT)
        .await
        .map_err(|e| ApiError::invalid(None, e.to_string()))?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::invalid(None, format!("invalid JSON body: {e}")))?;
    crate::request::typed::<Named>(&v).map(|n| n.model)
}

/// `POST /models/load`: `{"model"}` loaded now.
async fn load(State(f): State<Arc<Front>>, req: Request) -> Response {
    let name = match named(&f, req).await {
        Ok(n) => n,
        Err(e) => return e.into_response(),
    };
    match model(&f, &name, None).await {
        Ok(_) => axum::Json(json!({"success": true})).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `POST /models/unload`: `{"model"}` unloaded (its requests in flight
/// finish first).
async fn unload(State(f): State<Arc<Front>>, req: Request) -> Response {
    let name = match named(&f, req).await {
        Ok(n) => n,
        Err(e) => return e.into_response(),
    };
    match f.models.unload(&name).await {
        Ok(was) => axum::Json(json!({"success": true, "was_loaded": was})).into_response(),
        Err(e) => e.into_response(),
    }
}

fn ollama_entry(id: &str, st: Option<&AppState>, size: u64) -> Value {
    let card = st.map(|s| &s.facts.card);
    json!({
        "name": id,
        "model": id,
        "size": card.map_or(size, |c| c.file_bytes),
        "digest": card.and_then(|c| c.digest.clone()),
        "details": {
            "format": "gguf",
            "family": card.map(|c| c.family.clone()),
            "parameter_size": card.map(|c| c.parameter_size()),
            "quantization_level": card.map(|c| c.quantization.clone()),
        },
    })
}

/// `GET /api/tags`: every model of the folder (details from the loaded
/// ones' files).
async fn tags(State(f): State<Arc<Front>>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    if let Err(e) = check_key(&f, &parts) {
        return e.response_for(parts.uri.path());
    }
    let loaded = f.models.loaded().await;
    let mut models = Vec::new();
    for (id, path) in f.models.available() {
        let st = loaded.iter().find(|m| m.id == id).map(|m| &*m.state);
        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
        models.push(ollama_entry(&id, st, size));
    }
    axum::Json(json!({ "models": models })).into_response()
}

/// `GET /api/ps`: the models loaded now, with when each unloads.
async fn ps(State(f): State<Arc<Front>>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    if let Err(e) = check_key(&f, &parts) {
        return e.response_for(parts.uri.path());
    }
    let far = chrono::Utc::now() + chrono::Duration::days(365 * 290);
    let at = |when: Option<Instant>| {
        let t = when.map_or(far, |w| {
            chrono::Utc::now()
                + chrono::Duration::from_std(w.saturating_duration_since(Instant::now()))
                    .unwrap_or_default()
        });
        t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let running = |id: &str, st: &AppState, expires: Option<Instant>| {
        let mut e = ollama_entry(id, Some(st), 0);
        e["expires_at"] = json!(at(expires));
        e["size_vram"] = json!(0);
        e["context_length"] = json!(st.engine.ceiling().max_context);
        e
    };
    let mut models = Vec::new();
    for Loaded {
        id, state, expires, ..
    } in f.models.loaded().await
    {
        models.push(running(&id, &state, expires));
    }
    axum::Json(json!({ "models": models })).into_response()
}
