//! The decoder-only transformer of the llama family (Llama, SmolLM, Mistral, Qwen2)
//! and of Gemma 3, on f32 activations.
//!
//! Per layer (llama.cpp's graph for these architectures):
//! * `h = rmsnorm(x) * attn_norm`; `q, k, v = h Wq (+bq), h Wk (+bk), h Wv (+bv)`;
//!   Gemma: per-head RMS QK-norm; RoPE (normal pairs for llama, NeoX for Qwen2 and
//!   Gemma; Gemma's window layers use their own base);
//! * causal attention with scale `1/sqrt(head_dim)`, over the last `window`
//!   positions on window layers; `o = attn Wo` (Gemma: `rmsnorm(o) * post_attn_norm`);
//!   `x += o`;
//! * `h = rmsnorm(x) * ffn_norm`; `f = (act(h Wgate) * h Wup) Wdown`, act = SiLU
//!   (llama) or tanh-GELU (Gemma) (Gemma: `rmsnorm(f) * post_ffw_norm`); `x += f`.
//!
//! Embeddings are scaled by `sqrt(n_embd)` for Gemma; logits are
//! `rmsnorm(x) * output_norm` times the output matrix (tied to the embeddings when
//! the file has no `output.weight`).
//!
//! Invariants: every per-token computation is independent of the other tokens in
//! the call (matmul and attention reduce in fixed orders, SPEC S3), and attention
//! reads KV in runs that end at page boundaries only, so a position's numbers do
//! not depend on which pages (shared or private) hold its history.

use ferrox_core::ops::activation::{Gate, gated};
use ferrox_core::ops::exp::exp_shifted;
use ferrox_core::ops::matmul::matmul;
use ferrox_core::ops::norm::{rms_norm, rms_norm_each};
use ferrox_core::ops::rope::{self, RopeStyle};
use ferrox_core::ops::vector::{self, scaled_dots_heads, weighted_sum_heads};
use ferrox_core::packed::{PackedMatrix, QuantizedRows, packed_matmul, packed_matmul_many};
use ferrox_gguf::GgufFile;
use rayon::prelude::*;

use crate::activation_path::ActivationPath;
use crate::decoder::{Decoder, Logits, Span, Want};
use crate::error::ModelError;
use crate::hparams::{Architecture, HyperParams};
use crate::kv_store::{KvStore, LayerSlot};
use crate::weights::{TensorRef, Weights};

/// A loaded model, ready to run.
pub struct Transformer {
    file: GgufFile,
    hp: HyperParams,
    weights: Weights,
    pool: rayon::ThreadPool,
    rope_style: RopeStyle,
    embd_scale: Option<f32>,
    act: Gate,
    path: ActivationPath,
    /// The repacked matrices of the integer path (`None` per matrix whose type has
    /// no packed form, and for the f32 path).
    packed: PackedWeights,
}

/// Repacked copies of every matrix the integer path multiplies by.
#[derive(Default)]
struct PackedWeights {
    /// Per layer: wq, wk, wv, wo, gate, up, down.
    layers: Vec<[Option<PackedMatrix>; 7]>,
    output: Option<PackedMatrix>,
}

/// An input of the matrix products: `n` rows of f32, and their quantized form on
/// the integer path (made once, shared by every product of the same input).
struct Input<'a> {
    x: &'a [f32],
    n: usize,
    q: Option<&'a QuantizedRows>,
}

impl std::fmt::Debug for Transformer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transformer")
            .field("hp", &self.hp)
            .finish_non_exhaustive()
    }
}

/// A token of the batch: its span, its index in the span, its position.
#[derive(Clone, Copy)]
struct Slot {
    span: usize,
    index: usize,
    pos: usize,
}

impl Transformer {
    /// Loads the model in `file`, running on `threads` threads, on the default
    /// (integer-activation) path.
    pub fn new(file: GgufFile, threads: usize) -> Result<Transformer, ModelError> {
        Self::with_path(file, threads, ActivationPath::default())
    }

    /// Loads the model in `file` for the given activation path.
    pub fn with_path(
        file: GgufFile,
        threads: usize,
        path: ActivationPath,
    ) -> Result<Transformer, ModelError> {
        let hp = HyperParams::from_metadata(&file.header().metadata)?;
        let weights = Weights::load(&file, &hp)?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|i| format!("ferrox-compute-{i}"))
            .build()
            .map_err(|e| ModelError::KvPlan(format!("cannot start compute threads: {e}")))?;
        let (rope_style, embd_scale, act) = match hp.architecture {
            Architecture::Llama => (RopeStyle::Normal, None, Gate::Silu),
            Architecture::Qwen2 => (RopeStyle::Neox, None, Gate::Silu),
            Architecture::Gemma3 => (
                RopeStyle::Neox,
                Some((hp.n_embd as f32).sqrt()),
                Gate::GeluTanh,
            ),
        };
        let packed = match path {
            ActivationPath::F32 => PackedWeights::default(),
            ActivationPath::Int16 => {
                let pack = |t: &TensorRef| PackedMatrix::pack(&t.matrix(&file), &pool);
                PackedWeights {
                    layers: weights
                        .layers
                        .iter()
                        .map(|l| {
                            [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down].map(pack)
                        })
                        .collect(),
                    output: pack(&weights.output),
                }
            }
        };
        Ok(Transformer {
            file,
            hp,
            weights,
            pool,
            rope_style,
            embd_scale,
            act,
            path,
            packed,
        })
    }

    /// Bytes of the repacked weight copies (0 on the f32 path).
    pub fn packed_bytes(&self) -> usize {
        let p = &self.packed;
        p.layers
            .iter()
            .flatten()
            .chain([&p.output])
            .flatten()
            .map(PackedMatrix::byte_len)
            .sum()
    }

    /// The activation path this model runs.
    pub fn activation_path(&self) -> ActivationPath {
        self.path
    }

    /// Quantizes `x` into `buf` when the integer path runs, and returns the input.
    /// `consumers` are the packed forms of the matrices that take this input: it is
    /// quantized only when one of them is packed.
    fn input<'a>(
        &self,
        x: &'a [f32],
        n: usize,
        cols: usize,
        consumers: &[Option<PackedMatrix>],
        buf: &'a mut QuantizedRows,
    ) -> Input<'a> {
        let q = (self.path == ActivationPath::Int16
            && cols.is_multiple_of(ferrox_core::packed::BLOCK)
            && consumers.iter().any(Option::is_some))
        .then(|| {
            buf.quantize(x, n, cols);
            &*buf
        });
        Input { x, n, q }
    }

    /// `out = input * W`, on the packed matrix when there is one.
    fn project(
        &self,
        w: &TensorRef,
        packed: Option<&PackedMatrix>,
        input: &Input<'_>,
        out: &mut [f32],
    ) {
        self.project_many(input, &mut [(w, packed, out)]);
    }

    /// [`Self::project`] for several matrices of the same input, in one parallel
    /// region when all are packed.
    fn project_many(
        &self,
        input: &Input<'_>,
        jobs: &mut [(&TensorRef, Option<&PackedMatrix>, &mut [f32])],
    ) {
        if let Some(q) = input.q
            && jobs.iter().all(|j| j.1.is_some())
        {
            let mut packed: Vec<(&PackedMatrix, &mut [f32])> = jobs
                .iter_mut()
                .filter_map(|(_, p, out)| p.map(|p| (p, &mut **out)))
                .collect();
            packed_matmul_many(&mut packed, q, &self.pool);
            return;
        }
        for (w, p, out) in jobs.iter_mut() {
            match (p, input.q) {
                (Some(p), Some(q)) => packed_matmul(p, q, out, &self.pool),
                _ => matmul(&w.matrix(&self.file), input.x, input.n, out, &self.pool),
            }
        }
    }

    /// The file the model was loaded from.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    fn check(&self, store: &KvStore, spans: &[Span<'_>]) -> Result<(), ModelError> {
        for (i, s) in spans.iter().enumerate() {
            if let Some(&bad) = s.tokens.iter().find(|&&t| t as usize >= self.hp.vocab_size) {
                return Err(ModelError::Forward(format!(
                    "span {i}: token {bad} is outside the vocabulary of {}",
                    self.hp.vocab_size
                )));
            }
            let end = s.start + s.tokens.len();
            if let Err(p) = store.check_covers(s.pages, s.start, end) {
                return Err(ModelError::Forward(format!(
                    "span {i}: position {p} of positions {}..{end} has no KV page",
                    s.start
                )));
            }
        }
        Ok(())
    }

    /// Runs every span. Returns the logits of the wanted tokens, one row per
    /// `(span, index)` pushed on `keys`, in slot order (span by span, token by token).
    fn round(
        &self,
        cache: &mut KvStore,
        spans: &[Span<'_>],
        keys: &mut Vec<(usize, usize)>,
    ) -> Vec<f32> {
        let hp = &self.hp;
        let d = hp.n_embd;
        let slots: Vec<Slot> = spans
            .iter()
            .enumerate()
            .flat_map(|(si, s)| {
                (0..s.tokens.len()).map(move |i| Slot {
                    span: si,
                    index: i,
                    pos: s.start + i,
                })
            })
            .collect();
        let n = slots.len();
        if n == 0 {
            return Vec::new();
        }
        let tokens: Vec<u32> = spans
            .iter()
            .flat_map(|s| s.tokens.iter().copied())
            .collect();
        let (nh, nkv, dk, dv) = (hp.n_heads, hp.n_kv_heads, hp.head_dim_k, hp.head_dim_v);
        let (qd, kd, vd) = (nh * dk, nkv * dk, nkv * dv);
        let embd = self.weights.token_embd.matrix(&self.file);
        let mut x = vec![0.0f32; n * d];
        for (row, &t) in x.chunks_exact_mut(d).zip(&tokens) {
            embd.dequantize_row(t as usize, row);
            if let Some(s) = self.embd_scale {
                row.iter_mut().for_each(|v| *v *= s);
            }
        }
        let mut h = vec![0.0f32; n * d];
        let (mut q, mut k, mut v) = (
            vec![0.0f32; n * qd],
            vec![0.0f32; n * kd],
            vec![0.0f32; n * vd],
        );
        let mut att = vec![0.0f32; n * nh * dv];
        let mut o = vec![0.0f32; n * d];
        let (mut g, mut u) = (vec![0.0f32; n * hp.n_ff], vec![0.0f32; n * hp.n_ff]);
        let half = hp.rope_dim / 2;
        // RoPE angles of every token, once per base (not once per layer).
        let table = |base: f32| {
            let (mut cos, mut sin) = (vec![0.0f32; n * half], vec![0.0f32; n * half]);
            for (t, s) in slots.iter().enumerate() {
                rope::angles(
                    s.pos,
                    hp.rope_dim,
                    base,
                    &mut cos[t * half..(t + 1) * half],
                    &mut sin[t * half..(t + 1) * half],
                );
            }
            (cos, sin)
        };
        let global_angles = table(hp.rope_freq_base);
        let local_angles =
            (hp.rope_freq_base_local != hp.rope_freq_base).then(|| table(hp.rope_freq_base_local));
        let scale = 1.0 / (dk as f32).sqrt();
        let group = nh / nkv;
        let mut qbuf = QuantizedRows::default();
        let none: [Option<PackedMatrix>; 7] = Default::default();
        for (li, lw) in self.weights.layers.iter().enumerate() {
            let p = self.packed.layers.get(li).unwrap_or(&none);
            h.copy_from_slice(&x);
            h.chunks_exact_mut(d)
                .for_each(|r| rms_norm(r, &lw.attn_norm, hp.rms_eps));
            let input = self.input(&h, n, d, &p[..3], &mut qbuf);
            self.project_many(
                &input,
                &mut [
                    (&lw.wq, p[0].as_ref(), &mut q),
                    (&lw.wk, p[1].as_ref(), &mut k),
                    (&lw.wv, p[2].as_ref(), &mut v),
                ],
            );
            for (buf, bias, w) in [
                (&mut q, &lw.bq, qd),
                (&mut k, &lw.bk, kd),
                (&mut v, &lw.bv, vd),
            ] {
                if let Some(b) = bias {
                    buf.chunks_exact_mut(w)
                        .for_each(|r| r.iter_mut().zip(b).for_each(|(x, y)| *x += y));
                }
            }
            if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
                rms_norm_each(&mut q, dk, qn, hp.rms_eps);
                rms_norm_each(&mut k, dk, kn, hp.rms_eps);
            }
            // Window layers turn with their own RoPE base (Gemma 3's local layers).
            let window = match cache.layout().layers[li] {
                LayerSlot::Full(_) => None,
                LayerSlot::Window(_, w) => Some(w),
            };
            let (cos, sin) = match (window, &local_angles) {
                (Some(_), Some(local)) => local,
                _ => &global_angles,
            };
            for (t, s) in slots.iter().enumerate() {
                let (c, sn) = (
                    &cos[t * half..(t + 1) * half],
                    &sin[t * half..(t + 1) * half],
                );
                rope::apply(
                    &mut q[t * qd..(t + 1) * qd],
                    dk,
                    hp.rope_dim,
                    self.rope_style,
                    c,
                    sn,
                );
                rope::apply(
                    &mut k[t * kd..(t + 1) * kd],
                    dk,
                    hp.rope_dim,
                    self.rope_style,
                    c,
                    sn,
                );
                cache.write(
                    spans[s.span].pages,
                    li,
                    s.pos,
                    &k[t * kd..(t + 1) * kd],
                    &v[t * vd..(t + 1) * vd],
                );
            }
            let cache_ref: &KvStore = cache;
            let q_ref = &q;
            self.pool.install(|| {
                // One task per token and KV head: its query heads read each key
                // and value once; every head keeps its own order (SPEC S3).
                att.par_chunks_mut(group * dv).enumerate().for_each_init(
                    Vec::new,
                    |scores, (i, out)| {
                        let (t, kvh) = (i / nkv, i % nkv);
                        let s = slots[t];
                        let seq = spans[s.span].pages;
                        let lo = window.map_or(0, |w| (s.pos + 1).saturating_sub(w));
                        let n_keys = s.pos + 1 - lo;
                        let qs = &q_ref[t * qd + kvh * group * dk..t * qd + (kvh + 1) * group * dk];
                        scores.clear();
                        scores.resize(group * n_keys, 0.0);
                        let mut j = 0;
                        cache_ref.for_each_run(seq, li, kvh, lo, s.pos + 1, |_, keys, _| {
                            scaled_dots_heads(qs, dk, keys, scale, scores, n_keys, j);
                            j += keys.len() / dk;
                        });
                        for sc in scores.chunks_exact_mut(n_keys) {
                            let max = vector::max(sc);
                            exp_shifted(sc, max);
                        }
                        out.fill(0.0);
                        let mut j = 0;
                        cache_ref.for_each_run(seq, li, kvh, lo, s.pos + 1, |_, _, values| {
                            let m = values.len() / dv;
                            weighted_sum_heads(out, dv, scores, n_keys, j, m, values);
                            j += m;
                        });
                        for (g, o) in out.chunks_exact_mut(dv).enumerate() {
                            let inv = 1.0 / vector::sum(&scores[g * n_keys..(g + 1) * n_keys]);
                            o.iter_mut().for_each(|x| *x *= inv);
                        }
                    },
                );
            });
            let input = self.input(&att, n, nh * dv, &p[3..4], &mut qbuf);
            self.project(&lw.wo, p[3].as_ref(), &input, &mut o);
            if let Some(w) = &lw.attn_post_norm {
                o.chunks_exact_mut(d)
                    .for_each(|r| rms_norm(r, w, hp.rms_eps));
            }
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            h.copy_from_slice(&x);
            h.chunks_exact_mut(d)
                .for_each(|r| rms_norm(r, &lw.ffn_norm, hp.rms_eps));
            let input = self.input(&h, n, d, &p[4..6], &mut qbuf);
            self.project_many(
                &input,
                &mut [
                    (&lw.w_gate, p[4].as_ref(), &mut g),
                    (&lw.w_up, p[5].as_ref(), &mut u),
                ],
            );
            // Element-wise, so splitting it across threads changes no value.
            let act = self.act;
            g.par_chunks_mut(4096)
                .zip(u.par_chunks(4096))
                .for_each(|(gc, uc)| gated(gc, uc, act));
            let input = self.input(&g, n, hp.n_ff, &p[6..7], &mut qbuf);
            self.project(&lw.w_down, p[6].as_ref(), &input, &mut o);
            if let Some(w) = &lw.ffn_post_norm {
                o.chunks_exact_mut(d)
                    .for_each(|r| rms_norm(r, w, hp.rms_eps));
            }
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
        }
        let wanted: Vec<usize> = (0..n)
            .filter(|&t| {
                let s = slots[t];
                let span = &spans[s.span];
                match span.want {
                    Want::Nothing => false,
                    Want::All => true,
                    Want::Last => s.index + 1 == span.tokens.len(),
                }
            })
            .collect();
        if wanted.is_empty() {
            return Vec::new();
        }
        let mut rows = vec![0.0f32; wanted.len() * d];
        for (r, &t) in rows.chunks_exact_mut(d).zip(&wanted) {
            r.copy_from_slice(&x[t * d..(t + 1) * d]);
            rms_norm(r, &self.weights.output_norm, hp.rms_eps);
        }
        let vocab = hp.vocab_size;
        let mut logits = vec![0.0f32; wanted.len() * vocab];
        let input = self.input(
            &rows,
            wanted.len(),
            d,
            std::slice::from_ref(&self.packed.output),
            &mut qbuf,
        );
        self.project(
            &self.weights.output,
            self.packed.output.as_ref(),
            &input,
            &mut logits,
        );
        keys.extend(wanted.iter().map(|&t| (slots[t].span, slots[t].index)));
        logits
    }
}

impl Decoder for Transformer {
    fn forward(&self, store: &mut KvStore, spans: &[Span<'_>]) -> Result<Logits, ModelError> {
        self.check(store, spans)?;
        // The whole pass runs on a pool thread: each parallel region inside then
        // costs about a microsecond instead of a cross-thread hand-off.
        let mut index = Vec::new();
        let data = self.pool.install(|| self.round(store, spans, &mut index));
        Ok(Logits {
            vocab: self.hp.vocab_size,
            data,
            index,
        })
    }

    fn hyper_params(&self) -> &HyperParams {
        &self.hp
    }
}
