//! The server's log (`tracing`, target `ferrox::request`): one line per request
//! when it ends, however it ends, and one line per refusal.
//!
//! A [`RequestLog`] follows an accepted request: it feeds the latency histograms
//! and outcome counters from the engine's events and writes the request's line
//! when it is dropped, so a request whose client went away is logged as
//! `aborted` without any handler having to notice. A refusal is an [`ApiError`]
//! answered before anything was queued: its response carries a [`Refusal`], which
//! the [`log_refusals`] middleware writes with the route it was refused on.
//! Prompt text is logged only with `--log-prompts`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use ferrox_engine::{Event, Usage};

use crate::error::ApiError;
use crate::state::AppState;

/// The endpoint a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    ChatCompletions,
    Completions,
    Messages,
    OllamaChat,
    OllamaGenerate,
    Completion,
    Infill,
    Responses,
    Embeddings,
    Embedding,
    OllamaEmbed,
    Rerank,
}

impl Route {
    pub fn path(self) -> &'static str {
        match self {
            Route::ChatCompletions => "/v1/chat/completions",
            Route::Completions => "/v1/completions",
            Route::Messages => "/v1/messages",
            Route::OllamaChat => "/api/chat",
            Route::OllamaGenerate => "/api/generate",
            Route::Completion => "/completion",
            Route::Infill => "/infill",
            Route::Responses => "/v1/responses",
            Route::Embeddings => "/v1/embeddings",
            Route::Embedding => "/embedding",
            Route::OllamaEmbed => "/api/embed",
            Route::Rerank => "/v1/rerank",
        }
    }
}

/// Where an accepted request is, and how it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Still running. A request dropped in this state lost its client: `aborted`.
    Running,
    /// Every stream finished; the reason of the last one.
    Finished(&'static str),
    /// The engine failed it (`code`), or the server cut it at shutdown.
    Failed(&'static str),
    /// It ran past `--request-timeout`.
    TimedOut,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::Running => "aborted",
            Outcome::Finished(_) => "finished",
            Outcome::Failed(_) => "failed",
            Outcome::TimedOut => "timed_out",
        }
    }
}

/// The timing of one of a request's streams (one per prompt).
#[derive(Clone, Copy, Default)]
struct StreamTimes {
    last_token: Option<Instant>,
    tokens: usize,
    usage: Option<Usage>,
}

/// Counts of how requests ended, for the summary at shutdown.
#[derive(Debug, Default)]
pub struct Tally {
    finished: AtomicU64,
    aborted: AtomicU64,
    failed: AtomicU64,
    refused: AtomicU64,
}

impl Tally {
    fn count(&self, outcome: Outcome) {
        let c = match outcome {
            Outcome::Running => &self.aborted,
            Outcome::Finished(_) => &self.finished,
            Outcome::Failed(_) | Outcome::TimedOut => &self.failed,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes the summary line of the server's life.
    pub fn log_summary(&self, cut_at_shutdown: u64) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        tracing::info!(
            target: "ferrox::request",
            finished = get(&self.finished),
            aborted = get(&self.aborted),
            failed = get(&self.failed),
            refused = get(&self.refused),
            cut_at_shutdown,
            "ferrox stopped"
        );
    }
}

/// An accepted request, followed until it ends; its line is written on drop.
pub struct RequestLog {
    st: Arc<AppState>,
    id: String,
    route: Route,
    streaming: bool,
    started: Instant,
    queued_for: Option<Duration>,
    first_token: Option<Duration>,
    prompt_tokens: usize,
    streams: Vec<StreamTimes>,
    outcome: Outcome,
    /// The prompts' text, only with `--log-prompts`.
    prompt: Option<String>,
}

/// A [`RequestLog`] shared by the parts of a streamed response (the event stream
/// and its tail); the line is written when the last part is dropped.
#[derive(Clone)]
pub struct SharedLog(Arc<Mutex<RequestLog>>);

impl SharedLog {
    fn with<R>(&self, f: impl FnOnce(&mut RequestLog) -> R) -> R {
        f(&mut self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// See [`RequestLog::on_event`].
    pub fn on_event(&self, index: usize, e: &Event) {
        self.with(|l| l.on_event(index, e));
    }

    /// See [`RequestLog::timed_out`].
    pub fn timed_out(&self) {
        self.with(RequestLog::timed_out);
    }
}

/// A response id unique across restarts and replicas: `prefix`, the clock, the
/// process and the engine's request id.
pub fn unique_id(prefix: &str, request: u64) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("{prefix}{nanos:016x}{:08x}{request:x}", std::process::id())
}

impl RequestLog {
    /// The text of `prompts` (token ids) for the request's line, only with
    /// `--log-prompts`.
    pub fn prompt_text(st: &AppState, prompts: &[Vec<u32>]) -> Option<String> {
        st.server.log_prompts.then(|| {
            let texts: Vec<String> = prompts
                .iter()
                .map(|p| st.tokenizer.decode(p, true))
                .collect();
            serde_json::to_string(&texts).expect("strings serialize")
        })
    }

    /// A request that arrived at `started` and was accepted with prompts of
    /// `prompt_lens` tokens (one stream each); `prompt` from [`Self::prompt_text`].
    pub fn new(
        st: &Arc<AppState>,
        route: Route,
        id: &str,
        streaming: bool,
        started: Instant,
        prompt_lens: &[usize],
        prompt: Option<String>,
    ) -> RequestLog {
        RequestLog {
            st: Arc::clone(st),
            id: id.to_string(),
            route,
            streaming,
            started,
            queued_for: None,
            first_token: None,
            prompt_tokens: prompt_lens.iter().sum(),
            streams: vec![StreamTimes::default(); prompt_lens.len().max(1)],
            outcome: Outcome::Running,
            prompt,
        }
    }

    /// Shares this log between the parts of a streamed response.
    pub fn shared(self) -> SharedLog {
        SharedLog(Arc::new(Mutex::new(self)))
    }

    /// Observes stream `index`'s event `e` into the histograms, the counters and
    /// this request's line.
    pub fn on_event(&mut self, index: usize, e: &Event) {
        let now = Instant::now();
        let since_start = now - self.started;
        let m = &self.st.metrics;
        let s = &mut self.streams[index];
        match e {
            Event::Admitted => {
                m.queue_time.observe(since_start.as_secs_f64());
                self.queued_for.get_or_insert(since_start);
            }
            Event::PromptLogprobs(_) | Event::Embedding(_) => {}
            Event::Token { .. } => {
                match s.last_token {
                    None => m.time_to_first_token.observe(since_start.as_secs_f64()),
                    Some(l) => m.inter_token_latency.observe((now - l).as_secs_f64()),
                }
                s.last_token = Some(now);
                s.tokens += 1;
                self.first_token.get_or_insert(since_start);
            }
            Event::Finished { reason, usage, .. } => {
                m.end_to_end.observe(since_start.as_secs_f64());
                m.finished(reason.as_str());
                s.usage = Some(*usage);
                if self.outcome == Outcome::Running
                    && self.streams.iter().all(|s| s.usage.is_some())
                {
                    self.outcome = Outcome::Finished(reason.as_str());
                }
            }
            Event::Failed(f) => {
                let code = ApiError::from_failure(f).code;
                m.failed(code);
                self.outcome = Outcome::Failed(code);
            }
        }
    }

    /// The request ran past `--request-timeout` and was cancelled.
    pub fn timed_out(&mut self) {
        if self.outcome == Outcome::Running {
            self.st.metrics.failed(crate::limits::REQUEST_TIMEOUT);
            self.outcome = Outcome::TimedOut;
        }
    }

    /// The HTTP status the client got: a stream's is 200 whatever came after.
    fn status(&self) -> u16 {
        if self.streaming {
            return 200;
        }
        match self.outcome {
            Outcome::Running | Outcome::Finished(_) => 200,
            Outcome::Failed(code) if code == crate::error::SHUTTING_DOWN => 503,
            Outcome::Failed(_) => 500,
            Outcome::TimedOut => StatusCode::GATEWAY_TIMEOUT.as_u16(),
        }
    }

    fn write(&self) {
        let (mut cached, mut generated, mut drafted, mut accepted) = (0, 0, 0, 0);
        for s in &self.streams {
            cached += s.usage.map_or(0, |u| u.cached_tokens);
            generated += s.usage.map_or(s.tokens, |u| u.completion_tokens);
            drafted += s.usage.map_or(0, |u| u.drafted_tokens);
            accepted += s.usage.map_or(0, |u| u.accepted_tokens);
        }
        // Speculation's counts, on the lines of requests it drafted for.
        let (drafted, accepted) = match drafted {
            0 => (None, None),
            d => (Some(d), Some(accepted)),
        };
        let ms = |d: Duration| (d.as_secs_f64() * 1e4).round() / 10.0;
        let (finish, error) = match self.outcome {
            Outcome::Finished(r) => (Some(r), None),
            Outcome::Failed(code) => (None, Some(code)),
            Outcome::TimedOut => (None, Some(crate::limits::REQUEST_TIMEOUT)),
            Outcome::Running => (None, None),
        };
        macro_rules! line {
            ($level:ident) => {
                tracing::$level!(
                    target: "ferrox::request",
                    id = %self.id,
                    route = self.route.path(),
                    status = self.status(),
                    outcome = self.outcome.name(),
                    stream = self.streaming,
                    prompt_tokens = self.prompt_tokens,
                    cached_tokens = cached,
                    generated_tokens = generated,
                    drafted_tokens = drafted,
                    accepted_tokens = accepted,
                    queue_ms = self.queued_for.map(ms),
                    ttft_ms = self.first_token.map(ms),
                    duration_ms = ms(self.started.elapsed()),
                    finish,
                    error,
                    prompt = self.prompt.as_deref(),
                    "request"
                )
            };
        }
        match self.outcome {
            Outcome::Finished(_) | Outcome::Running => line!(info),
            Outcome::Failed(_) | Outcome::TimedOut => line!(warn),
        }
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        self.st.server.tally.count(self.outcome);
        self.write();
    }
}

/// Marks a response as a refusal (set by [`ApiError`]'s responses): what the
/// [`log_refusals`] middleware writes.
#[derive(Clone, Debug)]
pub struct Refusal {
    pub code: &'static str,
    pub message: Box<str>,
}

/// Middleware: one `refused` line for every response that carries a [`Refusal`],
/// with the method and path it was refused on.
pub async fn log_refusals(
    axum::extract::State(st): axum::extract::State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let response = next.run(req).await;
    if let Some(r) = response.extensions().get::<Refusal>() {
        st.server.tally.refused.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            target: "ferrox::request",
            method = %method,
            route = %path,
            status = response.status().as_u16(),
            code = r.code,
            error = %r.message,
            "refused"
        );
    }
    response
}

/// The `refused` line (and counts) of a request hyper refused before it was
/// parsed ([`crate::unparsed`]): no method or route is known.
pub(crate) fn unparsed_refusal(
    server: &crate::state::Server,
    model: Option<&AppState>,
    err: &crate::error::ApiError,
) {
    server.tally.refused.fetch_add(1, Ordering::Relaxed);
    if let Some(m) = model {
        m.metrics.refused(err.code);
    }
    tracing::warn!(
        target: "ferrox::request",
        status = err.status.as_u16(),
        code = err.code,
        error = %err.message,
        "refused"
    );
}

/// `response` without its [`Refusal`] mark: an error answered after the request
/// was accepted, which its [`RequestLog`] line reports.
pub fn not_a_refusal(mut response: Response) -> Response {
    response.extensions_mut().remove::<Refusal>();
    response
}
