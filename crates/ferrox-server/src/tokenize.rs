//! The tokenizer's routes, in llama-server's and vLLM's shapes:
//! `POST /tokenize`, `POST /detokenize` and vLLM's `GET /tokenizer_info`
//! (what lm-eval-harness's `tokenizer_backend=remote` reads, so that it needs
//! no tokenizer files of its own).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::invalid::Invalid;
use crate::json_body::json_body;
use crate::request::typed;
use crate::state::AppState;

/// The routes, on the served model's router.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/tokenizer_info", get(tokenizer_info))
}

/// A `/tokenize` body: llama-server's (`content`, `add_special` off by
/// default) or vLLM's (`prompt`, `add_special_tokens` on by default).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenizeBody {
    content: Option<String>,
    prompt: Option<String>,
    add_special: Option<bool>,
    add_special_tokens: Option<bool>,
    #[serde(default = "yes")]
    parse_special: bool,
    /// Each token as `{"id", "piece"}`: the piece a string when it is UTF-8,
    /// else its bytes.
    #[serde(default)]
    with_pieces: bool,
    /// vLLM's: the model (the router has chosen it already).
    #[serde(default, rename = "model")]
    _model: Option<serde::de::IgnoredAny>,
}

impl TokenizeBody {
    /// The text, and whether the model's special tokens (its BOS) are added.
    fn text(self) -> Result<(String, bool), Invalid> {
        match (self.content, self.prompt) {
            (Some(c), None) => Ok((c, self.add_special.unwrap_or(false))),
            (None, Some(p)) => Ok((p, self.add_special_tokens.unwrap_or(true))),
            (Some(_), Some(_)) => Err(Invalid::Conflict {
                field: "prompt",
                why: "give content (llama-server's name) or prompt (vLLM's), not both",
            }),
            (None, None) => Err(Invalid::Missing { field: "content" }),
        }
    }
}

/// A token with its piece (`/tokenize` with `with_pieces`).
#[derive(serde::Serialize)]
struct TokenPiece {
    id: u32,
    piece: Piece,
}

#[derive(serde::Serialize)]
#[serde(untagged)]
enum Piece {
    Text(String),
    Bytes(Vec<u8>),
}

fn yes() -> bool {
    true
}

/// A `/detokenize` body.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DetokenizeBody {
    tokens: Vec<u32>,
    /// vLLM's: the model (the router has chosen it already).
    #[serde(default, rename = "model")]
    _model: Option<serde::de::IgnoredAny>,
}

async fn tokenize(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let b: TokenizeBody = typed(&json_body(body)?)?;
    let (parse_special, with_pieces) = (b.parse_special, b.with_pieces);
    let (text, add_special) = b.text()?;
    let tokens = st.tokenizer.encode(&text, add_special, parse_special);
    // vLLM's answer adds the count and the context; llama-server's is the list.
    let (count, max_model_len) = (tokens.len(), st.engine.ceiling().max_context);
    if !with_pieces {
        return Ok(Json(
            json!({ "tokens": tokens, "count": count, "max_model_len": max_model_len }),
        ));
    }
    let pieces: Vec<TokenPiece> = tokens
        .into_iter()
        .map(|id| {
            let bytes = st.tokenizer.token_bytes(id, true).into_owned();
            let piece = match String::from_utf8(bytes) {
                Ok(s) => Piece::Text(s),
                Err(e) => Piece::Bytes(e.into_bytes()),
            };
            TokenPiece { id, piece }
        })
        .collect();
    Ok(Json(json!({ "tokens": pieces })))
}

async fn detokenize(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let b: DetokenizeBody = typed(&json_body(body)?)?;
    let vocab = st.tokenizer.vocab_size();
    if b.tokens.iter().any(|&t| t as usize >= vocab) {
        return Err(Invalid::NotAToken {
            field: "tokens",
            vocab,
        }
        .into());
    }
    let text = st.tokenizer.decode(&b.tokens, true);
    // llama-server names the text `content`, vLLM `prompt`.
    Ok(Json(json!({"content": text, "prompt": text})))
}

/// vLLM's `GET /tokenizer_info`: the special tokens, the chat template and the
/// context, as a client that tokenizes through this server needs them.
async fn tokenizer_info(State(st): State<Arc<AppState>>) -> Json<Value> {
    let t = &st.tokenizer;
    let piece = |id: Option<u32>| {
        id.map(|id| String::from_utf8_lossy(&t.token_bytes(id, true)).into_owned())
    };
    Json(json!({
        "tokenizer_class": "GGUF",
        "bos_token": piece(t.bos()),
        "eos_token": piece(t.eos()),
        "add_bos_token": t.adds_bos(),
        "chat_template": st.facts.chat_template,
        "model_max_length": st.engine.ceiling().max_context,
        "vocab_size": t.vocab_size(),
    }))
}
