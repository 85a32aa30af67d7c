//! The one error enum of ferrox-core.

use crate::dtype::DType;

/// Errors of the compute layer: shape and length mismatches caught before any
/// kernel runs.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CoreError {
    #[error(
        "{dtype} stores {block_len} values per block; {n} values is not a whole number of blocks"
    )]
    PartialBlock {
        dtype: DType,
        block_len: usize,
        n: usize,
    },
    #[error("{dtype} data of {got} bytes does not hold {n} values ({want} bytes)")]
    ByteLength {
        dtype: DType,
        n: usize,
        want: usize,
        got: usize,
    },
    #[error("output buffer holds {got} values, {want} needed")]
    OutputLength { want: usize, got: usize },
    #[error("no reference {what} kernel for {dtype}")]
    Unsupported { what: &'static str, dtype: DType },
}
