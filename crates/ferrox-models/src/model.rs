//! A model as commands use it: the transformer, its tokenizer and its chat format,
//! loaded together from one GGUF file.
//!
//! Invariant: a chat prompt is encoded with special tokens parsed (the template
//! spells them) and BOS added only when the rendered text does not already start
//! with it, so templates that write `{{ bos_token }}` do not get two.

use std::path::Path;

use ferrox_gguf::GgufFile;

use crate::chat::{ChatMessage, ChatTemplate};
use crate::error::ModelError;
use crate::tokenizer::Tokenizer;
use crate::transformer::Transformer;

/// A loaded model with its tokenizer and chat template.
pub struct Model {
    pub transformer: Transformer,
    pub tokenizer: Tokenizer,
    pub chat: Option<ChatTemplate>,
}

impl Model {
    /// Loads the GGUF file at `path`, computing on `threads` threads.
    pub fn load(path: &Path, threads: usize) -> Result<Model, ModelError> {
        Self::from_file(GgufFile::open(path)?, threads)
    }

    /// Loads a GGUF file already in memory.
    pub fn from_file(file: GgufFile, threads: usize) -> Result<Model, ModelError> {
        let m = &file.header().metadata;
        let tokenizer = Tokenizer::from_metadata(m)?;
        let piece = |id: Option<u32>| id.map(|i| tokenizer.decode(&[i], true)).unwrap_or_default();
        let (bos, eos) = (piece(tokenizer.bos()), piece(tokenizer.eos()));
        let template = m.string_opt("tokenizer.chat_template")?;
        let arch = crate::hparams::Architecture::from_gguf_name(m.str("general.architecture")?)?;
        let chat = ChatTemplate::for_model(template.as_deref(), arch, &bos, &eos)?;
        let transformer = Transformer::new(file, threads)?;
        Ok(Model { transformer, tokenizer, chat })
    }

    /// Token ids of a raw prompt (BOS as the metadata asks, special tokens parsed).
    pub fn prompt_ids(&self, text: &str) -> Vec<u32> {
        self.tokenizer.encode(text, true, true)
    }

    /// Token ids of a conversation rendered by the chat template.
    pub fn chat_ids(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<Vec<u32>, ModelError> {
        let template = self.chat.as_ref().ok_or_else(|| ModelError::ChatTemplate("the model has no chat template".into()))?;
        let text = template.render(messages, add_generation_prompt)?;
        let starts_with_bos = self.tokenizer.bos().is_some_and(|b| text.starts_with(&self.tokenizer.decode(&[b], true)));
        Ok(self.tokenizer.encode(&text, !starts_with_bos, true))
    }
}
