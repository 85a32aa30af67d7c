//! Errors in the OpenAI shape (SPEC S18), and the one place engine refusals become
//! HTTP statuses.
//!
//! Body: `{"error": {"message", "type", "param", "code"}}` with a string code; KV
//! refusals add `positions`, `positions_limit`, `estimated_bytes`, `limit_bytes` and
//! llama-server's `n_prompt_tokens` / `n_ctx`. A full queue is 503 with `Retry-After`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ferrox_engine::{Failure, SubmitError};

use serde::Serialize;

/// The code of a request cut off (or refused) because the server is shutting down.
pub const SHUTTING_DOWN: &str = "server_shutting_down";

/// What a KV refusal adds to the error: the request's size against the limits,
/// also under llama-server's names (`n_prompt_tokens`, `n_ctx`).
#[derive(Clone, Debug, Serialize)]
pub struct KvDetail {
    pub positions: u64,
    pub positions_limit: u64,
    pub estimated_bytes: u64,
    pub limit_bytes: u64,
    pub n_prompt_tokens: usize,
    pub n_ctx: u64,
}

/// The body: `{"error": {...}}`.
#[derive(Serialize)]
struct ErrorEnvelope<'a> {
    error: ErrorObject<'a>,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: &'a str,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    kv: Option<&'a KvDetail>,
}

/// An error answer.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: Box<str>,
    pub kind: &'static str,
    pub param: Option<Box<str>>,
    pub code: &'static str,
    /// The sizes of a KV refusal, beside the standard four fields.
    pub kv: Option<Box<KvDetail>>,
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// What the log says of this error when it refuses a request.
    pub fn refusal(&self) -> crate::request_log::Refusal {
        crate::request_log::Refusal {
            code: self.code,
            message: self.message.clone(),
        }
    }

    /// This error in the shape of the API at `path`: Anthropic's on
    /// `/v1/messages`, Ollama's on `/api/`, OpenAI's elsewhere.
    pub fn response_for(self, path: &str) -> Response {
        if path.starts_with("/v1/messages") {
            crate::anthropic::AnthropicError(self).into_response()
        } else if crate::ollama::owns(path) {
            crate::ollama::OllamaError(self).into_response()
        } else {
            self.into_response()
        }
    }

    /// A 500 `internal_error`: a bug, reported rather than hidden.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "internal_error",
            message,
        )
    }

    /// A 400 `invalid_request_error` about `param`.
    pub fn invalid(param: Option<&str>, message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into().into(),
            kind: "invalid_request_error",
            param: param.map(Box::from),
            code: "invalid_request_error",
            kv: None,
            retry_after: None,
        }
    }

    /// A 404 `model_not_found`: `name` is not the served model (`served`) or one
    /// of its aliases.
    pub fn model_not_found(name: &str, served: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "model_not_found",
            format!("model {name:?} is not served here; this server serves {served:?}"),
        )
    }

    /// Any other status and code.
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            message: message.into().into(),
            kind,
            param: None,
            code,
            kv: None,
            retry_after: None,
        }
    }

    /// The error of a refused submission, for a prompt of `prompt_tokens`.
    pub fn from_submit(e: SubmitError, prompt_tokens: usize) -> ApiError {
        match e {
            SubmitError::Invalid(i) => ApiError::invalid(Some(i.param), i.message),
            SubmitError::Kv(r) => {
                let mut err = ApiError::invalid(Some("max_tokens"), r.message.clone());
                err.code = r.kind.code();
                err.kv = Some(Box::new(KvDetail {
                    positions: r.positions,
                    positions_limit: r.positions_limit,
                    estimated_bytes: r.estimated_bytes,
                    limit_bytes: r.limit_bytes,
                    n_prompt_tokens: prompt_tokens,
                    n_ctx: r.positions_limit,
                }));
                err
            }
            SubmitError::QueueFull { retry_after_s, .. } => {
                let mut err = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    "queue_full",
                    e.to_string(),
                );
                err.retry_after = Some(retry_after_s);
                err
            }
            SubmitError::Stopped => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "engine_stopped",
                e.to_string(),
            ),
        }
    }

    /// The error of an accepted request that failed: a shutdown cut-off is a 503
    /// with `Retry-After` (another replica, or this one restarted, can serve it);
    /// the rest are 500s.
    pub fn from_failure(f: &Failure) -> ApiError {
        match f {
            Failure::Shutdown => ApiError::shutting_down(f.to_string()),
            Failure::Model(_) | Failure::Kv(_) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "generation_failed",
                f.to_string(),
            ),
            Failure::Constraint(_) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "grammar_failed",
                f.to_string(),
            ),
            Failure::EngineDown(_) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "engine_failed",
                f.to_string(),
            ),
        }
    }

    /// 503 `server_shutting_down` with `Retry-After: 1`.
    pub fn shutting_down(message: impl Into<String>) -> ApiError {
        let mut err = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            SHUTTING_DOWN,
            message,
        );
        err.retry_after = Some(1);
        err
    }

    /// The JSON body.
    pub fn body(&self) -> String {
        let envelope = ErrorEnvelope {
            error: ErrorObject {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.code,
                kv: self.kv.as_deref(),
            },
        };
        serde_json::to_string(&envelope).expect("an error body serializes")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let json = HeaderValue::from_static("application/json");
        let mut r = (self.status, [(header::CONTENT_TYPE, json)], self.body()).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r.extensions_mut().insert(self.refusal());
        r
    }
}
