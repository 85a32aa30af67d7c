//! The encoder's forward pass alone, without a server: passages a second for
//! batches of `SEQS` sequences of `TOKENS` tokens (the engine's pass at 16
//! clients on bge-small is about 5 x 101), on `THREADS` threads, the median and
//! best of `ROUNDS` (default 15). For A/B comparisons of encoder changes that
//! the HTTP benchmark's noise would hide:
//! `cargo run --release -p ferrox-models --example encoder_speed -- MODEL.gguf [SEQS TOKENS THREADS ROUNDS]`.

use std::time::Instant;

use ferrox_gguf::GgufFile;
use ferrox_models::ActivationPath;
use ferrox_models::decoder::{Span, Want};
use ferrox_models::kv_store::{KvStore, PageTable};
use ferrox_models::model::{Model, Net};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        panic!("usage: encoder_speed MODEL.gguf [SEQS TOKENS THREADS ROUNDS]");
    };
    let num =
        |i: usize, default: usize| args.get(i).map_or(default, |a| a.parse().expect("a count"));
    let (seqs, tokens, threads, rounds) = (num(1, 5), num(2, 101), num(3, 2), num(4, 15));
    let file = GgufFile::open(path).expect("model");
    let model = Model::from_file(file, threads, ActivationPath::default()).expect("loads");
    let Net::Encoder(_) = &model.net else {
        panic!("{path} is not an encoder");
    };
    let enc = model.net.into_decoder();
    let vocab = enc.hyper_params().vocab_size as u32;
    let ids: Vec<Vec<u32>> = (0..seqs)
        .map(|s| {
            (0..tokens)
                .map(|t| ((s * 7919 + t * 104_729) as u32 + 1000) % vocab)
                .collect()
        })
        .collect();
    let table = PageTable::default();
    let spans: Vec<Span<'_>> = ids
        .iter()
        .map(|t| Span {
            pages: &table,
            start: 0,
            tokens: t,
            want: Want::Hidden,
        })
        .collect();
    let mut store = KvStore::new(enc.kv_layout(), 16);
    let mut rates: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            enc.forward(&mut store, &spans).expect("forward");
            seqs as f64 / t.elapsed().as_secs_f64()
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    println!(
        "{seqs} x {tokens} tokens, {threads} threads: median {:.1}, best {:.1} passages/s",
        rates[rates.len() / 2],
        rates[rates.len() - 1]
    );
}
