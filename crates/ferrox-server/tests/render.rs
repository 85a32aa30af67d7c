//! vLLM's render endpoints and `/kv/blocks` in-process on a tiny model (issue
//! 31): a rendered prompt is the one the generating route runs, a body that
//! route refuses is refused alike, and the prefix cache's pages are listed.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use ferrox_server::router;
use ferrox_server::state::AppState;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

mod common;

use common::{Setup, state};

async fn call(st: &Arc<AppState>, req: Request<Body>) -> (StatusCode, Value) {
    let r = router(Arc::clone(st)).oneshot(req).await.unwrap();
    let status = r.status();
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")),
    )
}

async fn post(st: &Arc<AppState>, path: &str, body: Value) -> (StatusCode, Value) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    call(st, req).await
}

fn templated() -> Arc<AppState> {
    state(Setup {
        chat_template: Some(
            "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}",
        ),
        ..Setup::default()
    })
}

#[tokio::test]
async fn a_rendered_chat_is_the_prompt_the_chat_route_runs() {
    let st = templated();
    let chat = json!({"messages": [{"role": "user", "content": "hello"}],
                      "max_tokens": 3, "temperature": 0, "seed": 7, "stop": ["x"]});
    let (s, r) = post(&st, "/v1/chat/completions/render", chat.clone()).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let ids: Vec<u64> = serde_json::from_value(r["token_ids"].clone()).unwrap();
    assert_eq!(r["prompt"], "<user>hello<assistant>");
    let (_, tokenized) = post(
        &st,
        "/tokenize",
        json!({"content": "<user>hello<assistant>", "add_special": true, "parse_special": true}),
    )
    .await;
    assert_eq!(json!(ids), tokenized["tokens"]);
    let sp = &r["sampling_params"];
    assert_eq!(
        (
            &sp["max_tokens"],
            &sp["temperature"],
            &sp["seed"],
            &sp["stop"]
        ),
        (&json!(3), &json!(0.0), &json!(7), &json!(["x"]))
    );
    assert!(r["request_id"].as_str().unwrap().starts_with("chatcmpl-"));
    let (s, done) = post(&st, "/v1/chat/completions", chat).await;
    assert_eq!(s, StatusCode::OK, "{done}");
    assert_eq!(done["usage"]["prompt_tokens"], json!(ids.len()));
}

#[tokio::test]
async fn completions_render_one_request_per_prompt_and_refuse_as_generation_does() {
    let st = templated();
    let (s, r) = post(
        &st,
        "/v1/completions/render",
        json!({"prompt": ["abc", "de"], "max_tokens": 2}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let list = r.as_array().unwrap();
    assert_eq!(list.len(), 2);
    for (item, text) in list.iter().zip(["abc", "de"]) {
        let (_, t) = post(
            &st,
            "/tokenize",
            json!({"content": text, "add_special": true}),
        )
        .await;
        assert_eq!(item["token_ids"], t["tokens"], "{text}");
    }
    for path in ["/v1/completions/render", "/v1/completions"] {
        let (s, e) = post(&st, path, json!({"prompt": "abc", "temperature": -1})).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {e}");
        assert_eq!(e["error"]["param"], "temperature", "{path}: {e}");
    }
    // The tiny model has no template of its own: chat renders refuse as chat does.
    let (s, _) = post(
        &state(Setup::default()),
        "/v1/chat/completions/render",
        json!({"messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn kv_blocks_lists_the_pages_a_prompt_left_in_the_prefix_cache() {
    let st = templated();
    let get = || Request::get("/kv/blocks").body(Body::empty()).unwrap();
    let (s, empty) = call(&st, get()).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(empty["blocks"], json!([]));
    let prompt: Vec<u32> = (0..70).map(|i| 10 + i % 40).collect();
    let (s, _) = post(
        &st,
        "/v1/completions",
        json!({"prompt": prompt, "max_tokens": 1}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (_, listed) = call(&st, get()).await;
    let size = listed["block_size"].as_u64().unwrap() as usize;
    let blocks = listed["blocks"].as_array().unwrap();
    // Every whole page the prompt and its one token wrote.
    assert_eq!(blocks.len(), 71 / size, "{listed}");
}
