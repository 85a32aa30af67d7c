//! `POST /v1/responses`: OpenAI's Responses API over the generation core.
//! The answer is a `response` object whose `output` holds, in order, the
//! reasoning of a model that thinks, the message (`output_text`), and the
//! function calls; a reply cut by `max_output_tokens` is `incomplete`.
//! Streamed, it follows the documented event sequence: `response.created`,
//! `response.in_progress`, then per item `response.output_item.added`, its
//! content (`response.content_part.added`, `response.output_text.delta`...,
//! `response.output_text.done`, `response.content_part.done`; reasoning as
//! `response.reasoning_text.delta` / `.done`; a call's arguments as
//! `response.function_call_arguments.delta` / `.done`),
//! `response.output_item.done`, and last `response.completed` (or
//! `response.incomplete`); every event carries its `sequence_number`. A
//! failure after the start is an `error` event, the last.
//!
//! Nothing is stored: `previous_response_id` is refused, and a conversation
//! goes whole in `input`.

mod request;
mod stream;

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use ferrox_engine::{FinishReason, Usage};
use ferrox_text::tools::{Tool, ToolCall};
use serde::Serialize;
use serde_json::{Value, json};

use crate::answer::{self, Shape, call_ids};
use crate::error::ApiError;
use crate::generation;
use crate::json_body::json_body;
use crate::request_log::{RequestLog, Route, not_a_refusal, unique_id};
use crate::state::AppState;
use request::{Echo, ToolChoiceEcho};

/// The response object.
#[derive(Serialize, Clone)]
struct ResponseObject {
    id: String,
    object: &'static str,
    created_at: u64,
    status: &'static str,
    model: String,
    output: Vec<Item>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<UsageOut>,
    instructions: Option<String>,
    max_output_tokens: Option<usize>,
    temperature: f32,
    top_p: f32,
    tools: Vec<ToolOut>,
    tool_choice: Value,
    parallel_tool_calls: bool,
    text: Value,
    error: Option<Value>,
    incomplete_details: Option<Value>,
    metadata: Value,
    store: bool,
}

#[derive(Serialize, Clone)]
struct ToolOut {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    description: Option<String>,
    parameters: Value,
    strict: bool,
}

/// An output item.
#[derive(Serialize, Clone)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Item {
    Reasoning {
        id: String,
        summary: Vec<Value>,
        content: Vec<TextPart>,
    },
    Message {
        id: String,
        status: &'static str,
        role: &'static str,
        content: Vec<TextPart>,
    },
    FunctionCall {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
        status: &'static str,
    },
}

/// A text part of an item's content.
#[derive(Serialize, Clone)]
#[serde(tag = "type", rename_all = "snake_case")]
enum TextPart {
    OutputText {
        text: String,
        annotations: Vec<Value>,
        logprobs: Vec<Value>,
    },
    ReasoningText {
        text: String,
    },
}

impl TextPart {
    fn output(text: String) -> TextPart {
        TextPart::OutputText {
            text,
            annotations: Vec::new(),
            logprobs: Vec::new(),
        }
    }
}

#[derive(Serialize, Clone, Copy)]
struct UsageOut {
    input_tokens: usize,
    input_tokens_details: CachedOut,
    output_tokens: usize,
    output_tokens_details: ReasoningOut,
    total_tokens: usize,
}

#[derive(Serialize, Clone, Copy)]
struct CachedOut {
    cached_tokens: usize,
}

#[derive(Serialize, Clone, Copy)]
struct ReasoningOut {
    reasoning_tokens: usize,
}

impl From<&Usage> for UsageOut {
    fn from(u: &Usage) -> UsageOut {
        UsageOut {
            input_tokens: u.prompt_tokens,
            input_tokens_details: CachedOut {
                cached_tokens: u.cached_tokens,
            },
            output_tokens: u.completion_tokens,
            output_tokens_details: ReasoningOut {
                reasoning_tokens: 0,
            },
            total_tokens: u.prompt_tokens + u.completion_tokens,
        }
    }
}

/// What every object of one response shares: its id and the request's
/// settings.
struct Frame {
    id: String,
    created_at: u64,
    model: String,
    echo: Echo,
}

impl Frame {
    /// The response object with `output`, in `status`.
    fn object(
        &self,
        status: &'static str,
        output: Vec<Item>,
        usage: Option<&Usage>,
    ) -> ResponseObject {
        let e = &self.echo;
        ResponseObject {
            id: self.id.clone(),
            object: "response",
            created_at: self.created_at,
            status,
            model: self.model.clone(),
            output,
            usage: usage.map(UsageOut::from),
            instructions: e.instructions.clone(),
            max_output_tokens: e.max_output_tokens,
            temperature: e.temperature,
            top_p: e.top_p,
            tools: e.tools.iter().map(tool_out).collect(),
            tool_choice: match &e.tool_choice {
                ToolChoiceEcho::Auto => json!("auto"),
                ToolChoiceEcho::None => json!("none"),
                ToolChoiceEcho::Required => json!("required"),
                ToolChoiceEcho::Function(name) => json!({"type": "function", "name": name}),
            },
            parallel_tool_calls: e.parallel_tool_calls,
            text: json!({ "format": e.text_format }),
            error: None,
            incomplete_details: (status == "incomplete")
                .then(|| json!({"reason": "max_output_tokens"})),
            metadata: json!({}),
            store: false,
        }
    }

    /// An item id of `kind` (`msg`, `rs`, `fc`), the `n`-th of the response.
    fn item_id(&self, kind: &str, n: usize) -> String {
        format!("{kind}_{}_{n}", self.id.trim_start_matches("resp_"))
    }
}

fn tool_out(t: &Tool) -> ToolOut {
    ToolOut {
        kind: "function",
        name: t.name.clone(),
        description: t.description.clone(),
        parameters: t.parameters.clone(),
        strict: false,
    }
}

fn function_call(frame: &Frame, n: usize, c: &ToolCall, status: &'static str) -> Item {
    Item::FunctionCall {
        id: frame.item_id("fc", n),
        call_id: c.id.clone(),
        name: c.name.clone(),
        arguments: if status == "in_progress" {
            String::new()
        } else {
            c.arguments.to_string()
        },
        status,
    }
}

/// `completed`, or `incomplete` for an answer cut by the token limit.
fn status_of(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Length => "incomplete",
        _ => "completed",
    }
}

/// What a `/v1/responses` body asks the engine for (for counting its input).
pub(crate) fn generation_of(body: &Value) -> Result<generation::Generation, ApiError> {
    Ok(request::parse(body)?.generation)
}

/// `POST /v1/responses`.
pub async fn responses(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let answer = handle(Arc::clone(&st), body).await;
    st.respond(answer, IntoResponse::into_response)
}

async fn handle(
    st: Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    st.accepting()?;
    let valid = request::parse(&json_body(body)?)?;
    let tools = valid.generation.tools.as_ref().map(|_| st.tool_format());
    let prepared = generation::prepare(&st, valid.generation).await?;
    let shape = Shape {
        tools,
        thinking: st.thinking_start(&prepared.prompts[0]),
    };
    let prompt_text = RequestLog::prompt_text(&st, &prepared.prompts);
    let started = Instant::now();
    let mut submitted = prepared.submit(&st)?;
    let (engine_stream, n) = (submitted.streams.remove(0), submitted.prompt_lens[0]);
    let id = unique_id("resp_", engine_stream.id());
    let log = RequestLog::new(
        &st,
        Route::Responses,
        &id,
        valid.stream,
        started,
        &[n],
        prompt_text,
    );
    let frame = Frame {
        id,
        created_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: st.model_id.clone(),
        echo: valid.echo,
    };
    if valid.stream {
        return Ok(stream::sse(st, frame, shape, engine_stream, log));
    }
    Ok(whole(st, frame, shape, engine_stream, log).await)
}

/// The whole response as one object.
async fn whole(
    st: Arc<AppState>,
    frame: Frame,
    shape: Shape,
    engine_stream: ferrox_engine::RequestStream,
    mut log: RequestLog,
) -> Response {
    let mut ids = shape
        .tools
        .map(call_ids)
        .unwrap_or_else(|| Box::new(String::new));
    let answers = answer::collect(&st, vec![engine_stream], &mut log, shape, &mut ids).await;
    let a = match answers {
        Ok(mut a) => a.remove(0),
        Err(e) => return not_a_refusal(e.into_response()),
    };
    let Some(reason) = a.finish else {
        let e = ApiError::internal("the request ended without an answer");
        return not_a_refusal(e.into_response());
    };
    let mut output = Vec::new();
    if let Some(r) = a.reasoning {
        output.push(Item::Reasoning {
            id: frame.item_id("rs", 0),
            summary: Vec::new(),
            content: vec![TextPart::ReasoningText { text: r }],
        });
    }
    if !a.text.is_empty() || a.calls.is_empty() {
        output.push(Item::Message {
            id: frame.item_id("msg", 0),
            status: status_of(reason),
            role: "assistant",
            content: vec![TextPart::output(a.text)],
        });
    }
    for (n, c) in a.calls.iter().enumerate() {
        output.push(function_call(&frame, n, c, "completed"));
    }
    axum::Json(frame.object(status_of(reason), output, Some(&a.usage))).into_response()
}
