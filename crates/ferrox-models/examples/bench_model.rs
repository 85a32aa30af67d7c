//! Writes a benchmark model: random weights at a real model's widths, with its
//! keys, tensor names, vocabulary and llama-quantize's quant mix
//! (`ferrox_testkit::family::BENCH_MODELS`), for `ferrox bench --compare`:
//!
//! ```sh
//! cargo run --release -p ferrox-models --example bench_model -- NAME OUT.gguf [LAYERS [VARIANT]]
//! ```
//!
//! NAME is `llama32-1b` (Q4_K_M), `qwen3-8b` (Q4_K_M), `qwen3-30b-a3b` (Q4_K_M),
//! `gpt-oss-20b` (MXFP4_MOE) or `qwen35-0.8b` (Q4_K_M); LAYERS overrides the layer subset and VARIANT the
//! quant mix (`q8_0`, `kquants`, ...: a Q8_0 file shows, requantized by
//! `llama-quantize --allow-requantize`, which type llama.cpp picks for each
//! tensor). Needs `scripts/fetch-llama-refs` for the vocabularies.

use ferrox_models::Architecture;
use ferrox_testkit::family::{BENCH_MODELS, Family, Variant};

fn main() {
    let mut args = std::env::args().skip(1);
    let names: Vec<&str> = BENCH_MODELS.iter().map(|f| f.name).collect();
    let usage = format!(
        "usage: bench_model {{{}}} OUT.gguf [LAYERS [VARIANT]]",
        names.join("|")
    );
    let (Some(name), Some(out)) = (args.next(), args.next()) else {
        panic!("{usage}");
    };
    let mut model = *BENCH_MODELS
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no benchmark model `{name}`; {usage}"));
    if let Some(layers) = args.next() {
        model = model.with_layers(layers.parse().expect("a layer count"));
    }
    let variant = args.next().map_or(shipped(&model), |v| {
        *Variant::EVERY
            .iter()
            .find(|x| x.name() == v)
            .unwrap_or_else(|| panic!("no variant `{v}`"))
    });
    let vocab = ferrox_testkit::family_vocab(&model).expect("the model's vocabulary");
    let bytes = model.gguf(variant, &vocab);
    std::fs::write(&out, &bytes).expect("write the model");
    let size = model.size.expect("a benchmark model");
    println!(
        "{out}: {:.2} GB, {} of {} layers, like {}",
        bytes.len() as f64 / 1e9,
        size.n_layers,
        size.real_layers,
        model.like
    );
}

/// The quant mix the real model's files ship in.
fn shipped(model: &Family) -> Variant {
    match model.arch {
        Architecture::GptOss => Variant::Mxfp4,
        _ => Variant::Q4KM,
    }
}
