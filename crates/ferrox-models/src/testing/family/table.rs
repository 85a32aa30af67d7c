//! The families: each real model shape the tests copy, with its keys' values.

use super::Family;
use super::{FamilyExperts, Gemma4Like, RopeScale, VocabSource};
use crate::Architecture;

/// The fields most families share: no RoPE scaling, whole-head rotation, no
/// window key, a tied head.
const PLAIN: Family = Family {
    name: "",
    like: "",
    arch: Architecture::Llama,
    vocab: VocabSource::VocabFile(""),
    n_heads: 4,
    n_kv_heads: 2,
    head_dim: 16,
    context_length: 0,
    rope_base: 10_000.0,
    rms_eps: 1e-6,
    experts: None,
    gemma4: None,
    rope_scale: None,
    rotary: (1, 1),
    sliding_window: None,
    own_head: false,
};

/// Every family, one per supported architecture shape.
pub const FAMILIES: [Family; 14] = [
    Family {
        name: "llama3",
        like: "Llama 3.2 1B Instruct (llama3 RoPE factors, tied head)",
        arch: Architecture::Llama,
        vocab: VocabSource::VocabFile("llama-bpe"),
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 16,
        context_length: 131_072,
        rope_base: 500_000.0,
        rms_eps: 1e-5,
        experts: None,
        gemma4: None,
        rope_scale: Some(RopeScale {
            factor: 32.0,
            orig_context: 8192,
        }),
        ..PLAIN
    },
    Family {
        name: "qwen2",
        like: "Qwen2.5 7B Instruct with YaRN (QKV biases, tied head)",
        arch: Architecture::Qwen2,
        vocab: VocabSource::VocabFile("qwen2"),
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 16,
        context_length: 131_072,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        experts: None,
        gemma4: None,
        rope_scale: Some(RopeScale {
            factor: 4.0,
            orig_context: 32_768,
        }),
        ..PLAIN
    },
    Family {
        name: "qwen3",
        like: "Qwen3 0.6B (QK-norm, 128-wide heads of a 1024 embedding, tied head)",
        arch: Architecture::Qwen3,
        vocab: VocabSource::VocabFile("qwen2"),
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 32,
        context_length: 40_960,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        experts: None,
        gemma4: None,
        ..PLAIN
    },
    Family {
        name: "qwen3moe",
        like: "Qwen3-30B-A3B (128 experts, 8 used, QK-norm, F32 router, own output head)",
        arch: Architecture::Qwen3Moe,
        vocab: VocabSource::VocabFile("qwen2"),
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 32,
        context_length: 40_960,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        experts: Some(FamilyExperts {
            n_experts: 16,
            n_used: 4,
            n_ff: 32,
        }),
        gemma4: None,
        own_head: true,
        ..PLAIN
    },
    Family {
        name: "gptoss",
        like: "gpt-oss-20b (attention biases and sinks, alternating windows, YaRN x32, \
               routed experts with biases, MXFP4 experts, gpt-4o pre-tokenizer)",
        arch: Architecture::GptOss,
        vocab: VocabSource::VocabFile("qwen2"),
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 32,
        context_length: 131_072,
        rope_base: 150_000.0,
        rms_eps: 1e-5,
        experts: Some(FamilyExperts {
            n_experts: 16,
            n_used: 4,
            n_ff: 32,
        }),
        gemma4: None,
        rope_scale: Some(RopeScale {
            factor: 32.0,
            orig_context: 4096,
        }),
        // gpt-oss's window is 128; 8 here, so the prompts outrun it.
        sliding_window: Some(8),
        own_head: true,
        ..PLAIN
    },
    Family {
        name: "qwen35",
        like: "Qwen3.5 0.8B (gated delta-net layers with listed recurrent layers, gated \
               attention with QK-norm and partial M-RoPE, tied head)",
        arch: Architecture::Qwen35,
        vocab: VocabSource::VocabFile("qwen35"),
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 32,
        context_length: 262_144,
        rope_base: 10_000_000.0,
        rms_eps: 1e-6,
        experts: None,
        gemma4: None,
        ..PLAIN
    },
    Family {
        name: "phi3",
        like: "Phi-3.5 mini instruct (fused QKV and gate-up, LongRoPE)",
        arch: Architecture::Phi3,
        vocab: VocabSource::VocabFile("phi-3"),
        n_heads: 4,
        n_kv_heads: 4,
        head_dim: 16,
        context_length: 131_072,
        rope_base: 10_000.0,
        rms_eps: 1e-5,
        experts: None,
        gemma4: None,
        rope_scale: Some(RopeScale {
            factor: 32.0,
            orig_context: 4096,
        }),
        sliding_window: Some(262_144),
        own_head: true,
        ..PLAIN
    },
    Family {
        name: "gemma2",
        like: "Gemma 2 2B it (soft-caps, alternating windows, 256-wide heads)",
        arch: Architecture::Gemma2,
        vocab: VocabSource::CatalogModel("gemma3-270m"),
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 32,
        context_length: 8192,
        rope_base: 10_000.0,
        rms_eps: 1e-6,
        experts: None,
        gemma4: None,
        sliding_window: Some(8),
        ..PLAIN
    },
    Family {
        name: "gemma4",
        like: "Gemma 4 31B it (window layers listed, shaped apart from full layers: \
               their own head width, KV heads, rotated dims and RoPE base; full layers \
               with keys as values and proportional RoPE; unscaled attention over \
               normed values, layer output scales, logit soft-cap, tied head)",
        arch: Architecture::Gemma4,
        vocab: VocabSource::VocabFile("gemma-4"),
        n_heads: 4,
        n_kv_heads: 1,
        head_dim: 32,
        context_length: 262_144,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        experts: None,
        gemma4: Some(Gemma4Like::Dense),
        ..PLAIN
    },
    Family {
        name: "gemma4e2b",
        like: "Gemma 4 E2B it (the last layers read earlier layers' KV, per-layer token \
               inputs, twice-wide feed-forwards on the shared layers, one KV head)",
        arch: Architecture::Gemma4,
        vocab: VocabSource::VocabFile("gemma-4"),
        n_heads: 4,
        n_kv_heads: 1,
        head_dim: 32,
        context_length: 131_072,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        experts: None,
        gemma4: Some(Gemma4Like::E2b),
        ..PLAIN
    },
    Family {
        name: "gemma4moe",
        like: "Gemma 4 26B-A4B it (a dense feed-forward beside 16 routed experts with \
               fused gate-up, a scaled router and per-expert output scales, each path \
               between its own norms)",
        arch: Architecture::Gemma4,
        vocab: VocabSource::VocabFile("gemma-4"),
        n_heads: 4,
        n_kv_heads: 1,
        head_dim: 32,
        context_length: 262_144,
        rope_base: 1_000_000.0,
        rms_eps: 1e-6,
        experts: Some(FamilyExperts {
            n_experts: 16,
            n_used: 4,
            n_ff: 32,
        }),
        gemma4: Some(Gemma4Like::Moe),
        ..PLAIN
    },
    Family {
        name: "phi4mini",
        like: "Phi-4 mini instruct (partial rotary: three quarters of each head turn, \
               LongRoPE past the original context, grouped KV heads, sliding_window 0, \
               tied head)",
        arch: Architecture::Phi3,
        vocab: VocabSource::VocabFile("phi-3"),
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 16,
        context_length: 131_072,
        rope_base: 10_000.0,
        rms_eps: 1e-5,
        rope_scale: Some(RopeScale {
            factor: 32.0,
            orig_context: 4096,
        }),
        rotary: (3, 4),
        sliding_window: Some(0),
        ..PLAIN
    },
    Family {
        name: "llama3ctx64",
        like: "Llama 3.2 1B with llama3 RoPE factors (factor 8, low 1, high 4) from an \
               original context of 64, run at 256",
        arch: Architecture::Llama,
        vocab: VocabSource::VocabFile("llama-bpe"),
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 16,
        context_length: 256,
        rope_base: 500_000.0,
        rms_eps: 1e-5,
        rope_scale: Some(RopeScale {
            factor: 8.0,
            orig_context: 64,
        }),
        ..PLAIN
    },
    Family {
        name: "gptossctx64",
        like: "gpt-oss-20b with YaRN x4 of an original context of 64, run at 256 \
               (8 experts, 4 used)",
        arch: Architecture::GptOss,
        vocab: VocabSource::VocabFile("qwen2"),
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 32,
        context_length: 256,
        rope_base: 150_000.0,
        rms_eps: 1e-5,
        experts: Some(FamilyExperts {
            n_experts: 8,
            n_used: 4,
            n_ff: 32,
        }),
        rope_scale: Some(RopeScale {
            factor: 4.0,
            orig_context: 64,
        }),
        sliding_window: Some(8),
        own_head: true,
        ..PLAIN
    },
];
