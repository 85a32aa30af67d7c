//! Prompts without generation: `POST /v1/chat/completions/input_tokens` and
//! `POST /v1/responses/input_tokens` count the tokens a body's prompt takes
//! (`{"object": "response.input_tokens", "input_tokens": N}`, as
//! llama-server answers), and llama-server's `POST /apply-template` returns
//! a chat body's prompt as the template renders it (`{"prompt": ...}`).
//! Each reads its body as the generating route does, so a body one refuses
//! the other refuses too.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::generation::{self, Generation, Prompt};
use crate::invalid::Invalid;
use crate::json_body::json_body;
use crate::request::parse_chat;
use crate::state::AppState;

fn counted(n: usize) -> Json<Value> {
    Json(json!({"object": "response.input_tokens", "input_tokens": n}))
}

/// `POST /v1/chat/completions/input_tokens`.
pub async fn chat(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let g = Generation::from(parse_chat(&json_body(body)?)?);
    let prepared = generation::prepare(&st, g).await?;
    Ok(counted(prepared.prompts[0].len()))
}

/// `POST /v1/responses/input_tokens`.
pub async fn responses(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let g = crate::responses::generation_of(&json_body(body)?)?;
    let prepared = generation::prepare(&st, g).await?;
    Ok(counted(prepared.prompts[0].len()))
}

/// `POST /apply-template`: the prompt text of a chat body (the assistant's
/// turn opened, or the prefill continued).
pub async fn apply_template(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let g = Generation::from(parse_chat(&json_body(body)?)?);
    let Prompt::Chat {
        messages,
        vars,
        prefill,
    } = &g.prompt
    else {
        unreachable!("a chat body is a chat prompt")
    };
    let template = st.chat.as_ref().ok_or_else(|| Invalid::Template {
        detail: "the model has no chat template".into(),
    })?;
    st.check_template_vars(vars)?;
    let tools = g.tools.as_ref().map_or(&[][..], |t| &t.tools[..]);
    let mut prompt = template
        .render_with_tools(messages, tools, vars, true)
        .map_err(|e| Invalid::Template {
            detail: e.to_string(),
        })?;
    prompt.push_str(prefill.as_deref().unwrap_or(""));
    Ok(Json(json!({ "prompt": prompt })))
}
