//! The router: every endpoint, the chat page, the API-key check, the body limit, CORS,
//! and OpenAI-shaped 404s for unknown routes.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

use crate::completions;
use crate::error::ApiError;
use crate::state::{AppState, Phase, Server};

/// Largest request body accepted.
pub const BODY_LIMIT: usize = 4 << 20;
/// Largest body read in full (to answer 413 to a client still sending); beyond it
/// the connection is refused outright.
pub const BODY_READ_LIMIT: usize = 32 << 20;

/// The served model as OpenAI describes a model (its other names in `aliases`).
fn model_object(st: &AppState) -> Value {
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    json!({"id": st.model_id, "object": "model", "created": created, "owned_by": "ferrox", "aliases": st.aliases})
}

async fn models(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [model_object(&st)]}))
}

/// `GET /v1/models/{id}`: the model by its id or an alias; 404 `model_not_found`
/// for any other name.
async fn model(State(st): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    if st.serves(&id) {
        return Json(model_object(&st)).into_response();
    }
    ApiError::model_not_found(&id, &st.model_id).into_response()
}

/// 200 while serving; 503 while starting, once draining has begun (so a load
/// balancer stops sending at once), and when the engine has failed.
async fn health(State(st): State<Arc<AppState>>) -> Response {
    if !st.engine.is_healthy() {
        return unavailable("engine_failed", "the engine has failed and serves nothing");
    }
    server_health(&st.server)
}

fn unavailable(code: &'static str, message: &'static str) -> Response {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "server_error",
        code,
        message,
    )
    .into_response()
}

/// `/health` by the server's phase alone (a server whose started model is
/// unloaded answers it so).
pub(crate) fn server_health(server: &Server) -> Response {
    match server.phase.get() {
        Phase::Serving => (StatusCode::OK, Json(json!({"status": "ok"}))).into_response(),
        Phase::Starting => unavailable("loading", "the model is loading"),
        Phase::Draining => unavailable(
            crate::error::SHUTTING_DOWN,
            "the server is shutting down; in-flight requests are finishing",
        ),
    }
}

async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        st.metrics.render(),
    )
        .into_response()
}

async fn not_found(req: Request) -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "not_found",
        format!("no route for {} {}", req.method(), req.uri().path()),
    )
    .response_for(req.uri().path())
}

/// 405 in the shape of the route's API (axum's own has no body).
async fn method_not_allowed(req: Request) -> Response {
    let path = req.uri().path().to_string();
    let mut r = ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        "method_not_allowed",
        format!("{} is not allowed on {path}", req.method()),
    )
    .response_for(&path);
    let allow = match path.as_str() {
        "/health" | "/v1/health" | "/metrics" | "/slots" | "/props" | "/api/tags" | "/api/ps"
        | "/api/version" | "/kv/blocks" => "GET",
        "/api/delete" => "DELETE",
        p if p.starts_with("/v1/models") || p == "/models" => "GET",
        _ => "POST",
    };
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

/// The API key check: `Authorization: Bearer KEY`, or `x-api-key: KEY` as
/// Anthropic's clients send it. The 401 has the shape of the route's API.
async fn require_key(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &st.server.api_key {
        let header = |name: &str| req.headers().get(name).and_then(|h| h.to_str().ok());
        let bearer = key.accepts(header(header::AUTHORIZATION.as_str()));
        let x_api_key = header(ANTHROPIC_KEY_HEADER).is_some_and(|k| key.is(k));
        if !bearer && !x_api_key {
            let err = ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                "invalid_api_key",
                "missing or wrong API key (Authorization: Bearer KEY, or x-api-key: KEY)",
            );
            return err.response_for(req.uri().path());
        }
    }
    next.run(req).await
}

/// `GET /kv/blocks`: the chained hash of every page the prefix cache holds
/// (sorted), and the positions a page holds: what a follower of
/// `--kv-events` should hold.
async fn cached_blocks(State(st): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let mut blocks = st
        .engine
        .cached_blocks()
        .await
        .ok_or_else(|| ApiError::internal("the engine has stopped".to_string()))?;
    blocks.sort_unstable();
    let block_size = st.engine.ceiling().block_size;
    Ok(Json(json!({"block_size": block_size, "blocks": blocks})))
}

/// The header Anthropic's clients carry the API key in.
const ANTHROPIC_KEY_HEADER: &str = "x-api-key";

/// The router of a server over `st`.
pub fn router(st: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(completions::chat))
        // llama-server's spellings without the version.
        .route("/chat/completions", post(completions::chat))
        .route("/responses", post(crate::responses::responses))
        .route(
            "/v1/chat/completions/input_tokens",
            post(crate::input_tokens::chat),
        )
        .route(
            "/chat/completions/input_tokens",
            post(crate::input_tokens::chat),
        )
        .route(
            "/v1/responses/input_tokens",
            post(crate::input_tokens::responses),
        )
        .route(
            "/responses/input_tokens",
            post(crate::input_tokens::responses),
        )
        .route("/apply-template", post(crate::input_tokens::apply_template))
        .route("/v1/completions", post(completions::text))
        .route("/v1/chat/completions/render", post(crate::render::chat))
        .route("/v1/completions/render", post(crate::render::text))
        .route("/kv/blocks", get(cached_blocks))
        .route("/v1/messages", post(crate::anthropic::messages))
        .route("/v1/responses", post(crate::responses::responses))
        .route(
            "/v1/messages/count_tokens",
            post(crate::anthropic::count_tokens),
        )
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/v1/models/{*id}", get(model))
        .route("/props", get(crate::props::props))
        .merge(crate::tokenize::routes())
        .merge(crate::embeddings::routes())
        .merge(crate::ollama::routes())
        .merge(crate::native::routes())
        .route_layer(middleware::from_fn_with_state(Arc::clone(&st), require_key));
    let page = if st.server.webui {
        crate::webui::routes()
    } else {
        Router::new()
    };
    Router::new()
        .merge(api)
        .merge(page)
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // The `read_body` middleware below polices the size (and the time).
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(
            Arc::clone(&st),
            crate::limits::read_body,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&st),
            crate::request_log::log_refusals,
        ))
        // Outermost: a preflight is answered before the key check and the body.
        .layer(cors(&st.server.cors_origins))
        .with_state(st)
}

/// CORS for `origins` (`*`: any): preflights answered for the API's methods and
/// the headers its clients send (the OpenAI and Anthropic SDKs' included);
/// without origins, no CORS headers at all.
fn cors(origins: &[String]) -> CorsLayer {
    if origins.is_empty() {
        return CorsLayer::new();
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o.trim()).ok()),
        )
    };
    CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
        .allow_headers(AllowHeaders::mirror_request())
        .max_age(std::time::Duration::from_secs(600))
}

/// The router while the model loads: 503 `loading` everywhere.
pub fn loading_router() -> Router {
    Router::new().fallback(|| async {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "loading",
            "the model is loading; retry shortly",
        )
    })
}
