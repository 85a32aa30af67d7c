//! Parsing a GGUF v2/v3 file from its bytes. Pure: no I/O, no allocation sized by
//! a count before the count is checked against the bytes that remain.
//!
//! Layout (little-endian): magic `GGUF`, u32 version, u64 tensor count, u64
//! metadata count, the metadata entries (string key, u32 type, value), the tensor
//! infos (string name, u32 n_dims, u64 dims, u32 type, u64 offset), padding to
//! `general.alignment` (default 32), then the data section.
//!
//! Invariants of a parsed [`Gguf`]: every tensor's data lies inside the file,
//! starts on the alignment, overlaps no other tensor, has a supported storage
//! type and a whole number of blocks per row; keys and tensor names are unique.

use std::collections::HashMap;

use ferrox_core::DType;

use crate::cursor::Cursor;
use crate::error::{GgufError, Result};
use crate::metadata::Metadata;
use crate::tensor::{TensorInfo, TensorView};
use crate::value::{Array, Value, ValueType};

/// The magic bytes that open every GGUF file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dimensions a tensor may have (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Deepest nesting of arrays accepted (real files use at most 2).
pub const MAX_ARRAY_DEPTH: usize = 8;
/// Bytes a tensor info takes at the least (empty name, zero dims).
const MIN_TENSOR_INFO_LEN: usize = 8 + 4 + 4 + 8;
/// Bytes a metadata entry takes at the least (empty key, type, a one-byte value).
const MIN_KV_LEN: usize = 8 + 4 + 1;

/// A parsed GGUF header: metadata and tensor descriptions, with data offsets
/// checked against the length of the file it was parsed from.
#[derive(Clone, Debug)]
pub struct Gguf {
    /// Format version (2 or 3).
    pub version: u32,
    /// Key/value metadata.
    pub metadata: Metadata,
    /// Tensor descriptions in file order.
    pub tensors: Vec<TensorInfo>,
    /// Alignment of the data section and of every tensor in it.
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: usize,
    /// Length of the file the header was checked against.
    pub file_len: usize,
    by_name: HashMap<String, usize>,
}

impl Gguf {
    /// Parses and validates a whole GGUF file held in `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Gguf> {
        let mut c = Cursor::new(bytes);
        let magic: [u8; 4] = c.take(4, "magic")?.try_into().expect("4 bytes");
        if magic != GGUF_MAGIC {
            return Err(GgufError::BadMagic { found: magic });
        }
        let version = c.u32("version")?;
        if version != 2 && version != 3 {
            let swapped = version.swap_bytes();
            if swapped == 2 || swapped == 3 {
                return Err(GgufError::BigEndian { version: swapped });
            }
            return Err(GgufError::UnsupportedVersion { version });
        }
        let n_tensors = c.u64("tensor count")?;
        let n_kv = c.u64("metadata count")?;
        if !c.fits(n_kv, MIN_KV_LEN) {
            return Err(GgufError::TooManyMetadata {
                count: n_kv,
                remaining: c.remaining(),
            });
        }
        let mut metadata = Metadata::default();
        for _ in 0..n_kv {
            let key = c.string("metadata key")?;
            let type_at = c.pos();
            let type_id = c.u32("metadata value type")?;
            let vt = ValueType::from_id(type_id).ok_or(GgufError::UnknownValueType {
                offset: type_at,
                type_id,
            })?;
            let value = read_value(&mut c, vt, 0)?;
            metadata.insert(key, value)?;
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => {
                let a = metadata.u32("general.alignment")? as u64;
                if a == 0 || !a.is_power_of_two() {
                    return Err(GgufError::BadAlignment {
                        alignment: v.as_int().unwrap_or_default() as u64,
                    });
                }
                a
            }
        };
        if !c.fits(n_tensors, MIN_TENSOR_INFO_LEN) {
            return Err(GgufError::TooManyTensors {
                count: n_tensors,
                remaining: c.remaining(),
            });
        }
        let mut raw = Vec::with_capacity(prealloc(n_tensors as usize));
        for _ in 0..n_tensors {
            raw.push(read_tensor_info(&mut c)?);
        }
        let data_offset = align_up(c.pos() as u64, alignment);
        let mut tensors = Vec::with_capacity(raw.len());
        let mut by_name = HashMap::with_capacity(raw.len());
        for r in raw {
            let info = r.check(data_offset, alignment, bytes.len())?;
            if by_name.insert(info.name.clone(), tensors.len()).is_some() {
                return Err(GgufError::DuplicateTensor { name: info.name });
            }
            tensors.push(info);
        }
        check_no_overlap(&tensors)?;
        let data_offset = if tensors.is_empty() {
            (data_offset as usize).min(bytes.len())
        } else {
            data_offset as usize
        };
        Ok(Gguf {
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
            file_len: bytes.len(),
            by_name,
        })
    }

    /// The description of tensor `name`.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// A view of tensor `name` over `file`, the same bytes this header was parsed from.
    pub fn tensor<'a>(&'a self, file: &'a [u8], name: &str) -> Result<TensorView<'a>> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| GgufError::TensorNotFound {
                name: name.to_string(),
            })?;
        view(info, file)
    }

    /// Architecture name (`general.architecture`).
    pub fn architecture(&self) -> Result<&str> {
        self.metadata.str("general.architecture")
    }
}

pub(crate) fn view<'a>(info: &'a TensorInfo, file: &'a [u8]) -> Result<TensorView<'a>> {
    let data = file
        .get(info.file_offset..info.file_offset + info.n_bytes)
        .ok_or(GgufError::TensorPastEnd {
            tensor: info.name.clone(),
            start: info.file_offset as u64,
            end: (info.file_offset + info.n_bytes) as u64,
            file_len: file.len(),
        })?;
    Ok(TensorView { info, data })
}

/// Capacity to reserve for `n` items a (checked) count claims: growth past this
/// is paid for by bytes actually read.
fn prealloc(n: usize) -> usize {
    n.min(1 << 16)
}

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

fn read_value(c: &mut Cursor<'_>, vt: ValueType, depth: usize) -> Result<Value> {
    Ok(match vt {
        ValueType::U8 => Value::U8(c.u8("u8 value")?),
        ValueType::I8 => Value::I8(c.u8("i8 value")? as i8),
        ValueType::U16 => Value::U16(c.u16("u16 value")?),
        ValueType::I16 => Value::I16(c.u16("i16 value")? as i16),
        ValueType::U32 => Value::U32(c.u32("u32 value")?),
        ValueType::I32 => Value::I32(c.u32("i32 value")? as i32),
        ValueType::F32 => Value::F32(f32::from_bits(c.u32("f32 value")?)),
        ValueType::Bool => Value::Bool(c.u8("bool value")? != 0),
        ValueType::String => Value::String(c.string("string value")?),
        ValueType::U64 => Value::U64(c.u64("u64 value")?),
        ValueType::I64 => Value::I64(c.u64("i64 value")? as i64),
        ValueType::F64 => Value::F64(f64::from_bits(c.u64("f64 value")?)),
        ValueType::Array => Value::Array(read_array(c, depth + 1)?),
    })
}

fn read_array(c: &mut Cursor<'_>, depth: usize) -> Result<Array> {
    let at = c.pos();
    if depth > MAX_ARRAY_DEPTH {
        return Err(GgufError::NestingTooDeep {
            offset: at,
            max: MAX_ARRAY_DEPTH,
        });
    }
    let type_id = c.u32("array element type")?;
    let et = ValueType::from_id(type_id).ok_or(GgufError::UnknownValueType {
        offset: at,
        type_id,
    })?;
    let count = c.u64("array length")?;
    if !c.fits(count, et.min_encoded_len()) {
        return Err(GgufError::ArrayPastEnd {
            offset: at,
            count,
            elem: et.name(),
            remaining: c.remaining(),
        });
    }
    let n = count as usize;
    macro_rules! fixed {
        ($variant:ident, $t:ty, $conv:expr) => {{
            let size = std::mem::size_of::<$t>();
            let bytes = c.take(n * size, "array elements")?;
            Array::$variant(bytes.chunks_exact(size).map($conv).collect())
        }};
    }
    Ok(match et {
        ValueType::U8 => Array::U8(c.take(n, "array elements")?.to_vec()),
        ValueType::I8 => fixed!(I8, i8, |b| b[0] as i8),
        ValueType::Bool => fixed!(Bool, u8, |b| b[0] != 0),
        ValueType::U16 => fixed!(U16, u16, |b| u16::from_le_bytes([b[0], b[1]])),
        ValueType::I16 => fixed!(I16, i16, |b| i16::from_le_bytes([b[0], b[1]])),
        ValueType::U32 => fixed!(U32, u32, |b| u32::from_le_bytes(b.try_into().expect("4"))),
        ValueType::I32 => fixed!(I32, i32, |b| i32::from_le_bytes(b.try_into().expect("4"))),
        ValueType::F32 => fixed!(F32, f32, |b| f32::from_le_bytes(b.try_into().expect("4"))),
        ValueType::U64 => fixed!(U64, u64, |b| u64::from_le_bytes(b.try_into().expect("8"))),
        ValueType::I64 => fixed!(I64, i64, |b| i64::from_le_bytes(b.try_into().expect("8"))),
        ValueType::F64 => fixed!(F64, f64, |b| f64::from_le_bytes(b.try_into().expect("8"))),
        ValueType::String => {
            let mut v = Vec::with_capacity(prealloc(n));
            for _ in 0..n {
                v.push(c.string("array string")?);
            }
            Array::String(v)
        }
        ValueType::Array => {
            let mut v = Vec::with_capacity(prealloc(n));
            for _ in 0..n {
                v.push(read_array(c, depth + 1)?);
            }
            Array::Array(v)
        }
    })
}

/// A tensor info as read, before its placement is checked.
struct RawTensorInfo {
    name: String,
    shape: Vec<u64>,
    type_id: u32,
    offset: u64,
}

fn read_tensor_info(c: &mut Cursor<'_>) -> Result<RawTensorInfo> {
    let name = c.string("tensor name")?;
    let n_dims = c.u32("tensor dimension count")?;
    if n_dims > MAX_DIMS {
        return Err(GgufError::TooManyDims {
            tensor: name,
            n_dims,
        });
    }
    let mut shape = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        shape.push(c.u64("tensor dimension")?);
    }
    let type_id = c.u32("tensor storage type")?;
    let offset = c.u64("tensor data offset")?;
    Ok(RawTensorInfo {
        name,
        shape,
        type_id,
        offset,
    })
}

fn supported_list() -> String {
    DType::ALL
        .iter()
        .filter(|t| **t != DType::Q8_K)
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}

impl RawTensorInfo {
    fn check(self, data_offset: u64, alignment: u64, file_len: usize) -> Result<TensorInfo> {
        let RawTensorInfo {
            name,
            shape,
            type_id,
            offset,
        } = self;
        let dtype = match DType::from_ggml_id(type_id) {
            Some(t) if t != DType::Q8_K => t,
            _ => {
                return Err(GgufError::UnsupportedStorageType {
                    tensor: name,
                    type_id,
                    name: DType::ggml_name_of_id(type_id),
                    supported: supported_list(),
                });
            }
        };
        let overflow = |name: String, shape: Vec<u64>| GgufError::ShapeOverflow {
            tensor: name,
            shape,
        };
        let mut n_elements: u64 = 1;
        for &d in &shape {
            if d > i64::MAX as u64 {
                return Err(overflow(name, shape));
            }
            match n_elements.checked_mul(d) {
                Some(n) if n <= i64::MAX as u64 => n_elements = n,
                _ => return Err(overflow(name, shape)),
            }
        }
        let ne0 = shape.first().copied().unwrap_or(1);
        if ne0 % dtype.block_len() as u64 != 0 {
            return Err(GgufError::PartialBlock {
                tensor: name,
                dtype,
                ne0,
                block_len: dtype.block_len(),
            });
        }
        let n_bytes =
            (n_elements / dtype.block_len() as u64).checked_mul(dtype.block_bytes() as u64);
        let Some(n_bytes) = n_bytes.filter(|&b| b <= usize::MAX as u64) else {
            return Err(overflow(name, shape));
        };
        if offset % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                tensor: name,
                offset,
                alignment,
            });
        }
        let start = data_offset.checked_add(offset);
        let end = start.and_then(|s| s.checked_add(n_bytes));
        match (start, end) {
            (Some(start), Some(end)) if end <= file_len as u64 => Ok(TensorInfo {
                name,
                dtype,
                shape,
                offset,
                file_offset: start as usize,
                n_bytes: n_bytes as usize,
            }),
            _ => Err(GgufError::TensorPastEnd {
                tensor: name,
                start: start.unwrap_or(u64::MAX),
                end: end.unwrap_or(u64::MAX),
                file_len,
            }),
        }
    }
}

fn check_no_overlap(tensors: &[TensorInfo]) -> Result<()> {
    let mut order: Vec<&TensorInfo> = tensors.iter().filter(|t| t.n_bytes > 0).collect();
    order.sort_by_key(|t| t.file_offset);
    for pair in order.windows(2) {
        if pair[0].file_offset + pair[0].n_bytes > pair[1].file_offset {
            return Err(GgufError::TensorsOverlap {
                first: pair[0].name.clone(),
                second: pair[1].name.clone(),
            });
        }
    }
    Ok(())
}
