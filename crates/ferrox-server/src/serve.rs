//! Running the server: bind, report readiness, serve connections within the
//! [`Limits`], and shut down truthfully on SIGINT / SIGTERM.
//!
//! Shutdown: the listener stops accepting and `/health` turns 503 at once;
//! requests in flight get the grace period to finish. Then the engine ends every
//! request still running with `Failure::Shutdown`: a stream gets an error event
//! (and no `[DONE]`), a non-streaming request a 503 with `Retry-After`. The log
//! says how many were in flight and how many were cut, and at the end how every
//! request of the server's life ended.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::limits::{Activity, Guarded, IdleIo, Limits};
use crate::registry::Registry;
use crate::routes::router;
use crate::state::{AppState, Phase, Server};
use crate::unparsed::UnparsedIo;

/// Time the last responses get to reach their clients once every request has
/// ended (a client that stopped reading cannot hold a shutdown longer).
const LAST_WRITES: Duration = Duration::from_secs(5);

/// How to serve.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Time in-flight requests get to finish after a shutdown signal.
    pub grace: Duration,
}

/// What a server serves.
pub enum Served {
    /// One model.
    One(Arc<AppState>),
    /// Several (`--models-dir`): the server's state, the id of the model that
    /// answers requests naming none, and the registry, which holds every
    /// loaded model (the started one adopted, so that it can unload too).
    Several {
        server: Arc<Server>,
        started: String,
        models: Arc<Registry>,
    },
}

impl Served {
    fn server(&self) -> &Arc<Server> {
        match self {
            Served::One(st) => &st.server,
            Served::Several { server, .. } => server,
        }
    }

    /// The models loaded now.
    async fn loaded(&self) -> Vec<Arc<AppState>> {
        match self {
            Served::One(st) => vec![Arc::clone(st)],
            Served::Several { models, .. } => {
                models.loaded().await.into_iter().map(|m| m.state).collect()
            }
        }
    }

    /// The model whose metrics count what hyper refuses: the one served.
    fn metrics_model(&self) -> Option<Arc<AppState>> {
        match self {
            Served::One(st) => Some(Arc::clone(st)),
            Served::Several { .. } => None,
        }
    }
}

async fn signal(stop: CancellationToken) {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
        _ = stop.cancelled() => {}
    }
    stop.cancel();
}

/// Answers 503 `loading` on `listener` until `loaded` is cancelled (`/health`
/// and every other route), so clients can connect while the model loads.
pub async fn serve_loading(
    listener: tokio::net::TcpListener,
    loaded: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, crate::routes::loading_router())
        .with_graceful_shutdown(async move { loaded.cancelled().await })
        .await
}

/// The server-wide state connections follow while shutting down.
#[derive(Clone)]
struct Shutdown {
    /// Requests in flight on every connection.
    all: Arc<Activity>,
    /// Every request has ended (finished, or cut off after the grace period):
    /// connections close once their own last response is out.
    closing: CancellationToken,
}

/// Serves one accepted connection until it closes. Kept-alive connections stay
/// open while the server drains (a load balancer's `/health` probe on one sees
/// the 503), and close once every request in flight has ended and their own
/// last response is out.
fn connection(
    stream: tokio::net::TcpStream,
    app: axum::Router,
    served: (Arc<Server>, Option<Arc<AppState>>),
    limits: &Limits,
    shutdown: Shutdown,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let activity = Activity::new();
    let io = TokioIo::new(UnparsedIo::new(
        IdleIo::new(stream, Arc::clone(&activity), limits.idle_timeout),
        served.0,
        served.1,
    ));
    let counted = Arc::clone(&activity);
    let all = Arc::clone(&shutdown.all);
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let guard = (counted.enter(), all.enter());
        let app = app.clone();
        async move {
            let response = app.oneshot(req.map(Body::new)).await?;
            Ok::<_, Infallible>(response.map(|inner| Body::new(Guarded { inner, guard })))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(io, service);
    tokio::spawn(async move {
        let _permit = permit;
        tokio::pin!(conn);
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = shutdown.closing.cancelled() => {}
        }
        while activity.in_flight() > 0 {
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
        conn.as_mut().graceful_shutdown();
        let _ = conn.await;
    });
}

/// Serves `served` on `listener` until a shutdown signal (or `stop`); `on_ready` gets
/// the address once requests are answered.
pub async fn serve(
    served: Served,
    listener: tokio::net::TcpListener,
    opts: ServeOptions,
    stop: CancellationToken,
    on_ready: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let server = Arc::clone(served.server());
    let limits = server.limits.clone();
    let app = match &served {
        Served::Several {
            server,
            started,
            models,
        } => {
            tokio::spawn(reaper(Arc::downgrade(models)));
            crate::front::router(Arc::clone(server), started.clone(), Arc::clone(models))
        }
        Served::One(state) => router(Arc::clone(state)),
    };
    let max = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let shutdown = Shutdown {
        all: Activity::new(),
        closing: CancellationToken::new(),
    };
    server.phase.set(Phase::Serving);
    on_ready(addr);
    tokio::spawn(signal(stop.clone()));
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&slots).acquire_owned() => p.expect("the semaphore is never closed"),
            _ = stop.cancelled() => break,
        };
        let stream = tokio::select! {
            a = listener.accept() => match a {
                Ok((s, _)) => s,
                // Out of file descriptors and the like: wait, do not spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        connection(
            stream,
            app.clone(),
            (Arc::clone(&server), served.metrics_model()),
            &limits,
            shutdown.clone(),
            permit,
        );
    }
    drop(listener);
    let models = served.loaded().await;
    drain(&server, &models, &shutdown.all, opts.grace).await;
    shutdown.closing.cancel();
    let every = u32::try_from(max).unwrap_or(u32::MAX);
    // A client that stopped reading its response cannot hold the process.
    let _ = tokio::time::timeout(LAST_WRITES, slots.acquire_many(every)).await;
    server.tally.log_summary(cut_at_shutdown(&models));
    Ok(())
}

/// Unloads the models whose keep-alive ran out, every second, while the
/// registry lives.
async fn reaper(models: std::sync::Weak<crate::registry::Registry>) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        match models.upgrade() {
            Some(m) => m.reap().await,
            None => return,
        }
    }
}

/// Requests of `models` cut off at shutdown.
fn cut_at_shutdown(models: &[Arc<AppState>]) -> u64 {
    models.iter().map(|m| m.metrics.cut_at_shutdown()).sum()
}

/// Stops taking work, gives in-flight requests `grace`, then cuts off the rest
/// on every model's engine; returns once no request is in flight on any
/// connection.
async fn drain(server: &Server, models: &[Arc<AppState>], all: &Activity, grace: Duration) {
    server.phase.set(Phase::Draining);
    let in_flight: u64 = models
        .iter()
        .map(|m| {
            let stats = m.engine.stats();
            stats.running + stats.queue_depth
        })
        .sum();
    tracing::info!(
        in_flight,
        grace_s = grace.as_secs_f64(),
        "shutting down: {in_flight} requests in flight get {} s to finish",
        grace.as_secs_f64()
    );
    let engines: Vec<_> = models.iter().map(|m| m.engine.clone()).collect();
    let cutter = tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        engines.iter().for_each(|e| e.shutdown());
    });
    let deadline = tokio::time::Instant::now() + grace + LAST_WRITES;
    while all.in_flight() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cutter.abort();
    models.iter().for_each(|m| m.engine.shutdown());
    let cut = cut_at_shutdown(models);
    if cut > 0 {
        tracing::warn!(
            cut,
            "cut off {cut} requests still running after the {} s grace period (each got a 503 or a stream error event)",
            grace.as_secs_f64()
        );
    }
}
