//! Prompt scoring on `/v1/completions` in-process on a tiny model: `echo` with
//! `logprobs` (lm-eval's loglikelihood request), `max_tokens: 0`, and vLLM's
//! `prompt_logprobs`. A prompt's scores are the bits the same tokens get when
//! they are generated (SPEC S3: a span's logits do not depend on how its
//! sequence was split), a streamed echo adds up to the whole one, and bad
//! values are refused by name.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use ferrox_server::router;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

mod common;

use common::{Setup, state};

async fn post(body: Value) -> (StatusCode, Value) {
    post_to("/v1/completions", body).await
}

async fn post_to(path: &str, body: Value) -> (StatusCode, Value) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let r = router(state(Setup::default())).oneshot(req).await.unwrap();
    let status = r.status();
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")),
    )
}

fn floats(v: &Value) -> Vec<Option<f64>> {
    v.as_array().unwrap().iter().map(Value::as_f64).collect()
}

#[tokio::test]
async fn an_echoed_prompt_scores_its_tokens_with_the_bits_generation_gave_them() {
    let prompt: Vec<u32> = vec![5, 17, 3, 9];
    let (s, generated) = post(json!({"prompt": prompt, "max_tokens": 3, "temperature": 0,
                                      "logprobs": 2, "ignore_eos": true}))
    .await;
    assert_eq!(s, StatusCode::OK, "{generated}");
    let lp = &generated["choices"][0]["logprobs"];
    let gen_scores = floats(&lp["token_logprobs"]);
    let gen_tokens: Vec<String> = serde_json::from_value(lp["tokens"].clone()).unwrap();
    assert_eq!(gen_scores.len(), 3);

    // The prompt and its three generated tokens, scored whole with nothing
    // generated: lm-eval's request shape.
    let ids = generated_ids(&prompt).await;
    let (s, scored) = post(json!({"prompt": ids, "max_tokens": 0, "echo": true,
                                   "logprobs": 2, "temperature": 0}))
    .await;
    assert_eq!(s, StatusCode::OK, "{scored}");
    let choice = &scored["choices"][0];
    assert_eq!(choice["finish_reason"], "length");
    let lp = &choice["logprobs"];
    let scores = floats(&lp["token_logprobs"]);
    assert_eq!(scores.len(), prompt.len() + 3, "{lp}");
    assert_eq!(scores[0], None, "the first token has no context");
    assert!(lp["top_logprobs"][0].is_null());
    assert!(scores[1..].iter().all(|s| s.is_some_and(|v| v <= 0.0)));
    assert_eq!(&scores[prompt.len()..], &gen_scores[..], "the same bits");
    let tokens: Vec<String> = serde_json::from_value(lp["tokens"].clone()).unwrap();
    assert_eq!(&tokens[prompt.len()..], &gen_tokens[..]);
    // Offsets index the echoed text.
    let text = choice["text"].as_str().unwrap();
    let offsets: Vec<usize> = serde_json::from_value(lp["text_offset"].clone()).unwrap();
    for (t, &o) in tokens.iter().zip(&offsets) {
        assert!(
            text[o..].starts_with(t.as_str()),
            "{t:?} at {o} of {text:?}"
        );
    }
    assert_eq!(scored["usage"]["completion_tokens"], 0);
    assert_eq!(scored["usage"]["prompt_tokens"], prompt.len() + 3);
}

/// `prompt` followed by its three greedy tokens, as ids (llama-server's
/// `/completion` returns them).
async fn generated_ids(prompt: &[u32]) -> Vec<u32> {
    let (s, v) = post_to(
        "/completion",
        json!({"prompt": prompt, "n_predict": 3, "temperature": 0,
               "ignore_eos": true, "return_tokens": true}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let more: Vec<u32> =
        serde_json::from_value(v["tokens"].clone()).unwrap_or_else(|e| panic!("{e}: {v}"));
    prompt.iter().copied().chain(more).collect()
}

#[tokio::test]
async fn vllm_prompt_logprobs_list_each_token_with_its_rank_and_alternatives() {
    let (s, v) = post(
        json!({"prompt": [5, 17, 3], "max_tokens": 1, "temperature": 0,
                              "prompt_logprobs": 2}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let choice = &v["choices"][0];
    let list = choice["prompt_logprobs"].as_array().unwrap();
    assert_eq!(list.len(), 3);
    assert!(list[0].is_null());
    for (entry, id) in list[1..].iter().zip(["17", "3"]) {
        let m = entry.as_object().unwrap();
        assert!(m.contains_key(id), "{entry}");
        assert!((2..=3).contains(&m.len()), "{entry}");
        let ranks: Vec<u64> = m.values().map(|e| e["rank"].as_u64().unwrap()).collect();
        assert!(ranks.contains(&1), "the best token is listed: {entry}");
    }
    assert_eq!(choice["text"].as_str().map(str::is_empty), Some(false));
    assert!(choice["logprobs"].is_null(), "no completion logprobs asked");
}

#[tokio::test]
async fn echo_without_logprobs_answers_the_prompt_text_before_the_completion() {
    let (s, plain) = post(json!({"prompt": "abc", "max_tokens": 2, "temperature": 0,
                                  "ignore_eos": true}))
    .await;
    assert_eq!(s, StatusCode::OK, "{plain}");
    let (s, echoed) = post(json!({"prompt": "abc", "max_tokens": 2, "temperature": 0,
                                   "ignore_eos": true, "echo": true}))
    .await;
    assert_eq!(s, StatusCode::OK, "{echoed}");
    let text = echoed["choices"][0]["text"].as_str().unwrap();
    let completion = plain["choices"][0]["text"].as_str().unwrap();
    assert!(
        text.ends_with(completion) && text.len() > completion.len(),
        "{text:?}"
    );
    assert!(echoed["choices"][0]["logprobs"].is_null());
}

#[tokio::test]
async fn bad_scoring_requests_are_refused_by_name() {
    for (body, field) in [
        (json!({"prompt": "a", "max_tokens": 0}), "max_tokens"),
        (
            json!({"prompt": "a", "prompt_logprobs": 21}),
            "prompt_logprobs",
        ),
        (
            json!({"prompt": "a", "prompt_logprobs": -1}),
            "prompt_logprobs",
        ),
    ] {
        let (s, v) = post(body.clone()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert_eq!(v["error"]["param"], field, "{body}: {v}");
    }
}

/// A streamed `echo` sends the prompt (with its scores) as its first chunk,
/// then the tokens, as vLLM streams it: the chunks add up to the whole answer.
#[tokio::test]
async fn a_streamed_echo_adds_up_to_the_whole_one() {
    for (max_tokens, logprobs) in [(3, Some(2)), (0, Some(1)), (2, None)] {
        let mut body = json!({"prompt": [5, 17, 3, 9], "max_tokens": max_tokens, "echo": true,
                              "temperature": 0, "ignore_eos": true});
        if let Some(n) = logprobs {
            body["logprobs"] = json!(n);
        }
        let (s, whole) = post(body.clone()).await;
        assert_eq!(s, StatusCode::OK, "{whole}");
        body["stream"] = json!(true);
        let req = Request::post("/v1/completions")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let r = router(state(Setup::default())).oneshot(req).await.unwrap();
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let chunks: Vec<Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let joined: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["text"].as_str())
            .collect();
        let want = &whole["choices"][0];
        assert_eq!(joined, want["text"].as_str().unwrap(), "{body}");
        let tokens: Vec<Value> = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["logprobs"]["tokens"].as_array())
            .flatten()
            .cloned()
            .collect();
        let scores: Vec<Value> = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["logprobs"]["token_logprobs"].as_array())
            .flatten()
            .cloned()
            .collect();
        match logprobs {
            Some(_) => {
                assert_eq!(json!(tokens), want["logprobs"]["tokens"], "{body}");
                assert_eq!(json!(scores), want["logprobs"]["token_logprobs"], "{body}");
                assert!(scores[0].is_null(), "the first prompt token has no score");
            }
            None => assert!(tokens.is_empty()),
        }
        assert_eq!(
            chunks.last().unwrap()["choices"][0]["finish_reason"],
            want["finish_reason"]
        );
    }
}
