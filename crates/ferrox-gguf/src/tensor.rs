//! Tensor descriptions from the GGUF header, and borrowed views of their data.
//!
//! Invariants (established by the parser, relied on everywhere else): the
//! storage type is supported, `shape[0]` is a whole number of blocks, `n_bytes`
//! did not overflow, the data lies inside the file, is aligned, and overlaps no
//! other tensor's data.

use ferrox_core::DType;

/// A tensor as the header describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// Name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Storage type.
    pub dtype: DType,
    /// Dimensions in ggml order: `shape[0]` is the contiguous (row) dimension.
    pub shape: Vec<u64>,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    /// Absolute offset of the data in the file.
    pub file_offset: usize,
    /// Bytes of data.
    pub n_bytes: usize,
}

impl TensorInfo {
    /// Number of values.
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Values per row (`shape[0]`).
    pub fn row_len(&self) -> usize {
        self.shape.first().copied().unwrap_or(1) as usize
    }

    /// Number of rows (product of the dimensions after the first).
    pub fn n_rows(&self) -> usize {
        self.shape.iter().skip(1).product::<u64>() as usize
    }
}

/// A tensor's description with its bytes, borrowed from the file.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub info: &'a TensorInfo,
    /// Exactly `info.n_bytes` bytes; aligned as the file aligns them (use unaligned loads).
    pub data: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// Storage type.
    pub fn dtype(&self) -> DType {
        self.info.dtype
    }

    /// Shape in ggml order.
    pub fn shape(&self) -> &'a [u64] {
        &self.info.shape
    }

    /// The bytes of row `i` (of `shape[0]` values).
    pub fn row(&self, i: usize) -> Option<&'a [u8]> {
        let row_bytes = self.info.dtype.row_bytes(self.info.row_len())?;
        self.data
            .get(i.checked_mul(row_bytes)?..(i + 1).checked_mul(row_bytes)?)
    }
}
