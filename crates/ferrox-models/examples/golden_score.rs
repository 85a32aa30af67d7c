//! Scores any GGUF against golden continuations made for it (`llama_logits` or
//! `reference.py` output, see scripts/families/README.md), on both activation
//! paths and, on the fast one, with f16, q8_0 and q4_0 KV caches too:
//! `cargo run --release -p ferrox-models --example golden_score -- MODEL.gguf GOLDEN.jsonl...`.
//! For one-off checks of files the tests do not rebuild (llama-quantize output).

use ferrox_gguf::GgufFile;
use ferrox_models::kv_store::KvElement;
use ferrox_models::{ActivationPath, Transformer};
use ferrox_testkit::golden::score_with_kv;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, goldens @ ..] = &args[..] else {
        panic!("usage: golden_score MODEL.gguf GOLDEN.jsonl...");
    };
    for golden in goldens {
        let text = std::fs::read_to_string(golden).expect("golden file");
        let rows: Vec<serde_json::Value> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("golden JSON"))
            .collect();
        let runs = [
            (ActivationPath::F32, KvElement::F32),
            (ActivationPath::Int16, KvElement::F32),
            (ActivationPath::Int16, KvElement::F16),
            (ActivationPath::Int16, KvElement::Q8_0),
            (ActivationPath::Int16, KvElement::Q4_0),
        ];
        for (path, kv) in runs {
            let file = GgufFile::open(model).expect("model");
            let m = Transformer::with_path(file, 2, path).expect("loads");
            let label = format!("{golden} ({path} activations, {kv} KV)");
            let s = score_with_kv(&m, &rows, &label, kv);
            println!(
                "{label}: {}/{} identical, mean top-5 error {:.5} nats",
                s.identical,
                s.prompts,
                s.mean_error()
            );
        }
    }
}
