//! Running the server: bind, report readiness, and shut down gracefully on SIGINT /
//! SIGTERM: stop accepting, let in-flight requests finish within a grace period,
//! then cancel what is left (the engine answers every open stream) and return.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::routes::router;
use crate::state::AppState;

/// How to serve.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Time in-flight requests get to finish after a shutdown signal.
    pub grace: Duration,
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
    state.ready.store(true, Ordering::Release);
    on_ready(addr);
    let engine = state.engine.clone();
    let watchdog = {
        let stop = stop.clone();
        tokio::spawn(async move {
            stop.cancelled().await;
            tokio::time::sleep(opts.grace).await;
            engine.shutdown();
        })
    };
    let app = router(Arc::clone(&state));
    let shutdown = signal(stop.clone());
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    state.ready.store(false, Ordering::Release);
    state.engine.shutdown();
    watchdog.abort();
    Ok(())
}
