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

async fn get(app: axum::Router, path: &str) -> String {
    let resp = app
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// A repeated long prompt is served from the prefix cache: the response reports
/// `usage.prompt_tokens_details.cached_tokens` as OpenAI does, and `/metrics`
/// shows the queries, the hit tokens, the cached blocks and the usage ratio.
#[tokio::test]
async fn a_repeated_long_prompt_reports_cached_tokens_and_metrics_show_hits() {
    let app = app(usize::MAX);
    let prompt = "the quick brown fox jumps over the lazy dog ".repeat(4);
    let body = format!(r#"{{"prompt": "{prompt}", "max_tokens": 2, "temperature": 0}}"#);
    let (s, first) = post(app.clone(), "/v1/completions", &body).await;
    assert_eq!(s, StatusCode::OK, "{first}");
    let first: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let (_, second) = post(app.clone(), "/v1/completions", &body).await;
    let second: serde_json::Value = serde_json::from_str(&second).unwrap();
    let n = second["usage"]["prompt_tokens"].as_u64().unwrap();
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert_eq!(
        cached,
        (n - 1) / 16 * 16,
        "whole pages, one token left to run"
    );
    assert_eq!(first["choices"][0]["text"], second["choices"][0]["text"]);
    // The gauges follow the step that finished the request: wait for it.
    let mut m = get(app.clone(), "/metrics").await;
    for _ in 0..500 {
        if metric(&m, "ferrox_requests_running") == 0.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        m = get(app.clone(), "/metrics").await;
    }
    assert_eq!(metric(&m, "ferrox_prefix_cache_queries_total"), 2.0);
    assert_eq!(
        metric(&m, "ferrox_prefix_cache_hit_tokens_total"),
        cached as f64
    );
    assert!(metric(&m, "ferrox_kv_blocks_cached") >= (cached / 16) as f64);
    let ratio = metric(&m, "ferrox_kv_cache_usage_ratio");
    assert!((0.0..=1.0).contains(&ratio), "{ratio}");
}
