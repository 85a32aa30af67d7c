//! `ferrox run`: one prompt, one generation, streamed to stdout; load time and
//! prompt / generation speed on stderr. llama.cpp's `llama-cli` flags.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use ferrox_engine::kv_plan::defaults;
use ferrox_engine::{EngineConfig, Event, GenerationParams};
use ferrox_models::decoder::Decoder;
use ferrox_models::kv_store::KvElement;
use ferrox_models::model::Model;
use ferrox_sampling::sampler::{SamplingError, SamplingParams};
use ferrox_text::chat::ChatMessage;

/// Flags of `ferrox run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// GGUF file or catalog name (default: the default model).
    #[arg(short, long)]
    pub model: Option<String>,
    /// The prompt (without -p or -f, `run` starts a chat).
    #[arg(short, long, conflicts_with = "file")]
    pub prompt: Option<String>,
    /// Read the prompt from a file (`-` for standard input).
    #[arg(short, long)]
    pub file: Option<PathBuf>,
    /// Tokens to generate (per answer in a chat; -1: until the model ends or the
    /// context is full).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_hyphen_values = true)]
    pub n_predict: i64,
    /// Context size in tokens (prompt + generation) [default: min(model, 4096)].
    #[arg(short = 'c', long = "ctx-size")]
    pub ctx: Option<usize>,
    /// Compute threads [default: available cores].
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Activation path.
    #[command(flatten)]
    pub path: crate::knobs::ActivationArgs,
    #[command(flatten)]
    pub habits: crate::knobs::LlamaHabits,
    #[command(flatten)]
    pub spec: crate::knobs::SpecArgs,
    /// Temperature (0: greedy).
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Top-k (0: off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (1: off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p (0: off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty over the last 64 tokens (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// RNG seed [default: random, printed on stderr].
    #[arg(short, long)]
    pub seed: Option<u64>,
    /// Use the prompt as raw text, without the chat template (llama-cli's
    /// `-no-cnv` is taken too).
    #[arg(long, conflicts_with = "cnv")]
    pub no_cnv: bool,
    /// Conversation mode: an interactive chat, as `ferrox chat` (llama-cli's `-cnv`
    /// is taken too); `-p` is then the first message.
    #[arg(long)]
    pub cnv: bool,
    /// System message for the chat template.
    #[arg(long)]
    pub system: Option<String>,
    /// Stop when the output contains this text (not printed); repeatable.
    #[arg(long = "stop", value_name = "TEXT")]
    pub stops: Vec<String>,
}

/// The sampling flags, checked by the one sampling validation; an error names the
/// flag.
pub fn check_sampling(a: &RunArgs) -> Result<()> {
    let params = SamplingParams {
        temperature: a.temp,
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        repetition_penalty: a.repeat_penalty,
        ..Default::default()
    };
    params.validate().map_err(|e| {
        let flag = match e {
            SamplingError::Temperature(_) => "--temp",
            SamplingError::TopP(_) => "--top-p",
            SamplingError::MinP(_) => "--min-p",
            SamplingError::RepetitionPenalty(_) => "--repeat-penalty",
            _ => e.field(),
        };
        anyhow::anyhow!("{flag}: {e}")
    })
}

/// The prompt text: `-p`, or `-f FILE` (`-f -`: standard input); `None` without
/// either.
fn read_prompt(a: &RunArgs) -> Result<Option<String>> {
    let text = match (&a.prompt, &a.file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) if f.as_os_str() == "-" => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .context("cannot read the prompt from standard input")?;
            text
        }
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("cannot read prompt file {}", f.display()))?,
        (None, None) => return Ok(None),
    };
    Ok(Some(text))
}

/// Tokens to generate for `-n` with `room` positions left after the prompt.
fn max_tokens(n_predict: i64, room: usize) -> Result<usize> {
    match n_predict {
        0 => bail!(
            "-n 0 generates nothing; give -n N (N >= 1), or -n -1 to run until the model stops or the context is full"
        ),
        n if n < 0 => Ok(room),
        n => Ok((n as usize).min(room)),
    }
}

/// What one generation took and produced.
pub struct Timings {
    pub prompt_s: f64,
    pub gen_s: f64,
    /// Tokens generated (counted ones: stop tokens excluded).
    pub generated: usize,
    /// The text printed.
    pub text: String,
    /// The engine's usage, when the request finished (not when interrupted).
    pub usage: Option<ferrox_engine::Usage>,
    pub interrupted: bool,
}

/// Streams a generation to stdout until it ends or Ctrl-C is pressed (then the
/// request is dropped, which cancels it in the engine; a press during the
/// prompt's prefill counts too).
pub fn stream_out(mut stream: ferrox_engine::RequestStream) -> Result<Timings> {
    // A Ctrl-C pressed since the request was typed stops it (the chat drops
    // older presses before it reads a line).
    crate::interrupt::install()?;
    let t_prompt = Instant::now();
    let mut out = std::io::stdout().lock();
    let (mut prompt_s, mut t_gen, mut generated) = (None, Instant::now(), 0usize);
    let (mut text, mut usage, mut interrupted) = (String::new(), None, false);
    while let Some(event) = stream.blocking_recv() {
        if crate::interrupt::take() {
            interrupted = true;
            break;
        }
        let piece = match event {
            Event::Token { text, .. } => {
                if prompt_s.is_none() {
                    prompt_s = Some(t_prompt.elapsed().as_secs_f64());
                    t_gen = Instant::now();
                }
                generated += 1;
                text
            }
            Event::Finished { text, usage: u, .. } => {
                generated = u.completion_tokens;
                usage = Some(u);
                text
            }
            Event::Failed(failure) => bail!("generation failed: {failure}"),
            Event::Admitted | Event::PromptLogprobs(_) | Event::Embedding(_) => continue,
        };
        out.write_all(piece.as_bytes())?;
        out.flush()?;
        text.push_str(&piece);
    }
    writeln!(out)?;
    Ok(Timings {
        prompt_s: prompt_s.unwrap_or_else(|| t_prompt.elapsed().as_secs_f64()),
        gen_s: t_gen.elapsed().as_secs_f64(),
        generated,
        text,
        usage,
        interrupted,
    })
}

/// A model loaded for `run` and `chat`, its engine started (one request slot, KV
/// for the context).
pub struct Session {
    pub engine: ferrox_engine::EngineHandle,
    pub tokenizer: std::sync::Arc<ferrox_text::Tokenizer>,
    pub chat: Option<ferrox_text::chat::ChatTemplate>,
    pub ctx: usize,
    pub seed: u64,
    sampling: SamplingParams,
    stops: Vec<String>,
    n_predict: i64,
    load_s: f64,
    threads: usize,
    packed_mib: f64,
}

impl Session {
    /// Loads the model of `a` and starts its engine (`prefix_cache`: a chat's
    /// history is then not run again on each turn).
    pub fn start(a: &RunArgs, prefix_cache: bool) -> Result<Session> {
        check_sampling(a)?;
        max_tokens(a.n_predict, 1)?;
        let path = ferrox_hub::model_ref::resolve(a.model.as_deref())?;
        let threads = crate::knobs::threads_or_all(a.threads);
        let t_load = Instant::now();
        let model = Model::load_with(&path, threads, a.path.activations)?;
        let load_s = t_load.elapsed().as_secs_f64();
        let transformer = model.net.generator()?;
        let packed_mib = transformer.packed_bytes() as f64 / (1 << 20) as f64;
        let context_length = transformer.hyper_params().context_length;
        let ctx = a.ctx.unwrap_or(context_length.min(4096));
        if ctx == 0 || ctx > context_length {
            bail!(
                "--ctx-size {ctx}: must be between 1 and the model's context length {context_length}"
            );
        }
        let seed = a.seed.unwrap_or_else(ferrox_sampling::sampler::clock_seed);
        // The same engine, ceiling, sampler and stop matcher as the server (SPEC S10).
        let config = EngineConfig {
            max_seqs: 1,
            prefill_chunk: defaults::PREFILL_CHUNK,
            max_queue: 1,
            block_size: defaults::KV_BLOCK_SIZE,
            kv_blocks: Some(ctx.div_ceil(defaults::KV_BLOCK_SIZE)),
            max_context: Some(ctx),
            prefix_cache,
            recurrent_slots: None,
            kv_element: KvElement::default_for(transformer.activation_path()),
            speculation: a.spec.speculation(),
            kv_events: None,
        };
        let tokenizer = std::sync::Arc::new(model.tokenizer);
        let engine = ferrox_engine::start_with_draft(
            Box::new(transformer),
            std::sync::Arc::clone(&tokenizer),
            config,
            a.spec.drafter(threads, a.path.activations)?,
        )?;
        Ok(Session {
            engine,
            tokenizer,
            chat: model.chat,
            ctx,
            seed,
            sampling: SamplingParams {
                temperature: a.temp,
                top_k: a.top_k,
                top_p: a.top_p,
                min_p: a.min_p,
                repetition_penalty: a.repeat_penalty,
                seed: Some(seed),
                ..Default::default()
            },
            stops: a.stops.clone(),
            n_predict: a.n_predict,
            load_s,
            threads,
            packed_mib,
        })
    }

    /// Token ids of a conversation rendered by the model's chat template.
    pub fn chat_ids(&self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        Ok(ferrox_text::chat::encode_chat(
            self.chat.as_ref(),
            &self.tokenizer,
            messages,
            true,
        )?)
    }

    /// Generates from `ids`, streamed to stdout.
    pub fn generate(&self, ids: Vec<u32>) -> Result<Timings> {
        if ids.len() >= self.ctx {
            bail!(
                "the prompt is {} tokens; it must be shorter than the context of {} (raise --ctx-size)",
                ids.len(),
                self.ctx
            );
        }
        let params = GenerationParams {
            max_tokens: max_tokens(self.n_predict, self.ctx - ids.len())?,
            sampling: self.sampling.clone(),
            stop: self.stops.clone(),
            stop_token_ids: Vec::new(),
            logprobs: None,
            prompt_logprobs: None,
            embed: None,
            ignore_eos: false,
            grammar: None,
        };
        stream_out(self.engine.submit(ids, params)?)
    }

    /// The load line of the stats.
    pub fn print_load(&self, activations: ferrox_models::ActivationPath) {
        eprintln!(
            "load time:   {:>8.1} ms ({} threads, {activations} activations, {:.1} MiB repacked, seed {})",
            self.load_s * 1e3,
            self.threads,
            self.packed_mib,
            self.seed
        );
    }
}

/// The prompt and generation lines of the stats.
pub fn print_speed(prompt_tokens: usize, prompt_s: f64, decoded: usize, gen_s: f64) {
    eprintln!(
        "prompt:      {:>8.1} ms for {:>5} tokens ({:.1} tokens/s, to the first token)",
        prompt_s * 1e3,
        prompt_tokens,
        prompt_tokens as f64 / prompt_s.max(1e-9)
    );
    eprintln!(
        "generation:  {:>8.1} ms for {:>5} tokens ({:.1} tokens/s)",
        gen_s * 1e3,
        decoded,
        decoded as f64 / gen_s.max(1e-9)
    );
}

/// Runs one generation; without a prompt, a chat (as `llama-cli` does).
pub fn run(a: RunArgs) -> Result<()> {
    if a.cnv {
        return crate::chat_cmd::chat(a);
    }
    let Some(text) = read_prompt(&a)? else {
        return crate::chat_cmd::chat(a);
    };
    let session = Session::start(&a, false)?;
    let mut ids = match (&session.chat, a.no_cnv) {
        (Some(_), false) => {
            let mut msgs = Vec::new();
            if let Some(s) = &a.system {
                msgs.push(ChatMessage::new("system", s));
            }
            msgs.push(ChatMessage::new("user", &text));
            session.chat_ids(&msgs)?
        }
        (None, false) => {
            eprintln!(
                "note: the model has no chat template; the prompt is used as raw text (a base model continues it)"
            );
            session.tokenizer.encode(&text, true, true)
        }
        (_, true) => session.tokenizer.encode(&text, true, true),
    };
    if ids.is_empty() {
        // SPEC S6: an empty prompt still runs one forward pass, on BOS (or token 0).
        ids.push(session.tokenizer.bos().unwrap_or(0));
    }
    let prompt_len = ids.len();
    let t = session.generate(ids)?;
    if t.interrupted {
        eprintln!("\n[interrupted]");
    }
    eprintln!();
    session.print_load(a.path.activations);
    print_speed(
        prompt_len,
        t.prompt_s,
        t.generated.saturating_sub(1),
        t.gen_s,
    );
    if let Some(u) = t.usage.filter(|u| u.drafted_tokens > 0) {
        print_speculation(u.drafted_tokens, u.accepted_tokens);
    }
    Ok(())
}

/// The speculation line of the stats: drafted tokens and the share kept.
pub fn print_speculation(drafted: usize, kept: usize) {
    eprintln!(
        "speculation: {drafted:>8} drafted, {kept:>5} kept ({:.1} %)",
        100.0 * kept as f64 / drafted as f64
    );
}
