//! What a drafted row costs: the time of one sequence's step that verifies
//! `K` drafted tokens (a span of `1 + K` tokens with logits on every row,
//! as speculative decoding runs it) against the one-token step, at a depth
//! of `DEPTH` positions of context, on `THREADS` threads; the median of
//! `ROUNDS` steps per `K`, alternated. The replay of a drafting policy
//! scores a step as `1 + c K`; this prints `c`:
//! `cargo run --release -p ferrox-models --example verify_speed -- MODEL.gguf [DEPTH THREADS ROUNDS [K ...]]`.

use std::time::Instant;

use ferrox_gguf::GgufFile;
use ferrox_models::ActivationPath;
use ferrox_models::decoder::{Span, Want};
use ferrox_models::kv_store::KvElement;
use ferrox_models::model::Model;

/// Drafted tokens measured when the command names none.
const DRAFTS: [usize; 5] = [2, 4, 8, 16, 32];
/// KV positions a page (the engine's default).
const PAGE: usize = 16;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        panic!("usage: verify_speed MODEL.gguf [DEPTH THREADS ROUNDS [K ...]]");
    };
    let num =
        |i: usize, default: usize| args.get(i).map_or(default, |a| a.parse().expect("a count"));
    let (depth, threads, rounds) = (num(1, 400), num(2, 2), num(3, 31));
    let mut drafts: Vec<usize> = args
        .iter()
        .skip(4)
        .map(|a| a.parse().expect("a count"))
        .collect();
    if drafts.is_empty() {
        drafts = DRAFTS.to_vec();
    }
    drafts.insert(0, 0);
    let longest = drafts.iter().max().copied().unwrap_or(0);
    let file = GgufFile::open(path).expect("model");
    let model = Model::from_file(file, threads, ActivationPath::default()).expect("loads");
    let dec = model.net.into_decoder();
    let vocab = dec.vocab_size() as u32;
    let ids: Vec<u32> = (0..depth + 1 + longest)
        .map(|t| ((t * 104_729) as u32 + 1000) % vocab)
        .collect();
    let mut store = dec.kv_store(KvElement::F16, PAGE).expect("store");
    let pages = store.fresh_table(depth + 1 + longest);
    let prefill = Span {
        pages: &pages,
        start: 0,
        tokens: &ids[..depth],
        want: Want::Nothing,
    };
    dec.forward(&mut store, &[prefill]).expect("prefill");
    let mut times = vec![Vec::new(); drafts.len()];
    for _ in 0..rounds {
        for (k, t) in drafts.iter().zip(&mut times) {
            let span = Span {
                pages: &pages,
                start: depth,
                tokens: &ids[depth..depth + 1 + k],
                want: Want::Verify {
                    from: 0,
                    keep: None,
                },
            };
            let at = Instant::now();
            dec.forward(&mut store, &[span]).expect("step");
            t.push(at.elapsed().as_secs_f64());
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let one = median(&mut times[0]);
    println!(
        "depth {depth}, {threads} threads: one-token step {:.3} ms",
        one * 1e3
    );
    for (k, t) in drafts.iter().zip(&mut times).skip(1) {
        let m = median(t);
        println!(
            "{k:2} drafted: {:.3} ms, c = {:.3}",
            m * 1e3,
            (m - one) / (*k as f64 * one)
        );
    }
}
