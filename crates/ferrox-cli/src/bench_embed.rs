//! `ferrox bench-serve --scenario embed`: embedding throughput against any
//! server with OpenAI's `/v1/embeddings` (ferrox, llama-server `--embedding`,
//! vLLM). `--concurrency` clients each send requests of `--batch` distinct
//! passages of about `--words` words back to back until `--requests` have been
//! sent; the report gives embeddings and input tokens per second (the tokens
//! as the server's usage counts them) and the latency percentiles.

use std::time::Instant;

use anyhow::Result;
use serde_json::json;

use crate::bench_serve::{BenchServeArgs, percentile, run_clients};

/// One request's measure.
struct Measured {
    seconds: f64,
    vectors: usize,
    tokens: usize,
    error: Option<String>,
}

/// Passage `i`: distinct words, about `words` of them.
fn passage(i: usize, words: usize) -> String {
    const WORDS: [&str; 16] = [
        "river", "library", "engine", "garden", "signal", "harbor", "thread", "winter", "copper",
        "lantern", "meadow", "circuit", "orchard", "compass", "glacier", "ledger",
    ];
    let mut s = format!("Passage {i}:");
    for k in 0..words {
        s.push(' ');
        s.push_str(WORDS[(i * 31 + k * 7 + k / 16) % WORDS.len()]);
    }
    s
}

fn one(agent: &ureq::Agent, a: &BenchServeArgs, first: usize) -> Measured {
    let input: Vec<String> = (first..first + a.batch)
        .map(|i| passage(i, a.words))
        .collect();
    let body = json!({"model": a.model, "input": input, "encoding_format": "float"});
    let t0 = Instant::now();
    let mut req = agent
        .post(format!("{}/v1/embeddings", a.url.trim_end_matches('/')))
        .header("Content-Type", "application/json");
    if let Some(k) = &a.api_key {
        req = req.header("Authorization", &format!("Bearer {k}"));
    }
    let answer = req
        .send(body.to_string())
        .map_err(|e| e.to_string())
        .and_then(|mut r| {
            r.body_mut()
                .with_config()
                .limit(u64::MAX)
                .read_to_string()
                .map_err(|e| e.to_string())
        })
        .and_then(|text| {
            serde_json::from_str::<serde_json::Value>(&text).map_err(|e| e.to_string())
        });
    let seconds = t0.elapsed().as_secs_f64();
    match answer {
        Ok(v) => Measured {
            seconds,
            vectors: v["data"].as_array().map_or(0, Vec::len),
            tokens: v["usage"]["prompt_tokens"].as_u64().unwrap_or(0) as usize,
            error: None,
        },
        Err(e) => Measured {
            seconds,
            vectors: 0,
            tokens: 0,
            error: Some(e),
        },
    }
}

/// Runs the load and prints the report.
pub fn bench_embed(a: &BenchServeArgs, agent: ureq::Agent) -> Result<()> {
    anyhow::ensure!(a.batch >= 1, "--batch must be at least 1");
    let (samples, wall) = run_clients(a, &agent, |agent, a, i| one(agent, a, i * a.batch))?;
    let errors: Vec<&String> = samples.iter().filter_map(|s| s.error.as_ref()).collect();
    let vectors: usize = samples.iter().map(|s| s.vectors).sum();
    let tokens: usize = samples.iter().map(|s| s.tokens).sum();
    let mut latency: Vec<f64> = samples
        .iter()
        .filter(|s| s.error.is_none())
        .map(|s| s.seconds)
        .collect();
    let report = json!({
        "url": a.url, "concurrency": a.concurrency, "requests": a.requests, "batch": a.batch,
        "errors": errors.len(), "wall_s": wall, "embeddings": vectors, "input_tokens": tokens,
        "embeddings_per_s": vectors as f64 / wall, "input_tokens_per_s": tokens as f64 / wall,
        "latency_ms": {"p50": percentile(&mut latency, 0.5) * 1e3, "p90": percentile(&mut latency, 0.9) * 1e3},
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} requests x {} inputs of ~{} words, {} clients, {:.1} s: {:.1} embeddings/s, {:.0} input tokens/s ({} errors)",
            a.requests,
            a.batch,
            a.words,
            a.concurrency,
            wall,
            vectors as f64 / wall,
            tokens as f64 / wall,
            errors.len()
        );
        println!(
            "request latency (ms)       p50 {:>8.1}  p90 {:>8.1}",
            report["latency_ms"]["p50"].as_f64().unwrap_or(f64::NAN),
            report["latency_ms"]["p90"].as_f64().unwrap_or(f64::NAN)
        );
        if let Some(e) = errors.first() {
            println!("first error: {e}");
        }
    }
    anyhow::ensure!(
        errors.len() < samples.len(),
        "every request to {} failed",
        a.url
    );
    Ok(())
}
