//! What every handler shares: the model's engine handle, tokenizer, chat
//! template, names and metrics ([`AppState`]), and the server's own state
//! every model shares ([`Server`]: the API key, limits, where the server is
//! in its life).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use ferrox_engine::EngineHandle;
use ferrox_sampling::grammar::{Grammar, GrammarError, GrammarSpec, Grammars};
use ferrox_text::TextError;
use ferrox_text::Tokenizer;
use ferrox_text::chat::{ChatMessage, ChatTemplate, TemplateVars};
use ferrox_text::reasoning::{AnswerPhase, Thinking};
use ferrox_text::tools::{Tool, ToolFormat};

use crate::auth::ApiKey;
use crate::error::ApiError;
use crate::invalid::Invalid;
use crate::metrics::Metrics;

/// Where the server is in its life (what `/health` reports).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Bound, model still loading or engine not yet serving.
    Starting,
    /// Serving requests.
    Serving,
    /// A shutdown signal came: in-flight requests finish, new ones are refused.
    Draining,
}

/// The server's [`Phase`], shared across threads.
#[derive(Debug)]
pub struct Lifecycle(AtomicU8);

impl Lifecycle {
    pub fn new(phase: Phase) -> Lifecycle {
        Lifecycle(AtomicU8::new(phase as u8))
    }

    pub fn get(&self) -> Phase {
        match self.0.load(Ordering::Acquire) {
            0 => Phase::Starting,
            1 => Phase::Serving,
            _ => Phase::Draining,
        }
    }

    pub fn set(&self, phase: Phase) {
        self.0.store(phase as u8, Ordering::Release);
    }
}

/// What every model of a server shares: how it was started (the API key,
/// defaults, limits, the page) and where it is in its life, with the tally
/// of how its requests ended.
pub struct Server {
    pub api_key: Option<ApiKey>,
    /// `max_tokens` of requests that give none (capped by what the context leaves).
    pub default_max_tokens: usize,
    /// The seed of requests that give none (`--seed`); `None`: one from the
    /// clock each.
    pub default_seed: Option<u64>,
    pub phase: Lifecycle,
    /// Timeouts and limits of the HTTP layer.
    pub limits: crate::limits::Limits,
    /// Origins whose browser pages may call the API (CORS); `*` is any. Empty:
    /// no CORS headers, so browsers allow only same-origin pages.
    pub cors_origins: Vec<String>,
    /// Whether the chat page is served at `/` (`--no-webui` turns it off).
    pub webui: bool,
    /// Whether request lines carry the prompt text (`--log-prompts`).
    pub log_prompts: bool,
    /// How requests ended, for the summary at shutdown.
    pub tally: crate::request_log::Tally,
}

impl Server {
    /// Refuses new work once draining has begun (503 with `Retry-After`).
    pub fn accepting(&self) -> Result<(), ApiError> {
        if self.phase.get() == Phase::Draining {
            return Err(ApiError::shutting_down(
                "the server is shutting down and takes no new requests; retry elsewhere or later",
            ));
        }
        Ok(())
    }
}

/// One served model's state, and the server's it is served by.
pub struct AppState {
    pub engine: EngineHandle,
    pub tokenizer: Arc<Tokenizer>,
    pub chat: Option<ChatTemplate>,
    /// The id `/v1/models` reports.
    pub model_id: String,
    /// Other names clients may use for the model.
    pub aliases: Vec<String>,
    pub metrics: Metrics,
    /// The grammar compiler for structured output, or why this model has none.
    pub grammars: Result<Grammars, GrammarError>,
    /// What `/props` reports of how the server was started.
    pub facts: crate::props::ServerFacts,
    /// How embeddings are pooled and normalized.
    pub embedding: crate::embeddings::EmbeddingSettings,
    /// What every model of the server shares.
    pub server: Arc<Server>,
}

impl AppState {
    /// Refuses new work once the server drains (503 with `Retry-After`).
    pub fn accepting(&self) -> Result<(), ApiError> {
        self.server.accepting()
    }

    /// A route's response: its answer, or its refusal, counted on `/metrics`
    /// and rendered in the route API's error shape by `render`.
    pub fn respond(
        &self,
        answer: Result<axum::response::Response, ApiError>,
        render: fn(ApiError) -> axum::response::Response,
    ) -> axum::response::Response {
        answer.unwrap_or_else(|e| {
            self.metrics.refused(e.code);
            render(e)
        })
    }

    /// The text of token `id` as the API shows it, and its bytes.
    pub fn token_piece(&self, id: u32) -> (String, Vec<u8>) {
        let b = self.tokenizer.token_bytes(id, false).into_owned();
        (String::from_utf8_lossy(&b).into_owned(), b)
    }

    /// Whether `name` names the served model.
    pub fn serves(&self, name: &str) -> bool {
        name == self.model_id || self.aliases.iter().any(|a| a == name)
    }

    /// Compiles an output grammar; a grammar that cannot be compiled, or a model
    /// without a grammar compiler, is a 400 that says why.
    pub fn compile_grammar(&self, spec: &GrammarSpec) -> Result<Grammar, ApiError> {
        let compiled = match &self.grammars {
            Ok(g) => g.compile(spec),
            Err(e) => {
                return Err(Invalid::Grammar {
                    detail: format!("structured output is not available for this model: {e}"),
                }
                .into());
            }
        };
        compiled.map_err(|e| {
            Invalid::Grammar {
                detail: e.to_string(),
            }
            .into()
        })
    }

    /// Token ids of a conversation rendered by the model's chat template.
    pub fn model_chat_ids(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, TextError> {
        self.model_chat_ids_with_tools(messages, &[], &TemplateVars::new())
    }

    /// [`Self::model_chat_ids`] offering `tools`.
    pub fn model_chat_ids_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: &[Tool],
        vars: &TemplateVars,
    ) -> Result<Vec<u32>, TextError> {
        ferrox_text::chat::encode_chat_with_tools(
            self.chat.as_ref(),
            &self.tokenizer,
            messages,
            tools,
            vars,
            true,
        )
    }

    /// Refuses template variables the chat template has no knob for: a
    /// `reasoning_effort` the template does not read would change nothing.
    pub fn check_template_vars(&self, vars: &TemplateVars) -> Result<(), ApiError> {
        if vars.contains_key("reasoning_effort")
            && !self
                .chat
                .as_ref()
                .is_some_and(|t| t.reads("reasoning_effort"))
        {
            return Err(Invalid::Unsupported {
                field: "reasoning_effort".into(),
                what: "this model's chat template has no reasoning_effort knob",
            }
            .into());
        }
        Ok(())
    }

    /// Whether the served model thinks before it answers (its chat template
    /// has thinking).
    pub fn thinks(&self) -> bool {
        self.chat.as_ref().is_some_and(|c| c.thinks().is_some())
    }

    /// Tells a thinking model not to think (`enable_thinking: false`, read by
    /// the templates that switch it); a model that does not think is left be.
    pub fn thinking_off(&self, vars: &mut TemplateVars) {
        if self.thinks() {
            vars.insert("enable_thinking".into(), serde_json::Value::Bool(false));
        }
    }

    /// How the answer to `prompt` (token ids) is split, when the model thinks:
    /// its format, and where the answer starts (read from the prompt's last
    /// tokens).
    pub fn thinking_start(&self, prompt: &[u32]) -> Option<Thinking> {
        let format = self.chat.as_ref()?.thinks()?;
        let tail = &prompt[prompt.len().saturating_sub(8)..];
        Some(Thinking {
            format,
            start: AnswerPhase::after_prompt(format, &self.tokenizer.decode(tail, true)),
        })
    }

    /// How the served model writes tool calls.
    pub fn tool_format(&self) -> ToolFormat {
        self.chat
            .as_ref()
            .map_or(ToolFormat::Hermes, ChatTemplate::tool_format)
    }
}
