//! The multi-token-prediction head of the Qwen3.5 family file against the
//! float64 reference's (`scripts/families/reference.py --mtp`,
//! `mtp-family-qwen35-q8_0.jsonl`): at every position of each golden
//! prompt and its greedy continuation, the head's top-5 log-probabilities
//! beside the trunk's hidden state at the position before (zeros before the
//! first), as llama.cpp's `graph_mtp` computes them. Bars as the trunk's
//! (`exact_bar`): f32 activations within 0.005 nats mean, the default path
//! within 0.05; the head's choice equals the reference's wherever the
//! reference's lead is not a near-tie.

use ferrox_gguf::GgufFile;
use ferrox_models::decoder::{Decoder, Span, Want};
use ferrox_models::kv_store::KvStore;
use ferrox_models::{ActivationPath, Transformer};
use ferrox_testkit::family::{Family, Variant};
use ferrox_testkit::{TEST_THREADS, family_vocab, golden_rows};

/// A lead below this may fall either way in f32 (as the trunk's `F32_NOISE`).
const NEAR_TIE: f64 = 0.01;

fn log_softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
    row.iter().map(|&x| x as f64 - max - sum.ln()).collect()
}

#[test]
fn the_qwen35_mtp_head_matches_the_reference() {
    let f = Family::find("qwen35").expect("a family");
    let Some(vocab) = family_vocab(&f) else {
        return;
    };
    let bytes = f.gguf(Variant::Q8, &vocab);
    let rows = golden_rows("families/mtp-family-qwen35-q8_0.jsonl").expect("golden");
    for (path, bar) in [(ActivationPath::F32, 0.005), (ActivationPath::Int16, 0.05)] {
        let file = GgufFile::from_bytes(bytes.clone()).unwrap();
        let mut trunk = Transformer::with_path(file, TEST_THREADS, path).unwrap();
        let head = trunk
            .draft_head()
            .unwrap()
            .expect("the family file has a head");
        let (mut sum, mut n, mut parted) = (0.0f64, 0usize, 0usize);
        for row in &rows {
            let tokens: Vec<u32> = serde_json::from_value(row["tokens"].clone()).unwrap();
            let want: Vec<Vec<(u32, f64)>> = row["top5"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    t.as_array()
                        .unwrap()
                        .iter()
                        .map(|e| {
                            (
                                e["id"].as_u64().unwrap() as u32,
                                e["logprob"].as_f64().unwrap(),
                            )
                        })
                        .collect()
                })
                .collect();
            let mut kv = KvStore::new(trunk.kv_layout(), 16);
            let pages = kv.fresh_table(tokens.len());
            let span = Span {
                pages: &pages,
                start: 0,
                tokens: &tokens,
                want: Want::Nothing,
            };
            let hidden = trunk.forward(&mut kv, &[span]).unwrap().hidden;
            assert_eq!(hidden.index.len(), tokens.len(), "every token's hidden row");
            let d = hidden.width;
            // Each token beside the row of the position before it.
            let mut pairs = vec![0.0f32; d];
            pairs.extend_from_slice(&hidden.data[..(tokens.len() - 1) * d]);
            let mut head_kv = KvStore::new(head.kv_layout(), 16);
            let head_pages = head_kv.fresh_table(tokens.len());
            let span = Span {
                pages: &head_pages,
                start: 0,
                tokens: &tokens,
                want: Want::All,
            };
            let out = head.forward(&mut head_kv, &[span], &pairs).unwrap();
            assert_eq!(out.hidden.index.len(), tokens.len(), "the head's own rows");
            for (pos, top5) in want.iter().enumerate() {
                let got = log_softmax(out.logits.of(0, pos).unwrap());
                for &(id, lp) in top5 {
                    sum += (got[id as usize] - lp).abs();
                    n += 1;
                }
                let best =
                    (0..got.len()).max_by(|&a, &b| got[a].total_cmp(&got[b]).then(b.cmp(&a)));
                let lead = top5[0].1 - top5[1].1;
                if best != Some(top5[0].0 as usize) && lead >= NEAR_TIE {
                    parted += 1;
                }
            }
        }
        let mean = sum / n as f64;
        eprintln!(
            "qwen35 MTP head ({path} activations): mean top-5 error {mean:.5} nats over {n} values, {parted} choices parted"
        );
        assert!(mean <= bar, "{path}: mean top-5 error {mean} (bar {bar})");
        let allowed = if path == ActivationPath::F32 {
            0
        } else {
            n / 5 / 20
        };
        assert!(
            parted <= allowed,
            "{path}: {parted} choices parted from the reference's"
        );
    }
}
