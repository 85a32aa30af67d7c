//! Kernels. `reference` is the scalar specification; SIMD twins chosen at run time
//! arrive with the performance work and are tested against it.

pub mod fast;
pub mod reference;
