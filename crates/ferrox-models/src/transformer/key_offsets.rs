//! The model's key offsets ([`KeyOffsets`]): each layer's mean key over a
//! fixed text, computed once, the first time an 8- or 4-bit cache is made.

use ferrox_text::Tokenizer;

use super::Transformer;
use crate::decoder::{Decoder, Span, Want};
use crate::error::ModelError;
use crate::kv_store::{KeyOffsets, KvStore, PageTable};
use crate::weights::Mixer;

/// The text whose keys are averaged: notes, a list, figures, code and prose,
/// none of it from the held-out prompts the fidelity is measured on. Its
/// first [`CALIBRATION_TOKENS`] tokens are run.
///
/// Measured (q8_0 KV, mean top-5 against the exact function, SmolLM2 /
/// Gemma 3): the first 48, 64, 96 and all 143-157 tokens of this text gave
/// 0.0173 / 0.0136, 0.0167 / 0.0130, 0.0163 / 0.0137 and 0.0175 / 0.0151
/// nats; another 75-token text 0.0187 / 0.0136; 16 to 634 tokens of a
/// design document 0.016-0.020 / 0.013-0.016. The mean key is a property
/// of the layer more than of the text; which text moves the result by
/// about 0.002.
const CALIBRATION_TEXT: &str = "Meeting notes, Tuesday. The team reviewed the quarterly \
report: revenue grew 12% while costs held steady at $4.3 million.\n\
Action items:\n\
- Maria drafts the customer survey by Friday.\n\
- Update the build script so that `make test` runs on every commit.\n\n\
for (let i = 0; i < items.length; i++) {\n  total += items[i].price * items[i].qty;\n}\n\n\
The river wound slowly through the valley, past old stone bridges and quiet farms, until \
it reached the harbour town where the fishing boats waited for the tide. \"Are you coming \
with us?\" she asked. He nodded, picked up his bag and followed her down to the pier.";

/// Tokens of [`CALIBRATION_TEXT`] run: the pass costs about a prompt of this
/// length when the first 8- or 4-bit cache is made (measured: 0.1 s on
/// SmolLM2, 0.65-0.75 s on the Llama-3.2-1B shape, 0.85-1.05 s on eight of
/// Qwen3-8B's 36 layers).
const CALIBRATION_TOKENS: usize = 64;

impl Transformer {
    /// The key offsets of an 8- or 4-bit cache: computed on the first call
    /// (one forward pass over a fixed 64-token text, on f32 KV), then kept.
    pub fn key_offsets(&self) -> Result<&KeyOffsets, ModelError> {
        if let Some(o) = self.key_offsets.get() {
            return Ok(o);
        }
        let computed = self.calibrate_key_offsets()?;
        Ok(self.key_offsets.get_or_init(|| computed))
    }

    /// Each layer's mean key over [`CALIBRATION_TEXT`], as the model stores
    /// keys (after RoPE), for the layers that [`Self::takes_key_offset`];
    /// none for the others. No pass runs when no layer takes one.
    fn calibrate_key_offsets(&self) -> Result<KeyOffsets, ModelError> {
        let takes: Vec<bool> = (0..self.hp.n_layers)
            .map(|l| self.takes_key_offset(l))
            .collect();
        let tokenizer = Tokenizer::from_metadata(&self.file.header().metadata)?;
        let mut tokens = tokenizer.encode(CALIBRATION_TEXT, true, false);
        tokens.truncate(CALIBRATION_TOKENS.min(self.hp.context_length));
        if tokens.is_empty() || !takes.contains(&true) {
            return Ok(KeyOffsets::new(vec![None; takes.len()]));
        }
        let mut store = KvStore::new(self.kv_layout(), 16);
        let pages = store.fresh_table(tokens.len());
        let span = Span {
            pages: &pages,
            start: 0,
            tokens: &tokens,
            want: Want::Nothing,
        };
        self.forward(&mut store, &[span])?;
        let layers = takes
            .iter()
            .enumerate()
            .map(|(l, &t)| {
                t.then(|| mean_key(&store, &pages, l, tokens.len()))
                    .flatten()
            })
            .collect();
        Ok(KeyOffsets::new(layers))
    }

    /// Whether layer `layer` gets a key offset: an attention layer whose
    /// scores enter the softmax as they are (no soft-cap, no sink logit), so
    /// that a shift of them all changes nothing.
    fn takes_key_offset(&self, layer: usize) -> bool {
        self.hp.attn_softcap.is_none()
            && matches!(&self.weights.layers[layer].mixer, Mixer::Attention(a) if a.sinks.is_none())
    }
}

/// Layer `layer`'s mean key over positions `0..n` of `pages`
/// (`[n_kv_heads][head_dim_k]`), or none for a layer without KV.
fn mean_key(store: &KvStore, pages: &PageTable, layer: usize, n: usize) -> Option<Vec<f32>> {
    let place = store.layout().place(layer)?;
    let dk = place.head_dim_k;
    let mut sum = vec![0.0f64; place.n_kv_heads * dk];
    for pos in 0..n {
        for (h, s) in sum.chunks_exact_mut(dk).enumerate() {
            let (k, _) = store.read(pages, layer, pos, h);
            s.iter_mut().zip(&k).for_each(|(s, k)| *s += *k as f64);
        }
    }
    Some(sum.iter().map(|s| (s / n as f64) as f32).collect())
}
