//! The per-layer reading of the hyper-parameters: each layer's attention kind
//! (window pattern, recurrent layers) and its attention shape (Gemma 4's window
//! layers are shaped apart from its full ones, and its last layers read earlier
//! layers' KV).

use ferrox_gguf::{Metadata, Value};

use super::{AttentionKind, LayerAttention, invalid};
use crate::arch::WindowRule;
use crate::error::ModelError;

/// A positive count the file gives once for every layer or as a per-layer
/// array (llama.cpp's `get_key_or_arr`); `None` when absent.
pub(super) fn per_layer_counts(
    m: &Metadata,
    key: &str,
    n_layers: usize,
) -> Result<Option<Vec<usize>>, ModelError> {
    let Some(Value::Array(a)) = m.get(key) else {
        return match m.count_opt(key)? {
            Some(0) => Err(invalid(key, "must be positive")),
            n => Ok(n.map(|n| vec![n; n_layers])),
        };
    };
    if a.len() < n_layers {
        return Err(invalid(
            key,
            format!("{} values for {n_layers} layers", a.len()),
        ));
    }
    (0..n_layers)
        .map(|i| {
            a.int_at(i)
                .and_then(|v| usize::try_from(v).ok())
                .filter(|&v| v > 0)
                .ok_or_else(|| invalid(key, format!("value {i} is not a positive count")))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The attention shape of full-attention layers (and of every layer unless the
/// architecture shapes window layers apart).
#[derive(Clone, Copy, Debug)]
pub(super) struct HeadShape {
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    pub rope_dim: usize,
}

impl HeadShape {
    /// Checks the rotated dims fit the head (`key` names the rope key).
    pub fn checked(self, key: &str) -> Result<HeadShape, ModelError> {
        let HeadShape {
            head_dim_k,
            head_dim_v,
            rope_dim,
        } = self;
        if head_dim_k == 0 || head_dim_v == 0 || rope_dim > head_dim_k || rope_dim % 2 != 0 {
            return Err(invalid(
                key,
                format!("{rope_dim} rotated of a {head_dim_k}-wide head"),
            ));
        }
        Ok(self)
    }
}

/// What [`layer_attention`] reads the layers' shapes from.
pub(super) struct ShapeKeys<'a> {
    pub key: &'a dyn Fn(&str) -> String,
    pub n_heads: usize,
    /// KV heads of every layer.
    pub kv_heads: &'a [usize],
    pub full: HeadShape,
    /// Whether window layers have shapes of their own (the `*_swa` keys).
    pub window_shapes: bool,
    /// Whether the last layers may share KV (`shared_kv_layers`).
    pub shared_kv: bool,
}

/// Each layer's attention shape and the layer whose KV it reads.
pub(super) fn layer_attention(
    m: &Metadata,
    kinds: &[AttentionKind],
    keys: &ShapeKeys<'_>,
) -> Result<Vec<LayerAttention>, ModelError> {
    let key = keys.key;
    let window = match keys.window_shapes {
        true => {
            let head_dim_k = m.count(&key("attention.key_length_swa"))?;
            HeadShape {
                head_dim_k,
                head_dim_v: m.count(&key("attention.value_length_swa"))?,
                rope_dim: m
                    .count_opt(&key("rope.dimension_count_swa"))?
                    .unwrap_or(head_dim_k),
            }
            .checked(&key("rope.dimension_count_swa"))?
        }
        false => keys.full,
    };
    let shared = match keys.shared_kv {
        true => m
            .count_opt(&key("attention.shared_kv_layers"))?
            .unwrap_or(0),
        false => 0,
    };
    let first_shared = kinds
        .len()
        .checked_sub(shared)
        .filter(|&f| shared == 0 || f >= 2);
    let Some(first_shared) = first_shared else {
        return Err(invalid(
            &key("attention.shared_kv_layers"),
            format!(
                "{shared} of {} layers: at least two layers keep their own KV",
                kinds.len()
            ),
        ));
    };
    kinds
        .iter()
        .enumerate()
        .map(|(i, &kind)| {
            let n_kv_heads = keys.kv_heads[i];
            if !keys.n_heads.is_multiple_of(n_kv_heads) {
                return Err(invalid(
                    &key("attention.head_count_kv"),
                    format!(
                        "{n_kv_heads} KV heads of layer {i} do not divide {} heads",
                        keys.n_heads
                    ),
                ));
            }
            let shape = match kind {
                AttentionKind::SlidingWindow { .. } => window,
                AttentionKind::Full | AttentionKind::Recurrent => keys.full,
            };
            let kv_layer =
                shared_source(kinds, i, first_shared, &key("attention.shared_kv_layers"))?;
            Ok(LayerAttention {
                n_kv_heads,
                head_dim_k: shape.head_dim_k,
                head_dim_v: shape.head_dim_v,
                rope_dim: shape.rope_dim,
                kv_layer,
            })
        })
        .collect()
}

/// The layer whose KV layer `i` reads: itself before `first_shared`, else the
/// last layer before it of the same kind, as llama.cpp's Gemma 4 places it
/// (`first_shared - 2` for window layers, `first_shared - 1` for full ones).
fn shared_source(
    kinds: &[AttentionKind],
    i: usize,
    first_shared: usize,
    key: &str,
) -> Result<usize, ModelError> {
    if i < first_shared {
        return Ok(i);
    }
    let windowed = |k: AttentionKind| matches!(k, AttentionKind::SlidingWindow { .. });
    let source = first_shared - if windowed(kinds[i]) { 2 } else { 1 };
    if kinds[source] != kinds[i] {
        return Err(invalid(
            key,
            format!(
                "layer {i} would read the KV of layer {source}, which attends otherwise ({:?} vs {:?})",
                kinds[source], kinds[i]
            ),
        ));
    }
    Ok(source)
}

/// Which layers of a hybrid model are recurrent: `attention.recurrent_layers`
/// if the file lists them, else all but every `full_attention_interval`-th
/// (default 4), as llama.cpp reads them.
pub(super) fn recurrent_kinds(
    m: &Metadata,
    key: &dyn Fn(&str) -> String,
    n_layers: usize,
) -> Result<Vec<AttentionKind>, ModelError> {
    let kind = |r: bool| {
        if r {
            AttentionKind::Recurrent
        } else {
            AttentionKind::Full
        }
    };
    let list_key = key("attention.recurrent_layers");
    if let Some(Value::Array(ferrox_gguf::Array::Bool(flags))) = m.get(&list_key) {
        if flags.len() < n_layers {
            return Err(invalid(
                &list_key,
                format!("{} flags for {n_layers} layers", flags.len()),
            ));
        }
        return Ok(flags[..n_layers].iter().map(|&r| kind(r)).collect());
    }
    let interval = match m.count_opt(&key("full_attention_interval"))? {
        Some(0) => return Err(invalid(&key("full_attention_interval"), "must be positive")),
        Some(n) => n,
        None => 4,
    };
    Ok((0..n_layers)
        .map(|i| kind((i + 1) % interval != 0))
        .collect())
}

/// Attention kind of every layer, from the window size and pattern keys.
pub(super) fn layer_kinds(
    m: &Metadata,
    key: &dyn Fn(&str) -> String,
    rule: WindowRule,
    n_layers: usize,
) -> Result<Vec<AttentionKind>, ModelError> {
    let WindowRule::Pattern {
        pattern,
        default_window,
    } = rule
    else {
        return Ok(vec![AttentionKind::Full; n_layers]);
    };
    let window = match (
        m.count_opt(&key("attention.sliding_window"))?,
        default_window,
    ) {
        (Some(0), _) | (None, None) => return Ok(vec![AttentionKind::Full; n_layers]),
        (Some(w), _) | (None, Some(w)) => w,
    };
    let pattern_key = key("attention.sliding_window_pattern");
    let windowed: Vec<bool> = match m.get(&pattern_key) {
        Some(Value::Array(ferrox_gguf::Array::Bool(flags))) => {
            if flags.len() != n_layers {
                return Err(invalid(
                    &pattern_key,
                    format!("{} flags for {n_layers} layers", flags.len()),
                ));
            }
            flags.clone()
        }
        _ => {
            // One full-attention layer in every `pattern`, the last of each group.
            // (A pattern of 0 makes every layer a window layer, as in llama.cpp.)
            let pattern = m.count_opt(&pattern_key)?.unwrap_or(pattern);
            (0..n_layers)
                .map(|i| pattern == 0 || (i + 1) % pattern != 0)
                .collect()
        }
    };
    Ok(windowed
        .into_iter()
        .map(|w| {
            if w {
                AttentionKind::SlidingWindow { window }
            } else {
                AttentionKind::Full
            }
        })
        .collect())
}
