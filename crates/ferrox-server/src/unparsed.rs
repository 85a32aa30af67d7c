//! Requests refused before they are requests: hyper answers a malformed
//! request line or header (400), headers over its buffer (431), a URI too long
//! (414) or an unknown HTTP version (505) itself, before any handler runs, with
//! an empty body. hyper 1 has no hook for that body, so [`UnparsedIo`] sits
//! between hyper and the socket and replaces exactly those responses with the
//! same status and headers plus an OpenAI-shaped JSON error body, counts them
//! as refusals and logs them.
//!
//! What is replaced: a response head written on its own that has a 4xx or 5xx
//! status, `content-length: 0` and no `content-type`. Every response the
//! router makes carries a body or a content type, and hyper closes the
//! connection after its own refusals, so nothing is written after one.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::ApiError;
use crate::state::{AppState, Server};

/// A connection's socket whose hyper-made refusals get a JSON body.
pub struct UnparsedIo<T> {
    io: T,
    server: Arc<Server>,
    /// The served model, whose metrics count the refusals (none when a server
    /// serves several).
    model: Option<Arc<AppState>>,
    /// A rewritten response not yet fully written, and how much of it went out.
    pending: Vec<u8>,
    sent: usize,
}

impl<T> UnparsedIo<T> {
    pub fn new(io: T, server: Arc<Server>, model: Option<Arc<AppState>>) -> UnparsedIo<T> {
        UnparsedIo {
            io,
            server,
            model,
            pending: Vec::new(),
            sent: 0,
        }
    }
}

/// The error hyper's bodyless `status` stands for.
fn refusal(status: StatusCode) -> ApiError {
    let (code, message) = match status.as_u16() {
        400 => (
            "bad_request",
            "the request could not be read as HTTP/1.1: a malformed request line or header",
        ),
        414 => (
            "uri_too_long",
            "the request URI is longer than the server reads",
        ),
        431 => (
            "headers_too_large",
            "the request headers are larger than the server reads",
        ),
        505 => (
            "http_version_not_supported",
            "the request's HTTP version is not supported (HTTP/1.0 and 1.1 are)",
        ),
        _ => ("bad_request", "the request could not be read"),
    };
    ApiError::new(status, "invalid_request_error", code, message)
}

/// `buf` rewritten with a JSON body, when it is one of hyper's own refusals.
pub(crate) fn rewrite(buf: &[u8]) -> Option<(ApiError, Vec<u8>)> {
    let head = std::str::from_utf8(buf).ok()?;
    let head = head.strip_suffix("\r\n\r\n")?;
    if head.contains("\r\n\r\n") {
        return None;
    }
    let (status_line, headers) = head.split_once("\r\n")?;
    let code: u16 = status_line
        .strip_prefix("HTTP/1.1 ")?
        .get(..3)?
        .parse()
        .ok()?;
    let status = StatusCode::from_u16(code).ok()?;
    let lines: Vec<&str> = headers.split("\r\n").collect();
    let has = |name: &str| {
        lines
            .iter()
            .any(|l| l.to_ascii_lowercase().starts_with(name))
    };
    if code < 400 || has("content-type:") || !has("content-length: 0") {
        return None;
    }
    let err = refusal(status);
    let body = err.body();
    let mut out = format!("{status_line}\r\ncontent-type: application/json\r\n");
    for l in lines
        .iter()
        .filter(|l| !l.to_ascii_lowercase().starts_with("content-length:"))
    {
        out.push_str(l);
        out.push_str("\r\n");
    }
    out.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    Some((err, out.into_bytes()))
}

impl<T: AsyncWrite + Unpin> UnparsedIo<T> {
    /// Writes what is pending; ready once nothing is.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while self.sent < self.pending.len() {
            match Pin::new(&mut self.io).poll_write(cx, &self.pending[self.sent..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => self.sent += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for UnparsedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for UnparsedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        if let Poll::Ready(Err(e)) = this.drain(cx) {
            return Poll::Ready(Err(e));
        }
        if this.sent < this.pending.len() {
            return Poll::Pending;
        }
        if let Some((err, bytes)) = rewrite(buf) {
            crate::request_log::unparsed_refusal(&this.server, this.model.as_deref(), &err);
            this.pending = bytes;
            this.sent = 0;
            // The rewritten bytes stand for all of `buf`; flush writes the rest.
            let _ = this.drain(cx);
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.io).poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.io).poll_shutdown(cx),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bodyless_refusals_are_rewritten() {
        let hyper_400 = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 07:56:10 GMT\r\n\r\n";
        let (err, out) = rewrite(hyper_400).unwrap();
        assert_eq!(err.code, "bad_request");
        let out = String::from_utf8(out).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"));
        assert!(head.contains("connection: close\r\n") && head.contains("date: "));
        assert!(head.ends_with(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        let (err, _) = rewrite(b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n").unwrap();
        assert_eq!(err.code, "headers_too_large");
        for kept in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 12\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}",
            b"data: HTTP/1.1 400 x\r\ncontent-length: 0\r\n\r\n",
            b"{\"a\": 1}",
        ] {
            assert!(rewrite(kept).is_none(), "{}", String::from_utf8_lossy(kept));
        }
    }
}
