//! A model as commands use it: the network (a decoder transformer, or an
//! encoder), its tokenizer and its chat format, loaded together from one GGUF
//! file.
//!
//! Chat prompts are encoded by `chat::encode_chat`, the one encoding every path uses.

use std::path::Path;

use ferrox_gguf::GgufFile;

use crate::activation_path::ActivationPath;
use crate::decoder::Decoder;
use crate::encoder::Encoder;
use crate::error::ModelError;
use crate::hparams::HyperParams;
use crate::transformer::Transformer;
use ferrox_text::Tokenizer;
use ferrox_text::chat::{ChatMessage, ChatTemplate};

/// A loaded model with its tokenizer and chat template.
pub struct Model {
    pub net: Net,
    pub tokenizer: Tokenizer,
    pub chat: Option<ChatTemplate>,
}

/// Why an encoder cannot stand where a generating model is needed.
pub const NOT_A_GENERATOR: &str = "an embedding model (an encoder): it does not generate; serve it and use /v1/embeddings or /v1/rerank";

/// What computes: a generating decoder, or an encoder that only embeds.
pub enum Net {
    Decoder(Box<Transformer>),
    Encoder(Box<Encoder>),
}

impl Net {
    pub fn hyper_params(&self) -> &HyperParams {
        match self {
            Net::Decoder(t) => t.hyper_params(),
            Net::Encoder(e) => e.hyper_params(),
        }
    }

    /// The file the model was loaded from.
    pub fn file(&self) -> &GgufFile {
        match self {
            Net::Decoder(t) => t.file(),
            Net::Encoder(e) => e.file(),
        }
    }

    /// The network as the engine runs it.
    pub fn into_decoder(self) -> Box<dyn Decoder> {
        match self {
            Net::Decoder(t) => t,
            Net::Encoder(e) => e,
        }
    }

    /// The generating transformer, or why there is none.
    pub fn generator(self) -> Result<Transformer, ModelError> {
        match self {
            Net::Decoder(t) => Ok(*t),
            Net::Encoder(e) => Err(ModelError::WrongKind {
                architecture: e.hyper_params().architecture.gguf_name(),
                kind: NOT_A_GENERATOR,
            }),
        }
    }
}

impl Model {
    /// Loads the GGUF file at `path`, computing on `threads` threads.
    pub fn load(path: &Path, threads: usize) -> Result<Model, ModelError> {
        Self::from_file(GgufFile::open(path)?, threads, ActivationPath::default())
    }

    /// Loads the GGUF file at `path` for the given activation path.
    pub fn load_with(
        path: &Path,
        threads: usize,
        activations: ActivationPath,
    ) -> Result<Model, ModelError> {
        Self::from_file(GgufFile::open(path)?, threads, activations)
    }

    /// Loads a GGUF file already in memory.
    pub fn from_file(
        file: GgufFile,
        threads: usize,
        activations: ActivationPath,
    ) -> Result<Model, ModelError> {
        let m = &file.header().metadata;
        let tokenizer = Tokenizer::from_metadata(m)?;
        let piece = |id: Option<u32>| id.map(|i| tokenizer.decode(&[i], true)).unwrap_or_default();
        let (bos, eos) = (piece(tokenizer.bos()), piece(tokenizer.eos()));
        let template = m.string_opt("tokenizer.chat_template")?;
        let arch = crate::hparams::Architecture::from_gguf_name(m.str("general.architecture")?)?;
        let builtin = arch.spec().builtin_chat;
        let chat = ChatTemplate::for_model(template.as_deref(), builtin, &bos, &eos)?;
        let net = match arch.spec().encoder {
            true => Net::Encoder(Box::new(Encoder::new(file, threads)?)),
            false => Net::Decoder(Box::new(Transformer::with_path(
                file,
                threads,
                activations,
            )?)),
        };
        Ok(Model {
            net,
            tokenizer,
            chat,
        })
    }

    /// Token ids of a raw prompt (BOS as the metadata asks, special tokens parsed).
    pub fn prompt_ids(&self, text: &str) -> Vec<u32> {
        self.tokenizer.encode(text, true, true)
    }

    /// Token ids of a conversation rendered by the chat template.
    pub fn chat_ids(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>, ModelError> {
        ferrox_text::chat::encode_chat(
            self.chat.as_ref(),
            &self.tokenizer,
            messages,
            add_generation_prompt,
        )
        .map_err(ModelError::from)
    }
}
