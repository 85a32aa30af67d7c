//! The router in-process on a tiny model: error shapes (SPEC S18), a failure
//! after streaming began (an error event and no `[DONE]`), the API key (F4) and
//! a panic in the forward pass.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use ferrox_server::router;
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

mod common;

use common::{Fault, Setup, state};

fn app(fail_at: usize) -> axum::Router {
    let fault = match fail_at {
        usize::MAX => Fault::None,
        at => Fault::Error { at },
    };
    router(state(Setup {
        fault,
        ..Setup::default()
    }))
}

async fn post(app: axum::Router, path: &str, body: &str) -> (StatusCode, String) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    send(app, req).await
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
    assert!(events.len() >= 2, "{text}");
    assert!(
        !events.contains(&"[DONE]"),
        "no [DONE] after an error: a client must not read a cut-off as complete: {text}"
    );
    let before = events[events.len() - 1];
    let err: serde_json::Value = serde_json::from_str(before).unwrap();
    assert_eq!(err["error"]["code"], "generation_failed", "{before}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("simulated device fault")
    );
    assert!(
        events[..events.len() - 1]
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

/// The value of the series `name` (every series is labelled with the model).
fn metric(text: &str, name: &str) -> f64 {
    let series = format!("{name}{{model=\"tiny\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in {text}"))
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

/// The model-server protocol's series under vLLM's names (issue 31): within
/// one scrape they equal ferrox's own, `cache_config_info` carries the KV
/// layout as labels, and the latency histograms count the same requests.
#[tokio::test]
async fn vllm_named_metrics_equal_ferrox_own() {
    let app = app(usize::MAX);
    let body = r#"{"prompt": "abc", "max_tokens": 3, "ignore_eos": true}"#;
    for _ in 0..2 {
        let (s, text) = post(app.clone(), "/v1/completions", body).await;
        assert_eq!(s, StatusCode::OK, "{text}");
    }
    let m = get(app.clone(), "/metrics").await;
    for (vllm, ours) in [
        ("vllm:num_requests_waiting", "ferrox_queue_depth"),
        ("vllm:num_requests_running", "ferrox_requests_running"),
        ("vllm:kv_cache_usage_perc", "ferrox_kv_cache_usage_ratio"),
        (
            "vllm:time_to_first_token_seconds_count",
            "ferrox_time_to_first_token_seconds_count",
        ),
        (
            "vllm:e2e_request_latency_seconds_count",
            "ferrox_request_duration_seconds_count",
        ),
        (
            "vllm:request_queue_time_seconds_count",
            "ferrox_queue_time_seconds_count",
        ),
    ] {
        assert_eq!(metric(&m, vllm), metric(&m, ours), "{vllm}");
    }
    assert_eq!(metric(&m, "vllm:e2e_request_latency_seconds_count"), 2.0);
    let info = format!(
        "vllm:cache_config_info{{model=\"tiny\",block_size=\"{}\",num_gpu_blocks=\"{}\"}} 1",
        metric(&m, "ferrox_kv_block_size"),
        metric(&m, "ferrox_kv_blocks_total")
    );
    assert!(m.lines().any(|l| l == info), "no {info} in {m}");
}

async fn send(app: axum::Router, req: Request<Body>) -> (StatusCode, String) {
    let resp = app.oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// Issue F4: the `Bearer` scheme is matched in any case; a wrong key is a 401.
#[tokio::test]
async fn the_api_key_scheme_is_case_insensitive() {
    let app = router(state(Setup {
        api_key: Some("k3y"),
        ..Setup::default()
    }));
    for (auth, want) in [
        (Some("Bearer k3y"), StatusCode::OK),
        (Some("bearer k3y"), StatusCode::OK),
        (Some("BEARER k3y"), StatusCode::OK),
        (Some("Bearer k3"), StatusCode::UNAUTHORIZED),
        (None, StatusCode::UNAUTHORIZED),
    ] {
        let mut req = Request::get("/v1/models");
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let (s, text) = send(app.clone(), req.body(Body::empty()).unwrap()).await;
        assert_eq!(s, want, "{auth:?}: {text}");
    }
}

/// Issue 15 item 5: a panic inside the forward pass fails the request in flight
/// with a 500 in OpenAI's shape, turns `/health` unhealthy, and later requests
/// are refused at once: no client hangs.
#[tokio::test]
async fn a_panic_in_the_forward_pass_fails_requests_and_health() {
    let app = router(state(Setup {
        fault: Fault::Panic { at: 2 },
        ..Setup::default()
    }));
    let body = r#"{"prompt": "abc", "max_tokens": 20, "ignore_eos": true}"#;
    let (s, text) = post(app.clone(), "/v1/completions", body).await;
    assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "engine_failed", "{text}");
    assert!(text.contains("simulated bug"), "{text}");
    let health = send(
        app.clone(),
        Request::get("/health").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(health.0, StatusCode::SERVICE_UNAVAILABLE, "{}", health.1);
    assert!(health.1.contains("engine_failed"), "{}", health.1);
    let (s, text) = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        post(app, "/v1/completions", body),
    )
    .await
    .expect("answered at once");
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{text}");
}

async fn preflight(app: axum::Router, origin: &str) -> axum::http::Response<Body> {
    let req = Request::builder()
        .method("OPTIONS")
        .uri("/v1/chat/completions")
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type",
        )
        .body(Body::empty())
        .unwrap();
    app.oneshot(req).await.unwrap()
}

/// CORS (`--cors-origins`): a listed origin's preflight is answered (before the
/// API-key check) with its methods and headers, and its requests carry
/// `Access-Control-Allow-Origin`; another origin, or no configuration, gets no
/// CORS headers.
#[tokio::test]
async fn cors_preflights_are_answered_for_listed_origins_only() {
    let listed = "http://app.example";
    let app = || {
        router(state(Setup {
            api_key: Some("sesame"),
            cors_origins: vec![listed.into()],
            ..Setup::default()
        }))
    };
    let r = preflight(app(), listed).await;
    assert_eq!(r.status(), StatusCode::OK);
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], listed);
    assert!(
        h["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("POST")
    );
    let allowed = h["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_lowercase();
    assert!(
        allowed.contains("authorization") && allowed.contains("content-type"),
        "{allowed}"
    );
    let r = preflight(app(), "http://evil.example").await;
    assert!(r.headers().get("access-control-allow-origin").is_none());
    // The request itself: answered, with the origin allowed.
    let req = Request::get("/v1/models")
        .header("origin", listed)
        .header("authorization", "Bearer sesame")
        .body(Body::empty())
        .unwrap();
    let r = app().oneshot(req).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["access-control-allow-origin"], listed);
    // Without --cors-origins: no CORS headers at all.
    let r = preflight(router(state(Setup::default())), listed).await;
    assert!(r.headers().get("access-control-allow-origin").is_none());
}

async fn get_page(app: axum::Router, path: &str) -> (StatusCode, axum::http::HeaderMap, String) {
    let r = app
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let (parts, body) = r.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    (
        parts.status,
        parts.headers,
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

/// The chat page: `/` and its files are served without the API key (they hold no
/// data), with media types and a CSP that keeps the page on this server;
/// `--no-webui` leaves `/` to the JSON 404.
#[tokio::test]
async fn chat_page_is_served_unless_turned_off() {
    let app = || {
        router(state(Setup {
            api_key: Some("sesame"),
            ..Setup::default()
        }))
    };
    let (status, h, body) = get_page(app(), "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(h["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(body.contains("<title>ferrox</title>"));
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("connect-src 'self'") && csp.contains("script-src 'self'"));
    for path in [
        "/webui/app.js",
        "/webui/vendor/marked.min.js",
        "/webui/vendor/purify.min.js",
    ] {
        let (status, h, body) = get_page(app(), path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(
            h["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/javascript")
        );
        assert!(body.len() > 1000, "{path}");
    }
    let (status, h, _) = get_page(app(), "/webui/style.css").await;
    assert_eq!(status, StatusCode::OK);
    assert!(h["content-type"].to_str().unwrap().starts_with("text/css"));
    // The API behind it still wants the key.
    let (status, _, _) = get_page(app(), "/v1/models").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let off = router(state(Setup {
        webui: false,
        ..Setup::default()
    }));
    let (status, h, body) = get_page(off, "/").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        h["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    assert!(body.contains("no route for GET /"), "{body}");
}

/// The body limit's refusal has the shape of the route's API: Anthropic's on
/// `/v1/messages`, OpenAI's elsewhere.
#[tokio::test]
async fn body_limit_refusals_have_the_routes_shape() {
    let big = "x".repeat(5 << 20);
    let (status, body) = post(app(usize::MAX), "/v1/messages", &big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["type"], "error", "{body}");
    assert_eq!(v["error"]["type"], "request_too_large", "{body}");
    let (status, body) = post(app(usize::MAX), "/v1/completions", &big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "request_too_large", "{body}");
}

/// A thinking model's answer is split: the thinking is `reasoning_content`,
/// plain and streamed, for `<think>` tags (as Qwen3's template has them) and
/// for gpt-oss's harmony channels (the tiny model is made to write them by a
/// grammar).
#[tokio::test]
async fn thinking_goes_to_reasoning_content() {
    let think_tags = (
        "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}{# <think> ... </think> #}",
        r#"start: \"<think>\" \"plan\" \"</think>\" \"done\""#,
    );
    let harmony = (
        "{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}{# <|channel|>analysis<|message|> #}",
        r#"start: \"<|channel|>analysis<|message|>\" \"plan\" \"<|end|><|start|>assistant<|channel|>final<|message|>\" \"done\""#,
    );
    for (template, grammar) in [think_tags, harmony] {
        let app = || {
            router(state(Setup {
                chat_template: Some(template),
                ..Setup::default()
            }))
        };
        let body = format!(
            r#"{{"messages": [{{"role": "user", "content": "hi"}}], "max_tokens": 200, "grammar": "{grammar}"}}"#
        );
        let (status, text) = post(app(), "/v1/chat/completions", &body).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let m = &v["choices"][0]["message"];
        assert_eq!(m["reasoning_content"], "plan", "{text}");
        assert_eq!(m["content"], "done", "{text}");
        let streamed = body.replace("\"max_tokens\"", "\"stream\": true, \"max_tokens\"");
        let (status, text) = post(app(), "/v1/chat/completions", &streamed).await;
        assert_eq!(status, StatusCode::OK);
        let (mut reasoning, mut content) = (String::new(), String::new());
        for line in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let d = &v["choices"][0]["delta"];
            reasoning += d["reasoning_content"].as_str().unwrap_or("");
            content += d["content"].as_str().unwrap_or("");
        }
        assert_eq!(
            (reasoning.as_str(), content.as_str()),
            ("plan", "done"),
            "{text}"
        );
    }
}

/// Anthropic's `thinking`: enabled, a thinking model's thinking comes back
/// as a `thinking` block before the text (streamed: its deltas, then an empty
/// `signature_delta`, the text block at index 1); left out, the template is
/// told `enable_thinking: false` and no thinking block appears.
#[tokio::test]
async fn anthropic_thinking_is_a_block_when_enabled() {
    // The prompt ends inside `<think>` when thinking is on, so all the tiny
    // model writes is thinking.
    let template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% if enable_thinking is not defined or enable_thinking %}<think>{% endif %}{% endif %}{# </think> #}";
    let app = || {
        router(state(Setup {
            chat_template: Some(template),
            ..Setup::default()
        }))
    };
    let body = |thinking: &str, stream: bool| {
        format!(
            r#"{{"model": "m", "max_tokens": 6, "temperature": 0, "stream": {stream}, {thinking} "messages": [{{"role": "user", "content": "hi"}}]}}"#
        )
    };
    let on = r#""thinking": {"type": "enabled", "budget_tokens": 50},"#;
    let (status, text) = post(app(), "/v1/messages", &body(on, false)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let thought = v["content"][0]["thinking"].as_str().unwrap().to_string();
    assert_eq!(v["content"][0]["type"], "thinking", "{text}");
    assert_eq!(v["content"][0]["signature"], "", "{text}");
    assert!(!thought.is_empty(), "{text}");
    assert_eq!(v["content"][1]["type"], "text", "{text}");

    let (status, text) = post(app(), "/v1/messages", &body(on, true)).await;
    assert_eq!(status, StatusCode::OK);
    let events: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |kind: &'static str| events.iter().filter(move |e| e["type"] == kind);
    let starts: Vec<_> = of("content_block_start")
        .map(|e| (e["index"].clone(), e["content_block"]["type"].clone()))
        .collect();
    assert_eq!(
        starts,
        [(json!(0), json!("thinking")), (json!(1), json!("text"))],
        "{text}"
    );
    let streamed: String = of("content_block_delta")
        .filter_map(|e| e["delta"]["thinking"].as_str())
        .collect();
    assert_eq!(streamed, thought);
    let signature = of("content_block_delta").position(|e| e["delta"]["type"] == "signature_delta");
    assert!(signature.is_some(), "{text}");

    let (status, off) = post(app(), "/v1/messages", &body("", false)).await;
    assert_eq!(status, StatusCode::OK, "{off}");
    let v_off: serde_json::Value = serde_json::from_str(&off).unwrap();
    assert_eq!(v_off["content"][0]["type"], "text", "{off}");
    assert!(
        v_off["usage"]["input_tokens"].as_u64() < v["usage"]["input_tokens"].as_u64(),
        "no <think> in the prompt: {off}"
    );
}

/// `--seed`: requests that give no seed take the server's, so that sampled
/// answers repeat (llama-server's `--seed`); choices still differ by their
/// number, and a request's own seed wins.
#[tokio::test]
async fn the_server_seed_makes_unseeded_sampling_repeat() {
    let app = |seed| {
        router(state(Setup {
            seed,
            ..Setup::default()
        }))
    };
    let text = |body: &str| {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        v["choices"][0]["text"].as_str().unwrap().to_string()
    };
    let body = r#"{"prompt": "hi", "max_tokens": 12, "temperature": 1.5, "top_k": 0, "top_p": 1}"#;
    let (status, a) = post(app(Some(7)), "/v1/completions", body).await;
    assert_eq!(status, StatusCode::OK, "{a}");
    let (_, b) = post(app(Some(7)), "/v1/completions", body).await;
    assert_eq!(text(&a), text(&b));
    let seeded = body.replace("\"prompt\"", "\"seed\": 7, \"prompt\"");
    let (_, own) = post(app(None), "/v1/completions", &seeded).await;
    assert_eq!(text(&own), text(&a), "the server's seed is the request's");
    let (_, other) = post(
        app(Some(7)),
        "/v1/completions",
        &seeded.replace(": 7", ": 8"),
    )
    .await;
    assert_ne!(text(&other), text(&a), "a request's own seed wins");
}

/// A wrong method gets a 405 with the API's error body and an `Allow` header,
/// Anthropic's shape on `/v1/messages`.
#[tokio::test]
async fn wrong_methods_get_a_shaped_405() {
    for (method, path, allow) in [
        ("GET", "/v1/chat/completions", "POST"),
        ("DELETE", "/v1/models", "GET"),
        ("GET", "/v1/messages", "POST"),
    ] {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap();
        let r = app(usize::MAX).oneshot(req).await.unwrap();
        assert_eq!(
            r.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
        assert_eq!(r.headers()["allow"], allow, "{method} {path}");
        let body = r.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        if path == "/v1/messages" {
            assert_eq!(v["type"], "error", "{v}");
        } else {
            assert_eq!(v["error"]["code"], "method_not_allowed", "{v}");
        }
    }
}

/// A body that does not say it is JSON, or names a key twice, is a 400 naming
/// the problem, on the OpenAI and Anthropic routes alike.
#[tokio::test]
async fn bodies_must_be_declared_json_without_duplicate_keys() {
    let body = r#"{"prompt": "a", "max_tokens": 1}"#;
    let req = Request::post("/v1/completions")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap();
    let (status, text) = send(app(usize::MAX), req).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(text.contains("Content-Type: application/json"), "{text}");
    for (path, body) in [
        (
            "/v1/completions",
            r#"{"prompt": "a", "max_tokens": 1, "max_tokens": 9}"#,
        ),
        (
            "/v1/messages",
            r#"{"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": "a", "content": "b"}]}"#,
        ),
    ] {
        let (status, text) = post(app(usize::MAX), path, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
        assert!(text.contains("duplicate key"), "{path}: {text}");
    }
}

/// llama-server's `/tokenize` and `/detokenize` round-trip; a missing field, an
/// unknown one and an id outside the vocabulary are 400s naming their field.
#[tokio::test]
async fn tokenize_and_detokenize_round_trip_and_refuse_by_name() {
    let (status, body) = post(app(usize::MAX), "/tokenize", r#"{"content": "hi!"}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let tokens = serde_json::from_str::<serde_json::Value>(&body).unwrap()["tokens"].clone();
    assert!(!tokens.as_array().unwrap().is_empty(), "{body}");
    let (status, body) = post(
        app(usize::MAX),
        "/detokenize",
        &serde_json::json!({ "tokens": tokens }).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["content"],
        "hi!"
    );
    let (status, body) = post(
        app(usize::MAX),
        "/tokenize",
        r#"{"content": "hi!", "with_pieces": true}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let pieces = serde_json::from_str::<serde_json::Value>(&body).unwrap()["tokens"].clone();
    let ids: Vec<_> = pieces
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].clone())
        .collect();
    assert_eq!(serde_json::Value::from(ids), tokens, "{body}");
    let text: String = pieces
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["piece"].as_str().unwrap())
        .collect();
    assert_eq!(text, "hi!");
    for (path, body, param) in [
        ("/tokenize", r#"{}"#, serde_json::json!("content")),
        (
            "/tokenize",
            r#"{"content": "a", "prompt": "a"}"#,
            serde_json::json!("prompt"),
        ),
        (
            "/tokenize",
            r#"{"content": "a", "mood": 1}"#,
            serde_json::json!("mood"),
        ),
        (
            "/tokenize",
            r#"{"content": 5}"#,
            serde_json::json!("content"),
        ),
        (
            "/detokenize",
            r#"{"tokens": [99999]}"#,
            serde_json::json!("tokens"),
        ),
    ] {
        let (status, answer) = post(app(usize::MAX), path, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {body}: {answer}");
        let e: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(e["error"]["param"], param, "{path} {body}: {answer}");
    }
}

/// vLLM's shapes of the tokenizer routes (what lm-eval's remote tokenizer
/// sends): `prompt` with the special tokens added unless `add_special_tokens`
/// is false, the count and context beside the tokens, `prompt` in
/// `/detokenize`'s answer, and `GET /tokenizer_info`.
#[tokio::test]
async fn the_tokenizer_routes_answer_vllm_clients_too() {
    let json = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
    let tokens = |body: &str| json(body)["tokens"].clone();
    let (_, llama) = post(app(usize::MAX), "/tokenize", r#"{"content": "hi!"}"#).await;
    let (status, plain) = post(
        app(usize::MAX),
        "/tokenize",
        r#"{"model": "m", "prompt": "hi!", "add_special_tokens": false}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{plain}");
    assert_eq!(tokens(&plain), tokens(&llama));
    let n = tokens(&plain).as_array().unwrap().len();
    assert_eq!(json(&plain)["count"], n);
    assert!(json(&plain)["max_model_len"].as_u64().unwrap() > 0);
    let info = json(&get(app(usize::MAX), "/tokenizer_info").await);
    let (_, special) = post(app(usize::MAX), "/tokenize", r#"{"prompt": "hi!"}"#).await;
    let with_bos = tokens(&special).as_array().unwrap().len();
    let adds = usize::from(info["add_bos_token"].as_bool().unwrap());
    assert_eq!(with_bos, n + adds, "{special}");
    assert!(info["eos_token"].is_string(), "{info}");
    assert_eq!(info["model_max_length"], json(&plain)["max_model_len"]);
    let (status, text) = post(
        app(usize::MAX),
        "/detokenize",
        &serde_json::json!({"model": "m", "tokens": tokens(&plain)}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(json(&text)["prompt"], "hi!");
}

/// One model served: any `model` a client sends is answered, and the answer
/// names the model that answered (llama-server's way).
#[tokio::test]
async fn any_model_name_is_answered_by_the_one_served_model() {
    let (status, body) = post(
        app(usize::MAX),
        "/v1/completions",
        r#"{"prompt": "a", "model": "gpt-9", "max_tokens": 2}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let models = get(app(usize::MAX), "/v1/models").await;
    let served: serde_json::Value = serde_json::from_str(&models).unwrap();
    assert_eq!(v["model"], served["data"][0]["id"], "{body}");
}

/// llama-server's `GET /props`: the context per request, the slots, the
/// default sampling in its names, and the chat template.
#[tokio::test]
async fn props_reports_the_context_slots_and_default_sampling() {
    let body = get(app(usize::MAX), "/props").await;
    let p: serde_json::Value = serde_json::from_str(&body).unwrap();
    let settings = &p["default_generation_settings"];
    assert!(settings["n_ctx"].as_u64().unwrap() > 0, "{body}");
    assert!(p["total_slots"].as_u64().unwrap() >= 1, "{body}");
    assert_eq!(settings["params"]["top_k"], 40, "{body}");
    assert_eq!(settings["params"]["n_predict"], -1, "{body}");
    assert_eq!(p["model_path"], "tiny.gguf", "{body}");
    assert_eq!(p["modalities"]["vision"], false, "{body}");
}
