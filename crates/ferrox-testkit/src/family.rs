//! Random-weight GGUFs of the families ferrox supports, for checking the forward
//! pass where no real checkpoint can be downloaded.
//!
//! Each [`Family`] is shaped like a real model of its family: every metadata key
//! and tensor name of that model (RoPE scaling keys and factor tensors, soft-caps,
//! windows, fused matrices, biases, QK-norms, tied or own head), the real
//! tokenizer copied from a vocab-only GGUF, and shapes shrunk to a 64-wide
//! embedding and two layers (four for Gemma 4). The bytes are a pure function
//! of the family, the [`Variant`] and the vocabulary file, so the golden
//! outputs made once from them (by llama.cpp and by the float64 reference,
//! `scripts/families/`) stay valid: a test regenerates the file and checks its
//! sha256 first.

use std::f64::consts::PI;

use ferrox_core::DType;
use ferrox_gguf::{GgufFile, GgufWriter, Value};

use ferrox_models::arch::Experts;
use ferrox_models::arch::tensors::{Role, Tensor, names};
use ferrox_models::{Architecture, HyperParams};

mod gemma4;
mod real_size;
mod table;

use real_size::{padded, q4_k_m_type, quantize_rows};

pub use table::{BENCH_MODELS, FAMILIES};

/// Where a family's tokenizer comes from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum VocabSource {
    /// `ggml-vocab-NAME.gguf` of llama.cpp's `models/` folder.
    VocabFile(&'static str),
    /// The tokenizer of a catalog model.
    CatalogModel(&'static str),
}

/// How the matrices are stored.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Every matrix Q8_0.
    Q8,
    /// Matrices cycle through Q4_0, Q5_1, F16, Q4_1, Q5_0 and BF16.
    Mixed,
    /// Every matrix IQ4_NL (the non-linear 4-bit grid).
    Iq4Nl,
    /// Matrices cycle through Q4_K, Q6_K, Q5_K, Q3_K and Q2_K, on a 256-wide
    /// model (K-quant rows are whole 256-value blocks).
    KQuants,
    /// Expert matrices MXFP4, the rest Q8_0, as gpt-oss ships (that family only;
    /// llama-quantize's `MXFP4_MOE`).
    Mxfp4,
    /// llama-quantize's `Q4_K_M` mix: Q4_K, with Q6_K for the head (the embeddings
    /// when tied) and for `attn_v` and `ffn_down` on the layers its
    /// `use_more_bits` picks, Q8_0 for `attn_k` and `attn_v` of 8-expert models.
    Q4KM,
}

impl Variant {
    pub const ALL: [Variant; 4] = [
        Variant::Q8,
        Variant::Mixed,
        Variant::Iq4Nl,
        Variant::KQuants,
    ];

    /// Every variant, the single-family ones included.
    pub const EVERY: [Variant; 6] = [
        Variant::Q8,
        Variant::Mixed,
        Variant::Iq4Nl,
        Variant::KQuants,
        Variant::Mxfp4,
        Variant::Q4KM,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Q8 => "q8_0",
            Variant::Mixed => "mixed",
            Variant::Iq4Nl => "iq4_nl",
            Variant::KQuants => "kquants",
            Variant::Mxfp4 => "mxfp4",
            Variant::Q4KM => "q4_k_m",
        }
    }

    /// The type of expert matrices when the variant fixes one.
    fn expert_type(self) -> Option<DType> {
        (self == Variant::Mxfp4).then_some(DType::MXFP4)
    }

    fn types(self) -> &'static [DType] {
        match self {
            Variant::Q8 | Variant::Mxfp4 => &[DType::Q8_0],
            Variant::Q4KM => &[DType::Q4_K],
            Variant::Mixed => &[
                DType::Q4_0,
                DType::Q5_1,
                DType::F16,
                DType::Q4_1,
                DType::Q5_0,
                DType::BF16,
            ],
            Variant::Iq4Nl => &[DType::IQ4_NL],
            Variant::KQuants => &[
                DType::Q4_K,
                DType::Q6_K,
                DType::Q5_K,
                DType::Q3_K,
                DType::Q2_K,
            ],
        }
    }
}

/// The widths of a real model, for files of its size (the benchmark models,
/// [`BENCH_MODELS`]) rather than the shrunk test shapes.
#[derive(Copy, Clone, Debug)]
pub struct RealSize {
    pub n_embd: usize,
    pub n_ff: usize,
    /// One expert's hidden width (mixture-of-experts models).
    pub expert_ff: usize,
    /// Layers of the file (a subset of the real model's when it is large).
    pub n_layers: usize,
    /// Layers of the real model.
    pub real_layers: usize,
    /// Rows of the embeddings and head when the vocabulary file has fewer tokens
    /// than the real model (padded with unused control tokens).
    pub vocab_rows: Option<usize>,
}

/// The widths of one file.
#[derive(Copy, Clone, Debug)]
struct Shape {
    n_embd: usize,
    n_ff: usize,
    head_dim: usize,
    /// One expert's hidden width (mixture-of-experts families).
    expert_ff: usize,
}

/// A family's shape and the real model it copies.
#[derive(Copy, Clone, Debug)]
pub struct Family {
    /// File stem, e.g. `llama3`.
    pub name: &'static str,
    /// The real model whose keys and tensor names it carries.
    pub like: &'static str,
    pub arch: Architecture,
    pub vocab: VocabSource,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// Per-head width (Qwen3 and Gemma 2 give it explicitly, wider than
    /// `n_embd / n_heads`).
    pub head_dim: usize,
    pub context_length: usize,
    pub rope_base: f32,
    pub rms_eps: f32,
    /// The routed experts of a mixture-of-experts family.
    pub experts: Option<FamilyExperts>,
    /// Which Gemma 4 model a Gemma 4 family copies.
    pub gemma4: Option<Gemma4Like>,
    /// How RoPE stretches past the trained context, for the families that
    /// scale it (llama3 factors, YaRN, LongRoPE).
    pub rope_scale: Option<RopeScale>,
    /// The rotated share of each head, `(numerator, denominator)`: Phi-4's
    /// partial rotary turns three quarters; `(1, 1)` turns it all.
    pub rotary: (usize, usize),
    /// `attention.sliding_window` as the converter writes it, where it does.
    pub sliding_window: Option<usize>,
    /// Whether the file has its own `output.weight` (else the head is the
    /// embeddings).
    pub own_head: bool,
    /// Multi-token-prediction blocks after the trunk (`nextn_predict_layers`).
    pub draft_blocks: usize,
    /// The real model's widths, for its benchmark files (`None`: the shrunk test
    /// shapes).
    pub size: Option<RealSize>,
}

pub use gemma4::Gemma4Like;

/// RoPE scaling of a family's file.
#[derive(Copy, Clone, Debug)]
pub struct RopeScale {
    /// The scaling factor (llama3 factors and YaRN; LongRoPE's comes from the
    /// contexts).
    pub factor: f32,
    /// The trained context it stretches (`rope.scaling.original_context_length`).
    pub orig_context: usize,
}

/// Expert counts of a mixture-of-experts family.
#[derive(Copy, Clone, Debug)]
pub struct FamilyExperts {
    pub n_experts: usize,
    pub n_used: usize,
    /// Hidden width of one expert on the 64-wide shape (the K-quant shape's is 256).
    pub n_ff: usize,
}

const N_EMBD: usize = 64;
/// Qwen3.5's delta-net key and value heads on these shapes (more value heads
/// than key heads, as the real models have).
const QWEN35_SSM_HEADS: (usize, usize) = (2, 4);
/// Qwen3.5 0.8B's delta-net: key heads, value heads, and their size (its
/// attention heads are twice as wide).
const QWEN35_REAL_SSM: (usize, usize, usize) = (16, 16, 128);
const N_FF: usize = 128;
const N_LAYERS: usize = 2;
/// Embedding values are uniform in `[-EMBD_SCALE, EMBD_SCALE)` (standard
/// deviation 0.5): logits of a tied head then spread by about 4.
const EMBD_SCALE: f32 = 0.87;

/// A deterministic stream of uniform values in [-1, 1).
struct Uniform(u64);

impl Uniform {
    fn next(&mut self) -> f32 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn values(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n).map(|_| offset + scale * self.next()).collect()
    }
}

/// Llama 3.1's RoPE frequency factors (the converter's formula): low and high
/// frequency factors 1 and 4, `factor` and the original context of `scale`.
fn llama3_factors(dim: usize, base: f32, scale: RopeScale) -> Vec<f32> {
    let (low, high) = (1.0f64, 4.0f64);
    let (factor, old_ctx) = (scale.factor as f64, scale.orig_context as f64);
    let (low_wavelen, high_wavelen) = (old_ctx / low, old_ctx / high);
    (0..dim / 2)
        .map(|i| {
            let freq = 1.0 / (base as f64).powf(2.0 * i as f64 / dim as f64);
            let wavelen = 2.0 * PI / freq;
            (if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (old_ctx / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }) as f32
        })
        .collect()
}

struct Builder {
    shape: Shape,
    w: GgufWriter,
    rnd: Uniform,
    types: &'static [DType],
    picked: usize,
    /// The type of every expert tensor, when the variant fixes one.
    expert_type: Option<DType>,
    /// llama-quantize's `Q4_K_M` choice by name: (layers, experts, tied head).
    q4_k_m: Option<(usize, usize, bool)>,
}

impl Builder {
    fn tensor(&mut self, name: String, dtype: DType, shape: &[usize], values: &[f32]) {
        // A row that is not whole blocks of the type falls back to Q8_0, as
        // llama-quantize falls back for K-quants.
        let dtype = match shape[0] % dtype.block_len() {
            0 => dtype,
            _ => DType::Q8_0,
        };
        let shape: Vec<u64> = shape.iter().map(|&s| s as u64).collect();
        let bytes = quantize_rows(dtype, values, shape[0] as usize);
        self.w
            .add_tensor(name, dtype, &shape, bytes)
            .expect("valid tensor");
    }

    /// A matrix of values uniform in `[-scale, scale)`.
    fn matrix_scaled(&mut self, name: String, cols: usize, rows: usize, scale: f32) {
        self.matrices(name, cols, rows, 1, scale);
    }

    /// `n` matrices `[cols] -> [rows]` stacked in one 3-D tensor (an expert
    /// tensor when `n > 1`), values of standard deviation `1/sqrt(cols)`.
    fn matrices(&mut self, name: String, cols: usize, rows: usize, n: usize, scale: f32) {
        let dtype = match (self.expert_type, self.q4_k_m) {
            (Some(t), _) if n > 1 => t,
            (_, Some((layers, experts, tied))) => q4_k_m_type(&name, layers, experts, tied),
            _ => {
                self.picked += 1;
                self.types[(self.picked - 1) % self.types.len()]
            }
        };
        let v = self.rnd.values(cols * rows * n, scale, 0.0);
        let shape: &[usize] = if n == 1 {
            &[cols, rows]
        } else {
            &[cols, rows, n]
        };
        self.tensor(name, dtype, shape, &v);
    }
}

impl Family {
    /// The family by name.
    pub fn find(name: &str) -> Option<Family> {
        FAMILIES.into_iter().find(|f| f.name == name)
    }

    /// The variants of this family's files: every family has the four common
    /// ones, gpt-oss also its MXFP4 experts.
    pub fn variants(&self) -> &'static [Variant] {
        const WITH_MXFP4: [Variant; 5] = [
            Variant::Q8,
            Variant::Mixed,
            Variant::Iq4Nl,
            Variant::KQuants,
            Variant::Mxfp4,
        ];
        match self.arch {
            Architecture::GptOss => &WITH_MXFP4,
            _ => &Variant::ALL,
        }
    }

    /// Layers of its files: two, or four for Gemma 4 (a window and a full
    /// layer, then two more that may share their KV); a benchmark model's own.
    pub fn n_layers(&self) -> usize {
        match (self.size, self.arch) {
            (Some(size), _) => size.n_layers,
            (None, Architecture::Gemma4) => 4,
            (None, _) => N_LAYERS,
        }
    }

    /// This benchmark model with `n` layers.
    pub fn with_layers(self, n: usize) -> Family {
        let size = self.size.expect("a benchmark model");
        Family {
            size: Some(RealSize {
                n_layers: n,
                ..size
            }),
            ..self
        }
    }

    /// File name of a variant: `family-llama3-q8_0.gguf`.
    pub fn file_name(&self, variant: Variant) -> String {
        format!("family-{}-{}.gguf", self.name, variant.name())
    }

    /// The GGUF bytes of `variant`, with the tokenizer of `vocab`.
    pub fn gguf(&self, variant: Variant, vocab: &GgufFile) -> Vec<u8> {
        let seed = self
            .name
            .bytes()
            .chain(variant.name().bytes())
            .fold(0xF3_u64, |h, b| h.wrapping_mul(0x100_0000_01B3) ^ b as u64);
        let mut b = Builder {
            shape: self.shape(variant),
            w: GgufWriter::new(),
            rnd: Uniform(seed),
            types: variant.types(),
            picked: 0,
            expert_type: variant.expert_type(),
            q4_k_m: (variant == Variant::Q4KM).then(|| {
                let experts = self.experts.map_or(0, |e| e.n_experts);
                // llama-quantize counts every block's, the draft blocks' too.
                (self.n_layers() + self.draft_blocks, experts, !self.own_head)
            }),
        };
        self.metadata(&mut b.w, b.shape, vocab);
        let embd_type = match b.q4_k_m {
            Some((layers, experts, tied)) => {
                q4_k_m_type("token_embd.weight", layers, experts, tied)
            }
            None => b.types[0],
        };
        let hp = hyper_params(&b.w);
        for t in self.arch.tensors().resolve(&hp) {
            if self.writes(&t, b.shape) {
                self.write(&mut b, &t, embd_type);
            }
        }
        b.w.to_bytes()
    }

    /// Whether the file has tensor `t`: every required one, and the optional
    /// ones the copied model's converter writes.
    fn writes(&self, t: &Tensor, shape: Shape) -> bool {
        let name = t
            .name
            .rsplit_once("blk.")
            .map_or(t.name.as_str(), |(_, rest)| {
                rest.split_once('.').map_or(rest, |(_, name)| name)
            });
        match (t.required, t.alternative, name) {
            (true, _, _) => true,
            (_, true, _) => false,
            (_, _, names::OUTPUT) => self.own_head,
            // Qwen3.5's MTP head shares the trunk's embeddings and head.
            (_, _, names::NEXTN_EMBED_TOKENS | names::NEXTN_SHARED_HEAD_HEAD) => false,
            (_, _, names::ATTN_V) => {
                !self
                    .gemma4_shape(shape, t.layer.expect("a layer tensor"))
                    .values_are_keys
            }
            _ => true,
        }
    }

    /// Writes tensor `t` with values of its role.
    fn write(&self, b: &mut Builder, t: &Tensor, embd_type: DType) {
        let name = t.name.clone();
        let (cols, rows) = (t.shape[0], t.shape.get(1).copied().unwrap_or(1));
        let fixed = |b: &mut Builder, scale: f32, offset: f32| {
            let v = b.rnd.values(t.shape.iter().product(), scale, offset);
            b.tensor(name.clone(), DType::F32, &t.shape, &v);
        };
        match t.role {
            Role::Embedding => {
                let v = b.rnd.values(cols * rows, EMBD_SCALE, 0.0);
                b.tensor(name, embd_type, &t.shape, &v);
            }
            Role::Linear => {
                let n = t.shape.get(2).copied().unwrap_or(1);
                b.matrices(name, cols, rows, n, (3.0 / cols as f32).sqrt());
            }
            // As wide as the embeddings, so the logits are as peaked as a tied
            // head's (greedy steps are then far from ties).
            Role::Head => b.matrix_scaled(name, cols, rows, EMBD_SCALE),
            Role::PerLayerEmbedding => b.matrix_scaled(name, cols, rows, 0.3),
            // The router is F32 in the real files; its logits spread by about 3,
            // so routing is decided well away from ties (Gemma 4's input is
            // normed to 1/sqrt(d) per value).
            Role::Router => {
                let fan_in = match self.arch.spec().experts {
                    Experts::BesideDense => 1.0,
                    _ => cols as f32,
                };
                fixed(b, (27.0 / fan_in).sqrt(), 0.0);
            }
            Role::Gain => fixed(b, 0.2, 1.0),
            Role::Bias => fixed(b, 0.3, 0.0),
            Role::RouterBias => fixed(b, 1.0, 0.0),
            // Sinks of the size of the scores, so they take a real share.
            Role::Sinks => fixed(b, 1.0, 0.5),
            Role::ExpertScale => fixed(b, 0.3, 1.0),
            Role::OutputScale => fixed(b, 0.3, 0.7),
            Role::Conv => fixed(b, 0.5, 0.0),
            Role::DtBias => fixed(b, 0.5, 1.0),
            // -exp(A_log): decays between e^-0.1 and e^-2 per unit of softplus.
            Role::Decay => fixed(b, 0.95, -1.05),
            Role::RopeFactors => {
                let f = self.rope_factors(&t.name, b.shape);
                b.tensor(name, DType::F32, &t.shape, &f);
            }
        }
    }

    /// The values of RoPE factor tensor `name`: Llama 3's, LongRoPE's long and
    /// short sets, or Gemma 4's proportional RoPE (a quarter of each full head
    /// turns; the converter's `1e30` stops the rest).
    fn rope_factors(&self, name: &str, shape: Shape) -> Vec<f32> {
        let pairs = self.rope_dim(shape) / 2;
        match (self.arch, name) {
            (Architecture::Llama, _) => {
                let scale = self.rope_scale.expect("Llama 3's RoPE factors");
                llama3_factors(shape.head_dim, self.rope_base, scale)
            }
            (Architecture::Gemma4, _) => crate::proportional_rope(shape.head_dim / 2),
            (_, names::ROPE_FACTORS_LONG) => (0..pairs).map(|i| 1.0 + 3.0 * i as f32).collect(),
            (_, names::ROPE_FACTORS_SHORT) => (0..pairs).map(|i| 1.0 + 0.05 * i as f32).collect(),
            _ => unreachable!("{name} is not a RoPE factor tensor of {:?}", self.arch),
        }
    }

    /// The widths of `variant`'s file: K-quants need whole 256-value rows, so
    /// their files are 256 wide with 64-wide heads and 256-wide experts.
    fn shape(&self, variant: Variant) -> Shape {
        if let Some(size) = self.size {
            return Shape {
                n_embd: size.n_embd,
                n_ff: size.n_ff,
                head_dim: self.head_dim,
                expert_ff: size.expert_ff,
            };
        }
        match variant {
            Variant::KQuants => Shape {
                n_embd: 256,
                n_ff: 512,
                head_dim: 256 / self.n_heads,
                expert_ff: 256,
            },
            _ => Shape {
                n_embd: N_EMBD,
                n_ff: N_FF,
                head_dim: self.head_dim,
                expert_ff: self.experts.map_or(0, |e| e.n_ff),
            },
        }
    }

    /// Writes every metadata key; returns the vocabulary size.
    fn metadata(&self, w: &mut GgufWriter, shape: Shape, vocab: &GgufFile) -> usize {
        let m = &vocab.header().metadata;
        let tokens = m
            .string_array("tokenizer.ggml.tokens")
            .expect("a vocabulary")
            .len();
        let n_vocab = self
            .size
            .and_then(|s| s.vocab_rows)
            .map_or(tokens, |rows| rows.max(tokens));
        let a = self.arch.gguf_name();
        let k = |s: &str| format!("{a}.{s}");
        let u = |n: usize| Value::U32(n as u32);
        w.set("general.architecture", Value::String(a.into()))
            .set(
                "general.name",
                Value::String(format!("ferrox random {} (like {})", self.name, self.like)),
            )
            .set("general.file_type", Value::U32(7))
            .set("general.quantization_version", Value::U32(2))
            .set(k("block_count"), u(self.n_layers() + self.draft_blocks))
            .set(k("context_length"), u(self.context_length))
            .set(k("embedding_length"), u(shape.n_embd))
            .set(k("feed_forward_length"), u(shape.n_ff))
            .set(k("attention.head_count"), u(self.n_heads))
            .set(k("attention.head_count_kv"), u(self.n_kv_heads))
            .set(k("rope.freq_base"), Value::F32(self.rope_base))
            .set(
                k("attention.layer_norm_rms_epsilon"),
                Value::F32(self.rms_eps),
            );
        match self.arch {
            Architecture::Llama => {
                w.set(k("vocab_size"), u(n_vocab))
                    .set(k("rope.dimension_count"), u(shape.head_dim))
                    .set(k("attention.key_length"), u(shape.head_dim))
                    .set(k("attention.value_length"), u(shape.head_dim));
            }
            Architecture::Qwen2 => {
                let scale = self.rope_scale.expect("Qwen2's YaRN");
                w.set(k("rope.scaling.type"), Value::String("yarn".into()))
                    .set(k("rope.scaling.factor"), Value::F32(scale.factor))
                    .set(
                        k("rope.scaling.original_context_length"),
                        u(scale.orig_context),
                    );
            }
            Architecture::Qwen3 | Architecture::Gemma2 => {
                w.set(k("attention.key_length"), u(shape.head_dim))
                    .set(k("attention.value_length"), u(shape.head_dim));
            }
            Architecture::Qwen3Moe | Architecture::GptOss => {
                let e = self.experts.expect("a mixture-of-experts family");
                w.set(k("attention.key_length"), u(shape.head_dim))
                    .set(k("attention.value_length"), u(shape.head_dim))
                    .set(k("expert_count"), u(e.n_experts))
                    .set(k("expert_used_count"), u(e.n_used))
                    .set(k("expert_feed_forward_length"), u(shape.expert_ff));
            }
            Architecture::Phi3 => {
                // LongRoPE's magnitude factor, as the converter writes it.
                let orig = self.rope_scale.expect("Phi-3's LongRoPE").orig_context;
                let scale = self.context_length as f64 / orig as f64;
                let attn = (1.0 + scale.ln() / (orig as f64).ln()).sqrt();
                w.set(k("rope.scaling.original_context_length"), u(orig))
                    .set(k("rope.dimension_count"), u(self.rope_dim(shape)))
                    .set(k("rope.scaling.attn_factor"), Value::F32(attn as f32));
            }
            Architecture::Qwen35 => {
                let rope = shape.head_dim / 4;
                // Pairs per section (the real [11, 11, 10, 0] at 64 rotated
                // dimensions; a quarter, an eighth and an eighth on the test
                // shapes), the delta-net's heads and their size, and which
                // layers are recurrent: every fourth is full attention, the
                // test files' two layers are one of each. The list wins over
                // the interval, as in the converted files.
                let (sections, (n_k, n_v, state), recurrent) = match self.size {
                    Some(size) => (
                        vec![11, 11, 10, 0],
                        QWEN35_REAL_SSM,
                        (0..size.n_layers)
                            .map(|i| (i + 1) % 4 != 0)
                            .collect::<Vec<_>>(),
                    ),
                    None => (
                        vec![(rope / 4) as i32, (rope / 8) as i32, (rope / 8) as i32, 0],
                        (QWEN35_SSM_HEADS.0, QWEN35_SSM_HEADS.1, shape.head_dim),
                        vec![true, false],
                    ),
                };
                // A draft block is not recurrent.
                let recurrent = [recurrent, vec![false; self.draft_blocks]].concat();
                w.set(k("attention.key_length"), u(shape.head_dim))
                    .set(k("attention.value_length"), u(shape.head_dim))
                    .set(k("rope.dimension_count"), u(rope))
                    .set(
                        k("rope.dimension_sections"),
                        Value::Array(ferrox_gguf::Array::I32(sections)),
                    )
                    .set(k("ssm.conv_kernel"), u(4))
                    .set(k("ssm.state_size"), u(state))
                    .set(k("ssm.group_count"), u(n_k))
                    .set(k("ssm.time_step_rank"), u(n_v))
                    .set(k("ssm.inner_size"), u(n_v * state))
                    .set(
                        k("attention.recurrent_layers"),
                        Value::Array(ferrox_gguf::Array::Bool(recurrent)),
                    )
                    .set(k("full_attention_interval"), u(4));
            }
            Architecture::Gemma4 => self.gemma4_metadata(w, shape),
            // The families are decoders; encoder files come from
            // scripts/families/make-encoder.
            Architecture::Bert | Architecture::NomicBert => {
                unreachable!("no decoder family is an encoder")
            }
            Architecture::Gemma3 => unreachable!("Gemma 3 is checked on the real model"),
        }
        if let Some(window) = self.sliding_window {
            w.set(k("attention.sliding_window"), u(window));
        }
        if self.draft_blocks > 0 {
            w.set(k("nextn_predict_layers"), u(self.draft_blocks));
        }
        if self.arch == Architecture::GptOss {
            let scale = self.rope_scale.expect("gpt-oss's YaRN");
            w.set(k("rope.scaling.type"), Value::String("yarn".into()))
                .set(k("rope.scaling.factor"), Value::F32(scale.factor))
                .set(
                    k("rope.scaling.original_context_length"),
                    u(scale.orig_context),
                );
        }
        if self.arch == Architecture::Gemma2 {
            w.set(k("attn_logit_softcapping"), Value::F32(50.0))
                .set(k("final_logit_softcapping"), Value::F32(30.0));
        }
        for (key, value) in m.iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
            w.set(key, padded(key, value, tokens, n_vocab));
        }
        if self.arch == Architecture::GptOss {
            // o200k's pre-tokenizer over the Qwen2 vocabulary (no o200k
            // vocabulary file is at hand).
            w.set("tokenizer.ggml.pre", Value::String("gpt-4o".into()));
        }
        n_vocab
    }

    /// Rotated dims of each head of a file of `shape`.
    fn rope_dim(&self, shape: Shape) -> usize {
        shape.head_dim * self.rotary.0 / self.rotary.1
    }
}

/// The hyper-parameters of the metadata written so far.
fn hyper_params(w: &GgufWriter) -> HyperParams {
    let file = GgufFile::from_bytes(w.to_bytes()).expect("the metadata parses");
    HyperParams::from_metadata(&file.header().metadata).expect("a family's keys are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_factors_match_the_converter_at_the_ends() {
        let scale = RopeScale {
            factor: 32.0,
            orig_context: 8192,
        };
        let f = llama3_factors(128, 500_000.0, scale);
        assert_eq!(f[0], 1.0);
        assert_eq!(f[63], 32.0);
        assert!(f.iter().all(|&x| (1.0..=32.0).contains(&x)));
    }
}
