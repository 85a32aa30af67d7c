//! The router in-process on a tiny model: error shapes (SPEC S18) and a failure
//! after streaming began, which must end the SSE stream with an error event.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use ferrox_engine::{EngineConfig, start};
use ferrox_gguf::GgufFile;
use ferrox_models::decoder::{Decoder, Logits, Span};
use ferrox_models::kv_store::KvStore;
use ferrox_models::testing::TinyModel;
use ferrox_models::{Architecture, HyperParams, ModelError, Tokenizer, Transformer};
use ferrox_server::metrics::Metrics;
use ferrox_server::{AppState, router};
use http_body_util::BodyExt;
use tower::ServiceExt;

/// Fails (with an error, not a panic) from its `fail_at`-th forward call on.
struct Failing {
    inner: Transformer,
    calls: AtomicUsize,
    fail_at: usize,
}

impl Decoder for Failing {
    fn forward(&self, cache: &mut KvStore, spans: &[Span<'_>]) -> Result<Logits, ModelError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) + 1 >= self.fail_at {
            return Err(ModelError::Forward("simulated device fault".into()));
        }
        self.inner.forward(cache, spans)
    }
    fn hyper_params(&self) -> &HyperParams {
        self.inner.hyper_params()
    }
}

fn app(fail_at: usize) -> axum::Router {
    let file = || GgufFile::from_bytes(TinyModel::new(Architecture::Llama).gguf()).unwrap();
    let tokenizer = Arc::new(Tokenizer::from_metadata(&file().header().metadata).unwrap());
    let decoder = Failing {
        inner: Transformer::new(file(), 1).unwrap(),
        calls: AtomicUsize::new(0),
        fail_at,
    };
    let engine = start(
        Box::new(decoder),
        Arc::clone(&tokenizer),
        EngineConfig {
            kv_blocks: Some(64),
            ..Default::default()
        },
    )
    .unwrap();
    let state = AppState {
        metrics: Metrics::new(engine.clone()),
        engine,
        tokenizer,
        chat: None,
        model_id: "tiny".into(),
        aliases: vec![],
        api_key: None,
        default_max_tokens: 64,
        ready: AtomicBool::new(true),
    };
    router(Arc::new(state))
}

async fn post(app: axum::Router, path: &str, body: &str) -> (StatusCode, String) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let resp = app.oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// SPEC S18: errors have the OpenAI shape with a string code.
#[tokio::test]
async fn errors_have_the_openai_shape() {
    for (path, body, status, code) in [
        (
            "/v1/completions",
            "{oops",
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
        ),
        (
            "/v1/completions",
            r#"{"prompt": "a", "model": "other"}"#,
            StatusCode::NOT_FOUND,
            "model_not_found",
        ),
        (
            "/v1/chat/completions",
            r#"{"messages": [{"role": "user", "content": "hi"}]}"#,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
        ),
        ("/v1/nothing", "{}", StatusCode::NOT_FOUND, "not_found"),
    ] {
        let (s, text) = post(app(usize::MAX), path, body).await;
        assert_eq!(s, status, "{path} {body}: {text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let e = &v["error"];
        assert_eq!(e["code"], code, "{text}");
        assert!(
            e["message"].is_string() && e["type"].is_string() && e.get("param").is_some(),
            "{text}"
        );
    }
}

/// SPEC S18: a request that fails after streaming began ends its SSE stream with an
/// error event, never a silent cut.
#[tokio::test]
async fn a_failure_mid_stream_ends_with_an_error_event() {
    let (s, text) = post(
        app(3),
        "/v1/completions",
        r#"{"prompt": "abc", "max_tokens": 20, "stream": true, "ignore_eos": true}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let events: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert!(events.len() >= 3, "{text}");
    let (last, before) = (events[events.len() - 1], events[events.len() - 2]);
    assert_eq!(last, "[DONE]");
    let err: serde_json::Value = serde_json::from_str(before).unwrap();
    assert_eq!(err["error"]["code"], "generation_failed", "{before}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("simulated device fault")
    );
    assert!(
        events[..events.len() - 2]
            .iter()
            .any(|e| e.contains("\"text\"")),
        "tokens were streamed before the failure: {text}"
    );
}
