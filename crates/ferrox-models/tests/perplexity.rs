//! `ferrox perplexity`'s measure (`ferrox_models::perplexity`) on both real
//! models against `tests/golden/perplexity.jsonl`: on SmolLM2 the float64
//! reference's figure after every chunk (`scripts/families/reference.py
//! --perplexity`), within 1e-4 relative on the exact (`f32`) path; and on both
//! models llama-perplexity's figures for the same text and context, within its
//! own rounding (its 8-bit activations move them by 1-2 %), which a wrong
//! chunking, a missing BOS or a token scored one place off would not be.

use std::path::PathBuf;

use ferrox_gguf::GgufFile;
use ferrox_models::perplexity::{Chunking, perplexity};
use ferrox_models::{ActivationPath, Transformer};
use ferrox_testkit::{TEST_THREADS, golden_rows, real_model};
use ferrox_text::Tokenizer;

/// How far llama-perplexity's figure may sit from ferrox's (relative).
const LLAMA_ROUNDING: f64 = 0.03;

fn running(model: &str, text: &str, ctx: usize, path: ActivationPath) -> Option<Vec<f64>> {
    let file = GgufFile::open(&real_model(model)?).unwrap();
    let tok = Tokenizer::from_metadata(&file.header().metadata).unwrap();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join(text)).unwrap();
    let tokens = tok.encode(&text, true, false);
    let chunking = Chunking {
        ctx,
        chunks: None,
        bos: tok.adds_bos().then(|| tok.bos()).flatten(),
    };
    let m = Transformer::with_path(file, TEST_THREADS, path).unwrap();
    Some(
        perplexity(&m, &tokens, chunking, |_, _| {})
            .unwrap()
            .running,
    )
}

fn within(label: &str, got: &[f64], want: &[f64], rel: f64) {
    assert_eq!(got.len(), want.len(), "{label}: chunks");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            ((g - w) / w).abs() <= rel,
            "{label}: chunk {}: {g} against {w} (relative {rel})",
            k + 1
        );
    }
}

fn floats(v: &serde_json::Value) -> Option<Vec<f64>> {
    v.as_array()
        .map(|a| a.iter().map(|x| x.as_f64().unwrap()).collect())
}

#[test]
fn perplexity_follows_the_float64_reference_and_llama_perplexity() {
    let Some(rows) = golden_rows("perplexity.jsonl") else {
        return;
    };
    for row in &rows {
        let model = row["model"].as_str().unwrap();
        let text = row["text"].as_str().unwrap();
        let ctx = row["ctx"].as_u64().unwrap() as usize;
        let llama = floats(&row["llama"]).unwrap();
        for (path, exact_rel) in [(ActivationPath::F32, 1e-4), (ActivationPath::Int16, 1e-3)] {
            let Some(got) = running(model, text, ctx, path) else {
                return;
            };
            let label = format!("{model} {path}");
            eprintln!("{label}: {got:?}");
            if let Some(exact) = floats(&row["exact"]) {
                within(&format!("{label} vs float64"), &got, &exact, exact_rel);
            }
            within(
                &format!("{label} vs llama-perplexity"),
                &got,
                &llama,
                LLAMA_ROUNDING,
            );
        }
    }
}
