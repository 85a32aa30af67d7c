//! Hostile GGUF input: every malformation is a typed error, never a panic, and no
//! allocation is sized by a count the file claims before it is checked.
//!
//! The corpus: a small valid file with every metadata type, truncated at every byte
//! offset and overwritten with extreme values at every offset, plus one crafted
//! file per error variant. A counting global allocator records the largest single
//! allocation made while parsing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ferrox_core::DType;
use ferrox_gguf::{Array, Gguf, GgufError, GgufWriter, Value};

/// Records the largest allocation made on this thread (tests run on several).
struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn record(size: usize) {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn sample_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()))
        .set("a.u8", Value::U8(7))
        .set("a.i8", Value::I8(-7))
        .set("a.u16", Value::U16(700))
        .set("a.i16", Value::I16(-700))
        .set("a.u32", Value::U32(70000))
        .set("a.i32", Value::I32(-70000))
        .set("a.f32", Value::F32(0.5))
        .set("a.bool", Value::Bool(true))
        .set("a.u64", Value::U64(1 << 40))
        .set("a.i64", Value::I64(-(1 << 40)))
        .set("a.f64", Value::F64(0.25))
        .set(
            "a.tokens",
            Value::Array(Array::String(vec!["<s>".into(), "hé".into(), "".into()])),
        )
        .set("a.scores", Value::Array(Array::F32(vec![0.1, -0.2])))
        .set(
            "a.nested",
            Value::Array(Array::Array(vec![
                Array::I32(vec![1, 2]),
                Array::String(vec!["x".into()]),
            ])),
        );
    w.add_tensor("t.f32", DType::F32, &[8], vec![1; 32])
        .unwrap();
    w.add_tensor("t.q8", DType::Q8_0, &[32, 2], vec![2; 68])
        .unwrap();
    w.add_tensor("t.q4k", DType::Q4_K, &[256], vec![3; 144])
        .unwrap();
    w.to_bytes()
}

fn parse_counting(bytes: &[u8]) -> (Result<Gguf, GgufError>, usize) {
    LARGEST.with(|l| l.set(0));
    let r = Gguf::parse(bytes);
    (r, LARGEST.with(|l| l.get()))
}

/// Allocations while parsing stay proportional to the file: a generous bound of
/// 64 bytes of memory per byte of input plus fixed overhead.
fn allocation_bound(len: usize) -> usize {
    64 * len + 16 * 1024
}

#[test]
fn the_sample_file_parses() {
    let bytes = sample_file();
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.tensors.len(), 3);
    assert_eq!(g.metadata.len(), 15);
}

#[test]
fn truncation_at_every_offset_is_an_error_not_a_panic() {
    let bytes = sample_file();
    for cut in 0..bytes.len() {
        let (r, largest) = parse_counting(&bytes[..cut]);
        assert!(r.is_err(), "prefix of {cut} bytes parsed");
        assert!(
            largest <= allocation_bound(cut),
            "prefix {cut}: allocated {largest} bytes"
        );
    }
}

#[test]
fn extreme_values_at_every_offset_never_panic_or_over_allocate() {
    let bytes = sample_file();
    let patterns: [&[u8]; 6] = [
        &[0xFF; 8],
        &[0xFF, 0xFF, 0xFF, 0x7F],
        &[0, 0, 0, 0, 0, 0, 0, 0x80],
        &[0; 8],
        &[0x10, 0, 0, 0, 0, 0, 0, 0],
        &[0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0],
    ];
    let mut errors = 0;
    for at in 0..bytes.len() {
        for p in patterns {
            let mut m = bytes.clone();
            let end = (at + p.len()).min(m.len());
            m[at..end].copy_from_slice(&p[..end - at]);
            let (r, largest) = parse_counting(&m);
            errors += r.is_err() as usize;
            assert!(
                largest <= allocation_bound(m.len()),
                "pattern {p:02x?} at {at}: allocated {largest} bytes"
            );
        }
    }
    assert!(
        errors > bytes.len(),
        "mutations should mostly be caught, {errors} were"
    );
}

#[test]
fn random_byte_flips_never_panic() {
    let bytes = sample_file();
    let mut state = 0x9E3779B97F4A7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..20_000 {
        let mut m = bytes.clone();
        for _ in 0..1 + next() % 4 {
            let i = (next() % m.len() as u64) as usize;
            m[i] = next() as u8;
        }
        let (_, largest) = parse_counting(&m);
        assert!(largest <= allocation_bound(m.len()));
    }
}

/// A byte-level builder that can write what the real writer refuses to.
#[derive(Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &[u8]) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s);
        self
    }
    fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key.as_bytes()).u32(4).u32(v)
    }
    fn tensor(&mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> &mut Self {
        self.str(name.as_bytes()).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(type_id).u64(offset)
    }
    fn data(&mut self, n: usize) -> Vec<u8> {
        let mut v = self.0.clone();
        v.resize(v.len().next_multiple_of(32), 0);
        v.resize(v.len() + n, 0xAB);
        v
    }
}

fn err(bytes: &[u8]) -> GgufError {
    Gguf::parse(bytes).expect_err("should be refused")
}

#[test]
fn header_errors_have_their_own_variants() {
    assert!(matches!(err(b"GGML\x03\0\0\0"), GgufError::BadMagic { .. }));
    assert!(matches!(
        err(&Raw::header(1, 0, 0).0),
        GgufError::UnsupportedVersion { version: 1 }
    ));
    assert!(matches!(
        err(&Raw::header(4, 0, 0).0),
        GgufError::UnsupportedVersion { version: 4 }
    ));
    assert!(matches!(
        err(&Raw::header(3u32.swap_bytes(), 0, 0).0),
        GgufError::BigEndian { version: 3 }
    ));
    assert!(matches!(err(b"GGUF\x03\0"), GgufError::Truncated { .. }));
    assert!(matches!(
        err(&Raw::header(3, 0, u64::MAX).0),
        GgufError::TooManyMetadata { .. }
    ));
    assert!(matches!(
        err(&Raw::header(3, 1 << 40, 0).0),
        GgufError::TooManyTensors { .. }
    ));
    assert!(
        Gguf::parse(&Raw::header(2, 0, 0).0).is_ok(),
        "an empty v2 file is valid"
    );
}

#[test]
fn metadata_errors_have_their_own_variants() {
    let mut r = Raw::header(3, 0, 1);
    r.u64(1 << 50).u64(0).u64(0);
    assert!(matches!(err(&r.0), GgufError::StringPastEnd { .. }));

    let mut r = Raw::header(3, 0, 1);
    r.str(b"k").u32(99).u32(0);
    assert!(matches!(
        err(&r.0),
        GgufError::UnknownValueType { type_id: 99, .. }
    ));

    let mut r = Raw::header(3, 0, 1);
    r.str(b"k").u32(9).u32(8).u64(u64::MAX / 2);
    assert!(matches!(err(&r.0), GgufError::ArrayPastEnd { .. }));

    let mut r = Raw::header(3, 0, 1);
    r.str(b"k").u32(9);
    for _ in 0..12 {
        r.u32(9).u64(1);
    }
    r.u32(9).u32(0).u64(0);
    assert!(matches!(err(&r.0), GgufError::NestingTooDeep { .. }));

    let mut r = Raw::header(3, 0, 1);
    r.str(b"k").u32(8).str(&[0xC3, 0x28]);
    assert!(matches!(err(&r.0), GgufError::InvalidUtf8 { .. }));

    let mut r = Raw::header(3, 0, 2);
    r.kv_u32("k", 1).kv_u32("k", 2);
    assert!(matches!(err(&r.0), GgufError::DuplicateKey { .. }));

    let mut r = Raw::header(3, 0, 1);
    r.kv_u32("general.alignment", 48);
    assert!(matches!(
        err(&r.0),
        GgufError::BadAlignment { alignment: 48 }
    ));

    let mut r = Raw::header(3, 0, 1);
    r.str(b"general.alignment").u32(8).str(b"32");
    let e = err(&r.0);
    assert_eq!(
        e.to_string(),
        "general.alignment: expected u32, found string"
    );
}

#[test]
fn tensor_errors_have_their_own_variants() {
    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[1, 1, 1, 1, 1], 0, 0);
    assert!(matches!(
        err(&r.data(4)),
        GgufError::TooManyDims { n_dims: 5, .. }
    ));

    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[1 << 40, 1 << 40], 0, 0);
    assert!(matches!(err(&r.data(4)), GgufError::ShapeOverflow { .. }));

    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[256], 16, 0);
    let e = err(&r.data(256));
    assert!(matches!(
        e,
        GgufError::UnsupportedStorageType { type_id: 16, .. }
    ));
    let msg = e.to_string();
    assert!(
        msg.contains("IQ2_XXS") && msg.contains("Q4_K") && msg.contains("BF16"),
        "{msg}"
    );

    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[16], DType::Q8_0.ggml_id(), 0);
    assert!(matches!(err(&r.data(64)), GgufError::PartialBlock { .. }));

    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[4], 0, 4);
    assert!(matches!(
        err(&r.data(64)),
        GgufError::MisalignedTensor { .. }
    ));

    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[64], 0, 0);
    assert!(matches!(err(&r.data(255)), GgufError::TensorPastEnd { .. }));
    assert!(Gguf::parse(&r.data(256)).is_ok());

    let mut r = Raw::header(3, 1, 0);
    r.tensor("t", &[4], 0, u64::MAX - 31);
    assert!(matches!(err(&r.data(64)), GgufError::TensorPastEnd { .. }));

    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[16], 0, 0).tensor("b", &[16], 0, 32);
    assert!(matches!(
        err(&r.data(128)),
        GgufError::TensorsOverlap { .. }
    ));

    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[8], 0, 0).tensor("a", &[8], 0, 32);
    assert!(matches!(
        err(&r.data(128)),
        GgufError::DuplicateTensor { .. }
    ));
}
