//! The metadata table of a GGUF file and its typed getters.
//!
//! Invariants: keys are unique (the parser refuses duplicates) and keep file
//! order. Every getter error names the key and the expected and found types
//! (`llama.block_count: expected u32, found string`). Strict getters take exactly
//! one type; `count` / `int` accept any integer type that fits, as llama.cpp does
//! for hyper-parameters written with different widths by different converters.

use std::collections::HashMap;

use crate::error::{GgufError, Result};
use crate::value::{Array, Value};

/// Ordered key/value metadata.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

macro_rules! strict_getter {
    ($name:ident, $opt:ident, $variant:ident, $t:ty, $label:literal) => {
        #[doc = concat!("The `", $label, "` at `key`; an error if missing or of another type.")]
        pub fn $name(&self, key: &str) -> Result<$t> {
            self.$opt(key)?.ok_or_else(|| GgufError::MissingKey {
                key: key.to_string(),
            })
        }
        #[doc = concat!("The `", $label, "` at `key` if present; an error if of another type.")]
        pub fn $opt(&self, key: &str) -> Result<Option<$t>> {
            match self.get(key) {
                None => Ok(None),
                Some(Value::$variant(v)) => Ok(Some(v.clone())),
                Some(other) => Err(wrong_type(key, $label, other)),
            }
        }
    };
}

macro_rules! array_getter {
    ($name:ident, $variant:ident, $t:ty, $label:literal) => {
        #[doc = concat!("The `", $label, "` at `key`; an error if missing or of another type.")]
        pub fn $name(&self, key: &str) -> Result<&[$t]> {
            match self.get(key) {
                None => Err(GgufError::MissingKey {
                    key: key.to_string(),
                }),
                Some(Value::Array(Array::$variant(v))) => Ok(v),
                Some(other) => Err(wrong_type(key, $label, other)),
            }
        }
    };
}

fn wrong_type(key: &str, expected: &'static str, found: &Value) -> GgufError {
    GgufError::WrongType {
        key: key.to_string(),
        expected,
        found: found.type_description(),
    }
}

impl Metadata {
    /// Adds an entry; an error if the key is already present.
    pub fn insert(&mut self, key: String, value: Value) -> Result<()> {
        if self.index.contains_key(&key) {
            return Err(GgufError::DuplicateKey { key });
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        Ok(())
    }

    /// The value at `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// Whether `key` is present.
    pub fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// Entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    strict_getter!(u8, u8_opt, U8, u8, "u8");
    strict_getter!(u32, u32_opt, U32, u32, "u32");
    strict_getter!(i32, i32_opt, I32, i32, "i32");
    strict_getter!(u64, u64_opt, U64, u64, "u64");
    strict_getter!(f32, f32_opt, F32, f32, "f32");
    strict_getter!(bool, bool_opt, Bool, bool, "bool");
    strict_getter!(string, string_opt, String, String, "string");

    array_getter!(string_array, String, String, "array of string");
    array_getter!(f32_array, F32, f32, "array of f32");
    array_getter!(i32_array, I32, i32, "array of i32");

    /// The string at `key` borrowed; an error if missing or of another type.
    pub fn str(&self, key: &str) -> Result<&str> {
        match self.get(key) {
            None => Err(GgufError::MissingKey {
                key: key.to_string(),
            }),
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(wrong_type(key, "string", other)),
        }
    }

    /// A non-negative integer of any stored width at `key`, as `usize`, if present.
    pub fn count_opt(&self, key: &str) -> Result<Option<usize>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let n = v
            .as_int()
            .ok_or_else(|| wrong_type(key, "an unsigned integer", v))?;
        usize::try_from(n)
            .map(Some)
            .map_err(|_| GgufError::OutOfRange {
                key: key.to_string(),
                value: n.to_string(),
                expected: "a count",
            })
    }

    /// A non-negative integer of any stored width at `key`, as `usize`.
    pub fn count(&self, key: &str) -> Result<usize> {
        self.count_opt(key)?.ok_or_else(|| GgufError::MissingKey {
            key: key.to_string(),
        })
    }

    /// A float stored as f32 or f64 at `key`, if present.
    pub fn float_opt(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::F32(v)) => Ok(Some(*v as f64)),
            Some(Value::F64(v)) => Ok(Some(*v)),
            Some(other) => Err(wrong_type(key, "f32", other)),
        }
    }

    /// The typed array at `key`, if present.
    pub fn array_opt(&self, key: &str) -> Result<Option<&Array>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(other) => Err(wrong_type(key, "array", other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Metadata {
        let mut m = Metadata::default();
        m.insert("llama.block_count".into(), Value::String("thirty".into()))
            .unwrap();
        m.insert("a.count".into(), Value::U64(7)).unwrap();
        m.insert("a.neg".into(), Value::I32(-1)).unwrap();
        m.insert(
            "a.tokens".into(),
            Value::Array(Array::String(vec!["x".into()])),
        )
        .unwrap();
        m
    }

    #[test]
    fn wrong_type_errors_name_key_expected_and_found() {
        let m = sample();
        let e = m.u32("llama.block_count").unwrap_err();
        assert_eq!(
            e.to_string(),
            "llama.block_count: expected u32, found string"
        );
        let e = m.f32_array("a.tokens").unwrap_err();
        assert_eq!(
            e.to_string(),
            "a.tokens: expected array of f32, found array of string"
        );
        assert_eq!(
            m.u32("missing").unwrap_err().to_string(),
            "metadata key \"missing\" is missing"
        );
        assert_eq!(m.u32_opt("missing").unwrap(), None);
    }

    #[test]
    fn counts_accept_any_integer_width_but_not_negatives() {
        let m = sample();
        assert_eq!(m.count("a.count").unwrap(), 7);
        assert!(matches!(
            m.count("a.neg"),
            Err(GgufError::OutOfRange { .. })
        ));
        assert!(matches!(
            m.count("llama.block_count"),
            Err(GgufError::WrongType { .. })
        ));
    }

    #[test]
    fn duplicate_keys_are_refused() {
        let mut m = sample();
        assert!(matches!(
            m.insert("a.count".into(), Value::U8(1)),
            Err(GgufError::DuplicateKey { .. })
        ));
    }
}
