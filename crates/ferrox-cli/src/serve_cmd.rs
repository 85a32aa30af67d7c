//! `ferrox serve`: the OpenAI-compatible server on one model, and with
//! `--models-dir` on the models of a folder, loaded on first use. The port
//! answers 503 `loading` from the start; the URL is printed once requests are
//! served; SIGINT / SIGTERM stop it gracefully (exit 0).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use ferrox_engine::byte_size::format_bytes;
use ferrox_engine::kv_plan::KvPlan;
use ferrox_engine::kv_plan::KvShape;
use ferrox_models::model::{Model, Net};
use ferrox_models::pooling::Normalize;
use ferrox_sampling::grammar::Grammars;
use ferrox_server::auth::ApiKey;
use ferrox_server::embeddings::EmbeddingSettings;
use ferrox_server::metrics::Metrics;
use ferrox_server::{AppState, Lifecycle, Limits, Phase, ServeOptions, Served, Server};
use tokio_util::sync::CancellationToken;

use crate::knobs::EngineArgs;

/// Flags of `ferrox serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// GGUF file, catalog name or Hugging Face model (hf.co/USER/REPO or
    /// hf.co/USER/REPO:QUANT),
    /// fetched the first time [default: the catalog's default model]. Catalog
    /// models are cached in FERROX_MODELS_DIR (default: $XDG_CACHE_HOME/ferrox/models,
    /// else ~/.cache/ferrox/models); Hub models in the Hugging Face cache (HF_HOME).
    #[arg(short, long, env = "FERROX_MODEL", value_name = "MODEL")]
    pub model: Option<String>,
    /// Another name `/v1/models/{id}` finds the model by (repeatable; the
    /// variable takes a comma-separated list). The id `/v1/models` reports is the
    /// catalog name or the file's stem; a request may name any model, and the
    /// served one answers.
    #[arg(
        long = "alias",
        value_name = "NAME",
        env = "FERROX_ALIAS",
        value_delimiter = ','
    )]
    pub aliases: Vec<String>,
    /// Origins whose web pages may call the API from a browser (CORS), e.g.
    /// `https://app.example.com` (repeatable; the variable takes a comma-separated
    /// list; `*` allows any origin). Default: none, so only same-origin pages.
    #[arg(
        long = "cors-origins",
        value_name = "ORIGIN",
        env = "FERROX_CORS_ORIGINS",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,
    /// Log lines as text or as JSON objects (one per line). RUST_LOG filters them
    /// [default filter: info].
    #[arg(long, env = "FERROX_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, value_name = "FORMAT")]
    pub log_format: LogFormat,
    /// Put each request's prompt text (after the chat template) in its log line.
    /// Off by default: prompts are the users' data.
    #[arg(long, env = "FERROX_LOG_PROMPTS")]
    pub log_prompts: bool,
    /// How embeddings pool a prompt's hidden states (none, mean, cls, last,
    /// rank) [default: the file's pooling_type, else mean]. `rank` needs a
    /// reranker's classification head.
    #[arg(long, env = "FERROX_POOLING", value_name = "POOLING")]
    pub pooling: Option<ferrox_models::Pooling>,
    /// How embeddings are normalized unless a request says (llama.cpp's codes:
    /// -1 none, 0 max-abs int16, 1 taxicab, 2 Euclidean, p > 2 p-norm).
    #[arg(long, env = "FERROX_EMBD_NORMALIZE", default_value_t = 2, allow_negative_numbers = true, value_parser = embd_normalize, value_name = "N")]
    pub embd_normalize: i64,
    /// Do not serve the chat page at `/` (the API is unchanged).
    #[arg(long, env = "FERROX_NO_WEBUI")]
    pub no_webui: bool,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1", env = "FERROX_HOST")]
    pub host: String,
    /// Port to listen on (0: any free port).
    #[arg(long, default_value_t = 8080, env = "FERROX_PORT")]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on the API routes (an empty key is an
    /// error).
    #[arg(
        long,
        env = "FERROX_API_KEY",
        conflicts_with = "api_key_file",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,
    /// Read the API key from a file (its content, surrounding whitespace removed),
    /// so that it shows in no process list.
    #[arg(long, env = "FERROX_API_KEY_FILE", value_name = "PATH")]
    pub api_key_file: Option<std::path::PathBuf>,
    /// Compute threads [default: available cores].
    #[arg(short = 't', long, env = "FERROX_THREADS", value_parser = crate::knobs::count_knob("FERROX_THREADS"), value_name = "N")]
    pub threads: Option<usize>,
    /// Activation path.
    #[command(flatten)]
    pub path: crate::knobs::ActivationArgs,
    /// max_tokens of requests that give none (each request reserves KV for
    /// prompt + max_tokens, so this bounds what a default request holds).
    #[arg(long, env = "FERROX_DEFAULT_MAX_TOKENS", value_parser = crate::knobs::count_knob("FERROX_DEFAULT_MAX_TOKENS"), default_value_t = 2048, value_name = "N")]
    pub default_max_tokens: usize,
    /// The seed of requests that give none, so that their sampled answers
    /// repeat (llama-server's `--seed`) [default: one from the clock per
    /// request].
    #[arg(short = 's', long, env = "FERROX_SEED", value_name = "N")]
    pub seed: Option<u64>,
    /// Seconds in-flight requests get to finish after SIGINT / SIGTERM; then the
    /// rest are cut off (a 503 with Retry-After, or a stream error event).
    #[arg(
        long,
        env = "FERROX_SHUTDOWN_GRACE",
        default_value_t = 10,
        value_name = "SECS"
    )]
    pub shutdown_grace: u64,
    /// Seconds a client may take to send a request's headers.
    #[arg(long, env = "FERROX_HEADER_TIMEOUT", value_parser = crate::knobs::count_knob("FERROX_HEADER_TIMEOUT"), default_value_t = 10, value_name = "SECS")]
    pub header_timeout: usize,
    /// Seconds a client may take to send a whole request body.
    #[arg(long, env = "FERROX_BODY_TIMEOUT", value_parser = crate::knobs::count_knob("FERROX_BODY_TIMEOUT"), default_value_t = 30, value_name = "SECS")]
    pub body_timeout: usize,
    /// Seconds a kept-alive connection may wait for its next request.
    #[arg(long, env = "FERROX_IDLE_TIMEOUT", value_parser = crate::knobs::count_knob("FERROX_IDLE_TIMEOUT"), default_value_t = 60, value_name = "SECS")]
    pub idle_timeout: usize,
    /// Connections served at once (more wait in the listen backlog).
    #[arg(long, env = "FERROX_MAX_CONNECTIONS", value_parser = crate::knobs::count_knob("FERROX_MAX_CONNECTIONS"), default_value_t = 1024, value_name = "N")]
    pub max_connections: usize,
    /// Seconds one completion request may run before it is cancelled with a 504
    /// (or a stream error event); 0: no limit.
    #[arg(
        long,
        env = "FERROX_REQUEST_TIMEOUT",
        default_value_t = 600,
        value_name = "SECS"
    )]
    pub request_timeout: u64,
    /// Serve every GGUF in this folder too, each named by its file stem and
    /// loaded on first use (the request's `model` picks it); the started
    /// model (`-m`, else the folder's first) answers requests that name none,
    /// and unloads and loads again as the others do.
    #[arg(long, env = "FERROX_SERVE_MODELS_DIR", value_name = "DIR")]
    pub models_dir: Option<std::path::PathBuf>,
    /// Models loaded at once with `--models-dir`, the started one included;
    /// past it the least recently used is unloaded.
    #[arg(long, env = "FERROX_MODELS_MAX", value_parser = crate::knobs::count_knob("FERROX_MODELS_MAX"), default_value_t = 2, value_name = "N")]
    pub models_max: usize,
    /// Bytes the loaded models may hold together (files and KV budgets), checked
    /// before each load [default: the memory available at start].
    #[arg(long, env = "FERROX_MODELS_MEMORY", value_parser = parse_models_memory, value_name = "BYTES")]
    pub models_memory: Option<u64>,
    /// How long a `--models-dir` model stays loaded after a request that sets no
    /// `keep_alive` (Ollama's spellings: `5m`, `1h`, `0`; `-1`: until evicted).
    #[arg(long, env = "FERROX_KEEP_ALIVE", value_parser = parse_keep_alive, default_value = "-1", value_name = "DURATION")]
    pub keep_alive: ferrox_server::registry::KeepAlive,
    /// Publish the prefix cache's events at this endpoint (`tcp://*:5557`):
    /// vLLM's KV events (ZMQ PUB, msgpack `BlockStored` / `BlockRemoved` /
    /// `AllBlocksCleared`), for routers that score replicas by what they hold.
    #[arg(long, env = "FERROX_KV_EVENTS", value_name = "ENDPOINT")]
    pub kv_events: Option<String>,
    /// A replay socket for --kv-events (ZMQ ROUTER): a subscriber that missed
    /// batches asks for them again from a sequence number.
    #[arg(
        long,
        env = "FERROX_KV_EVENTS_REPLAY",
        value_name = "ENDPOINT",
        requires = "kv_events"
    )]
    pub kv_events_replay: Option<String>,
    /// The topic (first frame) of every --kv-events message.
    #[arg(
        long,
        env = "FERROX_KV_EVENTS_TOPIC",
        default_value = "",
        value_name = "TOPIC"
    )]
    pub kv_events_topic: String,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub habits: crate::knobs::LlamaHabits,
}

fn parse_models_memory(s: &str) -> Result<u64, String> {
    ferrox_engine::byte_size::parse_byte_size(s).map_err(|e| e.to_string())
}

fn parse_keep_alive(s: &str) -> Result<ferrox_server::registry::KeepAlive, String> {
    let v = match s.trim().parse::<f64>() {
        Ok(n) => serde_json::json!(n),
        Err(_) => serde_json::json!(s),
    };
    ferrox_server::registry::KeepAlive::parse(&v)
        .ok_or_else(|| format!("{s:?} is not a duration (e.g. 30s, 5m, 1h, 0, or -1 for no limit)"))
}

/// What the KV pool will take once every page has been touched (memory is
/// committed lazily, so resident memory climbs toward this as pages are first
/// used). Refused up front when the system does not have that much available:
/// a KV page can then never be the allocation that runs the machine out of
/// memory mid-request, short of other processes taking memory meanwhile.
fn kv_peak_bytes(shape: &KvShape, config: &ferrox_engine::EngineConfig) -> Result<u64> {
    let Some(blocks) = config.kv_blocks else {
        return Ok(0);
    };
    let plan = KvPlan::from_blocks(
        shape,
        blocks as u64,
        config.block_size,
        config.max_seqs,
        config.prefill_chunk,
    )?;
    let peak = plan.total_bytes();
    if let Some(available) = available_memory()
        && peak > available
    {
        anyhow::bail!(
            "the KV budget needs {} at peak ({blocks} blocks of {} positions), but the system has {} available; lower --kv-memory / FERROX_CB_KV_MEMORY or --kv-blocks",
            format_bytes(peak),
            config.block_size,
            format_bytes(available)
        );
    }
    Ok(peak)
}

/// `MemAvailable` of `/proc/meminfo` (Linux), in bytes.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

impl ServeArgs {
    /// The model the server starts with: `-m`, else the first GGUF of
    /// `--models-dir`, else the default model.
    fn started_model(&self) -> Result<Option<String>> {
        let Some(dir) = self.models_dir.as_ref().filter(|_| self.model.is_none()) else {
            return Ok(self.model.clone());
        };
        let mut ggufs: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("--models-dir {}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
            .collect();
        ggufs.sort();
        match ggufs.first() {
            Some(p) => Ok(Some(p.display().to_string())),
            None => anyhow::bail!("--models-dir {}: no .gguf file in it", dir.display()),
        }
    }

    /// The CORS origins, each `*` or `scheme://host[:port]` as browsers send them.
    /// The bound `--kv-events` sockets, if asked for: one model's cache, so
    /// not with `--models-dir`.
    async fn kv_events_publisher(&self) -> Result<Option<ferrox_server::kv_events::Publisher>> {
        let Some(endpoint) = &self.kv_events else {
            return Ok(None);
        };
        anyhow::ensure!(
            self.models_dir.is_none(),
            "--kv-events publishes one model's KV cache; it cannot be used with --models-dir"
        );
        let cfg = ferrox_server::kv_events::KvEventsConfig {
            endpoint: endpoint.clone(),
            replay: self.kv_events_replay.clone(),
            topic: self.kv_events_topic.clone(),
            block_size: u32::try_from(self.engine.kv.kv_block_size)?,
        };
        Ok(Some(ferrox_server::kv_events::Publisher::bind(&cfg).await?))
    }

    fn check_cors_origins(&self) -> Result<()> {
        for o in &self.cors_origins {
            let ok = o == "*"
                || ((o.starts_with("http://") || o.starts_with("https://"))
                    && !o["https://".len().min(o.len())..].contains('/')
                    && o.is_ascii()
                    && !o.contains(char::is_whitespace));
            if !ok {
                anyhow::bail!(
                    "--cors-origins {o:?}: an origin is scheme://host[:port] with no path (e.g. https://app.example.com), or * for any"
                );
            }
        }
        Ok(())
    }

    /// The server's own state, as the flags set it (the models' are their own).
    fn server(&self) -> Result<Server> {
        Ok(Server {
            api_key: self.api_key()?,
            default_max_tokens: self.default_max_tokens,
            default_seed: self.seed,
            phase: Lifecycle::new(Phase::Starting),
            limits: self.limits(),
            cors_origins: self.cors_origins.clone(),
            webui: !self.no_webui,
            log_prompts: self.log_prompts,
            tally: Default::default(),
        })
    }

    /// The API key, from the flag, the variable or the file; an empty one is an error.
    fn api_key(&self) -> Result<Option<ApiKey>> {
        let key = match (&self.api_key, &self.api_key_file) {
            (Some(k), _) => Some(ApiKey::new(k).context("--api-key / FERROX_API_KEY")?),
            (None, Some(p)) => {
                Some(ApiKey::from_file(p).context("--api-key-file / FERROX_API_KEY_FILE")?)
            }
            (None, None) => None,
        };
        Ok(key)
    }

    fn limits(&self) -> Limits {
        let secs = |n: usize| Duration::from_secs(n as u64);
        Limits {
            header_timeout: secs(self.header_timeout),
            body_timeout: secs(self.body_timeout),
            idle_timeout: secs(self.idle_timeout),
            max_connections: self.max_connections,
            request_timeout: (self.request_timeout > 0)
                .then(|| Duration::from_secs(self.request_timeout)),
        }
    }
}

/// How log lines are written.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `time LEVEL target: message key=value ...`
    Text,
    /// One JSON object per line, fields flattened.
    Json,
}

/// Sends `tracing` events to stderr in `format`, filtered by `RUST_LOG` (default
/// `info`).
fn init_logging(format: LogFormat) -> Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) => tracing_subscriber::EnvFilter::try_new(&v).with_context(|| {
            format!("RUST_LOG={v:?} is not a log filter (e.g. info, or warn,ferrox::request=info)")
        })?,
        Err(_) => tracing_subscriber::EnvFilter::new("info"),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let done = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    done.map_err(|e| anyhow::anyhow!("cannot set up logging: {e}"))
}

/// Runs the server until a shutdown signal.
pub fn serve(a: ServeArgs) -> Result<()> {
    init_logging(a.log_format)?;
    let server = Arc::new(a.server()?);
    a.check_cors_origins()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("ferrox-http")
        .build()?;
    let a = Arc::new(a);
    rt.block_on(async move {
        let std_listener = std::net::TcpListener::bind((a.host.as_str(), a.port)).with_context(|| format!("cannot listen on {}:{}", a.host, a.port))?;
        std_listener.set_nonblocking(true)?;
        let loaded = CancellationToken::new();
        let loading = tokio::spawn(ferrox_server::serve_loading(tokio::net::TcpListener::from_std(std_listener.try_clone()?)?, loaded.clone()));
        let model_arg = a.started_model()?;
        let publisher = a.kv_events_publisher().await?;
        let (sink, events) = match &publisher {
            Some(_) => {
                let (sink, rx) = ferrox_engine::kv_events::KvEventSink::channel();
                (Some(sink), Some(rx))
            }
            None => (None, None),
        };
        let (args, shared) = (Arc::clone(&a), Arc::clone(&server));
        let started = tokio::task::spawn_blocking(move || -> Result<_> {
            let path = ferrox_hub::model_ref::resolve(model_arg.as_deref())?;
            let model_id = ferrox_hub::model_ref::model_id(model_arg.as_deref(), &path);
            let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let mut aliases = args.aliases.clone();
            aliases.extend([file_name, path.display().to_string(), "default".into()]);
            let threads = crate::knobs::threads_or_all(args.threads);
            let draft = args.engine.spec.drafter(threads, args.path.activations)?;
            let started = start_model(&args, shared, &path, model_id, aliases, sink, draft)?;
            Ok((path, started))
        })
        .await??;
        let (path, Started { state, config, kv_peak, activations }) = started;
        let served = match a.models_dir.as_ref() {
            None => Served::One(state),
            Some(dir) => {
                let models = Arc::new(ferrox_server::registry::Registry::new(
                    dir.clone(),
                    a.models_max,
                    a.models_memory.unwrap_or_else(|| available_memory().unwrap_or(u64::MAX)),
                    a.keep_alive,
                    loader(Arc::clone(&a), Arc::clone(&server)),
                ));
                let started = state.model_id.clone();
                models.adopt(state, path.clone()).await;
                Served::Several { server: Arc::clone(&server), started, models }
            }
        };
        let events_at = match (publisher, events) {
            (Some(p), Some(rx)) => {
                let at = match &p.bound.1 {
                    Some(replay) => format!("; KV events at {}, replay at {replay}", p.bound.0),
                    None => format!("; KV events at {}", p.bound.0),
                };
                tokio::spawn(p.run(rx));
                at
            }
            _ => String::new(),
        };
        let webui = !a.no_webui;
        loaded.cancel();
        loading.await??;
        let listener = tokio::net::TcpListener::from_std(std_listener)?;
        let stop = CancellationToken::new();
        let blocks = config.kv_blocks.map_or("unbounded".to_string(), |b| {
            format!("{b} blocks of {} {} positions, {} at peak", config.block_size, config.kv_element, format_bytes(kv_peak))
        });
        let folder = a.models_dir.as_ref().map_or(String::new(), |d| format!("; the models of {} on first use", d.display()));
        ferrox_server::serve(served, listener, ServeOptions { grace: Duration::from_secs(a.shutdown_grace) }, stop, |addr| {
            // One line, one write: a client that reads this line and closes the
            // pipe must not make a second write fail.
            let page = if webui { format!(", chat page at http://{addr}/") } else { String::new() };
            println!(
                "ferrox serving {} on http://{addr} (OpenAI API at http://{addr}/v1{page}; KV {blocks}, {} slots, {activations} activations{folder}{events_at})",
                path.display(),
                config.max_seqs
            );
        })
        .await?;
        Ok(())
    })
}

/// A model started: its serving state, engine configuration and KV peak.
struct Started {
    state: Arc<AppState>,
    config: ferrox_engine::EngineConfig,
    kv_peak: u64,
    /// The activation path the model runs (an encoder's is f32).
    activations: ferrox_models::ActivationPath,
}

/// Loads the model at `path` and starts its engine (blocking).
fn start_model(
    a: &ServeArgs,
    server: Arc<Server>,
    path: &std::path::Path,
    model_id: String,
    aliases: Vec<String>,
    kv_events: Option<ferrox_engine::kv_events::KvEventSink>,
    draft: Option<ferrox_engine::Drafter>,
) -> Result<Started> {
    let threads = crate::knobs::threads_or_all(a.threads);
    let model = Model::load_with(path, threads, a.path.activations)?;
    let grammars = Grammars::new(&model.tokenizer);
    if let Err(e) = &grammars {
        tracing::warn!("structured output is off for {model_id}: {e}");
    }
    let activations = match &model.net {
        Net::Decoder(t) => t.activation_path(),
        Net::Encoder(_) => ferrox_models::ActivationPath::F32,
    };
    let kv_element = a.engine.kv.kv_element(activations)?;
    let shape = KvShape::new(model.net.hyper_params(), kv_element);
    let normalize = Normalize::from_code(a.embd_normalize).expect("checked by the parser");
    let has_rank_head = matches!(&model.net, Net::Encoder(e) if e.has_classifier());
    let embedding = EmbeddingSettings::choose(
        a.pooling,
        normalize,
        model.net.hyper_params(),
        has_rank_head,
    )?;
    let config = ferrox_engine::EngineConfig {
        kv_events,
        ..a.engine.config(&shape, kv_element)?
    };
    let kv_peak = kv_peak_bytes(&shape, &config)?;
    let tokenizer = Arc::new(model.tokenizer.clone());
    let facts = ferrox_server::props::ServerFacts {
        model_path: path.display().to_string(),
        total_slots: config.max_seqs,
        chat_template: model
            .net
            .file()
            .header()
            .metadata
            .string_opt("tokenizer.chat_template")?,
        card: ferrox_server::model_card::ModelCard::of(
            model.net.file(),
            ferrox_hub::model_ref::known_sha256(path),
        ),
    };
    let engine = ferrox_engine::start_with_draft(
        model.net.into_decoder(),
        Arc::clone(&tokenizer),
        config.clone(),
        draft,
    )?;
    let state = Arc::new(AppState {
        metrics: Metrics::new(engine.clone(), &model_id),
        engine,
        tokenizer,
        chat: model.chat,
        aliases,
        model_id,
        embedding,
        grammars,
        facts,
        server,
    });
    Ok(Started {
        activations,
        state,
        config,
        kv_peak,
    })
}

/// How the folder's models are started: as the started one is, each under
/// its file stem.
fn loader(a: Arc<ServeArgs>, server: Arc<Server>) -> ferrox_server::registry::Loader {
    Arc::new(move |path, id| {
        let aliases = path
            .file_name()
            .map(|n| vec![n.to_string_lossy().into_owned()])
            .unwrap_or_default();
        start_model(
            &a,
            Arc::clone(&server),
            path,
            id.to_string(),
            aliases,
            None,
            None,
        )
        .map(|s| s.state)
        .map_err(Into::into)
    })
}

/// `--embd-normalize`: one of llama.cpp's codes.
fn embd_normalize(s: &str) -> Result<i64, String> {
    let code: i64 = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    match Normalize::from_code(code) {
        Some(_) => Ok(code),
        None => Err(format!(
            "{code}: one of -1 (none), 0 (max-abs int16), 1 (taxicab), 2 (Euclidean) or p > 2"
        )),
    }
}
