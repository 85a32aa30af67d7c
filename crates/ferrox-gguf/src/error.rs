//! The one error enum of ferrox-gguf. Every way a file can be wrong has its own
//! variant, and every message names where (byte offset, key or tensor) and what.

use std::path::PathBuf;

/// What went wrong reading or writing a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("not a GGUF file: magic bytes are {found:02x?}, expected \"GGUF\"")]
    BadMagic { found: [u8; 4] },
    #[error(
        "big-endian GGUF (version {version} byte-swapped) is not supported; convert the file to little-endian"
    )]
    BigEndian { version: u32 },
    #[error("unsupported GGUF version {version}; ferrox reads versions 2 and 3")]
    UnsupportedVersion { version: u32 },
    #[error(
        "file truncated: {what} at byte {offset} needs {needed} bytes, the file ends at byte {file_len}"
    )]
    Truncated {
        what: &'static str,
        offset: usize,
        needed: u64,
        file_len: usize,
    },
    #[error("string at byte {offset} claims {len} bytes, only {remaining} remain in the file")]
    StringPastEnd {
        offset: usize,
        len: u64,
        remaining: usize,
    },
    #[error("string at byte {offset} is not valid UTF-8")]
    InvalidUtf8 { offset: usize },
    #[error(
        "array at byte {offset} claims {count} elements of {elem}, more than the {remaining} remaining bytes can hold"
    )]
    ArrayPastEnd {
        offset: usize,
        count: u64,
        elem: &'static str,
        remaining: usize,
    },
    #[error("arrays nested deeper than {max} levels at byte {offset}")]
    NestingTooDeep { offset: usize, max: usize },
    #[error("unknown metadata value type {type_id} at byte {offset}")]
    UnknownValueType { offset: usize, type_id: u32 },
    #[error(
        "header claims {count} metadata entries, more than the {remaining} remaining bytes can hold"
    )]
    TooManyMetadata { count: u64, remaining: usize },
    #[error("header claims {count} tensors, more than the {remaining} remaining bytes can hold")]
    TooManyTensors { count: u64, remaining: usize },
    #[error("metadata key {key:?} appears twice")]
    DuplicateKey { key: String },
    #[error("tensor {name:?} appears twice")]
    DuplicateTensor { name: String },
    #[error("general.alignment must be a power of two, found {alignment}")]
    BadAlignment { alignment: u64 },
    #[error("tensor {tensor:?} has {n_dims} dimensions; at most 4 are supported")]
    TooManyDims { tensor: String, n_dims: u32 },
    #[error("tensor {tensor:?} has shape {shape:?} whose size overflows")]
    ShapeOverflow { tensor: String, shape: Vec<u64> },
    #[error("tensor {tensor:?} has storage type {}; supported types: {supported}", describe_type(*.type_id, .name))]
    UnsupportedStorageType {
        tensor: String,
        type_id: u32,
        name: Option<&'static str>,
        supported: String,
    },
    #[error(
        "tensor {tensor:?}: first dimension {ne0} is not a multiple of {dtype}'s block of {block_len}"
    )]
    PartialBlock {
        tensor: String,
        dtype: ferrox_core::DType,
        ne0: u64,
        block_len: usize,
    },
    #[error("tensor {tensor:?} at data offset {offset} is not aligned to {alignment} bytes")]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },
    #[error("tensor {tensor:?} spans bytes {start}..{end} but the file has {file_len} bytes")]
    TensorPastEnd {
        tensor: String,
        start: u64,
        end: u64,
        file_len: usize,
    },
    #[error("tensors {first:?} and {second:?} overlap in the data section")]
    TensorsOverlap { first: String, second: String },
    #[error("metadata key {key:?} is missing")]
    MissingKey { key: String },
    #[error("{key}: expected {expected}, found {found}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("{key}: value {value} is out of range for {expected}")]
    OutOfRange {
        key: String,
        value: String,
        expected: &'static str,
    },
    #[error("tensor {name:?} not found")]
    TensorNotFound { name: String },
    #[error("cannot write GGUF: {reason}")]
    Write { reason: String },
}

fn describe_type(id: u32, name: &Option<&'static str>) -> String {
    match name {
        Some(n) => format!("{n} (ggml type {id})"),
        None => format!("unknown id {id}"),
    }
}

/// Result alias of this crate.
pub type Result<T, E = GgufError> = std::result::Result<T, E>;
