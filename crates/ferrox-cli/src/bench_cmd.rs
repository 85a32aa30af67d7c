//! `ferrox bench`: prompt processing (`pp N`: one N-token prompt in one forward call)
//! and text generation (`tg N`: N single-token decode steps from an empty context)
//! in tokens per second, median and spread of `-r` repetitions, as llama-bench
//! reports them.

use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use ferrox_models::decoder::{Decoder, Span, Want};
use ferrox_models::kv_cache::KvCache;
use ferrox_models::kv_plan::defaults;
use ferrox_models::transformer::Transformer;

/// Flags of `ferrox bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// GGUF file or catalog name (default: the default model).
    #[arg(short, long)]
    pub model: Option<String>,
    /// Prompt tokens of the pp test (0: skip).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    pub n_prompt: usize,
    /// Generated tokens of the tg test (0: skip).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    pub n_gen: usize,
    /// Repetitions.
    #[arg(short = 'r', long, default_value_t = 5)]
    pub repetitions: usize,
    /// Compute threads [default: available cores].
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Print JSON instead of a markdown table.
    #[arg(long)]
    pub json: bool,
}

fn median_and_spread(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let med = if v.len() % 2 == 1 { v[v.len() / 2] } else { (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0 };
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len().max(2).saturating_sub(1) as f64).sqrt();
    (med, sd)
}

/// Tokens of a benchmark prompt: a fixed pseudo-random walk over the vocabulary.
fn tokens(n: usize, vocab: usize) -> Vec<u32> {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % vocab as u64) as u32
        })
        .collect()
}

fn one_run(m: &Transformer, n_prompt: usize, n_gen: usize) -> Result<(Option<f64>, Option<f64>)> {
    let vocab = m.hyper_params().vocab_size;
    let positions = n_prompt.max(n_gen).max(1);
    let mut cache = KvCache::new(m.kv_layout(), defaults::KV_BLOCK_SIZE, positions.div_ceil(defaults::KV_BLOCK_SIZE), 1, n_prompt.max(1))?;
    let mut pp = None;
    if n_prompt > 0 {
        let seq = cache.alloc(n_prompt).context("KV")?;
        let t = Instant::now();
        m.forward(&mut cache, &[Span { seq: &seq, start: 0, tokens: &tokens(n_prompt, vocab), want: Want::Last }])?;
        pp = Some(n_prompt as f64 / t.elapsed().as_secs_f64());
        cache.free(seq);
    }
    let mut tg = None;
    if n_gen > 0 {
        let seq = cache.alloc(n_gen).context("KV")?;
        let toks = tokens(n_gen, vocab);
        let t = Instant::now();
        for (pos, tok) in toks.iter().enumerate() {
            m.forward(&mut cache, &[Span { seq: &seq, start: pos, tokens: std::slice::from_ref(tok), want: Want::Last }])?;
        }
        tg = Some(n_gen as f64 / t.elapsed().as_secs_f64());
        cache.free(seq);
    }
    Ok((pp, tg))
}

/// Runs the benchmark and prints the table.
pub fn bench(a: BenchArgs) -> Result<()> {
    let path = crate::model_ref::resolve(a.model.as_deref())?;
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let file = ferrox_gguf::GgufFile::open(&path)?;
    let m = Transformer::new(file, threads)?;
    one_run(&m, a.n_prompt.min(16), a.n_gen.min(4))?; // warm-up: page in the weights
    let (mut pps, mut tgs) = (Vec::new(), Vec::new());
    for _ in 0..a.repetitions.max(1) {
        let (pp, tg) = one_run(&m, a.n_prompt, a.n_gen)?;
        pps.extend(pp);
        tgs.extend(tg);
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut rows = Vec::new();
    if !pps.is_empty() {
        rows.push((format!("pp{}", a.n_prompt), median_and_spread(pps)));
    }
    if !tgs.is_empty() {
        rows.push((format!("tg{}", a.n_gen), median_and_spread(tgs)));
    }
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(test, (med, sd))| serde_json::json!({"model": name, "threads": threads, "test": test, "median_tokens_per_s": med, "stddev": sd, "repetitions": a.repetitions}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("| model | threads | test | t/s (median) | stddev |");
        println!("|---|---:|---:|---:|---:|");
        for (test, (med, sd)) in rows {
            println!("| {name} | {threads} | {test} | {med:.2} | {sd:.2} |");
        }
    }
    Ok(())
}
