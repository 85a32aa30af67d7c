//! Kernels. `reference` is the scalar specification; SIMD twins chosen at run time
//! arrive with the performance work and are tested against it.

pub mod fast;
pub mod reference;
#[cfg(target_arch = "x86_64")]
pub mod x86;
