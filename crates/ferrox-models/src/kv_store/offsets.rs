//! Key offsets: per layer, a vector an 8- or 4-bit cache subtracts from every
//! key before it quantizes it.
//!
//! A layer's keys share a large common part: on SmolLM2 and Gemma 3 the
//! largest channels of the mean key are 7-30, against a spread of about 1 per
//! channel. A block's scale follows its largest value, so the quantizer spends
//! its steps on that common part and resolves the part that differs between
//! positions coarsely. Subtracting one fixed vector `c` from every key of a
//! layer changes each query's scores by the same amount, `q · c`, which the
//! softmax ignores: any `c` keeps the function, and a `c` near the keys' mean
//! leaves the quantizer only their spread. That holds only where the scores
//! enter the softmax as they are: a layer whose scores are soft-capped, or
//! whose softmax has a sink logit, gets no offset
//! (`Transformer::key_offsets`). Values are not offset: a mean value
//! subtracted and added back after the weighted sum measured no better.

/// Per layer, the offset subtracted from each key (`[n_kv_heads][head_dim_k]`),
/// or none.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyOffsets {
    layers: Vec<Option<Vec<f32>>>,
}

impl KeyOffsets {
    /// Offsets of each layer in order (`None`: the layer's keys are stored as
    /// they are).
    pub fn new(layers: Vec<Option<Vec<f32>>>) -> KeyOffsets {
        KeyOffsets { layers }
    }

    /// Layer `layer`'s offset, if it has one.
    pub fn of(&self, layer: usize) -> Option<&[f32]> {
        self.layers.get(layer)?.as_deref()
    }

    /// How many layers the offsets describe.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }
}
