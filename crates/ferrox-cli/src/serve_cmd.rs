//! `ferrox serve`: the OpenAI-compatible server on one model. The port answers 503
//! `loading` from the start; the URL is printed once requests are served; SIGINT /
//! SIGTERM stop it gracefully (exit 0).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use ferrox_models::decoder::Decoder;
use ferrox_models::kv_plan::{KvShape, defaults};
use ferrox_models::model::Model;
use ferrox_server::metrics::Metrics;
use ferrox_server::{AppState, ServeOptions};
use tokio_util::sync::CancellationToken;

use crate::knobs::EngineArgs;

/// Flags of `ferrox serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// GGUF file or catalog name (default: the default model, fetched the first time).
    #[arg(short, long)]
    pub model: Option<String>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1", env = "FERROX_HOST")]
    pub host: String,
    /// Port to listen on (0: any free port).
    #[arg(long, default_value_t = 8080, env = "FERROX_PORT")]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on the API routes.
    #[arg(long, env = "FERROX_API_KEY")]
    pub api_key: Option<String>,
    /// Compute threads [default: available cores].
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Activation path.
    #[command(flatten)]
    pub path: crate::knobs::ActivationArgs,
    /// max_tokens of requests that give none (each request reserves KV for
    /// prompt + max_tokens, so this bounds what a default request holds).
    #[arg(long, env = "FERROX_DEFAULT_MAX_TOKENS", value_parser = crate::knobs::count_knob("FERROX_DEFAULT_MAX_TOKENS"), default_value_t = 2048)]
    pub default_max_tokens: usize,
    /// Seconds in-flight requests get to finish after SIGINT / SIGTERM.
    #[arg(long, default_value_t = 10)]
    pub shutdown_grace: u64,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Runs the server until a shutdown signal.
pub fn serve(a: ServeArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("ferrox-http")
        .build()?;
    rt.block_on(async move {
        let std_listener = std::net::TcpListener::bind((a.host.as_str(), a.port)).with_context(|| format!("cannot listen on {}:{}", a.host, a.port))?;
        std_listener.set_nonblocking(true)?;
        let loaded = CancellationToken::new();
        let loading = tokio::spawn(ferrox_server::serve_loading(tokio::net::TcpListener::from_std(std_listener.try_clone()?)?, loaded.clone()));
        let model_arg = a.model.clone();
        let activations = a.path.activations;
        let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let (path, model) = tokio::task::spawn_blocking(move || -> Result<_> {
            let path = crate::model_ref::resolve(model_arg.as_deref())?;
            let model = Model::load_with(&path, threads, activations)?;
            Ok((path, model))
        })
        .await??;
        let shape = KvShape::new(model.transformer.hyper_params(), defaults::KV_ELEMENT_BYTES);
        let config = a.engine.config(&shape)?;
        let tokenizer = Arc::new(model.tokenizer.clone());
        let engine = ferrox_engine::start(Box::new(model.transformer), Arc::clone(&tokenizer), config.clone())?;
        let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let model_id = a.model.clone().unwrap_or_else(|| ferrox_models::catalog::DEFAULT_MODEL.to_string());
        let state = Arc::new(AppState {
            metrics: Metrics::new(engine.clone()),
            engine,
            tokenizer,
            chat: model.chat,
            aliases: vec![file_name, path.display().to_string(), "default".into()],
            model_id,
            api_key: a.api_key.clone(),
            default_max_tokens: a.default_max_tokens,
            ready: AtomicBool::new(false),
        });
        loaded.cancel();
        loading.await??;
        let listener = tokio::net::TcpListener::from_std(std_listener)?;
        let stop = CancellationToken::new();
        let blocks = config.kv_blocks.map_or("unbounded".to_string(), |b| format!("{b} blocks of {}", config.block_size));
        ferrox_server::serve(state, listener, ServeOptions { grace: Duration::from_secs(a.shutdown_grace) }, stop, |addr| {
            println!(
                "ferrox serving {} on http://{addr} (OpenAI API at http://{addr}/v1; KV {blocks}, {} slots, {activations} activations)",
                path.display(),
                config.max_seqs
            );
        })
        .await?;
        eprintln!("ferrox stopped");
        Ok(())
    })
}
