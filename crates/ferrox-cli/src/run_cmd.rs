//! `ferrox run`: one prompt, one generation, streamed to stdout; load time and
//! prompt / generation speed on stderr. llama.cpp's `llama-cli` flags.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use ferrox_engine::{EngineConfig, Event, GenerationParams};
use ferrox_models::chat::ChatMessage;
use ferrox_models::decoder::Decoder;
use ferrox_models::kv_plan::defaults;
use ferrox_models::model::Model;
use ferrox_models::sampler::SamplingParams;

/// Flags of `ferrox run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// GGUF file or catalog name (default: the default model).
    #[arg(short, long)]
    pub model: Option<String>,
    /// The prompt.
    #[arg(short, long, conflicts_with = "file")]
    pub prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(short, long)]
    pub file: Option<PathBuf>,
    /// Tokens to generate (-1: until the model ends or the context is full).
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
    /// Use the prompt as raw text, without the chat template.
    #[arg(long)]
    pub no_cnv: bool,
    /// System message for the chat template.
    #[arg(long)]
    pub system: Option<String>,
    /// Stop when the output contains this text (not printed); repeatable.
    #[arg(long = "stop", value_name = "TEXT")]
    pub stops: Vec<String>,
}

fn check_sampling(a: &RunArgs) -> Result<()> {
    let bad = |name: &str, v: f32, rule: &str| anyhow::anyhow!("--{name} {v}: {rule}");
    if a.temp.is_nan() || a.temp < 0.0 {
        return Err(bad("temp", a.temp, "must be a number >= 0"));
    }
    if !(a.top_p > 0.0 && a.top_p <= 1.0) {
        return Err(bad("top-p", a.top_p, "must be in (0, 1]"));
    }
    if !(0.0..=1.0).contains(&a.min_p) {
        return Err(bad("min-p", a.min_p, "must be in [0, 1]"));
    }
    if a.repeat_penalty.is_nan() || a.repeat_penalty <= 0.0 {
        return Err(bad("repeat-penalty", a.repeat_penalty, "must be > 0"));
    }
    Ok(())
}

/// The prompt text: `-p`, or `-f FILE` (`-f -`: standard input).
fn read_prompt(a: &RunArgs) -> Result<String> {
    match (&a.prompt, &a.file) {
        (Some(p), _) => Ok(p.clone()),
        (None, Some(f)) if f.as_os_str() == "-" => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .context("cannot read the prompt from standard input")?;
            Ok(text)
        }
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("cannot read prompt file {}", f.display())),
        (None, None) => bail!("give a prompt with -p TEXT or -f FILE (-f - reads standard input)"),
    }
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

/// What one generation took.
struct Timings {
    prompt_s: f64,
    gen_s: f64,
    generated: usize,
    interrupted: bool,
}

/// Streams the generation to stdout until it ends or Ctrl-C is pressed (then the
/// request is dropped, which cancels it in the engine).
fn stream_out(mut stream: ferrox_engine::RequestStream) -> Result<Timings> {
    let interrupted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&interrupted);
    ctrlc::set_handler(move || flag.store(true, std::sync::atomic::Ordering::SeqCst))
        .context("cannot install the Ctrl-C handler")?;
    let t_prompt = Instant::now();
    let mut out = std::io::stdout().lock();
    let (mut prompt_s, mut t_gen, mut generated) = (None, Instant::now(), 0usize);
    while let Some(event) = stream.blocking_recv() {
        if interrupted.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        match event {
            Event::Token { text, .. } => {
                if prompt_s.is_none() {
                    prompt_s = Some(t_prompt.elapsed().as_secs_f64());
                    t_gen = Instant::now();
                }
                generated += 1;
                out.write_all(text.as_bytes())?;
                out.flush()?;
            }
            Event::Finished { text, usage, .. } => {
                out.write_all(text.as_bytes())?;
                generated = usage.completion_tokens;
            }
            Event::Failed(failure) => bail!("generation failed: {failure}"),
            Event::Admitted => {}
        }
    }
    writeln!(out)?;
    Ok(Timings {
        prompt_s: prompt_s.unwrap_or_else(|| t_prompt.elapsed().as_secs_f64()),
        gen_s: t_gen.elapsed().as_secs_f64(),
        generated,
        interrupted: interrupted.load(std::sync::atomic::Ordering::SeqCst),
    })
}

/// Runs one generation.
pub fn run(a: RunArgs) -> Result<()> {
    check_sampling(&a)?;
    max_tokens(a.n_predict, 1)?;
    let text = read_prompt(&a)?;
    let path = crate::model_ref::resolve(a.model.as_deref())?;
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let t_load = Instant::now();
    let mut model = Model::load_with(&path, threads, a.path.activations)?;
    let load_s = t_load.elapsed().as_secs_f64();
    let packed_mib = model.transformer.packed_bytes() as f64 / (1 << 20) as f64;
    let hp = model.transformer.hyper_params();
    let ctx = a.ctx.unwrap_or(hp.context_length.min(4096));
    if ctx == 0 || ctx > hp.context_length {
        bail!(
            "--ctx-size {ctx}: must be between 1 and the model's context length {}",
            hp.context_length
        );
    }
    model.transformer.limit_context(ctx);
    let mut ids = match (&model.chat, a.no_cnv) {
        (Some(_), false) => {
            let mut msgs = Vec::new();
            if let Some(s) = &a.system {
                msgs.push(ChatMessage::new("system", s));
            }
            msgs.push(ChatMessage::new("user", &text));
            model.chat_ids(&msgs, true)?
        }
        (None, false) => {
            eprintln!(
                "note: the model has no chat template; the prompt is used as raw text (a base model continues it)"
            );
            model.prompt_ids(&text)
        }
        (_, true) => model.prompt_ids(&text),
    };
    if ids.is_empty() {
        // SPEC S6: an empty prompt still runs one forward pass, on BOS (or token 0).
        ids.push(model.tokenizer.bos().unwrap_or(0));
    }
    if ids.len() >= ctx {
        bail!(
            "the prompt is {} tokens; it must be shorter than the context of {ctx} (raise --ctx-size)",
            ids.len()
        );
    }
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let params = SamplingParams {
        temperature: a.temp,
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        repetition_penalty: a.repeat_penalty,
        seed,
        ..Default::default()
    };
    // The same engine, ceiling, sampler and stop matcher as the server (SPEC S10):
    // one request slot and KV for the context.
    let config = EngineConfig {
        max_seqs: 1,
        prefill_chunk: defaults::PREFILL_CHUNK,
        max_queue: 1,
        block_size: defaults::KV_BLOCK_SIZE,
        kv_blocks: Some(ctx.div_ceil(defaults::KV_BLOCK_SIZE)),
        max_context: Some(ctx),
        prefix_cache: false,
    };
    let prompt_len = ids.len();
    let tokenizer = std::sync::Arc::new(model.tokenizer.clone());
    let engine = ferrox_engine::start(Box::new(model.transformer), tokenizer, config)?;
    let max_tokens = max_tokens(a.n_predict, ctx - prompt_len)?;
    let params = GenerationParams {
        max_tokens,
        sampling: params,
        stop: a.stops.clone(),
        stop_token_ids: Vec::new(),
        logprobs: None,
        ignore_eos: false,
    };
    let stream = engine.submit(ids, params)?;
    let t = stream_out(stream)?;
    let (prompt_s, gen_s, ids_len) = (t.prompt_s, t.gen_s, prompt_len);
    if t.interrupted {
        eprintln!("\n[interrupted]");
    }
    eprintln!();
    eprintln!(
        "load time:   {:>8.1} ms ({} threads, {} activations, {:.1} MiB repacked, seed {seed})",
        load_s * 1e3,
        threads,
        a.path.activations,
        packed_mib
    );
    eprintln!(
        "prompt:      {:>8.1} ms for {:>5} tokens ({:.1} tokens/s, to the first token)",
        prompt_s * 1e3,
        ids_len,
        ids_len as f64 / prompt_s
    );
    let decoded = t.generated.saturating_sub(1);
    eprintln!(
        "generation:  {:>8.1} ms for {:>5} tokens ({:.1} tokens/s)",
        gen_s * 1e3,
        decoded,
        decoded as f64 / gen_s.max(1e-9)
    );
    Ok(())
}
