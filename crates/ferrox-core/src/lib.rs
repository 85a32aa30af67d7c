//! ferrox-core: the compute half of ferrox. No I/O, no async; the only global state is the kernel level ([`isa`]), fixed at first use.
//!
//! * [`isa`]: the instruction-set level kernels run at, chosen once per process.
//! * [`dtype`]: the GGML storage types ferrox knows, with their block geometry.
//! * [`blocks`]: `#[repr(C)]` block layouts, byte sizes asserted at compile time.
//! * [`kernels::reference`]: scalar dequantize / quantize / dot product, the
//!   specification every SIMD kernel is tested against.
//! * [`ops`]: the forward pass's operations on f32 activations (the exact path).
//! * [`packed`]: the integer-activation path: repacked weights, activations
//!   quantized to 16-bit integers, exact integer block products.

// Kernels index lanes, rows and heads by number, as the reference arithmetic
// they mirror does; iterator chains would hide which lane meets which.
#![allow(clippy::needless_range_loop)]

#[macro_use]
mod dispatch;

pub mod blocks;
pub mod dtype;
pub mod error;
pub mod isa;
pub mod kernels;
pub mod ops;
pub mod packed;
pub mod pool;

pub use dtype::DType;
pub use error::CoreError;
