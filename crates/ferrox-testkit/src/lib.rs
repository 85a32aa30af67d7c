//! Helpers for tests in every crate that run on the real models and golden files.
//!
//! A test that needs a real model calls [`real_model`]; when the file is absent it
//! writes `SKIPPED <test>: ...` past the harness's capture (and to
//! `$FERROX_SKIP_LOG` when set) and returns early, unless
//! `FERROX_REQUIRE_MODELS=1` (set by `scripts/test-all`, which fetches the models
//! first), where absence is a failure.

use std::path::PathBuf;

use ferrox_hub::catalog;
use ferrox_models::arch::tensors::{Role, Tensor, full_name, names};

pub mod family;
pub mod golden;

/// The folder of llama.cpp reference files (vocab GGUFs with their test vectors,
/// chat templates) that `scripts/fetch-llama-refs` unpacks from the
/// llama-cpp-python sdist: `FERROX_LLAMA_REFS`, else `llama-cpp-refs` in the
/// model cache.
pub fn llama_refs_dir() -> PathBuf {
    std::env::var_os("FERROX_LLAMA_REFS")
        .map(PathBuf::from)
        .unwrap_or_else(|| catalog::models_dir().join("llama-cpp-refs"))
}

/// llama.cpp's `models/ggml-vocab-NAME.gguf`, or `None` (with the reason printed).
pub fn vocab_file(name: &str) -> Option<PathBuf> {
    let path = llama_refs_dir().join(format!("ggml-vocab-{name}.gguf"));
    if path.is_file() {
        Some(path)
    } else {
        absent(
            &format!("vocab file {}", path.display()),
            "run scripts/fetch-llama-refs, or set FERROX_LLAMA_REFS",
        )
    }
}

/// llama.cpp's `models/templates/NAME` compiled as a chat template (`<s>` and
/// `</s>` as its BOS and EOS), or `None` (reason printed).
pub fn llama_template(name: &str) -> Option<ferrox_text::chat::ChatTemplate> {
    let path = llama_refs_dir().join("templates").join(name);
    let Ok(source) = std::fs::read_to_string(&path) else {
        return absent(
            &format!("chat template {}", path.display()),
            "run scripts/fetch-llama-refs, or set FERROX_LLAMA_REFS",
        )
        .and(None);
    };
    Some(
        ferrox_text::chat::ChatTemplate::jinja(&source, "<s>", "</s>")
            .unwrap_or_else(|e| panic!("{name}: {e}")),
    )
}

/// The GGUF whose tokenizer family `f` copies, or `None` (reason printed).
pub fn family_vocab(f: &family::Family) -> Option<ferrox_gguf::GgufFile> {
    let path = match f.vocab {
        family::VocabSource::VocabFile(name) => vocab_file(name)?,
        family::VocabSource::CatalogModel(name) => real_model(name)?,
    };
    Some(ferrox_gguf::GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn required() -> bool {
    std::env::var("FERROX_REQUIRE_MODELS").is_ok_and(|v| v == "1")
}

fn absent(what: &str, hint: &str) -> Option<PathBuf> {
    assert!(
        !required(),
        "FERROX_REQUIRE_MODELS=1 but {what} is missing ({hint})"
    );
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let line = format!("SKIPPED {test}: {what} is missing ({hint})\n");
    // Written to the stream itself, not through `eprintln!`, which the test
    // harness captures and hides for passing tests.
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    if let Some(log) = std::env::var_os("FERROX_SKIP_LOG") {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
        if let Err(e) = appended {
            eprintln!("cannot record the skip in FERROX_SKIP_LOG: {e}");
        }
    }
    None
}

/// Compute threads for a test that only scores a model (golden outputs,
/// perplexity): one, because the test runner runs two tests at once on CI's
/// two cores, and a second compute thread per test mostly spun waiting for
/// the other (`family_golden`: 385 -> 318 CPU seconds, 208 -> 192 s). A
/// model's bits are the same on any thread count (SPEC S3); the tests of that
/// set their own counts.
pub const TEST_THREADS: usize = 1;

/// The cached file of catalog model `name`, or `None` (with the reason printed).
pub fn real_model(name: &str) -> Option<PathBuf> {
    let model = catalog::find(name).expect("a catalog name");
    match model.cached() {
        Some(p) => Some(p),
        None => absent(
            &format!("model {name}"),
            &format!("run `ferrox pull {name}`, or set FERROX_MODELS_DIR"),
        ),
    }
}

/// The golden reference directory (`FERROX_GOLDEN_DIR`, else the repository's
/// `tests/golden`).
pub fn golden_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("FERROX_GOLDEN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden"));
    if dir.is_dir() {
        Some(dir)
    } else {
        absent(
            &format!("golden directory {}", dir.display()),
            "set FERROX_GOLDEN_DIR",
        )
    }
}

/// The golden file `name` parsed as JSON lines.
pub fn golden_rows(name: &str) -> Option<Vec<serde_json::Value>> {
    let path = golden_dir()?.join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Some(
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("golden JSON"))
            .collect(),
    )
}

/// Options of a tiny random model.
#[derive(Clone, Debug)]
pub struct TinyModel {
    pub architecture: ferrox_models::Architecture,
    pub n_layers: usize,
    /// Gemma 2 and 3: sliding window and one full layer in `pattern` (0: none).
    pub window: usize,
    pub pattern: usize,
    pub seed: u64,
    /// Context length in positions.
    pub context_length: usize,
    /// Multi-token-prediction blocks after the layers (Qwen3.5's MTP head),
    /// full-attention layers sharing the embeddings and head.
    pub draft_blocks: usize,
}

/// The offset and spread of an f32 tensor of the tiny models, by its role
/// (`None`: a quantized matrix, or RoPE factors).
fn tiny_values(t: &Tensor) -> Option<(f32, f32)> {
    Some(match t.role {
        Role::Gain => (1.0, 0.2),
        Role::Bias => (0.0, 0.1),
        Role::RouterBias | Role::Conv => (0.0, 0.5),
        Role::Sinks | Role::Router => (0.0, 1.0),
        Role::DtBias => (1.0, 0.5),
        Role::Decay => (-1.0, 0.9),
        Role::OutputScale => (0.8, 0.2),
        Role::ExpertScale => (1.0, 0.2),
        Role::Embedding
        | Role::Linear
        | Role::Head
        | Role::PerLayerEmbedding
        | Role::RopeFactors => return None,
    })
}

/// Proportional RoPE's factors over `pairs` pairs: a quarter of each head
/// turns, the converter's `1e30` stops the rest.
pub(crate) fn proportional_rope(pairs: usize) -> Vec<f32> {
    (0..pairs)
        .map(|p| if p < pairs / 4 { 1.0 } else { 1e30 })
        .collect()
}

impl TinyModel {
    /// A two-layer tiny model of `architecture` (four for Gemma 4, whose last
    /// two layers share the first two's KV).
    pub fn new(architecture: ferrox_models::Architecture) -> TinyModel {
        TinyModel {
            architecture,
            n_layers: if architecture == ferrox_models::Architecture::Gemma4 {
                4
            } else {
                2
            },
            window: 4,
            pattern: 2,
            seed: 7,
            context_length: 4096,
            draft_blocks: 0,
        }
    }

    /// Writes the model as GGUF bytes: 32-wide embeddings, 4 query heads and 2 kv
    /// heads of 8 dims, a 64-wide feed-forward, a 96-token byte-level vocabulary
    /// (`<|bos|>`, `<|eos|>`, then printable ASCII), weights in a mix of Q8_0, Q4_0,
    /// Q5_1 and F16.
    pub fn gguf(&self) -> Vec<u8> {
        use ferrox_core::DType;
        use ferrox_core::kernels::reference::quantize;
        use ferrox_gguf::{Array, GgufWriter, Value};

        let (d, ff, nh, nkv, hd, vocab) = (32usize, 64usize, 4usize, 2usize, 8usize, 96usize);
        let arch = self.architecture.gguf_name();
        let mut state = self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut rnd = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let mut w = GgufWriter::new();
        let k = |s: &str| format!("{arch}.{s}");
        w.set("general.architecture", Value::String(arch.into()))
            .set("general.name", Value::String(format!("tiny {arch}")))
            .set(
                k("block_count"),
                Value::U32((self.n_layers + self.draft_blocks) as u32),
            )
            .set(k("context_length"), Value::U32(self.context_length as u32))
            .set(k("embedding_length"), Value::U32(d as u32))
            .set(k("feed_forward_length"), Value::U32(ff as u32))
            .set(k("attention.head_count"), Value::U32(nh as u32))
            .set(k("attention.head_count_kv"), Value::U32(nkv as u32))
            .set(k("attention.key_length"), Value::U32(hd as u32))
            .set(k("attention.value_length"), Value::U32(hd as u32))
            .set(k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6))
            .set(k("rope.freq_base"), Value::F32(10000.0));
        let (n_experts, expert_ff) = (8usize, 32usize);
        let moe = matches!(
            self.architecture,
            ferrox_models::Architecture::Qwen3Moe | ferrox_models::Architecture::GptOss
        );
        if self.draft_blocks > 0 {
            w.set(
                k("nextn_predict_layers"),
                Value::U32(self.draft_blocks as u32),
            );
        }
        if moe {
            w.set(k("expert_count"), Value::U32(n_experts as u32))
                .set(k("expert_used_count"), Value::U32(2))
                .set(
                    k("expert_feed_forward_length"),
                    Value::U32(expert_ff as u32),
                );
        }
        if matches!(
            self.architecture,
            ferrox_models::Architecture::Gemma2
                | ferrox_models::Architecture::Gemma3
                | ferrox_models::Architecture::GptOss
        ) {
            w.set(
                k("attention.sliding_window"),
                Value::U32(self.window as u32),
            );
            w.set(
                k("attention.sliding_window_pattern"),
                Value::U32(self.pattern as u32),
            );
        }
        // Qwen3.5: layer 0 a gated delta-net (2 key heads, 4 value heads of 8),
        // the others gated attention.
        let (ssm_k, ssm_v, conv) = (2usize, 4usize, 4usize);
        if self.architecture == ferrox_models::Architecture::Qwen35 {
            let flags = (0..self.n_layers + self.draft_blocks)
                .map(|i| i == 0)
                .collect();
            w.set(k("ssm.conv_kernel"), Value::U32(conv as u32))
                .set(k("ssm.state_size"), Value::U32(hd as u32))
                .set(k("ssm.group_count"), Value::U32(ssm_k as u32))
                .set(k("ssm.time_step_rank"), Value::U32(ssm_v as u32))
                .set(k("ssm.inner_size"), Value::U32((ssm_v * hd) as u32))
                .set(k("rope.dimension_count"), Value::U32(4))
                .set(
                    k("attention.recurrent_layers"),
                    Value::Array(Array::Bool(flags)),
                );
        }
        // Gemma 4: window layers (even) 2 KV heads of 8, full layers 1 of 16
        // with a quarter turned and keys as values; the second half shares the
        // first half's KV and is twice as wide inside; 32-wide per-layer inputs.
        let gemma4 = self.architecture == ferrox_models::Architecture::Gemma4;
        let (full_hd, epl) = (16usize, 32usize);
        let swa = |i: usize| i.is_multiple_of(2);
        let first_shared = self.n_layers.div_ceil(2).max(2);
        let g4 = |i: usize| {
            let (nkv, hd) = if swa(i) { (nkv, hd) } else { (1, full_hd) };
            let ff = if i >= first_shared { 2 * ff } else { ff };
            (nkv, hd, ff)
        };
        if gemma4 {
            let ints = |f: &dyn Fn(usize) -> usize| {
                Value::Array(Array::I32(
                    (0..self.n_layers).map(|i| f(i) as i32).collect(),
                ))
            };
            w.set(
                k("attention.sliding_window"),
                Value::U32(self.window as u32),
            )
            .set(
                k("attention.sliding_window_pattern"),
                Value::Array(Array::Bool((0..self.n_layers).map(swa).collect())),
            )
            .set(k("attention.head_count_kv"), ints(&|i| g4(i).0))
            .set(k("feed_forward_length"), ints(&|i| g4(i).2))
            .set(k("attention.key_length"), Value::U32(full_hd as u32))
            .set(k("attention.value_length"), Value::U32(full_hd as u32))
            .set(k("attention.key_length_swa"), Value::U32(hd as u32))
            .set(k("attention.value_length_swa"), Value::U32(hd as u32))
            .set(k("rope.dimension_count"), Value::U32(full_hd as u32))
            .set(k("rope.dimension_count_swa"), Value::U32(hd as u32))
            .set(k("rope.freq_base_swa"), Value::F32(100.0))
            .set(
                k("attention.shared_kv_layers"),
                Value::U32((self.n_layers - first_shared) as u32),
            )
            .set(
                k("embedding_length_per_layer_input"),
                Value::U32(epl as u32),
            )
            .set(k("final_logit_softcapping"), Value::F32(30.0));
        }
        let mut tokens = vec!["<|bos|>".to_string(), "<|eos|>".to_string()];
        tokens.extend((0x21u8..=0x7E).map(|b| (b as char).to_string()));
        let mut types = vec![3i32, 3];
        types.extend(std::iter::repeat_n(1, vocab - 2));
        w.set("tokenizer.ggml.model", Value::String("gpt2".into()))
            .set("tokenizer.ggml.pre", Value::String("gpt2".into()))
            .set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
            .set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))
            .set("tokenizer.ggml.merges", Value::Array(Array::String(vec![])))
            .set("tokenizer.ggml.bos_token_id", Value::U32(0))
            .set("tokenizer.ggml.eos_token_id", Value::U32(1));
        let file = ferrox_gguf::GgufFile::from_bytes(w.to_bytes()).expect("tiny metadata parses");
        let hp = ferrox_models::HyperParams::from_metadata(&file.header().metadata)
            .expect("tiny keys are valid");
        let types = [DType::Q8_0, DType::Q4_0, DType::Q5_1, DType::F16];
        let mut picked = 0usize;
        for t in self.architecture.tensors().resolve(&hp) {
            if !self.writes(&t) {
                continue;
            }
            let (dtype, values) = match tiny_values(&t) {
                Some((offset, scale)) => (
                    DType::F32,
                    (0..t.shape.iter().product())
                        .map(|_| offset + scale * rnd())
                        .collect(),
                ),
                None if t.role == Role::RopeFactors => (DType::F32, proportional_rope(t.shape[0])),
                None => {
                    picked += 1;
                    let v: Vec<f32> = (0..t.shape.iter().product()).map(|_| rnd() * 0.4).collect();
                    (types[(picked - 1) % types.len()], v)
                }
            };
            let dims: Vec<u64> = t.shape.iter().map(|&s| s as u64).collect();
            w.add_tensor(
                t.name,
                dtype,
                &dims,
                quantize(dtype, &values).expect("tiny shapes are whole blocks"),
            )
            .expect("valid tensor");
        }
        w.to_bytes()
    }

    /// Whether the tiny file has tensor `t`: every required one, an own head
    /// for Llama, Phi-3 and gpt-oss, RoPE factors for Gemma 4 only, and values
    /// on Gemma 4's window layers only (its full layers use their keys).
    fn writes(&self, t: &Tensor) -> bool {
        use ferrox_models::Architecture as A;
        let arch = self.architecture;
        let is = |name: &str| t.name == full_name(name, t.layer);
        if t.required {
            return true;
        }
        if t.alternative {
            return false;
        }
        if is(names::OUTPUT) {
            return matches!(arch, A::Llama | A::Phi3 | A::GptOss);
        }
        // A draft block shares the embeddings and head (as Qwen3.5's does).
        if is(names::NEXTN_EMBED_TOKENS) || is(names::NEXTN_SHARED_HEAD_HEAD) {
            return false;
        }
        if t.role == Role::RopeFactors {
            return arch == A::Gemma4;
        }
        if is(names::ATTN_V) {
            return t.layer.is_some_and(|i| i.is_multiple_of(2));
        }
        true
    }

    /// The model loaded, on `threads` threads, on the default activation path.
    pub fn load(&self, threads: usize) -> ferrox_models::Transformer {
        self.load_with(threads, ferrox_models::ActivationPath::default())
    }

    /// The model loaded for the given activation path.
    pub fn load_with(
        &self,
        threads: usize,
        path: ferrox_models::ActivationPath,
    ) -> ferrox_models::Transformer {
        let file = ferrox_gguf::GgufFile::from_bytes(self.gguf()).expect("tiny model parses");
        ferrox_models::Transformer::with_path(file, threads, path).expect("tiny model loads")
    }
}
