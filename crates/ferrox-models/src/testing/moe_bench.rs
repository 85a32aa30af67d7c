//! A random-weight Qwen3-MoE GGUF shaped like a real Qwen3-30B-A3B layer, for
//! `ferrox bench --compare` against llama.cpp: the same widths (2048-wide
//! embedding, 32 query and 4 KV heads of 128, 128 experts of 768 with 8 used
//! per token, a 151,936-token vocabulary) and the real tokenizer, with fewer
//! layers. Matrices are Q4_K (ferrox's round-to-nearest quantizer), the router
//! and norms F32, as in the real Q4_K_M files' expert and router tensors.

use ferrox_core::DType;
use ferrox_core::kernels::reference::quantize;
use ferrox_gguf::{GgufFile, GgufWriter, Value};
use rayon::prelude::*;

/// The widths of one Qwen3-30B-A3B layer.
const N_EMBD: usize = 2048;
const N_HEADS: usize = 32;
const N_KV_HEADS: usize = 4;
const HEAD_DIM: usize = 128;
const N_EXPERTS: usize = 128;
const N_USED: usize = 8;
const EXPERT_FF: usize = 768;

/// Values uniform in `[-scale, scale)`, from a counter-based hash (so chunks can
/// be made in parallel and the file is a pure function of its name and layers).
fn values(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    (0..n as u64)
        .into_par_iter()
        .map(|i| {
            let mut z = seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale
        })
        .collect()
}

/// `values` quantized to `dtype` in parallel, row block by row block.
fn quantized(dtype: DType, v: &[f32], row: usize) -> Vec<u8> {
    v.par_chunks(row * 64)
        .map(|c| quantize(dtype, c).expect("whole K-quant blocks"))
        .collect::<Vec<_>>()
        .concat()
}

struct Writer {
    w: GgufWriter,
    seed: u64,
}

impl Writer {
    /// A tensor of `shape` (ggml order), values of standard deviation
    /// `1/sqrt(shape[0])` for matrices.
    fn tensor(&mut self, name: String, dtype: DType, shape: &[usize], scale: f32) {
        self.seed += 1;
        let n = shape.iter().product();
        let v = values(self.seed, n, scale);
        let bytes = match dtype {
            DType::F32 => quantize(DType::F32, &v).expect("f32"),
            _ => quantized(dtype, &v, shape[0]),
        };
        let dims: Vec<u64> = shape.iter().map(|&s| s as u64).collect();
        self.w
            .add_tensor(name, dtype, &dims, bytes)
            .expect("valid tensor");
    }

    fn matrix(&mut self, name: String, shape: &[usize]) {
        let scale = (3.0 / shape[0] as f32).sqrt();
        self.tensor(name, DType::Q4_K, shape, scale);
    }

    fn norm(&mut self, name: String, len: usize) {
        self.seed += 1;
        let v: Vec<f32> = values(self.seed, len, 0.2)
            .into_iter()
            .map(|x| 1.0 + x)
            .collect();
        let bytes = quantize(DType::F32, &v).expect("f32");
        self.w
            .add_tensor(name, DType::F32, &[len as u64], bytes)
            .expect("valid tensor");
    }
}

/// The GGUF bytes of an `n_layers`-layer model with the tokenizer of `vocab`
/// (Qwen2's, as Qwen3's).
pub fn gguf(vocab: &GgufFile, n_layers: usize) -> Vec<u8> {
    let m = &vocab.header().metadata;
    let n_vocab = m
        .string_array("tokenizer.ggml.tokens")
        .expect("a vocabulary")
        .len();
    let mut w = Writer {
        w: GgufWriter::new(),
        seed: 0x30B_A3B,
    };
    let k = |s: &str| format!("qwen3moe.{s}");
    let u = |n: usize| Value::U32(n as u32);
    w.w.set("general.architecture", Value::String("qwen3moe".into()))
        .set(
            "general.name",
            Value::String(format!(
                "ferrox random Qwen3-30B-A3B shape, {n_layers} layers"
            )),
        )
        .set("general.file_type", Value::U32(15))
        .set("general.quantization_version", Value::U32(2))
        .set(k("block_count"), u(n_layers))
        .set(k("context_length"), u(40_960))
        .set(k("embedding_length"), u(N_EMBD))
        .set(k("feed_forward_length"), u(6144))
        .set(k("attention.head_count"), u(N_HEADS))
        .set(k("attention.head_count_kv"), u(N_KV_HEADS))
        .set(k("attention.key_length"), u(HEAD_DIM))
        .set(k("attention.value_length"), u(HEAD_DIM))
        .set(k("rope.freq_base"), Value::F32(1_000_000.0))
        .set(k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6))
        .set(k("expert_count"), u(N_EXPERTS))
        .set(k("expert_used_count"), u(N_USED))
        .set(k("expert_feed_forward_length"), u(EXPERT_FF));
    for (key, value) in m.iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
        w.w.set(key, value.clone());
    }
    let (q, kv) = (N_HEADS * HEAD_DIM, N_KV_HEADS * HEAD_DIM);
    w.tensor(
        "token_embd.weight".into(),
        DType::Q4_K,
        &[N_EMBD, n_vocab],
        0.87,
    );
    for i in 0..n_layers {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        w.norm(n("attn_norm"), N_EMBD);
        w.matrix(n("attn_q"), &[N_EMBD, q]);
        w.matrix(n("attn_k"), &[N_EMBD, kv]);
        w.matrix(n("attn_v"), &[N_EMBD, kv]);
        w.norm(n("attn_q_norm"), HEAD_DIM);
        w.norm(n("attn_k_norm"), HEAD_DIM);
        w.matrix(n("attn_output"), &[q, N_EMBD]);
        w.norm(n("ffn_norm"), N_EMBD);
        let router = (27.0 / N_EMBD as f32).sqrt();
        w.tensor(n("ffn_gate_inp"), DType::F32, &[N_EMBD, N_EXPERTS], router);
        w.matrix(n("ffn_gate_exps"), &[N_EMBD, EXPERT_FF, N_EXPERTS]);
        w.matrix(n("ffn_up_exps"), &[N_EMBD, EXPERT_FF, N_EXPERTS]);
        w.matrix(n("ffn_down_exps"), &[EXPERT_FF, N_EMBD, N_EXPERTS]);
    }
    w.norm("output_norm.weight".into(), N_EMBD);
    w.tensor(
        "output.weight".into(),
        DType::Q4_K,
        &[N_EMBD, n_vocab],
        0.87,
    );
    w.w.to_bytes()
}

/// Parameters a token reads at most through one layer's feed-forward and
/// attention (the active-parameter bound of bench reports): the chosen
/// experts' three matrices, the router, and the attention matrices.
pub fn active_parameters_per_layer() -> usize {
    let (q, kv) = (N_HEADS * HEAD_DIM, N_KV_HEADS * HEAD_DIM);
    N_USED * 3 * N_EMBD * EXPERT_FF + N_EMBD * N_EXPERTS + 2 * N_EMBD * q + 2 * N_EMBD * kv
}
