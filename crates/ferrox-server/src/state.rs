//! What every handler shares: the engine handle, the tokenizer and chat template,
//! the model's names, the API key and the metrics.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ferrox_engine::EngineHandle;
use ferrox_models::chat::{ChatMessage, ChatTemplate};
use ferrox_models::{ModelError, Tokenizer};

use crate::metrics::Metrics;

/// Shared server state.
pub struct AppState {
    pub engine: EngineHandle,
    pub tokenizer: Arc<Tokenizer>,
    pub chat: Option<ChatTemplate>,
    /// The id `/v1/models` reports.
    pub model_id: String,
    /// Other names clients may use for the model.
    pub aliases: Vec<String>,
    pub api_key: Option<String>,
    /// `max_tokens` of requests that give none (capped by what the context leaves).
    pub default_max_tokens: usize,
    pub metrics: Metrics,
    pub ready: AtomicBool,
}

impl AppState {
    /// Whether `name` names the served model.
    pub fn serves(&self, name: &str) -> bool {
        name == self.model_id || self.aliases.iter().any(|a| a == name)
    }

    /// Token ids of a conversation rendered by the model's chat template.
    pub fn model_chat_ids(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, ModelError> {
        ferrox_models::chat::encode_chat(self.chat.as_ref(), &self.tokenizer, messages, true)
    }
}
