//! `ferrox bench`: prompt processing (`pp N`: one N-token prompt in one forward call)
//! and text generation (`tg N`: N single-token decode steps from an empty context)
//! in tokens per second, median and spread of `-r` repetitions, as llama-bench
//! reports them. With a tg test it also measures the machine's read bandwidth
//! and gives each tg figure as a share of it: the weight bytes one decode step
//! reads times the steps per second.

use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use ferrox_engine::kv_plan::defaults;
use ferrox_models::decoder::{Decoder, Span, Want};
use ferrox_models::kv_store::KvElement;
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
    /// Activation path.
    #[command(flatten)]
    pub path: crate::knobs::ActivationArgs,
    /// Sequences decoded together in the tg test (one forward call per step, as the
    /// server batches its requests); tg then reports their aggregate tokens/s.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = crate::knobs::count_knob("--parallel"))]
    pub parallel: usize,
    /// Positions already in the KV cache when the tg test starts (llama-bench's
    /// `-d`): decode at this depth of context. Prefilled untimed.
    #[arg(short = 'd', long = "n-depth", default_value_t = 0, value_name = "N")]
    pub depth: usize,
    /// KV cache element type (f32, f16, q8_0, q4_0), as `ferrox serve`'s, and
    /// by default the same: f16, or f32 with `--activations f32`.
    #[arg(long = "kv-type", value_name = "TYPE")]
    pub kv_type: Option<KvElement>,
    /// Print JSON instead of a markdown table.
    #[arg(long)]
    pub json: bool,
    /// A llama-bench binary to run interleaved with ferrox on the same file; the
    /// table then gives both and their ratio.
    #[arg(long, value_name = "LLAMA_BENCH")]
    pub compare: Option<std::path::PathBuf>,
}

/// One llama-bench run (one repetition): tokens per second of pp and tg.
fn llama_bench_once(
    bin: &std::path::Path,
    model: &std::path::Path,
    a: &BenchArgs,
    threads: usize,
) -> Result<(Option<f64>, Option<f64>)> {
    let out = std::process::Command::new(bin)
        .args([
            "-m",
            &model.display().to_string(),
            "-p",
            &a.n_prompt.to_string(),
            "-n",
            &a.n_gen.to_string(),
            "-d",
            &a.depth.to_string(),
            "-r",
            "1",
            "-t",
            &threads.to_string(),
            "-o",
            "json",
        ])
        .output()
        .with_context(|| format!("cannot run {}", bin.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "{} failed: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("llama-bench -o json did not print JSON")?;
    let (mut pp, mut tg) = (None, None);
    for t in v.as_array().context("llama-bench JSON is not an array")? {
        let ts = t["avg_ts"].as_f64();
        if t["n_gen"].as_u64() == Some(0) {
            pp = ts;
        } else if t["n_prompt"].as_u64() == Some(0) {
            tg = ts;
        }
    }
    Ok((pp, tg))
}

fn median_and_spread(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let med = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>()
        / v.len().max(2).saturating_sub(1) as f64)
        .sqrt();
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

/// A tg test's suffix at a depth of context, as llama-bench writes it, with
/// the cache's type (ferrox's; llama-bench's is its default f16).
fn at_depth(depth: usize, kv: KvElement) -> String {
    match depth {
        0 => String::new(),
        d => format!(" @ d{d} ({kv} KV)"),
    }
}

/// What one run measures: the tests' sizes and the cache.
#[derive(Clone, Copy)]
struct RunShape {
    n_prompt: usize,
    n_gen: usize,
    parallel: usize,
    depth: usize,
    kv: KvElement,
}

fn one_run(m: &Transformer, r: RunShape) -> Result<(Option<f64>, Option<f64>)> {
    let RunShape {
        n_prompt,
        n_gen,
        parallel,
        depth,
        kv,
    } = r;
    let vocab = m.hyper_params().vocab_size;
    let mut store = m.kv_store(kv, defaults::KV_BLOCK_SIZE)?;
    let mut pp = None;
    if n_prompt > 0 {
        let pages = store.fresh_table(n_prompt);
        let t = Instant::now();
        m.forward(
            &mut store,
            &[Span {
                pages: &pages,
                start: 0,
                tokens: &tokens(n_prompt, vocab),
                want: Want::Last,
            }],
        )?;
        pp = Some(n_prompt as f64 / t.elapsed().as_secs_f64());
    }
    let mut tg = None;
    if n_gen > 0 {
        let tables: Vec<_> = (0..parallel)
            .map(|_| store.fresh_table(depth + n_gen))
            .collect();
        if depth > 0 {
            let context = tokens(depth, vocab);
            for pages in &tables {
                for (i, chunk) in context.chunks(defaults::PREFILL_CHUNK).enumerate() {
                    let span = Span {
                        pages,
                        start: i * defaults::PREFILL_CHUNK,
                        tokens: chunk,
                        want: Want::Nothing,
                    };
                    m.forward(&mut store, &[span])?;
                }
            }
        }
        let toks = tokens(n_gen, vocab);
        let t = Instant::now();
        for (pos, tok) in toks.iter().enumerate() {
            let spans: Vec<Span<'_>> = tables
                .iter()
                .map(|pages| Span {
                    pages,
                    start: depth + pos,
                    tokens: std::slice::from_ref(tok),
                    want: Want::Last,
                })
                .collect();
            m.forward(&mut store, &spans)?;
        }
        tg = Some((n_gen * parallel) as f64 / t.elapsed().as_secs_f64());
    }
    Ok((pp, tg))
}

/// The read bandwidth and the weight bytes a decode step reads, ferrox's
/// (as its path stores them) and the file's (what llama.cpp reads).
struct Bandwidth {
    bytes_per_s: f64,
    ferrox_bytes: f64,
    file_bytes: f64,
}

impl Bandwidth {
    /// `bytes_per_s` (measured before the model loads) and `m`'s step bytes.
    fn new(bytes_per_s: f64, m: &Transformer) -> Bandwidth {
        Bandwidth {
            bytes_per_s,
            ferrox_bytes: m.decode_weight_bytes(),
            file_bytes: m.decode_file_bytes(),
        }
    }

    /// The share of the bandwidth a decode of `steps_per_s` reading `bytes` a step uses.
    fn share(&self, bytes: f64, steps_per_s: f64) -> f64 {
        crate::bandwidth::share(bytes, steps_per_s, self.bytes_per_s)
    }

    fn json(&self, steps_per_s: f64, llama_tokens_per_s: Option<f64>) -> serde_json::Value {
        serde_json::json!({
            "read_bandwidth_gb_s": self.bytes_per_s / 1e9,
            "ferrox_weight_gb_per_step": self.ferrox_bytes / 1e9,
            "ferrox_bandwidth_share": self.share(self.ferrox_bytes, steps_per_s),
            "file_weight_gb_per_step": self.file_bytes / 1e9,
            "llama_cpp_bandwidth_share": llama_tokens_per_s.map(|t| self.share(self.file_bytes, t)),
        })
    }

    fn line(
        &self,
        test: &str,
        steps_per_s: f64,
        llama_tokens_per_s: Option<f64>,
        threads: usize,
    ) -> String {
        let mut s = format!(
            "read bandwidth {:.1} GB/s ({threads} threads); {test} reads {:.3} GB of weights a step: {:.0} % of it",
            self.bytes_per_s / 1e9,
            self.ferrox_bytes / 1e9,
            100.0 * self.share(self.ferrox_bytes, steps_per_s)
        );
        if let Some(t) = llama_tokens_per_s {
            s += &format!(
                " (llama.cpp reads the file's {:.3} GB: {:.0} %)",
                self.file_bytes / 1e9,
                100.0 * self.share(self.file_bytes, t)
            );
        }
        s
    }
}

/// Runs the benchmark and prints the table.
pub fn bench(a: BenchArgs) -> Result<()> {
    let path = ferrox_hub::model_ref::resolve(a.model.as_deref())?;
    let threads = crate::knobs::threads_or_all(a.threads);
    let file = ferrox_gguf::GgufFile::open(&path)?;
    anyhow::ensure!(
        a.parallel == 1 || a.compare.is_none(),
        "--parallel has no llama-bench counterpart to --compare with"
    );
    // Before the model loads: the measuring buffer is gone when the weights come.
    let read_bandwidth = (a.n_gen > 0).then(|| crate::bandwidth::measure(threads));
    let m = Transformer::with_path(file, threads, a.path.activations)?;
    let kv = a
        .kv_type
        .unwrap_or_else(|| KvElement::default_for(m.activation_path()));
    let shape = RunShape {
        n_prompt: a.n_prompt,
        n_gen: a.n_gen,
        parallel: a.parallel,
        depth: a.depth,
        kv,
    };
    // Warm-up: page in the weights.
    one_run(
        &m,
        RunShape {
            n_prompt: a.n_prompt.min(16),
            n_gen: a.n_gen.min(4),
            depth: 0,
            ..shape
        },
    )?;
    let (mut pps, mut tgs) = (Vec::new(), Vec::new());
    let (mut lpps, mut ltgs) = (Vec::new(), Vec::new());
    for _ in 0..a.repetitions.max(1) {
        if let Some(bin) = &a.compare {
            let (pp, tg) = llama_bench_once(bin, &path, &a, threads)?;
            lpps.extend(pp);
            ltgs.extend(tg);
        }
        let (pp, tg) = one_run(&m, shape)?;
        pps.extend(pp);
        tgs.extend(tg);
    }
    let bandwidth = read_bandwidth
        .filter(|_| !tgs.is_empty())
        .map(|bw| Bandwidth::new(bw, &m));
    if a.compare.is_some() {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut rows = Vec::new();
        for (test, ours, theirs) in [
            (format!("pp{}", a.n_prompt), pps, lpps),
            (format!("tg{}{}", a.n_gen, at_depth(a.depth, kv)), tgs, ltgs),
        ] {
            if ours.is_empty() || theirs.is_empty() {
                continue;
            }
            let ((om, osd), (lm, lsd)) = (median_and_spread(ours), median_and_spread(theirs));
            let mut row = serde_json::json!({"model": name, "threads": threads, "test": test, "ferrox": om, "ferrox_stddev": osd, "llama_cpp": lm, "llama_cpp_stddev": lsd, "ratio": om / lm});
            if let (Some(b), true) = (&bandwidth, test.starts_with("tg")) {
                row["bandwidth"] = b.json(om, Some(lm));
            }
            rows.push(row);
        }
        if a.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        } else {
            println!("| model | threads | test | llama.cpp t/s | ferrox t/s | ratio |");
            println!("|---|---:|---:|---:|---:|---:|");
            for r in &rows {
                println!(
                    "| {} | {} | {} | {:.2} ± {:.2} | {:.2} ± {:.2} | {:.2}x |",
                    r["model"].as_str().unwrap_or(""),
                    threads,
                    r["test"].as_str().unwrap_or(""),
                    r["llama_cpp"].as_f64().unwrap_or(0.0),
                    r["llama_cpp_stddev"].as_f64().unwrap_or(0.0),
                    r["ferrox"].as_f64().unwrap_or(0.0),
                    r["ferrox_stddev"].as_f64().unwrap_or(0.0),
                    r["ratio"].as_f64().unwrap_or(0.0)
                );
            }
            if let (Some(b), Some(tg)) = (
                &bandwidth,
                rows.iter().find(|r| r.get("bandwidth").is_some()),
            ) {
                let (om, lm) = (
                    tg["ferrox"].as_f64().unwrap_or(0.0),
                    tg["llama_cpp"].as_f64(),
                );
                println!(
                    "\n{}",
                    b.line(tg["test"].as_str().unwrap_or(""), om, lm, threads)
                );
            }
        }
        return Ok(());
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut rows = Vec::new();
    if !pps.is_empty() {
        rows.push((format!("pp{}", a.n_prompt), median_and_spread(pps)));
    }
    if !tgs.is_empty() {
        let tg = if a.parallel > 1 {
            format!("tg{}x{}{}", a.n_gen, a.parallel, at_depth(a.depth, kv))
        } else {
            format!("tg{}{}", a.n_gen, at_depth(a.depth, kv))
        };
        rows.push((tg, median_and_spread(tgs)));
    }
    // One decode step reads the weights once for all its sequences.
    let steps_per_s = |tokens_per_s: f64| tokens_per_s / a.parallel as f64;
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(test, (med, sd))| {
                let mut row = serde_json::json!({"model": name, "threads": threads, "test": test, "median_tokens_per_s": med, "stddev": sd, "repetitions": a.repetitions});
                if let (Some(b), true) = (&bandwidth, test.starts_with("tg")) {
                    row["bandwidth"] = b.json(steps_per_s(*med), None);
                }
                row
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("| model | threads | test | t/s (median) | stddev |");
        println!("|---|---:|---:|---:|---:|");
        for (test, (med, sd)) in &rows {
            println!("| {name} | {threads} | {test} | {med:.2} | {sd:.2} |");
        }
        if let (Some(b), Some((test, (med, _)))) =
            (&bandwidth, rows.iter().find(|r| r.0.starts_with("tg")))
        {
            println!("\n{}", b.line(test, steps_per_s(*med), None, threads));
        }
    }
    Ok(())
}
