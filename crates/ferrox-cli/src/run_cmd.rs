//! `ferrox run`: one prompt, one generation, streamed to stdout; load time and
//! prompt / generation speed on stderr. llama.cpp's `llama-cli` flags.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use ferrox_models::chat::ChatMessage;
use ferrox_models::decoder::{Decoder, Span, Want};
use ferrox_models::kv_cache::KvCache;
use ferrox_models::kv_plan::defaults;
use ferrox_models::model::Model;
use ferrox_models::sampler::{Sampler, SamplingParams};
use ferrox_engine::{FinishReason, OutputStage};

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
    if !(a.temp >= 0.0) {
        return Err(bad("temp", a.temp, "must be a number >= 0"));
    }
    if !(a.top_p > 0.0 && a.top_p <= 1.0) {
        return Err(bad("top-p", a.top_p, "must be in (0, 1]"));
    }
    if !(0.0..=1.0).contains(&a.min_p) {
        return Err(bad("min-p", a.min_p, "must be in [0, 1]"));
    }
    if !(a.repeat_penalty > 0.0) {
        return Err(bad("repeat-penalty", a.repeat_penalty, "must be > 0"));
    }
    Ok(())
}

/// Runs one generation.
pub fn run(a: RunArgs) -> Result<()> {
    check_sampling(&a)?;
    let text = match (&a.prompt, &a.file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => std::fs::read_to_string(f).with_context(|| format!("cannot read prompt file {}", f.display()))?,
        (None, None) => bail!("give a prompt with -p TEXT or -f FILE"),
    };
    let path = crate::model_ref::resolve(a.model.as_deref())?;
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let t_load = Instant::now();
    let model = Model::load(&path, threads)?;
    let load_s = t_load.elapsed().as_secs_f64();
    let hp = model.transformer.hyper_params();
    let ctx = a.ctx.unwrap_or(hp.context_length.min(4096));
    if ctx == 0 || ctx > hp.context_length {
        bail!("--ctx-size {ctx}: must be between 1 and the model's context length {}", hp.context_length);
    }
    let mut ids = match (&model.chat, a.no_cnv) {
        (Some(_), false) => {
            let mut msgs = Vec::new();
            if let Some(s) = &a.system {
                msgs.push(ChatMessage::new("system", s));
            }
            msgs.push(ChatMessage::new("user", &text));
            model.chat_ids(&msgs, true)?
        }
        _ => model.prompt_ids(&text),
    };
    if ids.is_empty() {
        // SPEC S6: an empty prompt still runs one forward pass, on BOS (or token 0).
        ids.push(model.tokenizer.bos().unwrap_or(0));
    }
    if ids.len() >= ctx {
        bail!("the prompt is {} tokens; it must be shorter than the context of {ctx} (raise --ctx-size)", ids.len());
    }
    let seed = a.seed.unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64));
    let params = SamplingParams {
        temperature: a.temp,
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        repetition_penalty: a.repeat_penalty,
        seed,
        ..Default::default()
    };
    let chunk = defaults::PREFILL_CHUNK;
    let mut cache = KvCache::new(model.transformer.kv_layout(), defaults::KV_BLOCK_SIZE, ctx.div_ceil(defaults::KV_BLOCK_SIZE), 1, chunk)?;
    let seq = cache.alloc(ctx).context("KV cache")?;
    let t_prompt = Instant::now();
    let mut logits = Vec::new();
    for (i, piece) in ids.chunks(chunk).enumerate() {
        let last = (i + 1) * chunk >= ids.len();
        let want = if last { Want::Last } else { Want::Nothing };
        let l = model.transformer.forward(&mut cache, &[Span { seq: &seq, start: i * chunk, tokens: piece, want }])?;
        if last {
            logits = l.last_of(0).context("logits")?.to_vec();
        }
    }
    let prompt_s = t_prompt.elapsed().as_secs_f64();
    let mut sampler = Sampler::new(params, &ids);
    let limit = if a.n_predict < 0 { usize::MAX } else { a.n_predict as usize };
    let mut output = OutputStage::new(model.tokenizer.end_of_generation().iter().copied(), a.stops.clone(), limit);
    let mut out = std::io::stdout().lock();
    let t_gen = Instant::now();
    let mut pos = ids.len();
    if limit == 0 {
        output.end(FinishReason::Length);
    }
    while output.finished().is_none() {
        let tok = sampler.sample(&logits);
        sampler.accept(tok);
        let step = output.on_token(tok, &model.tokenizer.token_bytes(tok, false));
        out.write_all(step.text.as_bytes())?;
        out.flush()?;
        if step.finished.is_some() {
            break;
        }
        if pos + 1 >= ctx {
            out.write_all(output.end(FinishReason::Length).as_bytes())?;
            break;
        }
        let l = model.transformer.forward(&mut cache, &[Span { seq: &seq, start: pos, tokens: &[tok], want: Want::Last }])?;
        logits = l.last_of(0).context("logits")?.to_vec();
        pos += 1;
    }
    let generated = output.generated();
    writeln!(out)?;
    let gen_s = t_gen.elapsed().as_secs_f64();
    eprintln!();
    eprintln!("load time:   {:>8.1} ms ({} threads, seed {seed})", load_s * 1e3, threads);
    eprintln!("prompt:      {:>8.1} ms for {:>5} tokens ({:.1} tokens/s)", prompt_s * 1e3, ids.len(), ids.len() as f64 / prompt_s);
    eprintln!("generation:  {:>8.1} ms for {:>5} tokens ({:.1} tokens/s)", gen_s * 1e3, generated, generated as f64 / gen_s.max(1e-9));
    Ok(())
}
