//! The log (issue: a person at the keyboard, point 6): one line per request with
//! its id, route, status, tokens, queue time, TTFT, duration and finish reason
//! or error code, whether it finished, failed, timed out or lost its client; one
//! line per refusal, on every route and from every layer; prompt text only with
//! `--log-prompts`. Lines are captured as JSON from a subscriber installed for
//! this test binary alone.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use ferrox_server::{Limits, router};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

mod common;

use common::{Fault, Setup, state};

/// Where the subscriber writes.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buffer {
    /// The lines written so far, parsed, and cleared.
    fn take(&self) -> Vec<Value> {
        let bytes = std::mem::take(&mut *self.0.lock().unwrap());
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn capture() -> Buffer {
    let buf = Buffer::default();
    let writer = buf.clone();
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_writer(move || writer.clone())
        .init();
    buf
}

fn post(path: &str, body: &str) -> Request<Body> {
    Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// Sends `req` and reads the whole answer.
async fn answer(app: axum::Router, req: Request<Body>) -> u16 {
    let r = app.oneshot(req).await.unwrap();
    let status = r.status().as_u16();
    r.into_body().collect().await.unwrap();
    status
}

fn requests(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|l| l["message"] == "request").collect()
}

/// One test, so that one subscriber sees it all, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines() {
    let logs = capture();
    every_request_and_refusal_gets_one_line(&logs).await;
    timeouts_and_failures_say_so_and_prompts_stay_out(&logs).await;
}

async fn every_request_and_refusal_gets_one_line(logs: &Buffer) {
    let st = state(Setup {
        log_prompts: true,
        ..Setup::default()
    });
    let app = || router(Arc::clone(&st));

    // Finished, plain and streamed; the prompt's text is there (--log-prompts).
    let body = r#"{"prompt": "abc", "max_tokens": 3, "ignore_eos": true"#;
    assert_eq!(
        answer(app(), post("/v1/completions", &format!("{body}}}"))).await,
        200
    );
    let streamed = format!("{body}, \"stream\": true}}");
    assert_eq!(answer(app(), post("/v1/completions", &streamed)).await, 200);
    let lines = logs.take();
    let done = requests(&lines);
    assert_eq!(done.len(), 2, "{lines:?}");
    for (l, stream) in done.iter().zip([false, true]) {
        assert_eq!(l["route"], "/v1/completions");
        assert_eq!(l["status"], 200);
        assert_eq!(l["outcome"], "finished");
        assert_eq!(l["stream"], stream);
        assert_eq!(l["generated_tokens"], 3);
        assert_eq!(l["finish"], "length");
        assert!(l["prompt_tokens"].as_u64().unwrap() > 0);
        assert!(l["cached_tokens"].is_u64());
        assert!(l["id"].as_str().unwrap().starts_with("cmpl-"));
        for f in ["queue_ms", "ttft_ms", "duration_ms"] {
            assert!(l[f].as_f64().unwrap() >= 0.0, "{f}: {l}");
        }
        assert!(l["prompt"].as_str().unwrap().contains("abc"), "{l}");
        assert_eq!(l["level"], "INFO");
    }
    assert_ne!(done[0]["id"], done[1]["id"]);

    // Refusals: by the handler, the router, the key check and the body limit,
    // each once with its route and code; none is a request line.
    let refusals = [
        (
            "/v1/completions",
            r#"{"prompt": "a", "top_p": 7}"#.to_string(),
            400,
            "invalid_request_error",
        ),
        (
            "/v1/messages",
            r#"{"model": "tiny"}"#.to_string(),
            400,
            "invalid_request_error",
        ),
        ("/v1/nothing", "{}".to_string(), 404, "not_found"),
        (
            "/v1/completions",
            "x".repeat(5 << 20),
            413,
            "request_too_large",
        ),
    ];
    for (path, body, status, _) in &refusals {
        assert_eq!(
            answer(app(), post(path, body)).await,
            *status as u16,
            "{path}"
        );
    }
    let lines = logs.take();
    assert!(requests(&lines).is_empty(), "{lines:?}");
    let refused: Vec<&Value> = lines.iter().filter(|l| l["message"] == "refused").collect();
    assert_eq!(refused.len(), refusals.len(), "{lines:?}");
    for (l, (path, _, status, code)) in refused.iter().zip(&refusals) {
        assert_eq!(l["route"], *path);
        assert_eq!(l["status"], *status);
        assert_eq!(l["code"], *code);
        assert_eq!(l["level"], "WARN");
        assert!(!l["error"].as_str().unwrap().is_empty());
    }

    // Aborted: the client reads one chunk of a long stream and goes away.
    let long = r#"{"prompt": "abc", "max_tokens": 200, "ignore_eos": true, "stream": true}"#;
    let r = app().oneshot(post("/v1/completions", long)).await.unwrap();
    let mut body = r.into_body();
    body.frame().await.unwrap().unwrap();
    drop(body);
    let lines = logs.take();
    let aborted = requests(&lines);
    assert_eq!(aborted.len(), 1, "{lines:?}");
    assert_eq!(aborted[0]["outcome"], "aborted");
    assert!(aborted[0].get("finish").is_none(), "{}", aborted[0]);
}

async fn timeouts_and_failures_say_so_and_prompts_stay_out(logs: &Buffer) {
    let st = state(Setup {
        fault: Fault::Slow { millis: 20 },
        limits: Limits {
            request_timeout: Some(Duration::from_millis(200)),
            ..Limits::default()
        },
        ..Setup::default()
    });
    let long = r#"{"prompt": "secret words", "max_tokens": 500, "ignore_eos": true"#;
    let status = answer(
        router(Arc::clone(&st)),
        post("/v1/completions", &format!("{long}}}")),
    )
    .await;
    assert_eq!(status, 504);
    let streamed = format!("{long}, \"stream\": true}}");
    let status = answer(router(Arc::clone(&st)), post("/v1/completions", &streamed)).await;
    assert_eq!(status, 200);
    let lines = logs.take();
    let timed_out = requests(&lines);
    assert_eq!(timed_out.len(), 2, "{lines:?}");
    for (l, status) in timed_out.iter().zip([504, 200]) {
        assert_eq!(l["outcome"], "timed_out");
        assert_eq!(l["error"], "request_timeout");
        assert_eq!(l["status"], status);
        assert_eq!(l["level"], "WARN");
    }
    assert!(lines.iter().all(|l| l.get("prompt").is_none()));
    assert!(!lines.iter().any(|l| l.to_string().contains("secret")));
    assert!(lines.iter().all(|l| l["message"] != "refused"), "{lines:?}");

    // A failure in the forward pass: one `failed` line with the error's code.
    let failing = state(Setup {
        fault: Fault::Error { at: 2 },
        ..Setup::default()
    });
    let status = answer(
        router(failing),
        post("/v1/completions", &format!("{long}}}")),
    )
    .await;
    assert_eq!(status, 500);
    let lines = logs.take();
    let failed = requests(&lines);
    assert_eq!(failed.len(), 1, "{lines:?}");
    assert_eq!(failed[0]["outcome"], "failed");
    assert_eq!(failed[0]["error"], "generation_failed");
    assert_eq!(failed[0]["status"], 500);
}
