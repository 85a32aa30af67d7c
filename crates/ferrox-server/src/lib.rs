//! ferrox-server: the OpenAI-compatible HTTP server over the engine.
//!
//! * [`json_body`]: strict JSON bodies (content type, no duplicate keys).
//! * [`field_policy`]: each route's fields, each declared once: implemented,
//!   alias, no-op or refused.
//! * [`input_tokens`]: prompts without generation: token counts, `/apply-template`.
//! * [`invalid`]: the typed causes of a 400.
//! * [`prompt_forms`]: llama-server's prompt forms (ids mixed with text, prompt
//!   objects), as token ids.
//! * [`answer`]: the one typed answer every API renders, gathered from the engine.
//! * [`sampling`]: the one sampling validator, with each API's bounds.
//! * [`openai`]: the OpenAI request, response and chunk types (serde).
//! * [`request`]: body validation into `ValidRequest` (pure, SPEC S17).
//! * [`structured`]: the structured-output fields, into a grammar spec (pure).
//! * [`tool_request`]: `tools`, `tool_choice` and the tool parts of messages (pure).
//! * [`error`]: OpenAI-shaped errors; the only place refusals become statuses (S18).
//! * [`generation`]: the one way every route reaches the engine: a typed prompt,
//!   tools, grammar and sampling, prepared and submitted.
//! * [`completions`]: chat and text completions, JSON and SSE.
//! * [`anthropic`]: Anthropic's Messages API (`POST /v1/messages`), JSON and SSE.
//! * [`native`]: llama-server's own `/completion`, `/infill` and `/slots`.
//! * [`embeddings`]: `/v1/embeddings` and `/embedding`: inputs pooled by the
//!   engine, normalized and truncated here.
//! * [`ollama`]: Ollama's API (`/api/chat`, `/api/generate`, the model routes), NDJSON.
//! * [`model_card`]: what the served model's file says of itself.
//! * [`responses`]: OpenAI's Responses API (`POST /v1/responses`), JSON and SSE.
//! * [`registry`] and [`front`]: several models on one server (`--models-dir`),
//!   loaded on first use, routed by the body's `model`.
//! * [`routes`]: the router, models, health, tokenize, metrics.
//! * [`auth`]: the API key (case-insensitive scheme, constant-time comparison).
//! * [`metrics`]: Prometheus text (S19).
//! * [`request_log`]: the log: a line per request, per refusal, and a summary at shutdown.
//! * [`mod@serve`]: binding, readiness and graceful shutdown.
//! * [`webui`]: the chat page at `/`, compiled in.
//! * [`unparsed`]: hyper's own refusals (malformed requests, huge headers) with a JSON body.
//! * [`limits`]: header, body, idle and request timeouts; connection and body limits.

pub mod answer;
pub mod anthropic;
pub mod auth;
pub mod completions;
pub mod embeddings;
pub mod error;
pub mod field_policy;
pub mod front;
pub mod generation;
pub mod input_tokens;
pub mod invalid;
pub mod json_body;
pub mod kv_events;
pub mod limits;
pub mod metrics;
pub mod model_card;
pub mod native;
pub mod ollama;
pub mod openai;
pub mod prompt_forms;
pub mod props;
pub mod registry;
pub mod render;
pub mod request;
pub mod request_log;
pub mod responses;
pub mod routes;
pub mod sampling;
pub mod serve;
pub mod state;
pub mod structured;
pub mod tokenize;
pub mod tool_request;
pub mod unparsed;
pub mod webui;

pub use limits::Limits;
pub use routes::router;
pub use serve::{ServeOptions, Served, serve, serve_loading};
pub use state::{AppState, Lifecycle, Phase, Server};
