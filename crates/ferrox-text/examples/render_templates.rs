//! Renders chat templates the way ferrox does, for a comparison with Python's
//! jinja2 (`tests/templates/test_jinja2.py` drives it). Reads one JSON case per
//! line on stdin:
//!
//! `{"template": PATH, "messages": [...], "tools": [...], "vars": {...},
//!   "add_generation_prompt": true, "bos": "<s>", "eos": "</s>", "time": SECS}`
//!
//! and writes one JSON line per case: the exact variables the template saw
//! (`context`) and either `rendered` or `error` (a failure to compile or render,
//! as ferrox reports it).
//!
//! `cargo run -p ferrox-text --example render_templates < cases.jsonl`

use std::io::{BufRead, Write};

use ferrox_text::TextError;
use ferrox_text::chat::{ChatMessage, ChatTemplate, TemplateVars, template_context};
use ferrox_text::tools::Tool;
use serde::Deserialize;

/// Why a case was not rendered.
#[derive(Debug, thiserror::Error)]
enum RenderError {
    #[error("{path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Template(#[from] TextError),
}

#[derive(Deserialize)]
struct Case {
    template: std::path::PathBuf,
    messages: Vec<ChatMessage>,
    #[serde(default)]
    tools: Vec<ToolIn>,
    #[serde(default)]
    vars: TemplateVars,
    add_generation_prompt: bool,
    bos: String,
    eos: String,
    time: i64,
}

/// A tool in OpenAI's shape.
#[derive(Deserialize)]
struct ToolIn {
    function: FunctionIn,
}

#[derive(Deserialize)]
struct FunctionIn {
    name: String,
    description: Option<String>,
    parameters: serde_json::Value,
}

fn render(case: &Case) -> (serde_json::Value, Result<String, RenderError>) {
    let tools: Vec<Tool> = case
        .tools
        .iter()
        .map(|t| Tool {
            name: t.function.name.clone(),
            description: t.function.description.clone(),
            parameters: t.function.parameters.clone(),
        })
        .collect();
    let ctx = template_context(
        &case.messages,
        Some(&tools[..]).filter(|t| !t.is_empty()),
        &case.vars,
        &case.bos,
        &case.eos,
        case.add_generation_prompt,
    );
    let rendered = std::fs::read_to_string(&case.template)
        .map_err(|source| RenderError::Read {
            path: case.template.clone(),
            source,
        })
        .and_then(|source| {
            let t = ChatTemplate::jinja_at(&source, &case.bos, &case.eos, Some(case.time))?;
            Ok(t.render_context(&ctx)?)
        });
    (ctx, rendered)
}

fn main() {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("stdin");
        if line.trim().is_empty() {
            continue;
        }
        let case: Case = serde_json::from_str(&line).expect("a case line");
        let (ctx, rendered) = render(&case);
        let answer = match rendered {
            Ok(text) => serde_json::json!({"context": ctx, "rendered": text}),
            Err(e) => serde_json::json!({"context": ctx, "error": e.to_string()}),
        };
        writeln!(out, "{answer}").expect("stdout");
    }
}
