//! The Responses API's event stream: the engine's events, taken apart as they
//! come (thinking split off, calls held back), become the documented events,
//! each item opened when its first text arrives and closed before the next.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use ferrox_engine::{Event, FinishReason, RequestStream, Usage};
use ferrox_text::tools::{ToolCall, ToolFormat};
use futures_util::stream::{self, StreamExt};
use serde_json::{Value, json};

use super::{Frame, Item, TextPart, function_call, status_of};
use crate::answer::{Pieces, Shape, Splitter, call_ids};
use crate::error::ApiError;
use crate::limits::{deadline, request_timeout};
use crate::request_log::RequestLog;
use crate::state::AppState;

/// The item being written.
enum Open {
    None,
    Reasoning { index: usize, text: String },
    Message { index: usize, text: String },
}

/// One response's stream state.
struct Events {
    frame: Frame,
    seq: u64,
    split: Splitter,
    tools: Option<ToolFormat>,
    /// The items closed so far.
    output: Vec<Item>,
    open: Open,
}

impl Events {
    /// An event named `name` with `data` (its `type` and `sequence_number`
    /// added).
    fn event(&mut self, name: &'static str, mut data: Value) -> SseEvent {
        data["type"] = json!(name);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        SseEvent::default().event(name).data(data.to_string())
    }

    fn start(&mut self) -> Vec<SseEvent> {
        let object = self.frame.object("in_progress", Vec::new(), None);
        let created = self.event("response.created", json!({ "response": object }));
        let object = self.frame.object("in_progress", Vec::new(), None);
        let progress = self.event("response.in_progress", json!({ "response": object }));
        vec![created, progress]
    }

    fn on_event(&mut self, e: Event) -> Vec<SseEvent> {
        match e {
            Event::Admitted | Event::PromptLogprobs(_) | Event::Embedding(_) => Vec::new(),
            Event::Token { text, .. } => {
                let p = self.split.push(&text);
                self.pieces(p)
            }
            Event::Finished {
                reason,
                usage,
                text,
            } => self.finish(reason, &usage, &text),
            Event::Failed(f) => vec![self.error(&ApiError::from_failure(&f))],
        }
    }

    fn error(&mut self, e: &ApiError) -> SseEvent {
        self.event(
            "error",
            json!({"message": e.message.as_ref(), "code": e.code, "param": null}),
        )
    }

    fn pieces(&mut self, p: Pieces) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if !p.reasoning.is_empty() {
            out.extend(self.reasoning(&p.reasoning));
        }
        if !p.text.is_empty() {
            out.extend(self.text(&p.text));
        }
        out
    }

    fn reasoning(&mut self, delta: &str) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if !matches!(self.open, Open::Reasoning { .. }) {
            out.extend(self.close("completed"));
            let index = self.output.len();
            let item = Item::Reasoning {
                id: self.frame.item_id("rs", index),
                summary: Vec::new(),
                content: Vec::new(),
            };
            out.push(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ));
            self.open = Open::Reasoning {
                index,
                text: String::new(),
            };
        }
        let Open::Reasoning { index, text } = &mut self.open else {
            unreachable!("opened above")
        };
        text.push_str(delta);
        let index = *index;
        let id = self.frame.item_id("rs", index);
        out.push(self.event(
            "response.reasoning_text.delta",
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta}),
        ));
        out
    }

    fn text(&mut self, delta: &str) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if !matches!(self.open, Open::Message { .. }) {
            out.extend(self.open_message());
        }
        let Open::Message { index, text } = &mut self.open else {
            unreachable!("opened above")
        };
        text.push_str(delta);
        let index = *index;
        let id = self.frame.item_id("msg", index);
        out.push(self.event(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta, "logprobs": []}),
        ));
        out
    }

    fn open_message(&mut self) -> Vec<SseEvent> {
        let mut out = self.close("completed");
        let index = self.output.len();
        let id = self.frame.item_id("msg", index);
        let item = Item::Message {
            id: id.clone(),
            status: "in_progress",
            role: "assistant",
            content: Vec::new(),
        };
        out.push(self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        ));
        out.push(self.event(
            "response.content_part.added",
            json!({"item_id": id, "output_index": index, "content_index": 0,
                   "part": TextPart::output(String::new())}),
        ));
        self.open = Open::Message {
            index,
            text: String::new(),
        };
        out
    }

    /// Closes the open item, a message in `status`.
    fn close(&mut self, status: &'static str) -> Vec<SseEvent> {
        match std::mem::replace(&mut self.open, Open::None) {
            Open::None => Vec::new(),
            Open::Reasoning { index, text } => {
                let id = self.frame.item_id("rs", index);
                let done = self.event(
                    "response.reasoning_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
                );
                let item = Item::Reasoning {
                    id,
                    summary: Vec::new(),
                    content: vec![TextPart::ReasoningText { text }],
                };
                vec![done, self.item_done(index, item)]
            }
            Open::Message { index, text } => {
                let id = self.frame.item_id("msg", index);
                let text_done = self.event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}),
                );
                let part = TextPart::output(text);
                let part_done = self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                );
                let item = Item::Message {
                    id,
                    status,
                    role: "assistant",
                    content: vec![part],
                };
                vec![text_done, part_done, self.item_done(index, item)]
            }
        }
    }

    fn item_done(&mut self, index: usize, item: Item) -> SseEvent {
        let e = self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        self.output.push(item);
        e
    }

    fn finish(&mut self, reason: FinishReason, usage: &Usage, last: &str) -> Vec<SseEvent> {
        let mut ids = self
            .tools
            .map(call_ids)
            .unwrap_or_else(|| Box::new(String::new));
        let (p, calls) = self.split.finish(last, &mut ids);
        let mut out = self.pieces(p);
        if calls.is_empty()
            && !self
                .output
                .iter()
                .any(|i| matches!(i, Item::Message { .. }))
            && !matches!(self.open, Open::Message { .. })
        {
            out.extend(self.open_message());
        }
        let status = status_of(reason);
        out.extend(self.close(status));
        for c in &calls {
            out.extend(self.call(c));
        }
        if reason == FinishReason::Cancelled {
            return out;
        }
        let name = match status {
            "incomplete" => "response.incomplete",
            _ => "response.completed",
        };
        let object = self.frame.object(status, self.output.clone(), Some(usage));
        out.push(self.event(name, json!({ "response": object })));
        out
    }

    /// A function call's events: added, its arguments in pieces, done.
    fn call(&mut self, c: &ToolCall) -> Vec<SseEvent> {
        let index = self.output.len();
        let n = self
            .output
            .iter()
            .filter(|i| matches!(i, Item::FunctionCall { .. }))
            .count();
        let item = function_call(&self.frame, n, c, "in_progress");
        let id = self.frame.item_id("fc", n);
        let mut out = vec![self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        )];
        for piece in c.argument_pieces() {
            out.push(self.event(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": index, "delta": piece}),
            ));
        }
        out.push(self.event(
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "arguments": c.arguments.to_string()}),
        ));
        let done = function_call(&self.frame, n, c, "completed");
        out.push(self.item_done(index, done));
        out
    }
}

/// The SSE response.
pub(super) fn sse(
    st: Arc<AppState>,
    frame: Frame,
    shape: Shape,
    engine_stream: RequestStream,
    log: RequestLog,
) -> Response {
    let mut events = Events {
        frame,
        seq: 0,
        split: Splitter::new(shape),
        tools: shape.tools,
        output: Vec::new(),
        open: Open::None,
    };
    let head = events.start();
    let limit = st.server.limits.request_timeout;
    let timed_out = Arc::new(AtomicBool::new(false));
    let timed_out_tail = Arc::clone(&timed_out);
    let log = log.shared();
    let log_tail = log.clone();
    let events = Arc::new(std::sync::Mutex::new(events));
    let events_tail = Arc::clone(&events);
    let body = stream::unfold(engine_stream, |mut s| async move {
        let e = s.recv().await?;
        Some((e, s))
    })
    .take_until(deadline(limit, timed_out))
    .flat_map(move |e| {
        log.on_event(0, &e);
        let out = events.lock().unwrap_or_else(|p| p.into_inner()).on_event(e);
        stream::iter(out)
    });
    let tail = stream::once(async move {
        match limit {
            Some(l) if timed_out_tail.load(Ordering::Acquire) => {
                log_tail.timed_out();
                let mut ev = events_tail.lock().unwrap_or_else(|p| p.into_inner());
                Some(ev.error(&request_timeout(l)))
            }
            _ => None,
        }
    })
    .filter_map(std::future::ready);
    let all = stream::iter(head)
        .chain(body)
        .chain(tail)
        .map(Ok::<_, Infallible>);
    Sse::new(all)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(5)))
        .into_response()
}
