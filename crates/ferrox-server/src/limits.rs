//! The HTTP layer's limits: how long a client may take to send a request's
//! headers and body, how long a kept-alive connection may sit idle, how many
//! connections are served at once, how large a body may be, and how long one
//! request may run.
//!
//! * Headers: hyper's own `header_read_timeout`.
//! * Idle keep-alive: [`IdleIo`] ends a connection that has no request in
//!   flight and has read nothing for the idle timeout (a request in flight,
//!   streaming or not, never counts as idle).
//! * Body: [`read_body`] buffers every body under one deadline for the whole
//!   body (not per chunk, so a trickle cannot hold it open), and answers 413
//!   from a `Content-Length` over `BODY_READ_LIMIT` before reading anything
//!   (bodies between the 4 MiB limit and that are read, then refused, so a
//!   client still sending gets the 413 rather than a reset). It is the one
//!   place the body size is policed; handlers get a body already within it.
//! * Connections: a semaphore in the accept loop (`serve`); beyond it new
//!   connections wait in the kernel's backlog.
//! * Wall clock: the completion handlers end a request at its deadline
//!   (`within_request_timeout`, and the streams' own deadline), answering
//!   a 504 `request_timeout`.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::error::ApiError;
use crate::routes::{BODY_LIMIT, BODY_READ_LIMIT};
use crate::state::AppState;

/// The limits (`ferrox serve` flags and variables set them).
#[derive(Clone, Debug)]
pub struct Limits {
    /// Time from the start of a request to the end of its headers.
    pub header_timeout: Duration,
    /// Time for a whole request body to arrive.
    pub body_timeout: Duration,
    /// Time a kept-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// Wall-clock time one completion request may run (`None`: no limit).
    pub request_timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
            request_timeout: Some(Duration::from_secs(600)),
        }
    }
}

/// One connection's requests in flight and when the last one ended.
#[derive(Debug)]
pub struct Activity {
    in_flight: AtomicUsize,
    quiet_since: Mutex<Instant>,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            quiet_since: Mutex::new(Instant::now()),
        })
    }

    fn touch(&self) {
        *self.quiet_since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// Requests in flight on the connection.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    fn quiet_since(&self) -> Instant {
        *self.quiet_since.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks a request in flight until the returned guard is dropped (with the
    /// response body, so a stream counts until its last byte).
    pub fn enter(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(Arc::clone(self))
    }
}

/// A request in flight on a connection.
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that holds its request's [`InFlight`] until it is dropped.
pub struct Guarded {
    pub inner: Body,
    /// The connection's and the server's.
    pub guard: (InFlight, InFlight),
}

impl http_body::Body for Guarded {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A socket that fails its reads with `TimedOut` once its connection has had no
/// request in flight and read nothing for `idle`.
pub struct IdleIo<T> {
    io: T,
    activity: Arc<Activity>,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
}

impl<T> IdleIo<T> {
    pub fn new(io: T, activity: Arc<Activity>, idle: Duration) -> IdleIo<T> {
        let timer = Box::pin(tokio::time::sleep(idle));
        IdleIo {
            io,
            activity,
            idle,
            timer,
        }
    }

    /// Whether the connection has been idle for the whole timeout (arming the
    /// timer to wake this task when it will be).
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        if self.activity.in_flight.load(Ordering::Acquire) > 0 {
            return false;
        }
        let deadline = self.activity.quiet_since() + self.idle;
        if self.timer.deadline() != deadline {
            self.timer.as_mut().reset(deadline);
        }
        self.timer.as_mut().poll(cx).is_ready()
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    self.activity.touch();
                }
                Poll::Ready(r)
            }
            Poll::Pending if self.expired(cx) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "idle keep-alive timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

fn too_large(message: String) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "invalid_request_error",
        "request_too_large",
        message,
    )
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// Middleware: refuses a declared `Content-Length` over the limit before reading
/// anything, then reads the whole body under the body timeout. Refusals have the
/// shape of the route's API.
pub async fn read_body(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    match read_whole(&st, req).await {
        Ok(req) => next.run(req).await,
        Err(e) => e.response_for(&path),
    }
}

async fn read_whole(st: &AppState, req: Request) -> Result<Request, ApiError> {
    // Ollama's API reads JSON whatever the Content-Type (its examples use
    // `curl -d`, which says form data).
    if req.method() == axum::http::Method::POST && !crate::ollama::owns(req.uri().path()) {
        crate::json_body::check_content_type(req.headers())?;
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    // Up to BODY_READ_LIMIT the body is read (and refused after, by the handler)
    // so that a client still sending sees the 413 instead of a reset.
    if let Some(n) = declared
        && n > BODY_READ_LIMIT as u64
    {
        return Err(too_large(format!(
            "request body too large: Content-Length {n} bytes, the limit is {BODY_LIMIT} bytes"
        )));
    }
    let (parts, body) = req.into_parts();
    let limit = st.server.limits.body_timeout;
    match tokio::time::timeout(limit, axum::body::to_bytes(body, BODY_READ_LIMIT)).await {
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            "request_timeout",
            format!(
                "the request body did not arrive within {} s (--body-timeout / FERROX_BODY_TIMEOUT)",
                limit.as_secs_f64()
            ),
        )),
        Ok(Err(e)) if is_length_limit(&e) => Err(too_large(format!(
            "request body too large: over {BODY_READ_LIMIT} bytes"
        ))),
        Ok(Err(e)) => Err(crate::invalid::Invalid::Unreadable {
            detail: e.to_string(),
        }
        .into()),
        Ok(Ok(bytes)) if bytes.len() > BODY_LIMIT => Err(too_large(format!(
            "request body too large: {} bytes, the limit is {BODY_LIMIT} bytes",
            bytes.len()
        ))),
        Ok(Ok(bytes)) => Ok(Request::from_parts(parts, Body::from(bytes))),
    }
}

/// The code of a request cancelled by `--request-timeout`.
pub const REQUEST_TIMEOUT: &str = "request_timeout";

/// 504 `request_timeout`: the request ran past the server's wall-clock limit.
pub(crate) fn request_timeout(limit: Duration) -> ApiError {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        "server_error",
        REQUEST_TIMEOUT,
        format!(
            "the request ran longer than the server's limit of {} s (--request-timeout / FERROX_REQUEST_TIMEOUT) and was cancelled",
            limit.as_secs_f64()
        ),
    )
}

/// `answer` (a whole, unstreamed response) within the request timeout, or the
/// limit it ran past: then `answer` is dropped, which drops its request
/// streams and so cancels them.
pub(crate) async fn within_request_timeout<T>(
    limit: Option<Duration>,
    answer: impl std::future::Future<Output = T>,
) -> Result<T, Duration> {
    match limit {
        None => Ok(answer.await),
        Some(l) => tokio::time::timeout(l, answer).await.map_err(|_| l),
    }
}

/// Sleeps out a stream's request deadline (forever without one), then marks
/// the stream timed out.
pub(crate) async fn deadline(
    limit: Option<Duration>,
    timed_out: Arc<std::sync::atomic::AtomicBool>,
) {
    match limit {
        Some(l) => tokio::time::sleep(l).await,
        None => std::future::pending().await,
    }
    timed_out.store(true, Ordering::Release);
}
