//! Writing GGUF v3 files: used by tests to make tiny models of any architecture,
//! and by tools that rewrite metadata.
//!
//! Invariants: what this writer produces parses back with [`crate::Gguf::parse`]
//! to the same metadata and tensors; tensor data is aligned to
//! `general.alignment` (32 unless set); the writer refuses tensors whose byte
//! length does not match their type and shape.

use std::path::Path;

use ferrox_core::DType;

use crate::error::{GgufError, Result};
use crate::parse::{DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS};
use crate::value::{Array, Value};

struct PendingTensor {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    data: Vec<u8>,
}

/// Builds a GGUF file in memory.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

impl GgufWriter {
    /// An empty file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`, replacing an earlier value of the same key.
    pub fn set(&mut self, key: impl Into<String>, value: Value) -> &mut Self {
        let key = key.into();
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.metadata.push((key, value)),
        }
        self
    }

    /// Adds a tensor of `dtype` with `shape` (ggml order) and its stored bytes.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: &[u64],
        data: Vec<u8>,
    ) -> Result<&mut Self> {
        let name = name.into();
        if shape.len() > MAX_DIMS as usize {
            return Err(GgufError::Write {
                reason: format!("tensor {name:?} has {} dimensions", shape.len()),
            });
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufError::DuplicateTensor { name });
        }
        let n: u64 = shape.iter().product();
        let want = usize::try_from(n).ok().and_then(|n| dtype.row_bytes(n));
        if want != Some(data.len())
            || shape
                .first()
                .is_some_and(|&d| d % dtype.block_len() as u64 != 0)
        {
            return Err(GgufError::Write {
                reason: format!(
                    "tensor {name:?}: {} bytes do not hold {dtype} values of shape {shape:?}",
                    data.len()
                ),
            });
        }
        self.tensors.push(PendingTensor {
            name,
            dtype,
            shape: shape.to_vec(),
            data,
        });
        Ok(self)
    }

    fn alignment(&self) -> u64 {
        match self.metadata.iter().find(|(k, _)| k == "general.alignment") {
            Some((_, Value::U32(a))) if a.is_power_of_two() => *a as u64,
            _ => DEFAULT_ALIGNMENT,
        }
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let align = self.alignment() as usize;
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_string(&mut out, k);
            out.extend_from_slice(&v.value_type().id().to_le_bytes());
            put_value(&mut out, v);
        }
        let mut offset = 0usize;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            put_string(&mut out, &t.name);
            out.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for d in &t.shape {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.dtype.ggml_id().to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offsets.push(offset);
            offset = (offset + t.data.len()).next_multiple_of(align);
        }
        if !self.tensors.is_empty() {
            out.resize(out.len().next_multiple_of(align), 0);
        }
        let data_start = out.len();
        for (t, off) in self.tensors.iter().zip(offsets) {
            out.resize(data_start + off, 0);
            out.extend_from_slice(&t.data);
        }
        out
    }

    /// Writes the file to `path`.
    pub fn write_to(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_bytes()).map_err(|source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => put_string(out, s),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Array(a) => put_array(out, a),
    }
}

fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&a.elem_type().id().to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => each!(v),
        Array::Bool(v) => out.extend(v.iter().map(|&b| b as u8)),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::String(v) => v.iter().for_each(|s| put_string(out, s)),
        Array::Array(v) => v.iter().for_each(|inner| put_array(out, inner)),
    }
}
