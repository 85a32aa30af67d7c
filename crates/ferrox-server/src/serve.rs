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
use crate::routes::router;
use crate::state::{AppState, Phase};
use crate::unparsed::UnparsedIo;

/// Time the last responses get to reach their clients once every request has
/// ended (a client that stopped reading cannot hold a shutdown longer).
const LAST_WRITES: Duration = Duration::from_secs(5);

/// How to serve.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Time in-flight requests get to finish after a shutdown signal.
    pub grace: Duration,
    /// The folder's models besides the started one (`--models-dir`).
    pub models: Option<Arc<crate::registry::Registry>>,
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
    state: Arc<AppState>,
    limits: &Limits,
    shutdown: Shutdown,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let activity = Activity::new();
    let io = TokioIo::new(UnparsedIo::new(
        IdleIo::new(stream, Arc::clone(&activity), limits.idle_timeout),
        state,
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

/// Serves `state` on `listener` until a shutdown signal (or `stop`); `on_ready` gets
/// the address once requests are answered.
pub async fn serve(
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
    opts: ServeOptions,
    stop: CancellationToken,
    on_ready: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let limits = state.limits.clone();
    let app = match &opts.models {
        Some(models) => {
            tokio::spawn(reaper(Arc::downgrade(models)));
            crate::front::router(Arc::clone(&state), Arc::clone(models))
        }
        None => router(Arc::clone(&state)),
    };
    let max = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let shutdown = Shutdown {
        all: Activity::new(),
        closing: CancellationToken::new(),
    };
    state.phase.set(Phase::Serving);
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
            Arc::clone(&state),
            &limits,
            shutdown.clone(),
            permit,
        );
    }
    drop(listener);
    drain(&state, &shutdown.all, opts.grace).await;
    if let Some(models) = &opts.models {
        models.shutdown().await;
    }
    shutdown.closing.cancel();
    let every = u32::try_from(max).unwrap_or(u32::MAX);
    // A client that stopped reading its response cannot hold the process.
    let _ = tokio::time::timeout(LAST_WRITES, slots.acquire_many(every)).await;
    state.tally.log_summary(state.metrics.cut_at_shutdown());
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

/// Stops taking work, gives in-flight requests `grace`, then cuts off the rest;
/// returns once no request is in flight on any connection.
async fn drain(state: &AppState, all: &Activity, grace: Duration) {
    state.phase.set(Phase::Draining);
    let stats = state.engine.stats();
    let in_flight = stats.running + stats.queue_depth;
    tracing::info!(
        in_flight,
        grace_s = grace.as_secs_f64(),
        "shutting down: {in_flight} requests in flight get {} s to finish",
        grace.as_secs_f64()
    );
    let engine = state.engine.clone();
    let cutter = tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        engine.shutdown();
    });
    let deadline = tokio::time::Instant::now() + grace + LAST_WRITES;
    while all.in_flight() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cutter.abort();
    state.engine.shutdown();
    let cut = state.metrics.cut_at_shutdown();
    if cut > 0 {
        tracing::warn!(
            cut,
            "cut off {cut} requests still running after the {} s grace period (each got a 503 or a stream error event)",
            grace.as_secs_f64()
        );
    }
}
