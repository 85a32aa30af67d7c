//! Operations of the forward pass on f32 activations.
//!
//! Invariant (SPEC S3, batch invariance): every output element is reduced in an
//! order fixed by its own inputs' lengths, never by how many rows share a call or
//! how work is split across threads. Reductions run in [`vector::LANES`] fixed
//! lanes folded in a fixed tree, and use no fused multiply-add, so the SIMD builds
//! chosen at run time give bit-identical results to the portable one. The one
//! exception, [`matmul_fused`], reduces each element as one chain of fused
//! multiply-adds in column order (correctly rounded, so the same bits on every
//! build too).

pub mod activation;
pub mod delta_rule;
pub mod exp;
pub mod matmul;
pub mod matmul_fused;
pub mod norm;
pub mod prefetch;
pub mod rope;
pub mod vector;
