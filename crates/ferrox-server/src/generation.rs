//! The one way every API reaches the engine. A route parses its body into a
//! [`Generation`] (a typed prompt, the tools and output grammar, the sampling),
//! then [`prepare`] renders and tokenizes the prompts and compiles the grammar,
//! on a blocking thread, and [`Prepared::submit`] submits one engine request
//! per prompt. The routes only parse and render: OpenAI's chat and text
//! completions and Anthropic's Messages are codecs over this.
//!
//! Invariants: refusals happen here, before anything is queued; when one of
//! several prompts is refused, the requests already submitted are dropped,
//! which cancels them, and the refusal is the answer.

use std::sync::Arc;

use ferrox_engine::{GenerationParams, RequestStream};
use ferrox_sampling::grammar::GrammarSpec;
use ferrox_text::chat::{ChatMessage, TemplateVars};
use ferrox_text::fim::{self, Infill};

use crate::error::ApiError;
use crate::invalid::Invalid;
use crate::state::AppState;
use crate::tool_request::{ToolChoice, ToolRequest};

/// A prompt in the forms the APIs take.
#[derive(Debug, Clone)]
pub enum Prompt {
    /// A conversation for the chat template, with the template's extra
    /// variables and, optionally, the start of the answer (an assistant
    /// prefill), continued as is.
    Chat {
        messages: Vec<ChatMessage>,
        vars: TemplateVars,
        prefill: Option<String>,
    },
    /// Raw text prompts, one engine request each (BOS as the model asks,
    /// special tokens parsed).
    Text(Vec<String>),
    /// Prompts given as token ids, one engine request each.
    Tokens(Vec<Vec<u32>>),
    /// A prompt after the token ids of an earlier exchange (Ollama's
    /// `context`), without a second BOS.
    Continued {
        context: Vec<u32>,
        then: Box<Prompt>,
    },
    /// Fill-in-the-middle, built as llama-server builds it; `field` names
    /// the request's field that asked for it (refused for a model without
    /// FIM tokens).
    Infill { infill: Infill, field: &'static str },
}

impl Prompt {
    /// This prompt after the token ids `context` (an earlier exchange).
    pub fn after(self, context: Vec<u32>) -> Prompt {
        if context.is_empty() {
            return self;
        }
        Prompt::Continued {
            context,
            then: Box::new(self),
        }
    }
}

/// What a request asks the engine for, whatever its API.
#[derive(Debug, Clone)]
pub struct Generation {
    pub prompt: Prompt,
    /// Tools on offer; a forced call (`required`, a named tool) is constrained
    /// by the tool format's grammar, which takes the place of `grammar`.
    pub tools: Option<ToolRequest>,
    /// The grammar the output must follow.
    pub grammar: Option<GrammarSpec>,
    /// Sampling and stops (`max_tokens` is filled in by [`Prepared::submit`]).
    pub params: GenerationParams,
    /// Tokens to generate; `None`: what the context leaves, capped at
    /// `--default-max-tokens`.
    pub max_tokens: Option<usize>,
    /// A context smaller than the server's for this request (Ollama's
    /// `num_ctx`): prompt and answer must fit in it.
    pub context: Option<RequestContext>,
    /// Answers per prompt (OpenAI's `n`): each its own engine request, the
    /// k-th sampled with the seed plus k, so that they differ when sampling
    /// and share the prompt's cached pages.
    pub choices: usize,
}

/// A request's own context size, and the field that set it.
#[derive(Debug, Clone, Copy)]
pub struct RequestContext {
    pub tokens: usize,
    pub field: &'static str,
}

/// A generation with its prompts tokenized and its grammar compiled.
pub struct Prepared {
    /// The token ids of each prompt.
    pub prompts: Vec<Vec<u32>>,
    params: GenerationParams,
    max_tokens: Option<usize>,
    context: Option<RequestContext>,
    choices: usize,
}

impl Prepared {
    /// What each request samples with and stops at (`max_tokens` not yet
    /// resolved: see [`Prepared::max_tokens`]).
    pub fn params(&self) -> &GenerationParams {
        &self.params
    }

    /// The tokens asked for; `None`: what the context leaves, capped at
    /// `--default-max-tokens`.
    pub fn max_tokens(&self) -> Option<usize> {
        self.max_tokens
    }

    /// The prompt of each engine request [`Prepared::submit`] makes, in order
    /// (each prompt once per choice).
    pub fn request_prompts(&self) -> impl Iterator<Item = &Vec<u32>> {
        self.prompts
            .iter()
            .flat_map(move |p| std::iter::repeat_n(p, self.choices))
    }
}

/// Renders and tokenizes the prompts and compiles the output grammar on a
/// blocking thread: template rendering, tokenization and grammar compilation
/// are CPU work that must not hold the async runtime's threads.
pub async fn prepare(st: &Arc<AppState>, g: Generation) -> Result<Prepared, ApiError> {
    let st = Arc::clone(st);
    tokio::task::spawn_blocking(move || prepare_blocking(&st, g))
        .await
        .map_err(|e| ApiError::internal(format!("preparing the request failed: {e}")))?
}

fn prepare_blocking(st: &AppState, mut g: Generation) -> Result<Prepared, ApiError> {
    let prompts = tokenize(st, &g)?;
    let forced = g.tools.as_ref().filter(|t| t.choice != ToolChoice::Auto);
    let spec = match forced {
        Some(t) => Some(GrammarSpec::Lark(
            st.tool_format().call_grammar(&t.callable(), t.parallel),
        )),
        None => g.grammar.take(),
    };
    if let Some(spec) = &spec {
        g.params.grammar = Some(Arc::new(st.compile_grammar(spec)?));
    }
    Ok(Prepared {
        prompts,
        params: g.params,
        max_tokens: g.max_tokens,
        context: g.context,
        choices: g.choices.max(1),
    })
}

/// The token ids of each prompt.
fn tokenize(st: &AppState, g: &Generation) -> Result<Vec<Vec<u32>>, ApiError> {
    tokenize_prompt(st, &g.prompt, g)
}

fn tokenize_prompt(
    st: &AppState,
    prompt: &Prompt,
    g: &Generation,
) -> Result<Vec<Vec<u32>>, ApiError> {
    let tools = g.tools.as_ref();
    Ok(match prompt {
        Prompt::Chat {
            messages,
            vars,
            prefill,
        } => {
            st.check_template_vars(vars)?;
            let tools = tools.map_or(&[][..], |t| &t.tools[..]);
            let mut ids = st
                .model_chat_ids_with_tools(messages, tools, vars)
                .map_err(|e| Invalid::Template {
                    detail: e.to_string(),
                })?;
            if let Some(p) = prefill {
                ids.extend(st.tokenizer.encode(p, false, true));
            }
            vec![ids]
        }
        Prompt::Text(texts) => texts
            .iter()
            .map(|t| st.tokenizer.encode(t, true, true))
            .collect(),
        Prompt::Tokens(ids) => ids.clone(),
        Prompt::Infill { infill, field } => {
            let room = fim::Room {
                batch: INFILL_BATCH,
                context: context_limit(st, g.context),
                answer: g.max_tokens,
            };
            vec![
                fim::prompt_ids(&st.tokenizer, infill, room).map_err(|e| Invalid::NoFim {
                    field,
                    detail: e.to_string(),
                })?,
            ]
        }
        Prompt::Continued { context, then } => tokenize_prompt(st, then, g)?
            .into_iter()
            .map(|ids| {
                let bos = st.tokenizer.bos();
                let skip = usize::from(bos.is_some() && ids.first().copied() == bos);
                context.iter().chain(&ids[skip..]).copied().collect()
            })
            .collect(),
    })
}

/// The batch llama-server trims an infill prompt to (its `-b` default).
const INFILL_BATCH: usize = 2048;

/// The positions one request may use: the server's context, or a smaller one
/// the request asks for.
fn context_limit(st: &AppState, asked: Option<RequestContext>) -> usize {
    let ceiling = st.engine.ceiling().max_context as usize;
    asked.map_or(ceiling, |c| c.tokens.min(ceiling))
}

/// The engine requests of one generation, one per prompt.
pub struct Submitted {
    pub streams: Vec<RequestStream>,
    /// Prompt tokens of each.
    pub prompt_lens: Vec<usize>,
}

impl Prepared {
    /// Submits every prompt; on a refusal, the ones already submitted are
    /// dropped (cancelled) and the refusal is answered.
    pub fn submit(self, st: &AppState) -> Result<Submitted, ApiError> {
        let ceiling = st.engine.ceiling().max_context as usize;
        let limit = context_limit(st, self.context);
        let mut out = Submitted {
            streams: Vec::with_capacity(self.prompts.len()),
            prompt_lens: Vec::with_capacity(self.prompts.len()),
        };
        let choices = self.choices;
        // A prompt is cloned for its choices but the last (none with one).
        let copies = self
            .prompts
            .into_iter()
            .flat_map(|p| std::iter::repeat_n(p, choices).zip(0u64..));
        for (p, k) in copies {
            let mut params = self.params.clone();
            params.sampling.seed = params
                .sampling
                .seed
                .or(st.server.default_seed)
                .map(|s| s.wrapping_add(k));
            // Without max_tokens: up to what the context leaves, capped so that
            // a request does not reserve a whole context of KV blocks (SPEC S7)
            // by default.
            let left = limit.saturating_sub(p.len().max(1));
            params.max_tokens = match (self.max_tokens, self.context) {
                (_, Some(c)) if left == 0 && limit < ceiling => {
                    return Err(Invalid::OverContext {
                        field: c.field,
                        prompt: p.len(),
                        limit,
                    }
                    .into());
                }
                (Some(n), Some(_)) => n.min(left),
                (Some(n), None) => n,
                (None, _) => left.clamp(1, st.server.default_max_tokens.max(1)),
            };
            let n = p.len();
            let stream = st
                .engine
                .submit(p, params)
                .map_err(|e| ApiError::from_submit(e, n))?;
            out.streams.push(stream);
            out.prompt_lens.push(n);
        }
        Ok(out)
    }
}
