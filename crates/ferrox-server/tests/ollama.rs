//! Ollama's API in-process on a tiny model: NDJSON streams that add up to the
//! unstreamed answer, `context` to continue from, a failure mid-stream as an
//! `{"error"}` line, Ollama-shaped errors, and `options` policed by name.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use ferrox_server::router;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

mod common;

use common::{Fault, Setup, state};

fn app(fault: Fault) -> axum::Router {
    router(state(Setup {
        fault,
        ..Setup::default()
    }))
}

/// POSTs `body` as `curl -d` does (no JSON content type): Ollama's API reads
/// it anyway.
async fn post(app: axum::Router, path: &str, body: Value) -> (StatusCode, String) {
    let req = Request::post(path)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(body.to_string()))
        .unwrap();
    let r = app.oneshot(req).await.unwrap();
    let status = r.status();
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn greedy(stream: bool) -> Value {
    json!({"model": "anything", "prompt": "abc", "stream": stream,
           "options": {"temperature": 0, "num_predict": 6, "seed": 1}})
}

#[tokio::test]
async fn a_stream_adds_up_to_the_whole_answer_and_ends_with_its_counts() {
    let (s, text) = post(app(Fault::None), "/api/generate", greedy(true)).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let lines = lines(&text);
    let (last, pieces) = lines.split_last().unwrap();
    assert!(pieces.iter().all(|l| l["done"] == false), "{text}");
    assert_eq!(last["done"], true, "{text}");
    assert_eq!(last["model"], "tiny");
    let streamed: String = lines
        .iter()
        .map(|l| l["response"].as_str().unwrap())
        .collect();
    let (s, whole) = post(app(Fault::None), "/api/generate", greedy(false)).await;
    assert_eq!(s, StatusCode::OK, "{whole}");
    let whole: Value = serde_json::from_str(&whole).unwrap();
    assert_eq!(whole["response"], streamed.as_str());
    assert_eq!(whole["done_reason"], last["done_reason"]);
    // `context` is the prompt's ids, then the answer's.
    let (n_prompt, n_answer) = (
        whole["prompt_eval_count"].as_u64().unwrap(),
        whole["eval_count"].as_u64().unwrap(),
    );
    assert_eq!(n_answer, 6);
    let context = whole["context"].as_array().unwrap();
    assert_eq!(context.len() as u64, n_prompt + n_answer, "{whole}");
    assert_eq!(whole["context"], last["context"]);
    for key in ["total_duration", "prompt_eval_duration", "eval_duration"] {
        assert!(whole[key].is_u64(), "{key}: {whole}");
    }
    // Continuing from it sends the whole history, and nothing twice.
    let next = json!({"model": "m", "prompt": "d", "context": context, "stream": false,
                      "options": {"num_predict": 1}});
    let (s, text) = post(app(Fault::None), "/api/generate", next).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(
        v["prompt_eval_count"].as_u64().unwrap() > n_prompt + n_answer - 1,
        "{v}"
    );
}

#[tokio::test]
async fn a_failure_mid_stream_ends_with_an_error_line() {
    let body = json!({"model": "m", "prompt": "abc",
                      "options": {"num_predict": 20, "temperature": 0}});
    let (s, text) = post(app(Fault::Error { at: 3 }), "/api/generate", body).await;
    assert_eq!(s, StatusCode::OK);
    let lines = lines(&text);
    let last = lines.last().unwrap();
    assert!(last["error"].is_string(), "{text}");
    assert!(
        lines.iter().all(|l| l.get("done") != Some(&json!(true))),
        "{text}"
    );
}

#[tokio::test]
async fn errors_have_ollamas_shape_and_name_the_field() {
    let chat = |options: Value| json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "options": options});
    for (path, body, status, says) in [
        (
            "/api/chat",
            chat(json!({"bogus": 1})),
            StatusCode::BAD_REQUEST,
            "options.bogus",
        ),
        (
            "/api/chat",
            chat(json!({"mirostat": 2})),
            StatusCode::BAD_REQUEST,
            "mirostat",
        ),
        (
            "/api/chat",
            chat(json!({"temperature": -1})),
            StatusCode::BAD_REQUEST,
            "temperature",
        ),
        (
            "/api/chat",
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "top_k": 3}),
            StatusCode::BAD_REQUEST,
            "goes inside options",
        ),
        (
            "/api/generate",
            json!({"model": "m", "prompt": "abc", "options": {"num_ctx": 2}}),
            StatusCode::BAD_REQUEST,
            "options.num_ctx",
        ),
        (
            "/api/generate",
            json!({"model": "m", "prompt": "abc", "images": ["aGk="]}),
            StatusCode::BAD_REQUEST,
            "images",
        ),
        (
            "/api/generate",
            json!({"model": "m", "prompt": "abc", "format": "yaml"}),
            StatusCode::BAD_REQUEST,
            "format",
        ),
        ("/api/nothing", json!({}), StatusCode::NOT_FOUND, "no route"),
    ] {
        let (s, text) = post(app(Fault::None), path, body.clone()).await;
        assert_eq!(s, status, "{body}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let message = v["error"].as_str().unwrap_or_else(|| panic!("{text}"));
        assert!(message.contains(says), "{body}: {message}");
    }
}

#[tokio::test]
async fn options_reach_the_sampler_and_a_request_without_prompt_loads() {
    // A stop string ends the answer as on the other routes.
    let body = json!({"model": "m", "prompt": "abc", "stream": false,
                      "options": {"temperature": 0, "num_predict": 3, "num_ctx": 64,
                                  "num_thread": 8, "use_mmap": true}});
    let (s, text) = post(app(Fault::None), "/api/generate", body).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["eval_count"], 3, "{v}");
    let (s, text) = post(
        app(Fault::None),
        "/api/generate",
        json!({"model": "m", "stream": false}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (v["done"].clone(), v["done_reason"].clone()),
        (json!(true), json!("load"))
    );
}
