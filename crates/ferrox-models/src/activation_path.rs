//! Which activations the matrix products of the forward pass take.
//!
//! * [`ActivationPath::Int16`] (the default): activations quantized to 16-bit
//!   integers per block of 32 values and multiplied with exact integer dot products
//!   against weights repacked at load (`ferrox_core::packed`). Error ~1e-5
//!   relative per product; the forward-pass fidelity bar for the default path
//!   (step-1 16/16, greedy >= 10/16, <= 0.05 nats) holds with a wide margin.
//! * [`ActivationPath::F32`]: f32 activations over the GGUF bytes as stored: the
//!   exact function the file defines, up to f32 rounding. Slower; no repacked copy.
//!
//! The default is `Int16` on CPUs with a hand-written build of its kernel
//! (`ferrox_core::packed::has_simd_kernel`), else `F32` (the portable integer
//! kernel is exact but slower than the f32 path).
//!
//! Either path is batch invariant (SPEC S3); they differ from each other.

use std::fmt;
use std::str::FromStr;

/// How the forward pass multiplies activations by weight matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActivationPath {
    Int16,
    F32,
}

impl Default for ActivationPath {
    /// The fastest path on this CPU.
    fn default() -> Self {
        if ferrox_core::packed::has_simd_kernel() {
            ActivationPath::Int16
        } else {
            ActivationPath::F32
        }
    }
}

impl FromStr for ActivationPath {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(ActivationPath::default()),
            "int16" | "i16" => Ok(ActivationPath::Int16),
            "f32" | "exact" => Ok(ActivationPath::F32),
            other => Err(format!(
                "unknown activation path `{other}`: expected `auto` (the fastest on this CPU), `int16` or `f32` (exact)"
            )),
        }
    }
}

impl fmt::Display for ActivationPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ActivationPath::Int16 => "int16",
            ActivationPath::F32 => "f32",
        })
    }
}
