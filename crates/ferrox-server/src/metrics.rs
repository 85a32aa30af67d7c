//! `/metrics` (SPEC S19): the engine's counters, read at scrape time without locks,
//! beside the server's own latency histograms and token and outcome counters, in
//! the OpenMetrics text format of an explicit registry (no globals).

use std::sync::Mutex;

use ferrox_engine::EngineHandle;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// The server's metrics.
pub struct Metrics {
    registry: Mutex<Registry>,
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    pub end_to_end: Histogram,
    pub queue_time: Histogram,
    pub requests: Family<Labels, Counter>,
    pub refusals: Family<Labels, Counter>,
    /// Requests that failed after they were accepted, shutdown cut-offs included.
    pub failed: Family<Labels, Counter>,
}

struct EngineCollector(EngineHandle);

impl std::fmt::Debug for EngineCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EngineCollector")
    }
}

impl prometheus_client::collector::Collector for EngineCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.0.stats();
        let counters: [(&str, &str, u64); 14] = [
            (
                "ferrox_prefix_cache_queries",
                "Prompts looked up in the prefix cache",
                s.prefix_queries,
            ),
            (
                "ferrox_prefix_cache_hit_tokens",
                "Prompt tokens served from the prefix cache instead of being run",
                s.prefix_hit_tokens,
            ),
            (
                "ferrox_prefix_cache_evictions",
                "Cached KV blocks evicted to make room",
                s.prefix_evictions,
            ),
            (
                "ferrox_prefill_chunks",
                "Prompt chunks run",
                s.prefill_chunks,
            ),
            (
                "ferrox_prefill_tokens",
                "Prompt tokens run",
                s.prefill_tokens,
            ),
            (
                "ferrox_decode_steps",
                "Steps with at least one decode row",
                s.decode_steps,
            ),
            ("ferrox_aborted_requests", "Requests cancelled", s.aborted),
            (
                "ferrox_prompt_tokens",
                "Prompt tokens of admitted requests",
                s.prompt_tokens,
            ),
            (
                "ferrox_generation_tokens",
                "Generated tokens",
                s.generated_tokens,
            ),
            (
                "ferrox_finished_stop",
                "Requests finished by a stop",
                s.finished_stop,
            ),
            (
                "ferrox_finished_length",
                "Requests finished by max_tokens",
                s.finished_length,
            ),
            (
                "ferrox_spec_draft_tokens",
                "Tokens drafted by speculative decoding and run for checking",
                s.drafted_tokens,
            ),
            (
                "ferrox_spec_accepted_tokens",
                "Drafted tokens kept (each a decode step saved)",
                s.accepted_tokens,
            ),
            (
                "ferrox_recurrent_waits",
                "Prefill passes in which the next request waited for recurrent-state slots (hybrid models)",
                s.recurrent_waits,
            ),
        ];
        for (name, help, v) in counters {
            let c = ConstCounter::new(v);
            c.encode(enc.encode_descriptor(name, help, None, MetricType::Counter)?)?;
        }
        let gauges: [(&str, &str, u64); 10] = [
            (
                "ferrox_recurrent_slots_free",
                "Free recurrent-state slots (hybrid models; 0 otherwise)",
                s.recurrent_slots_free,
            ),
            (
                "ferrox_state_snapshots",
                "Recurrent-state snapshots kept for prefix hits (hybrid models)",
                s.state_snapshots,
            ),
            (
                "ferrox_kv_blocks_cached",
                "KV blocks no request holds that the prefix cache keeps (evictable)",
                s.kv_blocks_cached,
            ),
            (
                "ferrox_queue_depth",
                "Requests waiting for admission",
                s.queue_depth,
            ),
            ("ferrox_requests_running", "Requests in flight", s.running),
            (
                "ferrox_kv_blocks_total",
                "KV blocks in the pool (0: no budget)",
                s.kv_blocks_total,
            ),
            (
                "ferrox_kv_blocks_free",
                "KV blocks admission can still promise (free plus evictable, less what running requests are owed)",
                s.kv_blocks_free,
            ),
            (
                "ferrox_kv_blocks_in_use",
                "KV blocks referenced by in-flight requests (a shared block counts once)",
                s.kv_blocks_in_use,
            ),
            (
                "ferrox_kv_blocks_peak",
                "Most KV blocks held at once",
                s.peak_blocks_held,
            ),
            (
                "ferrox_kv_block_size",
                "Token positions per KV block",
                s.kv_block_size,
            ),
        ];
        for (name, help, v) in gauges {
            let g = ConstGauge::new(v as i64);
            g.encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        let usage = match s.kv_blocks_total {
            0 => 0.0,
            total => s.kv_blocks_in_use as f64 / total as f64,
        };
        ConstGauge::new(usage).encode(enc.encode_descriptor(
            "ferrox_kv_cache_usage_ratio",
            "Fraction of the KV blocks referenced by in-flight requests",
            None,
            MetricType::Gauge,
        )?)?;
        encode_vllm(&mut enc, &s, usage)
    }
}

/// The model-server protocol's gauges under vLLM's names (what the Kubernetes
/// inference gateway's endpoint picker and vllm-router scrape): queued and
/// running requests, the KV cache's use as a fraction (blocks referenced by
/// requests, as vLLM counts them: cached blocks no request holds are free),
/// and `cache_config_info` for prefix-aware scoring.
fn encode_vllm(
    enc: &mut DescriptorEncoder,
    s: &ferrox_engine::stats::StatsSnapshot,
    usage: f64,
) -> Result<(), std::fmt::Error> {
    for (name, help, v) in [
        (
            "vllm:num_requests_waiting",
            "Requests waiting for admission (ferrox_queue_depth)",
            s.queue_depth,
        ),
        (
            "vllm:num_requests_running",
            "Requests in flight (ferrox_requests_running)",
            s.running,
        ),
    ] {
        ConstGauge::new(v as i64).encode(enc.encode_descriptor(
            name,
            help,
            None,
            MetricType::Gauge,
        )?)?;
    }
    ConstGauge::new(usage).encode(enc.encode_descriptor(
        "vllm:kv_cache_usage_perc",
        "KV cache use, 0 to 1 (ferrox_kv_cache_usage_ratio)",
        None,
        MetricType::Gauge,
    )?)?;
    let info = [
        ("block_size".to_string(), s.kv_block_size.to_string()),
        ("num_gpu_blocks".to_string(), s.kv_blocks_total.to_string()),
    ];
    ConstGauge::new(1i64).encode(
        enc.encode_descriptor(
            "vllm:cache_config_info",
            "The KV cache's layout: positions per block and blocks in the pool",
            None,
            MetricType::Gauge,
        )?
        .encode_family(&info)?,
    )
}

fn latency() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ])
}

impl Metrics {
    /// Metrics for a server over `engine`, every series labelled with the model id
    /// (`model="..."`). Refusals are one family, `ferrox_refused_requests{code}`,
    /// counted by the server wherever they happen (HTTP validation, the engine's
    /// checks, the queue bound).
    pub fn new(engine: EngineHandle, model_id: &str) -> Metrics {
        let mut r = Registry::with_labels(
            [(
                std::borrow::Cow::Borrowed("model"),
                std::borrow::Cow::Owned(model_id.to_string()),
            )]
            .into_iter(),
        );
        let m = Metrics {
            registry: Mutex::new(Registry::default()),
            time_to_first_token: latency(),
            inter_token_latency: latency(),
            end_to_end: latency(),
            queue_time: latency(),
            requests: Family::default(),
            refusals: Family::default(),
            failed: Family::default(),
        };
        r.register(
            "ferrox_time_to_first_token_seconds",
            "Time from request to first token",
            m.time_to_first_token.clone(),
        );
        r.register(
            "ferrox_inter_token_latency_seconds",
            "Time between tokens of a stream",
            m.inter_token_latency.clone(),
        );
        r.register(
            "ferrox_request_duration_seconds",
            "Time from request to its last event",
            m.end_to_end.clone(),
        );
        r.register(
            "ferrox_queue_time_seconds",
            "Time from request to admission",
            m.queue_time.clone(),
        );
        // The same measurements under vLLM's names (the model-server protocol).
        for (name, help, h) in [
            (
                "vllm:time_to_first_token_seconds",
                "Time to first token (ferrox_time_to_first_token_seconds)",
                &m.time_to_first_token,
            ),
            (
                "vllm:inter_token_latency_seconds",
                "Time between tokens (ferrox_inter_token_latency_seconds)",
                &m.inter_token_latency,
            ),
            (
                "vllm:e2e_request_latency_seconds",
                "Request latency (ferrox_request_duration_seconds)",
                &m.end_to_end,
            ),
            (
                "vllm:request_queue_time_seconds",
                "Time in the queue (ferrox_queue_time_seconds)",
                &m.queue_time,
            ),
        ] {
            r.register(name, help, h.clone());
        }
        r.register(
            "ferrox_requests",
            "Finished requests by finish reason",
            m.requests.clone(),
        );
        r.register(
            "ferrox_refused_requests",
            "Refused requests by error code",
            m.refusals.clone(),
        );
        r.register(
            "ferrox_failed_requests",
            "Accepted requests that failed, by error code",
            m.failed.clone(),
        );
        r.register_collector(Box::new(EngineCollector(engine)));
        *m.registry.lock().expect("fresh mutex") = r;
        m
    }

    /// Counts a finished request.
    pub fn finished(&self, reason: &str) {
        self.requests
            .get_or_create(&vec![("finish_reason".to_string(), reason.to_string())])
            .inc();
    }

    /// Counts a request that failed after it was accepted.
    pub fn failed(&self, code: &str) {
        self.failed
            .get_or_create(&vec![("code".to_string(), code.to_string())])
            .inc();
    }

    /// Requests cut off at shutdown after the grace period (the failures coded
    /// `server_shutting_down`; a request refused while draining is a refusal).
    pub fn cut_at_shutdown(&self) -> u64 {
        self.failed
            .get_or_create(&vec![(
                "code".to_string(),
                crate::error::SHUTTING_DOWN.to_string(),
            )])
            .get()
    }

    /// Counts a refusal.
    pub fn refused(&self, code: &str) {
        self.refusals
            .get_or_create(&vec![("code".to_string(), code.to_string())])
            .inc();
    }

    /// The OpenMetrics text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let r = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        prometheus_client::encoding::text::encode(&mut out, &r)
            .expect("writing to a String cannot fail");
        out
    }
}
