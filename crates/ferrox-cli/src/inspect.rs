//! What `ferrox inspect` reports about a model file: a pure function of the parsed
//! file and the KV options, serializable for `--json`, printable as text.
//!
//! Invariant: every KV number here comes from [`ferrox_engine::kv_plan`], the same code
//! admission and refusals use, so the report quotes what the server will do.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use ferrox_gguf::GgufFile;

use ferrox_engine::byte_size::format_bytes;
use ferrox_engine::kv_plan::{KvPlan, KvShape};
use ferrox_models::arch::tensors::{full_name, names as n};
use ferrox_models::hparams::{AttentionKind, HyperParams};
use ferrox_models::kv_store::{KvElement, KvLayout};

/// KV options the plan is computed for.
#[derive(Clone, Debug)]
pub struct KvOptions {
    /// Positions per request to plan for (`--ctx`); the model's context length if `None`.
    pub ctx: Option<usize>,
    /// KV memory budget in bytes.
    pub memory: u64,
    pub block_size: usize,
    pub max_seqs: usize,
    pub prefill_chunk: usize,
    pub element: KvElement,
}

/// Count and bytes of the tensors of one storage type.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct TypeCount {
    pub tensors: usize,
    pub bytes: u64,
}

/// KV figures of one kind of layer.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LayerKindKv {
    pub kind: String,
    pub layers: usize,
    /// Bytes per position summed over the layers of this kind.
    pub bytes_per_position: u64,
    /// Positions one request holds in these layers at most (`None`: unbounded).
    pub max_positions_per_request: Option<u64>,
}

/// The KV plan for the options given.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KvReport {
    /// The KV type, and the bytes a value takes in it (34/32 for q8_0).
    pub element: KvElement,
    pub element_bytes: f64,
    pub by_layer_kind: Vec<LayerKindKv>,
    pub ctx: usize,
    /// KV bytes of one request of `ctx` positions.
    pub bytes_per_full_context_request: u64,
    pub memory_bytes: u64,
    pub plan: KvPlan,
    pub full_context_requests_that_fit: u64,
}

/// Everything `inspect` prints.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ModelReport {
    pub file: Option<String>,
    pub file_bytes: u64,
    pub gguf_version: u32,
    pub hyper_params: HyperParams,
    pub tokenizer_model: Option<String>,
    pub tokenizer_pre: Option<String>,
    pub n_tensors: usize,
    pub n_parameters: u64,
    pub tensor_types: BTreeMap<String, TypeCount>,
    /// What the forward pass does for this model beyond the plain llama layer.
    pub features: Vec<String>,
    /// The activation path `auto` picks on this CPU, with its kernel level.
    pub activations: String,
    pub kv: KvReport,
}

/// Gemma 4's per-layer shapes, in words.
fn layer_shape_features(hp: &HyperParams, has: &dyn Fn(&str) -> bool) -> Vec<String> {
    let mut f = Vec::new();
    let window = hp
        .layers
        .iter()
        .zip(&hp.attention)
        .find(|(k, _)| matches!(k, AttentionKind::SlidingWindow { .. }));
    if let Some((_, w)) = window.filter(|(_, w)| {
        (w.n_kv_heads, w.head_dim_k, w.rope_dim) != (hp.n_kv_heads, hp.head_dim_k, hp.rope_dim)
    }) {
        f.push(format!(
            "window layers shaped apart: {} kv heads of {}, {} rotated",
            w.n_kv_heads, w.head_dim_k, w.rope_dim
        ));
    }
    let shared = hp
        .attention
        .iter()
        .enumerate()
        .filter(|(i, a)| a.kv_layer != *i)
        .count();
    if shared > 0 {
        f.push(format!(
            "KV shared: the last {shared} layers read earlier layers' KV"
        ));
    }
    let keys_as_values = (0..hp.n_layers)
        .filter(|&i| has(&full_name(n::ATTN_K, Some(i))) && !has(&full_name(n::ATTN_V, Some(i))))
        .count();
    if keys_as_values > 0 {
        f.push(format!("keys as values on {keys_as_values} layers"));
    }
    if hp.spec().value_norm {
        f.push("values RMS-normed, attention unscaled".into());
    }
    if hp.n_embd_per_layer > 0 {
        f.push(format!("per-layer token inputs of {}", hp.n_embd_per_layer));
    }
    if has(&full_name(n::LAYER_OUTPUT_SCALE, Some(0))) {
        f.push("per-layer output scale".into());
    }
    f
}

/// The architecture features of a model, from its table, hyper-parameters and
/// tensor names, in words.
fn features(hp: &HyperParams, has: &dyn Fn(&str) -> bool) -> Vec<String> {
    let spec = hp.spec();
    let tensors = hp.architecture.tensors();
    let mut f = vec![format!(
        "{} feed-forward",
        match spec.gate {
            ferrox_core::ops::activation::Gate::Silu => "SwiGLU",
            ferrox_core::ops::activation::Gate::GeluTanh => "GeGLU (tanh)",
            ferrox_core::ops::activation::Gate::SwigluOai => "SwiGLU (gpt-oss, clamped)",
        }
    )];
    f.push(format!(
        "RoPE {} pairs, scaling {}",
        match spec.rope_style {
            ferrox_core::ops::rope::RopeStyle::Normal => "adjacent",
            ferrox_core::ops::rope::RopeStyle::Neox => "NeoX half-split",
        },
        hp.rope_scaling
    ));
    if has(n::ROPE_FREQS) {
        f.push("RoPE frequency factors (llama3)".into());
    }
    if has(n::ROPE_FACTORS_LONG) {
        f.push(format!(
            "LongRoPE factors (long past {} positions), magnitude x{}",
            hp.rope_orig_context, hp.rope_attn_factor
        ));
    }
    // A hybrid's delta-net layers have an `attn_qkv` of their own.
    let attention = hp
        .layers
        .iter()
        .position(|l| *l != AttentionKind::Recurrent)
        .unwrap_or(0);
    if has(&full_name(n::ATTN_QKV, Some(attention))) {
        f.push("fused QKV".into());
    }
    if has(&full_name(n::FFN_UP, Some(0))) && !has(&full_name(n::FFN_GATE, Some(0))) {
        f.push("fused gate-up".into());
    }
    if let Some(m) = hp.moe {
        f.push(format!(
            "mixture of experts{}: {} of {} experts per token, {} wide, {}{}{}",
            if spec.experts == ferrox_models::arch::Experts::BesideDense {
                " beside a dense feed-forward"
            } else {
                ""
            },
            m.n_used,
            m.n_experts,
            m.n_ff_expert,
            match m.gating {
                ferrox_models::hparams::Gating::SoftmaxThenTopK => "softmax routing",
                ferrox_models::hparams::Gating::TopKThenSoftmax => "top-k then softmax routing",
            },
            if m.normalize {
                ", weights renormalized"
            } else {
                ""
            },
            m.weights_scale
                .map(|s| format!(", weights x{s}"))
                .unwrap_or_default()
        ));
    }
    if let Some(dn) = hp.delta_net {
        let n = hp
            .layers
            .iter()
            .filter(|l| **l == AttentionKind::Recurrent)
            .count();
        f.push(format!(
            "gated delta-net on {n} of {} layers ({} key / {} value heads of {}): {} KiB of recurrent state per sequence",
            hp.n_layers,
            dn.n_k_heads,
            dn.n_v_heads,
            dn.head_dim,
            (n * dn.state_floats() * 4).div_ceil(1024)
        ));
    }
    if spec.gated_attention {
        f.push("gated attention output".into());
    }
    f.extend(layer_shape_features(hp, has));
    if tensors.lists(n::ATTN_SINKS) {
        f.push("attention sinks".into());
    }
    if [n::ATTN_Q_BIAS, n::ATTN_QKV_BIAS]
        .iter()
        .any(|b| has(&full_name(b, Some(attention))))
    {
        f.push("QKV biases".into());
    }
    if tensors.lists(n::ATTN_Q_NORM) {
        f.push("QK-norm".into());
    }
    if tensors.lists(n::POST_FFW_NORM) {
        f.push("post-attention and post-feed-forward norms".into());
    }
    if spec.scale_embeddings {
        f.push("embeddings scaled by sqrt(n_embd)".into());
    }
    if let Some(c) = hp.attn_softcap {
        f.push(format!("attention soft-cap {c}"));
    }
    if let Some(c) = hp.final_softcap {
        f.push(format!("logit soft-cap {c}"));
    }
    if !(tensors.lists(n::OUTPUT) && has(n::OUTPUT)) {
        f.push("output head tied to the embeddings".into());
    }
    if hp.n_draft_layers > 0 {
        f.push(format!(
            "{} multi-token-prediction block(s) after the layers (drafts with --spec mtp)",
            hp.n_draft_layers
        ));
    }
    f
}

impl ModelReport {
    /// Builds the report of `file` for the KV options `kv`.
    pub fn new(file: &GgufFile, kv: &KvOptions) -> anyhow::Result<ModelReport> {
        let h = file.header();
        let hp = HyperParams::from_metadata(&h.metadata)?;
        let mut tensor_types: BTreeMap<String, TypeCount> = BTreeMap::new();
        for t in &h.tensors {
            let e = tensor_types.entry(t.dtype.name().to_string()).or_default();
            e.tensors += 1;
            e.bytes += t.n_bytes as u64;
        }
        KvLayout::new(&hp).check_element(kv.element)?;
        let shape = KvShape::new(&hp, kv.element);
        let ctx = kv.ctx.unwrap_or(hp.context_length);
        let plan = KvPlan::from_memory(
            &shape,
            kv.memory,
            kv.block_size,
            kv.max_seqs,
            kv.prefill_chunk,
        )?;
        let n_full = hp
            .layers
            .iter()
            .filter(|l| **l == AttentionKind::Full)
            .count();
        let mut by_layer_kind = Vec::new();
        if n_full > 0 {
            by_layer_kind.push(LayerKindKv {
                kind: "full attention".into(),
                layers: n_full,
                bytes_per_position: shape.full_bytes_per_position(),
                max_positions_per_request: None,
            });
        }
        if let Some(w) = shape.window() {
            by_layer_kind.push(LayerKindKv {
                kind: format!("sliding window {w}"),
                layers: hp
                    .layers
                    .iter()
                    .filter(|l| matches!(l, AttentionKind::SlidingWindow { .. }))
                    .count(),
                bytes_per_position: shape.window_bytes_per_position(),
                max_positions_per_request: Some(plan.seat_pages * kv.block_size as u64),
            });
        }
        Ok(ModelReport {
            file: file.path().map(|p| p.display().to_string()),
            file_bytes: file.bytes().len() as u64,
            gguf_version: h.version,
            tokenizer_model: h.metadata.string_opt("tokenizer.ggml.model")?,
            tokenizer_pre: h.metadata.string_opt("tokenizer.ggml.pre")?,
            n_tensors: h.tensors.len(),
            n_parameters: h.tensors.iter().map(|t| t.n_elements()).sum(),
            tensor_types,
            features: features(&hp, &|n| h.tensor_info(n).is_some()),
            activations: format!(
                "{} (auto on this CPU; {} kernels)",
                ferrox_models::ActivationPath::default(),
                ferrox_core::isa::active().name()
            ),
            kv: KvReport {
                element: kv.element,
                element_bytes: kv.element.bytes_per_value(),
                by_layer_kind,
                ctx,
                bytes_per_full_context_request: shape.request_bytes(ctx as u64, kv.prefill_chunk),
                memory_bytes: kv.memory,
                full_context_requests_that_fit: plan.requests_that_fit(ctx as u64),
                plan,
            },
            hyper_params: hp,
        })
    }
}

impl fmt::Display for ModelReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hp = &self.hyper_params;
        let mut s = String::new();
        if let Some(p) = &self.file {
            writeln!(s, "file:            {p}")?;
        }
        writeln!(
            s,
            "size:            {} (GGUF v{})",
            format_bytes(self.file_bytes),
            self.gguf_version
        )?;
        writeln!(
            s,
            "architecture:    {}{}",
            hp.architecture.gguf_name(),
            hp.name
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        )?;
        writeln!(
            s,
            "parameters:      {:.1} M in {} tensors",
            self.n_parameters as f64 / 1e6,
            self.n_tensors
        )?;
        writeln!(s, "layers:          {}", hp.n_layers)?;
        writeln!(s, "embedding:       {}", hp.n_embd)?;
        writeln!(s, "feed-forward:    {}", hp.n_ff)?;
        writeln!(
            s,
            "heads:           {} query, {} kv",
            hp.n_heads, hp.n_kv_heads
        )?;
        writeln!(
            s,
            "head dim:        {} (k), {} (v), {} rotated",
            hp.head_dim_k, hp.head_dim_v, hp.rope_dim
        )?;
        writeln!(s, "context length:  {}", hp.context_length)?;
        writeln!(s, "vocabulary:      {}", hp.vocab_size)?;
        writeln!(
            s,
            "rope base:       {}{}",
            hp.rope_freq_base,
            if hp.sliding_window().is_some() {
                format!(" (local layers {})", hp.rope_freq_base_local)
            } else {
                String::new()
            }
        )?;
        writeln!(s, "rms epsilon:     {:e}", hp.rms_eps)?;
        writeln!(s, "features:        {}", self.features.join("; "))?;
        match hp.sliding_window() {
            Some(w) => writeln!(
                s,
                "sliding window:  {w} on {} of {} layers",
                hp.layers
                    .iter()
                    .filter(|l| matches!(l, AttentionKind::SlidingWindow { .. }))
                    .count(),
                hp.n_layers
            )?,
            None => writeln!(s, "sliding window:  none")?,
        }
        writeln!(
            s,
            "tokenizer:       {} (pre-tokenizer {})",
            self.tokenizer_model.as_deref().unwrap_or("none"),
            self.tokenizer_pre.as_deref().unwrap_or("none")
        )?;
        writeln!(s, "activations:     {}", self.activations)?;
        writeln!(s, "tensor types:")?;
        for (t, c) in &self.tensor_types {
            writeln!(
                s,
                "  {t:<6} {:>4} tensors  {:>12}",
                c.tensors,
                format_bytes(c.bytes)
            )?;
        }
        let kv = &self.kv;
        writeln!(
            s,
            "KV cache ({}, {} bytes per value):",
            kv.element, kv.element_bytes
        )?;
        for k in &kv.by_layer_kind {
            let cap = k
                .max_positions_per_request
                .map(|p| format!(", at most {p} positions per request"))
                .unwrap_or_default();
            writeln!(
                s,
                "  {:<20} {:>3} layers  {} per token position{cap}",
                k.kind,
                k.layers,
                format_bytes(k.bytes_per_position)
            )?;
        }
        let p = &kv.plan;
        writeln!(
            s,
            "KV plan for --ctx {} and --kv-memory {}:",
            kv.ctx,
            format_bytes(kv.memory_bytes)
        )?;
        writeln!(
            s,
            "  one full-context request   {}",
            format_bytes(kv.bytes_per_full_context_request)
        )?;
        writeln!(
            s,
            "  blocks                     {} of {} positions, {} each",
            p.n_blocks,
            p.block_size,
            format_bytes(p.block_bytes)
        )?;
        if p.seat_bytes > 0 {
            writeln!(
                s,
                "  window seats               {} of {} pages, {} each",
                p.max_seqs,
                p.seat_pages,
                format_bytes(p.seat_bytes)
            )?;
        }
        writeln!(
            s,
            "  full-context requests fit  {} (max seqs {})",
            kv.full_context_requests_that_fit, p.max_seqs
        )?;
        writeln!(
            s,
            "  memory at peak             {} (taken as pages are first used)",
            format_bytes(p.total_bytes())
        )?;
        f.write_str(&s)
    }
}

/// The real models' hyper-parameters and KV prices, as the report gives them.
#[cfg(test)]
mod tests {
    use super::*;
    use ferrox_core::DType;
    use ferrox_engine::kv_plan::defaults;
    use ferrox_testkit::real_model;

    fn report(model: &str) -> Option<ModelReport> {
        let file = GgufFile::open(real_model(model)?).unwrap();
        let opts = KvOptions {
            ctx: None,
            memory: 1 << 30,
            block_size: defaults::KV_BLOCK_SIZE,
            max_seqs: defaults::MAX_SEQS,
            prefill_chunk: defaults::PREFILL_CHUNK,
            element: KvElement::F32,
        };
        Some(ModelReport::new(&file, &opts).unwrap())
    }

    #[test]
    fn real_model_smollm2_hyper_parameters_and_kv_price() {
        let Some(r) = report("smollm2-135m") else {
            return;
        };
        let hp: &HyperParams = &r.hyper_params;
        assert_eq!(
            (hp.n_layers, hp.n_embd, hp.n_ff, hp.n_heads, hp.n_kv_heads),
            (30, 576, 1536, 9, 3)
        );
        assert_eq!(
            (
                hp.head_dim_k,
                hp.head_dim_v,
                hp.rope_dim,
                hp.context_length,
                hp.vocab_size
            ),
            (64, 64, 64, 8192, 49152)
        );
        assert_eq!(hp.sliding_window(), None);
        // 30 layers x 3 kv heads x (64 + 64) x 4 bytes.
        assert_eq!(r.kv.by_layer_kind.len(), 1);
        assert_eq!(r.kv.by_layer_kind[0].bytes_per_position, 46_080);
        assert_eq!(r.kv.bytes_per_full_context_request, 46_080 * 8192);
        assert_eq!(r.kv.plan.n_blocks, (1u64 << 30) / (46_080 * 16));
        assert_eq!(r.kv.full_context_requests_that_fit, 2);
        assert_eq!(r.tensor_types["Q4_1"].tensors, 210);
        assert_eq!(r.tokenizer_model.as_deref(), Some("gpt2"));
    }

    #[test]
    fn real_model_gemma3_hyper_parameters_and_kv_price() {
        let Some(r) = report("gemma3-270m") else {
            return;
        };
        let hp = &r.hyper_params;
        assert_eq!(
            (hp.n_layers, hp.n_embd, hp.n_ff, hp.n_heads, hp.n_kv_heads),
            (18, 640, 2048, 4, 1)
        );
        assert_eq!(
            (
                hp.head_dim_k,
                hp.head_dim_v,
                hp.context_length,
                hp.vocab_size
            ),
            (256, 256, 32768, 262144)
        );
        assert_eq!(hp.sliding_window(), Some(512));
        let global: Vec<usize> = (0..18)
            .filter(|&i| hp.layers[i] == AttentionKind::Full)
            .collect();
        assert_eq!(global, vec![5, 11, 17]);
        assert_eq!(
            (hp.rope_freq_base, hp.rope_freq_base_local),
            (1_000_000.0, 10_000.0)
        );
        // Full layers: 3 x 1 x 512 x 4 bytes; window layers: 15 x 1 x 512 x 4 bytes, held in
        // a seat of (512 + 512 - 2) / 16 + 2 = 65 window pages of 16 positions, and priced
        // at no more than window + chunk = 1024 positions (SPEC S10).
        let kinds: Vec<(usize, u64, Option<u64>)> =
            r.kv.by_layer_kind
                .iter()
                .map(|k| (k.layers, k.bytes_per_position, k.max_positions_per_request))
                .collect();
        assert_eq!(kinds, vec![(3, 6144, None), (15, 30720, Some(1040))]);
        assert_eq!(
            r.kv.bytes_per_full_context_request,
            6144 * 32768 + 30720 * 1024
        );
        assert_eq!(r.tokenizer_model.as_deref(), Some("llama"));
        assert_eq!(r.tensor_types["Q6_K"].tensors, 9);
        assert!(r.tensor_types.keys().all(|k| DType::from_name(k).is_some()));
    }
}
