//! The families: each real model shape the tests copy, with its keys' values.

use super::Family;
use super::{FamilyExperts, Gemma4Like, RealSize, RopeScale, VocabSource};
use ferrox_models::Architecture;

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
    draft_blocks: 0,
    size: None,
};

const LLAMA3: Family = Family {
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
};

const QWEN3: Family = Family {
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
};

const QWEN3_MOE: Family = Family {
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
};

const GPT_OSS: Family = Family {
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
};

/// Qwen3.5's test shape (the base of its benchmark model too).
const QWEN35: Family = Family {
    name: "qwen35",
    like: "Qwen3.5 0.8B (gated delta-net layers with listed recurrent layers, gated \
           attention with QK-norm and partial M-RoPE, tied head, an MTP head)",
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
    // The converter keeps the MTP head by default.
    draft_blocks: 1,
    ..PLAIN
};

/// Every family, one per supported architecture shape.
pub const FAMILIES: [Family; 14] = [
    LLAMA3,
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
    QWEN3,
    QWEN3_MOE,
    GPT_OSS,
    QWEN35,
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

/// The benchmark models: random weights at a real model's widths (or a layer
/// subset of it), with its keys, tensor names and vocabulary, for `ferrox bench
/// --compare` against llama.cpp (`examples/bench_model.rs`).
pub const BENCH_MODELS: [Family; 5] = [
    Family {
        name: "llama32-1b",
        like: "Llama-3.2-1B Instruct (16 layers, 32 query and 8 KV heads of 64, tied head)",
        n_heads: 32,
        n_kv_heads: 8,
        head_dim: 64,
        size: Some(RealSize {
            n_embd: 2048,
            n_ff: 8192,
            expert_ff: 0,
            n_layers: 16,
            real_layers: 16,
            vocab_rows: None,
        }),
        ..LLAMA3
    },
    Family {
        name: "qwen3-8b",
        like: "Qwen3-8B (8 of its 36 layers, 32 query and 8 KV heads of 128, own head)",
        n_heads: 32,
        n_kv_heads: 8,
        head_dim: 128,
        own_head: true,
        size: Some(RealSize {
            n_embd: 4096,
            n_ff: 12_288,
            expert_ff: 0,
            n_layers: 8,
            real_layers: 36,
            vocab_rows: None,
        }),
        ..QWEN3
    },
    Family {
        name: "qwen3-30b-a3b",
        like: "Qwen3-30B-A3B (4 of its 48 layers, 128 experts of 768 with 8 used, \
               32 query and 4 KV heads of 128, own head)",
        n_heads: 32,
        n_kv_heads: 4,
        head_dim: 128,
        experts: Some(FamilyExperts {
            n_experts: 128,
            n_used: 8,
            n_ff: 768,
        }),
        size: Some(RealSize {
            n_embd: 2048,
            n_ff: 6144,
            expert_ff: 768,
            n_layers: 4,
            real_layers: 48,
            vocab_rows: None,
        }),
        ..QWEN3_MOE
    },
    Family {
        name: "gpt-oss-20b",
        like: "gpt-oss-20b (4 of its 24 layers, 32 experts of 2880 with 4 used, MXFP4 \
               experts, 64 query and 8 KV heads of 64, windows of 128, own head; the \
               Qwen2 vocabulary padded to o200k_harmony's 201,088 rows)",
        n_heads: 64,
        n_kv_heads: 8,
        head_dim: 64,
        experts: Some(FamilyExperts {
            n_experts: 32,
            n_used: 4,
            n_ff: 2880,
        }),
        sliding_window: Some(128),
        size: Some(RealSize {
            n_embd: 2880,
            n_ff: 2880,
            expert_ff: 2880,
            n_layers: 4,
            real_layers: 24,
            vocab_rows: Some(201_088),
        }),
        ..GPT_OSS
    },
    Family {
        name: "qwen35-0.8b",
        like: "Qwen3.5 0.8B (24 layers, 18 gated delta-net of 16 heads of 128, 6 gated \
               attention of 8 query and 2 KV heads of 256, tied head, an MTP head)",
        n_heads: 8,
        n_kv_heads: 2,
        head_dim: 256,
        size: Some(RealSize {
            n_embd: 1024,
            n_ff: 3584,
            expert_ff: 0,
            n_layers: 24,
            real_layers: 24,
            vocab_rows: None,
        }),
        ..QWEN35
    },
];
