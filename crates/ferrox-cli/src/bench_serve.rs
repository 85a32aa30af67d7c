//! `ferrox bench-serve`: a load generator for any OpenAI-compatible server (ferrox,
//! llama-server, vLLM).
//!
//! * `--scenario random` (the default): `--concurrency` clients each send streaming
//!   `/v1/completions` requests with distinct prompts back to back until
//!   `--requests` have been sent; the report gives time to first token,
//!   inter-token latency and end-to-end latency percentiles and the aggregate
//!   generated tokens per second.
//! * `--scenario chat`: multi-turn conversations over a shared system prompt
//!   ([`crate::bench_chat`]).
//! * `--scenario embed`: `/v1/embeddings` requests ([`crate::bench_embed`]).

use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;

/// Flags of `ferrox bench-serve`.
#[derive(Args, Debug, Clone)]
pub struct BenchServeArgs {
    /// Base URL of the server (e.g. http://127.0.0.1:8080).
    #[arg(long)]
    pub url: String,
    /// Clients sending at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Requests in all.
    #[arg(long, default_value_t = 64)]
    pub requests: usize,
    /// Tokens to generate per request.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Prompt of every request (a number is appended so prompts differ).
    #[arg(
        long,
        default_value = "Write a short story about a lighthouse keeper. Story number"
    )]
    pub prompt: String,
    /// Model name to send.
    #[arg(long, default_value = "default")]
    pub model: String,
    /// Bearer token, if the server wants one.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Load shape: distinct prompts, or multi-turn chats over a shared system prompt.
    #[arg(long, value_enum, default_value_t = Scenario::Random)]
    pub scenario: Scenario,
    /// Chat scenario: turns per conversation (`--requests` is then clients x turns).
    #[arg(long, default_value_t = 4)]
    pub turns: usize,
    /// Chat scenario: rules in the shared system prompt (about 16 tokens each).
    #[arg(long, default_value_t = 100)]
    pub system_rules: usize,
    /// Random scenario: constrain every answer to this JSON schema (given as
    /// JSON), sent as OpenAI's `response_format` json_schema, to measure what
    /// structured output costs. A schema that can end early ends requests early.
    #[arg(long, value_name = "SCHEMA", value_parser = parse_schema)]
    pub json_schema: Option<serde_json::Value>,
    /// Embed scenario: inputs per request.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Embed scenario: words per input (about 1.3 tokens each).
    #[arg(long, default_value_t = 96)]
    pub words: usize,
}

fn parse_schema(s: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(s).map_err(|e| format!("not a JSON schema: {e}"))
}

/// The load shape of `bench-serve`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Distinct completion prompts, back to back.
    Random,
    /// Multi-turn chats whose history grows, over a system prompt all clients share.
    Chat,
    /// Embedding requests (`/v1/embeddings`) of distinct passages.
    Embed,
}

/// What one streamed request measured.
#[derive(Default)]
pub struct Sample {
    pub ttft: Option<f64>,
    pub gaps: Vec<f64>,
    pub e2e: f64,
    /// Chunks that carried text.
    pub tokens: usize,
    /// The text generated.
    pub text: String,
    /// Prompt tokens and cached prompt tokens, as the server's usage reported them.
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub error: Option<String>,
}

fn one_request(agent: &ureq::Agent, a: &BenchServeArgs, i: usize) -> Sample {
    let mut body = serde_json::json!({
        "model": a.model, "prompt": format!("{} {i}:", a.prompt), "max_tokens": a.max_tokens,
        "temperature": 0.0, "stream": true, "ignore_eos": true,
    });
    if let Some(schema) = &a.json_schema {
        body["response_format"] = serde_json::json!({
            "type": "json_schema", "json_schema": {"name": "bench", "schema": schema},
        });
    }
    stream(agent, a, "/v1/completions", &body)
}

/// The text a completion or chat chunk carries.
fn chunk_text(v: &serde_json::Value) -> Option<&str> {
    let c = v["choices"].as_array()?.first()?;
    c["text"]
        .as_str()
        .or_else(|| c["delta"]["content"].as_str())
}

/// Sends `body` to `path` as a streaming request and measures it.
pub fn stream(
    agent: &ureq::Agent,
    a: &BenchServeArgs,
    path: &str,
    body: &serde_json::Value,
) -> Sample {
    let t0 = Instant::now();
    let mut s = Sample::default();
    let mut req = agent
        .post(format!("{}{path}", a.url.trim_end_matches('/')))
        .header("Content-Type", "application/json");
    if let Some(k) = &a.api_key {
        req = req.header("Authorization", &format!("Bearer {k}"));
    }
    let mut resp = match req.send(body.to_string()) {
        Ok(r) => r,
        Err(e) => {
            s.error = Some(e.to_string());
            return s;
        }
    };
    let reader = BufReader::new(resp.body_mut().with_config().limit(u64::MAX).reader());
    let mut last: Option<Instant> = None;
    for line in reader.lines() {
        let Ok(line) = line else { break };
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data.trim() == "[DONE]" {
            break;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(data) else {
            continue;
        };
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            let n = |x: &serde_json::Value| x.as_u64().unwrap_or(0) as usize;
            s.prompt_tokens = n(&u["prompt_tokens"]);
            s.cached_tokens = n(&u["prompt_tokens_details"]["cached_tokens"]);
        }
        // llama-server reports its cache hits as timings.cache_n.
        if let Some(c) = v["timings"]["cache_n"].as_u64() {
            s.cached_tokens = c as usize;
        }
        let text = chunk_text(&v).unwrap_or("");
        if !text.is_empty() {
            s.text.push_str(text);
            let now = Instant::now();
            match last {
                None => s.ttft = Some((now - t0).as_secs_f64()),
                Some(l) => s.gaps.push((now - l).as_secs_f64()),
            }
            last = Some(now);
            s.tokens += 1;
        }
    }
    s.e2e = t0.elapsed().as_secs_f64();
    s
}

/// The `p` quantile of `v` (NaN when empty).
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Runs `--concurrency` clients, each calling `one(agent, args, i)` for the
/// next request index `i` until `--requests` have been sent; returns every
/// result and the wall time in seconds.
pub fn run_clients<T: Send + 'static>(
    a: &BenchServeArgs,
    agent: &ureq::Agent,
    one: fn(&ureq::Agent, &BenchServeArgs, usize) -> T,
) -> Result<(Vec<T>, f64)> {
    let next = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let handles: Vec<_> = (0..a.concurrency)
        .map(|_| {
            let (agent, a, next) = (agent.clone(), a.clone(), Arc::clone(&next));
            std::thread::spawn(move || {
                let mut out = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= a.requests {
                        return out;
                    }
                    out.push(one(&agent, &a, i));
                }
            })
        })
        .collect();
    let mut results = Vec::new();
    for h in handles {
        results.extend(
            h.join()
                .map_err(|_| anyhow::anyhow!("a client thread panicked"))?,
        );
    }
    Ok((results, t0.elapsed().as_secs_f64()))
}

/// Runs the load and prints the report.
pub fn bench_serve(a: BenchServeArgs) -> Result<()> {
    anyhow::ensure!(
        a.concurrency >= 1 && a.requests >= 1,
        "--concurrency and --requests must be at least 1"
    );
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(600)))
        .build()
        .into();
    if a.scenario == Scenario::Chat {
        anyhow::ensure!(a.turns >= 1, "--turns must be at least 1");
        return crate::bench_chat::bench_chat(&a, agent);
    }
    if a.scenario == Scenario::Embed {
        return crate::bench_embed::bench_embed(&a, agent);
    }
    let (samples, wall) = run_clients(&a, &agent, one_request)?;
    let errors: Vec<&String> = samples.iter().filter_map(|s| s.error.as_ref()).collect();
    let tokens: usize = samples.iter().map(|s| s.tokens).sum();
    let mut ttft: Vec<f64> = samples.iter().filter_map(|s| s.ttft).collect();
    let mut itl: Vec<f64> = samples
        .iter()
        .flat_map(|s| s.gaps.iter().copied())
        .collect();
    let mut e2e: Vec<f64> = samples
        .iter()
        .filter(|s| s.error.is_none())
        .map(|s| s.e2e)
        .collect();
    let report = serde_json::json!({
        "url": a.url, "concurrency": a.concurrency, "requests": a.requests, "errors": errors.len(),
        "wall_s": wall, "generated_tokens": tokens, "tokens_per_s": tokens as f64 / wall,
        "ttft_ms": {"p50": percentile(&mut ttft, 0.5) * 1e3, "p90": percentile(&mut ttft, 0.9) * 1e3, "p99": percentile(&mut ttft, 0.99) * 1e3},
        "itl_ms": {"p50": percentile(&mut itl, 0.5) * 1e3, "p90": percentile(&mut itl, 0.9) * 1e3, "p99": percentile(&mut itl, 0.99) * 1e3},
        "e2e_s": {"p50": percentile(&mut e2e, 0.5), "p90": percentile(&mut e2e, 0.9)},
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} requests x {} tokens, {} clients, {:.1} s: {:.1} generated tokens/s ({} errors)",
            a.requests,
            a.max_tokens,
            a.concurrency,
            wall,
            tokens as f64 / wall,
            errors.len()
        );
        for (name, key) in [
            ("time to first token (ms)", "ttft_ms"),
            ("inter-token latency (ms)", "itl_ms"),
        ] {
            let r = &report[key];
            println!(
                "{name:<26} p50 {:>8.1}  p90 {:>8.1}  p99 {:>8.1}",
                r["p50"].as_f64().unwrap_or(f64::NAN),
                r["p90"].as_f64().unwrap_or(f64::NAN),
                r["p99"].as_f64().unwrap_or(f64::NAN)
            );
        }
        if let Some(e) = errors.first() {
            println!("first error: {e}");
        }
    }
    if !errors.is_empty() && errors.len() == samples.len() {
        return Err(anyhow::anyhow!("every request failed")).context(a.url);
    }
    Ok(())
}
