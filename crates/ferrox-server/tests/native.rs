//! llama-server's own routes in-process on a tiny model: `/completion` whole
//! and streamed (they agree), its fields (`n_probs`, `return_tokens`, mixed
//! prompts, `samplers`, `n_predict: -1`), `/infill` refused by name for a
//! vocabulary without FIM tokens, and `/slots`.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use ferrox_server::router;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

mod common;

use common::{Setup, state};

async fn send(req: Request<Body>) -> (StatusCode, String) {
    let r = router(state(Setup::default())).oneshot(req).await.unwrap();
    let status = r.status();
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

async fn post(path: &str, body: Value) -> (StatusCode, String) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    send(req).await
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test]
async fn a_stream_adds_up_to_the_whole_completion() {
    let body = |stream: bool| {
        json!({"prompt": "abc", "n_predict": 5, "temperature": 0, "stream": stream,
               "n_probs": 3, "return_tokens": true, "ignore_eos": true})
    };
    let (s, text) = post("/completion", body(false)).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let whole = json_of(&text);
    assert_eq!(whole["stop"], true);
    assert_eq!(whole["stop_type"], "limit");
    assert_eq!(whole["tokens_predicted"], 5);
    assert_eq!(whole["tokens"].as_array().unwrap().len(), 5);
    assert_eq!(whole["timings"]["predicted_n"], 5);
    assert_eq!(whole["generation_settings"]["n_predict"], 5);
    let probs = whole["completion_probabilities"].as_array().unwrap();
    assert_eq!(probs.len(), 5);
    assert!(
        probs
            .iter()
            .all(|p| p["top_logprobs"].as_array().unwrap().len() == 3)
    );
    let (s, text) = post("/completion", body(true)).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let chunks: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(json_of)
        .collect();
    let (last, pieces) = chunks.split_last().unwrap();
    assert!(pieces.iter().all(|c| c["stop"] == false), "{text}");
    assert_eq!(last["stop"], true, "{text}");
    let streamed: String = pieces
        .iter()
        .map(|c| c["content"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, whole["content"].as_str().unwrap());
    let ids: Vec<Value> = pieces
        .iter()
        .flat_map(|c| c["tokens"].as_array().unwrap().clone())
        .collect();
    assert_eq!(Value::Array(ids), whole["tokens"]);
}

#[tokio::test]
async fn llama_server_spellings_are_read_as_it_reads_them() {
    // A mixed prompt, n_predict -1 and seed -1 ("none"), logit_bias pairs,
    // several prompts answered as a list.
    let (s, text) = post(
        "/completion",
        json!({"prompt": [["a", 5, "b"], "cd"], "n_predict": -1, "seed": -1,
               "logit_bias": [[5, false], ["a", 1.5]], "max_tokens": 2}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let v = json_of(&text);
    assert_eq!(v.as_array().map(Vec::len), Some(2), "{text}");
    assert_eq!(v[1]["index"], 1);
    // Prompt objects, id lists beside text, and text keys in a logit_bias map.
    let (s, text) = post(
        "/completion",
        json!({"prompt": [[1, 2], "ab", {"prompt_string": "cd"}], "max_tokens": 1,
               "logit_bias": {"ab": -100, "5": 2}}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    assert_eq!(json_of(&text).as_array().map(Vec::len), Some(3), "{text}");
    for (body, field) in [
        (
            json!({"prompt": "a", "samplers": ["temperature", "top_k"]}),
            "samplers",
        ),
        (json!({"prompt": "a", "samplers": ["mirostat"]}), "samplers"),
        (json!({"prompt": "a", "n_probs": 50}), "n_probs"),
        (
            json!({"prompt": "a", "lora": [{"id": 0, "scale": 1}]}),
            "lora",
        ),
        (
            json!({"prompt": "a", "post_sampling_probs": true}),
            "post_sampling_probs",
        ),
        (json!({"prompt": [1, {}]}), "prompt[1]"),
        (
            json!({"prompt": {"prompt_string": "a", "multimodal_data": ["aGk="]}}),
            "prompt.multimodal_data",
        ),
        (json!({"prompt": [1, "a", {}]}), "prompt[2]"),
    ] {
        let (s, text) = post("/completion", body.clone()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {text}");
        assert_eq!(json_of(&text)["error"]["param"], field, "{body}: {text}");
    }
}

#[tokio::test]
async fn infill_needs_fim_tokens_and_its_parts() {
    let (s, text) = post(
        "/infill",
        json!({"input_prefix": "def f():\n", "input_suffix": "\n", "prompt": "    return"}),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{text}");
    let e = &json_of(&text)["error"];
    assert_eq!(e["param"], "input_suffix");
    assert!(
        e["message"].as_str().unwrap().contains("prefix token"),
        "{e}"
    );
    for bad in [
        json!({"input_prefix": "a"}),
        json!({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": 1, "text": "x"}]}),
        json!({"input_prefix": "a", "input_suffix": "b", "input_extra": [{}]}),
    ] {
        let (s, text) = post("/infill", bad.clone()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}: {text}");
    }
    // OpenAI's `suffix` asks for the same, on one text prompt.
    let (s, text) = post("/v1/completions", json!({"prompt": "a", "suffix": "b"})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{text}");
    assert_eq!(json_of(&text)["error"]["param"], "suffix");
}

#[tokio::test]
async fn slots_list_every_sequence_the_engine_decodes_at_once() {
    let (s, text) = send(Request::get("/slots").body(Body::empty()).unwrap()).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let slots = json_of(&text);
    let slots = slots.as_array().unwrap();
    assert_eq!(slots.len(), Setup::default().max_seqs);
    assert!(
        slots
            .iter()
            .all(|s| s["is_processing"] == false && s["n_ctx"].is_u64())
    );
}

#[tokio::test]
async fn prompts_are_counted_and_rendered_without_generating() {
    let chat = json!({"messages": [{"role": "user", "content": "hi"}]});
    let (s, text) = post("/v1/chat/completions/input_tokens", chat.clone()).await;
    // The tiny model has no chat template: both routes refuse as chat does.
    assert_eq!(s, StatusCode::BAD_REQUEST, "{text}");
    let (s, text) = post("/v1/responses/input_tokens", json!({"input": "hi"})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{text}");
    let st = state(Setup {
        chat_template: Some(
            "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}",
        ),
        ..Setup::default()
    });
    let call = |path: &str, body: Value| {
        let req = Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        router(std::sync::Arc::clone(&st)).oneshot(req)
    };
    let r = call("/apply-template", chat.clone()).await.unwrap();
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        json_of(std::str::from_utf8(&bytes).unwrap())["prompt"],
        "<user>hi<assistant>"
    );
    let r = call("/v1/chat/completions/input_tokens", chat)
        .await
        .unwrap();
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    let counted = json_of(std::str::from_utf8(&bytes).unwrap());
    assert_eq!(counted["object"], "response.input_tokens");
    let n = counted["input_tokens"].as_u64().unwrap();
    let r = call("/v1/responses/input_tokens", json!({"input": "hi"}))
        .await
        .unwrap();
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        json_of(std::str::from_utf8(&bytes).unwrap())["input_tokens"],
        n
    );
    // vLLM's add_generation_prompt: false only to continue the last message.
    let r = call(
        "/apply-template",
        json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}],
               "add_generation_prompt": false, "continue_final_message": true}),
    )
    .await
    .unwrap();
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        json_of(std::str::from_utf8(&bytes).unwrap())["prompt"],
        "<user>hi<assistant>Hel"
    );
    let r = call(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": false}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn n_choices_per_prompt_count_the_prompt_once() {
    let (s, text) = post(
        "/v1/completions",
        json!({"prompt": ["abc", "de"], "n": 2, "max_tokens": 3, "temperature": 0, "ignore_eos": true}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let v = json_of(&text);
    let choices = v["choices"].as_array().unwrap();
    let indexes: Vec<u64> = choices
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, [0, 1, 2, 3]);
    // Greedy: a prompt's choices agree; each prompt counts once.
    assert_eq!(choices[0]["text"], choices[1]["text"]);
    assert_eq!(choices[2]["text"], choices[3]["text"]);
    let (_, one) = post(
        "/v1/completions",
        json!({"prompt": ["abc", "de"], "max_tokens": 3, "temperature": 0, "ignore_eos": true}),
    )
    .await;
    let one = json_of(&one);
    assert_eq!(v["usage"]["prompt_tokens"], one["usage"]["prompt_tokens"]);
    assert_eq!(v["usage"]["completion_tokens"], 12);
}
