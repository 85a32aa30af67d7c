//! Storage types: the GGML type ids ferrox reads, and the geometry of their blocks.
//!
//! Invariants:
//! * `block_bytes()` equals `size_of` of the matching struct in [`crate::blocks`]
//!   (asserted at compile time there and tested here).
//! * A row of `n` values of a type takes `n / block_len() * block_bytes()` bytes and
//!   `n` must be a multiple of `block_len()`; [`DType::row_bytes`] refuses the rest
//!   and never overflows.
//! * Ids follow ggml's `enum ggml_type` (the numbers stored in GGUF tensor infos).

use std::fmt;

/// Values per block of the K-quant family.
pub const QK_K: usize = 256;
/// Values per block of the legacy quant family (Q4_0 .. Q8_1).
pub const QK: usize = 32;

/// A storage type ferrox can read and compute with.
#[allow(non_camel_case_types)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ4_NL,
    IQ4_XS,
    BF16,
    /// OCP microscaling FP4 (gpt-oss's experts): E2M1 values with a shared
    /// E8M0 exponent per 32.
    MXFP4,
}

impl DType {
    /// Every supported type, in ggml id order.
    pub const ALL: [DType; 18] = [
        DType::F32,
        DType::F16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q8_1,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::Q8_K,
        DType::IQ4_NL,
        DType::IQ4_XS,
        DType::BF16,
        DType::MXFP4,
    ];

    /// The ggml type id stored in GGUF.
    pub const fn ggml_id(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Q4_0 => 2,
            DType::Q4_1 => 3,
            DType::Q5_0 => 6,
            DType::Q5_1 => 7,
            DType::Q8_0 => 8,
            DType::Q8_1 => 9,
            DType::Q2_K => 10,
            DType::Q3_K => 11,
            DType::Q4_K => 12,
            DType::Q5_K => 13,
            DType::Q6_K => 14,
            DType::Q8_K => 15,
            DType::IQ4_NL => 20,
            DType::IQ4_XS => 23,
            DType::BF16 => 30,
            DType::MXFP4 => 39,
        }
    }

    /// The type for a ggml id, if ferrox supports it.
    pub fn from_ggml_id(id: u32) -> Option<DType> {
        DType::ALL.into_iter().find(|t| t.ggml_id() == id)
    }

    /// ggml's name for a type id, including the ones ferrox does not support
    /// (for error messages). `None` for ids ggml never assigned.
    pub fn ggml_name_of_id(id: u32) -> Option<&'static str> {
        if let Some(t) = DType::from_ggml_id(id) {
            return Some(t.name());
        }
        Some(match id {
            4 => "Q4_2 (removed)",
            5 => "Q4_3 (removed)",
            16 => "IQ2_XXS",
            17 => "IQ2_XS",
            18 => "IQ3_XXS",
            19 => "IQ1_S",
            21 => "IQ3_S",
            22 => "IQ2_S",
            24 => "I8",
            25 => "I16",
            26 => "I32",
            27 => "I64",
            28 => "F64",
            29 => "IQ1_M",
            34 => "TQ1_0",
            35 => "TQ2_0",
            _ => return None,
        })
    }

    /// The short name ggml and llama.cpp print (`Q4_K`, `F16`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::Q4_0 => "Q4_0",
            DType::Q4_1 => "Q4_1",
            DType::Q5_0 => "Q5_0",
            DType::Q5_1 => "Q5_1",
            DType::Q8_0 => "Q8_0",
            DType::Q8_1 => "Q8_1",
            DType::Q2_K => "Q2_K",
            DType::Q3_K => "Q3_K",
            DType::Q4_K => "Q4_K",
            DType::Q5_K => "Q5_K",
            DType::Q6_K => "Q6_K",
            DType::Q8_K => "Q8_K",
            DType::IQ4_NL => "IQ4_NL",
            DType::IQ4_XS => "IQ4_XS",
            DType::MXFP4 => "MXFP4",
            DType::BF16 => "BF16",
        }
    }

    /// Parse a name as printed by [`DType::name`] (case-insensitive).
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Values per block.
    pub const fn block_len(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 => 1,
            DType::Q4_0
            | DType::Q4_1
            | DType::Q5_0
            | DType::Q5_1
            | DType::Q8_0
            | DType::Q8_1
            | DType::IQ4_NL
            | DType::MXFP4 => QK,
            DType::Q2_K
            | DType::Q3_K
            | DType::Q4_K
            | DType::Q5_K
            | DType::Q6_K
            | DType::Q8_K
            | DType::IQ4_XS => QK_K,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q8_0 => 34,
            DType::Q8_1 => 36,
            DType::Q2_K => 84,
            DType::Q3_K => 110,
            DType::Q4_K => 144,
            DType::Q5_K => 176,
            DType::Q6_K => 210,
            DType::Q8_K => 292,
            DType::IQ4_NL => 18,
            DType::IQ4_XS => 136,
            DType::MXFP4 => 17,
        }
    }

    /// Whether values are stored as quantized blocks (as opposed to plain floats).
    pub const fn is_quantized(self) -> bool {
        !matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Bytes taken by `n` values, or `None` when `n` is not a whole number of
    /// blocks or the size overflows `usize`.
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_len()) {
            return None;
        }
        (n / self.block_len()).checked_mul(self.block_bytes())
    }

    /// Average bits per stored value (for reports).
    pub fn bits_per_value(self) -> f64 {
        self.block_bytes() as f64 * 8.0 / self.block_len() as f64
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_unique() {
        for t in DType::ALL {
            assert_eq!(DType::from_ggml_id(t.ggml_id()), Some(t));
            assert_eq!(DType::from_name(t.name()), Some(t));
            assert_eq!(DType::ggml_name_of_id(t.ggml_id()), Some(t.name()));
        }
        assert_eq!(DType::from_ggml_id(16), None);
        assert_eq!(DType::ggml_name_of_id(16), Some("IQ2_XXS"));
        assert_eq!(DType::ggml_name_of_id(9999), None);
    }

    #[test]
    fn row_bytes_refuses_partial_blocks_and_overflow() {
        assert_eq!(DType::Q4_K.row_bytes(512), Some(288));
        assert_eq!(DType::Q4_K.row_bytes(100), None);
        assert_eq!(DType::F32.row_bytes(usize::MAX), None);
        assert_eq!(DType::Q8_0.row_bytes(64), Some(68));
    }

    #[test]
    fn bits_per_value_match_the_known_figures() {
        assert_eq!(DType::Q4_0.bits_per_value(), 4.5);
        assert_eq!(DType::Q4_K.bits_per_value(), 4.5);
        assert_eq!(DType::Q6_K.bits_per_value(), 6.5625);
    }
}
