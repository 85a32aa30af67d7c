//! ferrox-server: the OpenAI-compatible HTTP server over the engine.
//!
//! Planned house (issue "`ferrox serve`"): axum routes for chat and text
//! completions (JSON and SSE), validation into `Valid*` request types, OpenAI-shaped
//! errors with string codes (SPEC S18), `/metrics`, `/health`, and disconnects that
//! cancel (SPEC S13). Mapping typed refusals to HTTP status happens only here.
//!
//! Nothing is implemented here yet; the crate exists so that the dependency
//! direction core <- gguf <- models <- engine <- server <- cli is fixed from the start.
