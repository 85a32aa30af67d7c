//! The server on a real socket: shutdown that tells the truth (issue F1) and the
//! HTTP layer's timeouts and limits (F3), driven by raw HTTP/1.1 so that every
//! byte the client sees is checked.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Fault, Setup, state};
use ferrox_server::{AppState, Limits, ServeOptions, Served, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

struct Running {
    addr: std::net::SocketAddr,
    stop: CancellationToken,
    done: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(st: Arc<AppState>, grace: Duration) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stop = CancellationToken::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let done = tokio::spawn(serve(
        Served::One(st),
        listener,
        ServeOptions { grace },
        stop.clone(),
        move |a| {
            let _ = tx.send(a);
        },
    ));
    Running {
        addr: rx.await.unwrap(),
        stop,
        done,
    }
}

fn request(method: &str, path: &str, body: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Sends `raw` and reads until the server closes the connection.
async fn exchange(addr: std::net::SocketAddr, raw: &str) -> String {
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(raw.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn status_of(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"))
}

const LONG: &str = r#"{"prompt": "abc", "max_tokens": 1000, "ignore_eos": true"#;

/// F1: requests still running when the grace period ends are cut off visibly:
/// a stream ends with an error event and no `[DONE]`, a plain request gets a
/// 503 with `Retry-After`; `/health` is 503 from the moment draining starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_cut_off_is_never_reported_as_a_finish() {
    let st = state(Setup {
        fault: Fault::Slow { millis: 20 },
        ..Setup::default()
    });
    let server = start(Arc::clone(&st), Duration::from_millis(800)).await;
    let addr = server.addr;
    let streamed = tokio::spawn(async move {
        exchange(
            addr,
            &request(
                "POST",
                "/v1/completions",
                &format!("{LONG}, \"stream\": true}}"),
            ),
        )
        .await
    });
    let plain = tokio::spawn(async move {
        let keep_alive = request("POST", "/v1/completions", &format!("{LONG}}}"))
            .replace("Connection: close\r\n", "");
        exchange(addr, &keep_alive).await
    });
    // A kept-alive connection opened before the signal sees /health turn.
    let mut probe = TcpStream::connect(addr).await.unwrap();
    while st.engine.stats().running < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.stop.cancel();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let health = health_on(&mut probe).await;
    assert_eq!(status_of(&health), 503, "{health}");
    assert!(health.contains("server_shutting_down"), "{health}");

    let streamed = streamed.await.unwrap();
    let events: Vec<&str> = streamed
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert!(!events.contains(&"[DONE]"), "{streamed}");
    let last: serde_json::Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "server_shutting_down", "{streamed}");
    assert!(
        !events.iter().any(|e| e.contains("\"finish_reason\":\"")),
        "no finish_reason on a cut-off: {streamed}"
    );

    let plain = plain.await.unwrap();
    assert_eq!(status_of(&plain), 503, "{plain}");
    assert!(
        plain.to_ascii_lowercase().contains("retry-after: 1"),
        "{plain}"
    );
    assert!(plain.contains("server_shutting_down"), "{plain}");
    server.done.await.unwrap().unwrap();
    assert_eq!(st.metrics.cut_at_shutdown(), 2);
}

/// `/health` on an open keep-alive connection.
async fn health_on(c: &mut TcpStream) -> String {
    c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
        .await
        .expect("health answers")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// F1: requests that finish within the grace period are served whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_finish_within_the_grace_period_are_served_whole() {
    let st = state(Setup {
        fault: Fault::Slow { millis: 5 },
        ..Setup::default()
    });
    let server = start(Arc::clone(&st), Duration::from_secs(20)).await;
    let addr = server.addr;
    let body = r#"{"prompt": "abc", "max_tokens": 40, "ignore_eos": true, "stream": true}"#;
    let streamed =
        tokio::spawn(
            async move { exchange(addr, &request("POST", "/v1/completions", body)).await },
        );
    while st.engine.stats().running < 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.stop.cancel();
    let streamed = streamed.await.unwrap();
    assert!(streamed.contains("data: [DONE]"), "{streamed}");
    assert!(
        streamed.contains("\"finish_reason\":\"length\""),
        "{streamed}"
    );
    server.done.await.unwrap().unwrap();
    assert_eq!(st.metrics.cut_at_shutdown(), 0);
}

fn limited(limits: Limits) -> Arc<AppState> {
    state(Setup {
        limits,
        ..Setup::default()
    })
}

/// F3: a header or a body that never finishes, and a kept-alive connection that
/// sits idle, are closed at their timeouts; a Content-Length over the limit is
/// refused before any of the body is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_slow_bodies_and_idle_connections_time_out() {
    let limits = Limits {
        header_timeout: Duration::from_millis(400),
        body_timeout: Duration::from_millis(400),
        idle_timeout: Duration::from_millis(600),
        ..Limits::default()
    };
    let server = start(limited(limits), Duration::from_secs(1)).await;
    let addr = server.addr;

    let t = Instant::now();
    let slow_header = exchange(addr, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n").await;
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "closed at the header timeout"
    );
    assert!(!slow_header.contains("200 OK"), "{slow_header}");

    let t = Instant::now();
    let slow_body = exchange(
        addr,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\"",
    )
    .await;
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(status_of(&slow_body), 408, "{slow_body}");
    assert!(slow_body.contains("request_timeout"), "{slow_body}");

    let t = Instant::now();
    let huge = exchange(
        addr,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n{",
    )
    .await;
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "refused before reading"
    );
    assert_eq!(status_of(&huge), 413, "{huge}");

    let mut idle = TcpStream::connect(addr).await.unwrap();
    let first = health_on(&mut idle).await;
    assert_eq!(status_of(&first), 200, "{first}");
    let t = Instant::now();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), idle.read_to_end(&mut rest))
        .await
        .expect("the idle connection is closed");
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    server.stop.cancel();
    server.done.await.unwrap().unwrap();
}

/// F3: at most `max_connections` are served at once; the next waits in the
/// backlog and is served as soon as one closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_wait_their_turn() {
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let server = start(limited(limits), Duration::from_secs(1)).await;
    let addr = server.addr;
    let mut a = TcpStream::connect(addr).await.unwrap();
    let mut b = TcpStream::connect(addr).await.unwrap();
    assert_eq!(status_of(&health_on(&mut a).await), 200);
    assert_eq!(status_of(&health_on(&mut b).await), 200);
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    assert!(
        tokio::time::timeout(Duration::from_millis(500), c.read(&mut buf))
            .await
            .is_err(),
        "a third connection is not served while two are open"
    );
    drop(a);
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
        .await
        .expect("served once a place is free")
        .unwrap();
    assert_eq!(status_of(&String::from_utf8_lossy(&buf[..n])), 200);
    drop((b, c));
    server.stop.cancel();
    server.done.await.unwrap().unwrap();
}

/// F3: a request that runs past the wall-clock limit is cancelled: 504 for a
/// plain request, an error event (and no `[DONE]`) for a stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_wall_clock_limit_is_cancelled() {
    let st = state(Setup {
        fault: Fault::Slow { millis: 20 },
        limits: Limits {
            request_timeout: Some(Duration::from_millis(300)),
            ..Limits::default()
        },
        ..Setup::default()
    });
    let server = start(Arc::clone(&st), Duration::from_secs(1)).await;
    let plain = exchange(
        server.addr,
        &request("POST", "/v1/completions", &format!("{LONG}}}")),
    )
    .await;
    assert_eq!(status_of(&plain), 504, "{plain}");
    assert!(plain.contains("request_timeout"), "{plain}");
    let streamed = exchange(
        server.addr,
        &request(
            "POST",
            "/v1/completions",
            &format!("{LONG}, \"stream\": true}}"),
        ),
    )
    .await;
    assert!(!streamed.contains("[DONE]"), "{streamed}");
    assert!(streamed.contains("request_timeout"), "{streamed}");
    for _ in 0..500 {
        if st.engine.stats().running == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(st.engine.stats().running, 0, "both were cancelled");
    server.stop.cancel();
    server.done.await.unwrap().unwrap();
}

/// Issue 13: what hyper refuses before the router sees a request (a malformed
/// request line or header, headers over its buffer) still answers an
/// OpenAI-shaped JSON error, and the server serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_hyper_cannot_parse_get_a_json_error_body() {
    let st = state(Setup::default());
    let server = start(Arc::clone(&st), Duration::from_secs(1)).await;
    let huge = format!(
        "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(600_000)
    );
    for (raw, status, code) in [
        ("GARBAGE\r\n\r\n".to_string(), 400, "bad_request"),
        (
            "GET /health HTTP/1.1\r\nBad Header\r\n\r\n".to_string(),
            400,
            "bad_request",
        ),
        (huge, 431, "headers_too_large"),
    ] {
        let answer = exchange(server.addr, &raw).await;
        assert_eq!(status_of(&answer), status, "{answer}");
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.contains("content-type: application/json"), "{head}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], code, "{body}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{body}");
    }
    let ok = exchange(server.addr, &request("GET", "/health", "")).await;
    assert_eq!(status_of(&ok), 200, "{ok}");
    assert!(st.metrics.render().contains("headers_too_large"));
    server.stop.cancel();
    server.done.await.unwrap().unwrap();
}
