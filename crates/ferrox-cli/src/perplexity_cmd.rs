//! `ferrox perplexity`: llama-perplexity's measure of a text file
//! (`ferrox_models::perplexity`), printed as llama-perplexity prints it
//! (`[k]ppl,` after each chunk, then `Final estimate: PPL = X +/- Y`) so that
//! the two figures compare on the same file.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use ferrox_models::perplexity::{Chunking, perplexity};
use ferrox_models::transformer::Transformer;
use ferrox_text::Tokenizer;

/// Flags of `ferrox perplexity`.
#[derive(Args, Debug)]
pub struct PerplexityArgs {
    /// GGUF file or catalog name (default: the default model).
    #[arg(short, long)]
    pub model: Option<String>,
    /// The text to measure.
    #[arg(short, long)]
    pub file: PathBuf,
    /// Tokens per chunk (llama-perplexity's default).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    pub ctx: usize,
    /// Most chunks to score [default: every whole chunk].
    #[arg(long)]
    pub chunks: Option<usize>,
    /// Compute threads [default: available cores].
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Activation path.
    #[command(flatten)]
    pub path: crate::knobs::ActivationArgs,
    /// Print the result as JSON (after the chunks' line).
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: PerplexityArgs) -> Result<()> {
    let path = ferrox_hub::model_ref::resolve(a.model.as_deref())?;
    let text = std::fs::read_to_string(&a.file)
        .with_context(|| format!("reading {}", a.file.display()))?;
    let threads = crate::knobs::threads_or_all(a.threads);
    let file = ferrox_gguf::GgufFile::open(&path)?;
    let tokenizer = Tokenizer::from_metadata(&file.header().metadata)?;
    // As llama-perplexity: specials added, special-token text not parsed.
    let tokens = tokenizer.encode(&text, true, false);
    let m = Transformer::with_path(file, threads, a.path.activations)?;
    let chunking = Chunking {
        ctx: a.ctx,
        chunks: a.chunks,
        bos: tokenizer.adds_bos().then(|| tokenizer.bos()).flatten(),
    };
    eprintln!(
        "perplexity: {} tokens, chunks of {} ({} scored per chunk), {} path",
        tokens.len(),
        a.ctx,
        a.ctx.saturating_sub(a.ctx / 2 + 1),
        a.path.activations,
    );
    let started = Instant::now();
    let p = perplexity(&m, &tokens, chunking, |k, ppl| {
        eprint!("[{k}]{ppl:.4},");
    })?;
    eprintln!();
    let secs = started.elapsed().as_secs_f64();
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "ppl": p.ppl, "error": p.error, "chunks": p.running.len(),
                "ctx": a.ctx, "scored_tokens": p.scored, "running": p.running,
                "seconds": secs,
            })
        );
    } else {
        println!("Final estimate: PPL = {:.4} +/- {:.5}", p.ppl, p.error);
        eprintln!(
            "{} tokens scored in {secs:.1} s ({:.1} tokens/s run)",
            p.scored,
            (p.running.len() * a.ctx) as f64 / secs
        );
    }
    Ok(())
}
