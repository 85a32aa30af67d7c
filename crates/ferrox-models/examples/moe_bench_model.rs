//! Writes a random-weight Qwen3-MoE GGUF shaped like a real Qwen3-30B-A3B layer
//! (`ferrox_models::testing::moe_bench`), for `ferrox bench --compare`:
//! `cargo run --release -p ferrox-models --example moe_bench_model -- OUT.gguf [LAYERS]`
//! (default 4 layers; needs scripts/fetch-llama-refs for the Qwen2 vocabulary).

fn main() {
    let mut args = std::env::args().skip(1);
    let out = args
        .next()
        .expect("usage: moe_bench_model OUT.gguf [LAYERS]");
    let layers: usize = args.next().map_or(4, |l| l.parse().expect("a layer count"));
    let vocab_path = ferrox_models::testing::vocab_file("qwen2").expect("the qwen2 vocab file");
    let vocab = ferrox_gguf::GgufFile::open(&vocab_path).expect("a vocab GGUF");
    let bytes = ferrox_models::testing::moe_bench::gguf(&vocab, layers);
    std::fs::write(&out, &bytes).expect("write");
    let active = ferrox_models::testing::moe_bench::active_parameters_per_layer() * layers;
    println!(
        "{out}: {:.2} GB, {layers} layers, {:.1} M active parameters per token in the layers",
        bytes.len() as f64 / 1e9,
        active as f64 / 1e6
    );
}
