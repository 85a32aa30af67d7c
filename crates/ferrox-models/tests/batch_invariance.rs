//! SPEC S3 at the model level: a prompt's logits are bit-identical whether it runs
//! as one span or in spans of 1, 2, 5 and 64 tokens, and a sequence's decode logits
//! are bit-identical alone and beside 8 other sequences in one forward call.
//! On tiny random models of each architecture, and on SmolLM2.

use ferrox_gguf::GgufFile;
use ferrox_models::decoder::{Decoder, Span, Want};
use ferrox_models::kv_store::{KvElement, KvStore, PageTable};
use ferrox_models::{ActivationPath, Architecture, Transformer};
use ferrox_testkit::{TinyModel, real_model};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Every token's logits of `prompt`, fed in spans of `chunk` tokens.
fn prompt_logits(
    m: &Transformer,
    cache: &mut KvStore,
    prompt: &[u32],
    chunk: usize,
) -> Vec<Vec<u32>> {
    let seq = cache.fresh_table(prompt.len());
    let mut rows = Vec::new();
    for (i, piece) in prompt.chunks(chunk).enumerate() {
        let l = m
            .forward(
                cache,
                &[Span {
                    pages: &seq,
                    start: i * chunk,
                    tokens: piece,
                    want: Want::All,
                }],
            )
            .unwrap();
        rows.extend((0..piece.len()).map(|t| bits(l.logits.of(0, t).unwrap())));
    }
    rows
}

fn check_prompt_chunking(m: &Transformer, prompt: &[u32], kv: KvElement) {
    let mut cache = m.kv_store(kv, 4).unwrap();
    let whole = prompt_logits(m, &mut cache, prompt, prompt.len());
    assert_eq!(whole.len(), prompt.len());
    for chunk in [1, 2, 5, 64] {
        assert_eq!(
            prompt_logits(m, &mut cache, prompt, chunk),
            whole,
            "spans of {chunk}"
        );
    }
}

/// A store with each of `prompts` prefilled in its own sequence.
fn prefilled(m: &Transformer, prompts: &[Vec<u32>; 9], kv: KvElement) -> (KvStore, Vec<PageTable>) {
    let mut cache = m.kv_store(kv, 4).unwrap();
    let seqs: Vec<_> = prompts
        .iter()
        .map(|p| cache.fresh_table(p.len() + 1))
        .collect();
    for (s, p) in seqs.iter().zip(prompts) {
        m.forward(
            &mut cache,
            &[Span {
                pages: s,
                start: 0,
                tokens: p,
                want: Want::Nothing,
            }],
        )
        .unwrap();
    }
    (cache, seqs)
}

/// Decode logits of sequence 0 alone, then beside 8 other sequences (on a
/// second store prefilled the same way: a recurrent state cannot step twice
/// from one position).
fn check_decode_batching(m: &Transformer, prompts: &[Vec<u32>; 9], next: u32, kv: KvElement) {
    let (mut cache, seqs) = prefilled(m, prompts, kv);
    let tok = [next];
    let alone = m
        .forward(
            &mut cache,
            &[Span {
                pages: &seqs[0],
                start: prompts[0].len(),
                tokens: &tok,
                want: Want::Last,
            }],
        )
        .unwrap();
    let toks: Vec<[u32; 1]> = (0..9).map(|i| [(next + i as u32) % 90 + 2]).collect();
    let mut spans: Vec<Span<'_>> = seqs
        .iter()
        .zip(prompts)
        .zip(&toks)
        .map(|((s, p), t)| Span {
            pages: s,
            start: p.len(),
            tokens: t,
            want: Want::Last,
        })
        .collect();
    spans[0].tokens = &tok;
    spans.rotate_left(4); // sequence 0 is not first in the batch
    let (mut fresh, _) = prefilled(m, prompts, kv);
    let together = m.forward(&mut fresh, &spans).unwrap();
    assert_eq!(
        bits(alone.logits.last_of(0).unwrap()),
        bits(together.logits.last_of(5).unwrap())
    );
}

fn tiny_prompts() -> [Vec<u32>; 9] {
    std::array::from_fn(|i| {
        (0..(7 + 3 * i))
            .map(|j| ((j * 31 + i * 17) % 94 + 2) as u32)
            .collect()
    })
}

#[test]
fn tiny_models_give_identical_logits_for_any_prompt_chunking() {
    let prompt: Vec<u32> = (0..40).map(|j| (j * 37 % 94 + 2) as u32).collect();
    for arch in Architecture::ALL {
        for path in [ActivationPath::Int16, ActivationPath::F32] {
            let m = TinyModel::new(arch).load_with(2, path);
            for kv in [KvElement::F32, KvElement::F16] {
                check_prompt_chunking(&m, &prompt, kv);
            }
        }
    }
}

#[test]
fn tiny_models_give_identical_decode_logits_alone_and_beside_eight_others() {
    for arch in Architecture::ALL {
        for path in [ActivationPath::Int16, ActivationPath::F32] {
            let m = TinyModel::new(arch).load_with(2, path);
            for kv in [KvElement::F32, KvElement::F16] {
                check_decode_batching(&m, &tiny_prompts(), 40, kv);
            }
        }
    }
}

/// On four threads one sequence's decode has fewer tasks than threads (two KV
/// heads): each KV head's query heads are split across tasks, each reading
/// the KV again. Beside eight others it is not split: the bits agree.
#[test]
fn decode_with_query_heads_split_across_threads_gives_the_batched_bits() {
    for arch in Architecture::ALL {
        let m = TinyModel::new(arch).load_with(4, ActivationPath::Int16);
        check_decode_batching(&m, &tiny_prompts(), 40, KvElement::F16);
    }
}

/// Prompts whose first runs past two softmax chunks (256 keys each).
fn long_prompts() -> [Vec<u32>; 9] {
    let mut prompts = tiny_prompts();
    prompts[0] = (0..600).map(|j| ((j * 29 + 5) % 94 + 2) as u32).collect();
    prompts
}

/// Deep in a context one sequence's decode cuts each KV head's keys into
/// pieces of whole chunks, each on its own task, their chunks folded after;
/// beside eight others (or on one thread) a task takes all of them: the bits
/// agree.
#[test]
fn decode_with_keys_cut_into_pieces_gives_the_whole_bits() {
    for arch in Architecture::ALL {
        let m = TinyModel::new(arch).load_with(4, ActivationPath::Int16);
        check_decode_batching(&m, &long_prompts(), 40, KvElement::F16);
        let one = TinyModel::new(arch).load_with(1, ActivationPath::Int16);
        let decode = |m: &Transformer| {
            let (mut cache, seqs) = prefilled(m, &long_prompts(), KvElement::F32);
            let span = Span {
                pages: &seqs[0],
                start: 600,
                tokens: &[40],
                want: Want::Last,
            };
            bits(
                m.forward(&mut cache, &[span])
                    .unwrap()
                    .logits
                    .last_of(0)
                    .unwrap(),
            )
        };
        assert_eq!(decode(&m), decode(&one), "{arch:?}");
    }
}

/// A prompt past two chunks gives the same bits in one span as in spans of
/// 1 and 97 tokens (rows whose keys end inside a chunk, tasks whose keys
/// start inside one).
#[test]
fn long_prompts_give_identical_logits_for_any_chunking() {
    for arch in Architecture::ALL {
        let m = TinyModel::new(arch).load_with(2, ActivationPath::Int16);
        let prompt = &long_prompts()[0];
        let mut cache = m.kv_store(KvElement::F16, 16).unwrap();
        let whole = prompt_logits(&m, &mut cache, prompt, prompt.len());
        for chunk in [1, 97] {
            let got = prompt_logits(&m, &mut cache, prompt, chunk);
            assert_eq!(got, whole, "{arch:?}, spans of {chunk}");
        }
    }
}

/// With every layer windowed, position p sees only tokens p - layers * (window - 1)
/// and later: changing earlier tokens leaves its logits bit-identical, changing a
/// token inside that range does not. Exercises the window mask and the window pages
/// across several spans.
#[test]
fn window_layers_see_only_their_window() {
    let tiny = TinyModel {
        architecture: Architecture::Gemma3,
        n_layers: 2,
        window: 4,
        pattern: 100,
        seed: 11,
        context_length: 256,
        draft_blocks: 0,
    };
    let m = tiny.load(2);
    let reach = 2 * (4 - 1);
    let base: Vec<u32> = (0..30).map(|j| (j * 13 % 94 + 2) as u32).collect();
    let last = |prompt: &[u32]| {
        let mut cache = KvStore::new(m.kv_layout(), 4);
        let seq = cache.fresh_table(prompt.len());
        let l = m
            .forward(
                &mut cache,
                &[Span {
                    pages: &seq,
                    start: 0,
                    tokens: prompt,
                    want: Want::Last,
                }],
            )
            .unwrap();
        bits(l.logits.last_of(0).unwrap())
    };
    let want = last(&base);
    let mut far = base.clone();
    for t in far.iter_mut().take(29 - reach) {
        *t = 2 + (*t + 5) % 94;
    }
    assert_eq!(
        last(&far),
        want,
        "tokens outside the window changed the logits"
    );
    let mut near = base.clone();
    near[29 - reach] = 2 + (near[29 - reach] + 5) % 94;
    assert_ne!(last(&near), want, "a token inside the window had no effect");
}

/// A verified draft on a hybrid model (Qwen3.5): `Want::Verify` gives the
/// logits from its pending token on, bit for bit those of `Want::All`, and
/// keeps the recurrent state after the pending token; restored, that state
/// continues exactly as a sequence that never ran the draft.
#[test]
fn a_verify_span_keeps_the_state_after_its_pending_token() {
    let m = TinyModel::new(Architecture::Qwen35).load(2);
    let prompt: Vec<u32> = (0..11).map(|j| (j * 29 % 94 + 2) as u32).collect();
    let (n, run, next) = (prompt.len(), [5u32, 9, 14, 3], [41u32, 7]);
    fn span<'a>(pages: &'a PageTable, start: usize, tokens: &'a [u32], want: Want) -> Span<'a> {
        Span {
            pages,
            start,
            tokens,
            want,
        }
    }
    let prefill = |cache: &mut KvStore, seq: &PageTable| {
        m.forward(cache, &[span(seq, 0, &prompt, Want::Nothing)])
            .unwrap();
    };
    // The draft run with every row's logits, on a store of its own.
    let mut plain = KvStore::new(m.kv_layout(), 4);
    let seq = plain.fresh_table(n + 6);
    prefill(&mut plain, &seq);
    let all = m
        .forward(&mut plain, &[span(&seq, n, &run, Want::All)])
        .unwrap();
    // The same run verified: one token run again, then the pending one.
    let mut cache = KvStore::new(m.kv_layout(), 4);
    let seq = cache.fresh_table(n + 6);
    let spare = cache.fresh_table(1).state.unwrap();
    prefill(&mut cache, &seq);
    let verify = Want::Verify {
        from: 1,
        keep: Some(spare),
    };
    let out = m
        .forward(&mut cache, &[span(&seq, n, &run, verify)])
        .unwrap();
    let rows: Vec<_> = out.logits.rows_of(0).map(|(j, r)| (j, bits(r))).collect();
    let want: Vec<_> = (1..4)
        .map(|j| (j, bits(all.logits.of(0, j).unwrap())))
        .collect();
    assert_eq!(rows, want);
    // Taken back to the kept state, the sequence goes on from position n + 2.
    cache.copy_state(spare, seq.state.unwrap());
    let after = m
        .forward(&mut cache, &[span(&seq, n + 2, &next, Want::All)])
        .unwrap();
    let mut fresh = KvStore::new(m.kv_layout(), 4);
    let seq = fresh.fresh_table(n + 6);
    prefill(&mut fresh, &seq);
    m.forward(&mut fresh, &[span(&seq, n, &run[..2], Want::Nothing)])
        .unwrap();
    let direct = m
        .forward(&mut fresh, &[span(&seq, n + 2, &next, Want::All)])
        .unwrap();
    assert_eq!(bits(&after.logits.data), bits(&direct.logits.data));
    // The live state moved past the draft: it cannot go on from n + 2.
    let e = m
        .forward(&mut cache, &[span(&seq, n + 2, &next, Want::Last)])
        .unwrap_err();
    assert!(e.to_string().contains("recurrent-state slot"), "{e}");
}

#[test]
fn forward_refuses_tokens_outside_the_vocabulary_and_spans_past_their_kv() {
    let m = TinyModel::new(Architecture::Llama).load(1);
    let mut cache = KvStore::new(m.kv_layout(), 4);
    let seq = cache.fresh_table(4);
    let e = m
        .forward(
            &mut cache,
            &[Span {
                pages: &seq,
                start: 0,
                tokens: &[500],
                want: Want::Last,
            }],
        )
        .unwrap_err();
    assert!(e.to_string().contains("outside the vocabulary"), "{e}");
    let e = m
        .forward(
            &mut cache,
            &[Span {
                pages: &seq,
                start: 2,
                tokens: &[3, 4, 5],
                want: Want::Last,
            }],
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("position 4 of positions 2..5 has no KV page"),
        "{e}"
    );
}

#[test]
fn real_model_smollm2_logits_are_batch_invariant() {
    let Some(path) = real_model("smollm2-135m") else {
        return;
    };
    let m = Transformer::new(GgufFile::open(path).unwrap(), 2).unwrap();
    let prompt: Vec<u32> = vec![
        504, 3575, 282, 4649, 314, 7042, 30, 198, 198, 504, 2988, 314,
    ];
    let prompts: [Vec<u32>; 9] = std::array::from_fn(|i| prompt[..3 + i].to_vec());
    // The tiny models' 8-wide heads cannot take q8_0's blocks of 32.
    for kv in [KvElement::F16, KvElement::Q8_0, KvElement::Q4_0] {
        check_prompt_chunking(&m, &prompt, kv);
        check_decode_batching(&m, &prompts, 260, kv);
    }
}

/// The tiny llama model with `meta` set and an extra F32 tensor per `extra`, loaded.
fn load_edited(meta: &[(&str, ferrox_gguf::Value)], extra: &[(&str, usize)]) -> String {
    use ferrox_gguf::GgufFile;
    let bytes = TinyModel::new(Architecture::Llama).gguf();
    let file = GgufFile::from_bytes(bytes).unwrap();
    let mut w = ferrox_gguf::GgufWriter::new();
    for (k, v) in file.header().metadata.iter() {
        w.set(k, v.clone());
    }
    for (k, v) in meta {
        w.set(*k, v.clone());
    }
    for t in file.tensors() {
        w.add_tensor(t.info.name.clone(), t.dtype(), t.shape(), t.data.to_vec())
            .unwrap();
    }
    for (name, len) in extra {
        let data = vec![0u8; 4 * len];
        w.add_tensor(
            name.to_string(),
            ferrox_core::DType::F32,
            &[*len as u64],
            data,
        )
        .unwrap();
    }
    match Transformer::new(GgufFile::from_bytes(w.to_bytes()).unwrap(), 1) {
        Ok(_) => "loaded".into(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn what_is_not_implemented_is_refused_by_name() {
    use ferrox_gguf::Value;
    let e = load_edited(
        &[("llama.rope.scaling.type", Value::String("dynamic".into()))],
        &[],
    );
    assert!(
        e.contains("rope.scaling.type") && e.contains("dynamic"),
        "{e}"
    );
    let e = load_edited(&[("llama.expert_count", Value::U32(8))], &[]);
    assert!(e.contains("mixture-of-experts"), "{e}");
    let e = load_edited(&[], &[("blk.1.attn_q_norm.weight", 8)]);
    assert!(
        e.contains("blk.1.attn_q_norm.weight") && e.contains("llama"),
        "{e}"
    );
    // What is implemented loads: YaRN, linear scaling and llama3 frequency factors.
    let yarn = [
        ("llama.rope.scaling.type", Value::String("yarn".into())),
        ("llama.rope.scaling.factor", Value::F32(4.0)),
    ];
    assert_eq!(load_edited(&yarn, &[]), "loaded");
    assert_eq!(load_edited(&[], &[("rope_freqs.weight", 4)]), "loaded");
    let e = load_edited(&[], &[("rope_freqs.weight", 3)]);
    assert!(e.contains("rope_freqs.weight"), "{e}");
}
