//! `ferrox bench-serve --scenario chat`: multi-turn conversations against any
//! OpenAI-compatible server. Every client keeps its own conversation: a system
//! prompt shared by all clients, then `--turns` user questions, each answer appended
//! to the history before the next question, so every prompt starts with the whole
//! previous one. The report gives time to first token per turn (where a prefix
//! cache shows), the prompt and cached tokens the server reported, and aggregate
//! throughput.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;
use serde_json::json;

use crate::bench_serve::{BenchServeArgs, Sample, percentile, stream};

/// The shared system prompt: `rules` numbered rules, about 16 tokens each.
pub fn system_prompt(rules: usize) -> String {
    let mut s =
        String::from("You are a helpful assistant for a city library. Follow every rule below.\n");
    for i in 1..=rules {
        s.push_str(&format!(
            "Rule {i}: when asked about shelf {i}, answer briefly and mention opening hours.\n"
        ));
    }
    s
}

/// One turn of every client.
#[derive(Serialize)]
struct TurnReport {
    turn: usize,
    ttft_ms_p50: f64,
    ttft_ms_p90: f64,
    prompt_tokens_mean: f64,
    cached_tokens_mean: f64,
}

/// Runs one client's conversation; returns a sample per turn.
fn conversation(agent: &ureq::Agent, a: &BenchServeArgs, client: usize) -> Vec<Sample> {
    let mut messages = vec![json!({"role": "system", "content": system_prompt(a.system_rules)})];
    let mut out = Vec::with_capacity(a.turns);
    for turn in 0..a.turns {
        messages.push(json!({
            "role": "user",
            "content": format!("Client {client}, question {turn}: what is on shelf {}?", 1 + (client * 7 + turn * 3) % a.system_rules.max(1)),
        }));
        let body = json!({
            "model": a.model, "messages": messages, "max_tokens": a.max_tokens,
            "temperature": 0.0, "stream": true, "ignore_eos": true,
            "stream_options": {"include_usage": true},
        });
        let s = stream(agent, a, "/v1/chat/completions", &body);
        let failed = s.error.is_some();
        messages.push(json!({"role": "assistant", "content": s.text.clone()}));
        out.push(s);
        if failed {
            break;
        }
    }
    out
}

/// Runs the chat scenario and prints the report.
pub fn bench_chat(a: &BenchServeArgs, agent: ureq::Agent) -> Result<()> {
    let a = Arc::new(a.clone());
    let t0 = Instant::now();
    let handles: Vec<_> = (0..a.concurrency)
        .map(|c| {
            let (agent, a) = (agent.clone(), Arc::clone(&a));
            std::thread::spawn(move || conversation(&agent, &a, c))
        })
        .collect();
    let mut by_client = Vec::new();
    for h in handles {
        by_client.push(
            h.join()
                .map_err(|_| anyhow::anyhow!("a client thread panicked"))?,
        );
    }
    let wall = t0.elapsed().as_secs_f64();
    let all: Vec<&Sample> = by_client.iter().flatten().collect();
    let errors: Vec<&String> = all.iter().filter_map(|s| s.error.as_ref()).collect();
    let tokens: usize = all.iter().map(|s| s.tokens).sum();
    let turns: Vec<TurnReport> = (0..a.turns)
        .map(|t| {
            let of_turn: Vec<&Sample> = by_client.iter().filter_map(|c| c.get(t)).collect();
            let mut ttft: Vec<f64> = of_turn.iter().filter_map(|s| s.ttft).collect();
            let mean = |f: fn(&Sample) -> usize| {
                of_turn.iter().map(|s| f(s) as f64).sum::<f64>() / of_turn.len().max(1) as f64
            };
            TurnReport {
                turn: t + 1,
                ttft_ms_p50: percentile(&mut ttft, 0.5) * 1e3,
                ttft_ms_p90: percentile(&mut ttft, 0.9) * 1e3,
                prompt_tokens_mean: mean(|s| s.prompt_tokens),
                cached_tokens_mean: mean(|s| s.cached_tokens),
            }
        })
        .collect();
    if a.json {
        let report = json!({
            "url": a.url, "scenario": "chat", "concurrency": a.concurrency, "turns": turns,
            "errors": errors.len(), "wall_s": wall, "generated_tokens": tokens,
            "tokens_per_s": tokens as f64 / wall,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} clients x {} turns x {} tokens, {:.1} s: {:.1} generated tokens/s ({} errors)",
            a.concurrency,
            a.turns,
            a.max_tokens,
            wall,
            tokens as f64 / wall,
            errors.len()
        );
        println!("turn  ttft p50 (ms)  ttft p90 (ms)  prompt tokens  cached tokens");
        for t in &turns {
            println!(
                "{:>4}  {:>13.1}  {:>13.1}  {:>13.0}  {:>13.0}",
                t.turn, t.ttft_ms_p50, t.ttft_ms_p90, t.prompt_tokens_mean, t.cached_tokens_mean
            );
        }
        if let Some(e) = errors.first() {
            println!("first error: {e}");
        }
    }
    anyhow::ensure!(errors.len() < all.len(), "every request failed ({})", a.url);
    Ok(())
}
