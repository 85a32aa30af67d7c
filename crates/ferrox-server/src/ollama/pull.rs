//! `POST /api/pull`: fetches a catalog model or an `hf.co/...` file into the
//! model cache, verified, as Ollama's NDJSON lines: `pulling manifest`, the
//! download's progress (`total` and `completed` bytes of each file), then
//! `verifying sha256 digest`, `writing manifest` and `success`; one object
//! with `"stream": false`. A model pulled here goes to the cache, for
//! `ferrox serve -m NAME`; it is not served by this process unless its
//! `--models-dir` holds it.

use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use ferrox_hub::model_ref::Pullable;
use ferrox_hub::progress::Progress;
use futures_util::stream::{self, StreamExt};
use serde_json::json;
use tokio::sync::mpsc::UnboundedSender;

use super::OllamaError;
use super::models::{hub_error, named};
use crate::error::ApiError;
use crate::state::AppState;

/// A download's progress as Ollama's pull lines, sent as it goes: one at
/// each file's start and end, and one per hundredth of it between.
struct PullLines {
    lines: UnboundedSender<String>,
    label: String,
    total: u64,
    completed: u64,
    shown: u64,
}

impl PullLines {
    fn new(lines: UnboundedSender<String>) -> PullLines {
        PullLines {
            lines,
            label: String::new(),
            total: 0,
            completed: 0,
            shown: 0,
        }
    }

    fn send(&mut self) {
        self.shown = self.completed;
        let line = json!({
            "status": format!("pulling {}", self.label),
            "total": self.total,
            "completed": self.completed,
        });
        // A client that went away stops reading; the download still ends.
        let _ = self.lines.send(line.to_string() + "\n");
    }
}

impl Progress for PullLines {
    fn start(&mut self, label: &str, total: u64) {
        (self.label, self.total, self.completed) = (label.to_string(), total, 0);
        self.send();
    }

    fn advance(&mut self, bytes: u64) {
        self.completed += bytes;
        let step = (self.total / 100).max(1 << 20);
        if self.completed - self.shown >= step {
            self.send();
        }
    }

    fn done(&mut self) {
        self.total = self.total.max(self.completed);
        self.send();
    }
}

/// `POST /api/pull`.
pub(super) async fn pull(
    State(_st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let (name, n) = match named(body) {
        Ok(x) => x,
        Err(e) => return OllamaError(e).into_response(),
    };
    let target = match Pullable::parse(&name) {
        Ok(t) => t,
        Err(e) => return OllamaError(hub_error(&e)).into_response(),
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let fetched = tokio::task::spawn_blocking(move || target.fetch_with(&mut PullLines::new(tx)));
    let result = async move {
        match fetched.await {
            Ok(Ok(path)) => Ok(path),
            Ok(Err(e)) => Err(hub_error(&e)),
            Err(e) => Err(ApiError::internal(format!("the pull failed: {e}"))),
        }
    };
    if !n.stream.unwrap_or(true) {
        return match result.await {
            Ok(_) => Json(json!({"status": "success"})).into_response(),
            Err(e) => OllamaError(e).into_response(),
        };
    }
    let status = |s: &str| json!({ "status": s }).to_string() + "\n";
    let head = stream::iter([status("pulling manifest")]);
    // The progress lines end when the fetch drops its sender.
    let progress = stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|l| (l, rx)) });
    let rest = stream::once(async move {
        match result.await {
            Ok(_) => ["verifying sha256 digest", "writing manifest", "success"]
                .into_iter()
                .map(status)
                .collect(),
            Err(e) => vec![super::reply::error_line(&e)],
        }
    })
    .flat_map(stream::iter);
    let body = head
        .chain(progress)
        .chain(rest)
        .map(Ok::<_, std::convert::Infallible>);
    let mut r = Body::from_stream(body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_give_each_files_total_and_completed_bytes_a_hundred_times_at_most() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut p = PullLines::new(tx);
        let total = 200u64 << 20;
        p.start("model.gguf", total);
        for _ in 0..(total / 4096) {
            p.advance(4096);
        }
        p.done();
        drop(p);
        let mut lines = Vec::new();
        while let Ok(l) = rx.try_recv() {
            lines.push(serde_json::from_str::<serde_json::Value>(&l).unwrap());
        }
        assert!((100..=102).contains(&lines.len()), "{}", lines.len());
        assert_eq!(
            lines[0],
            json!({"status": "pulling model.gguf", "total": total, "completed": 0})
        );
        let last = lines.last().unwrap();
        assert_eq!(
            (last["total"].as_u64(), last["completed"].as_u64()),
            (Some(total), Some(total))
        );
        let done: Vec<u64> = lines
            .iter()
            .map(|l| l["completed"].as_u64().unwrap())
            .collect();
        assert!(done.windows(2).all(|w| w[0] <= w[1]), "{done:?}");
    }
}
