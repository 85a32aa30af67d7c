//! The writer and the reader agree, on files and in memory; the real models'
//! headers parse.

use ferrox_core::DType;
use ferrox_gguf::{Array, GgufFile, GgufWriter, Value};

#[test]
fn what_the_writer_writes_the_reader_reads_back() {
    let mut w = GgufWriter::new();
    let tokens: Vec<String> = (0..300).map(|i| format!("tok{i}")).collect();
    w.set("general.architecture", Value::String("llama".into()))
        .set("general.alignment", Value::U32(64))
        .set("llama.block_count", Value::U32(2))
        .set("x.f64", Value::F64(-1.5))
        .set(
            "tokenizer.ggml.tokens",
            Value::Array(Array::String(tokens.clone())),
        )
        .set(
            "x.nested",
            Value::Array(Array::Array(vec![
                Array::U8(vec![1, 2, 3]),
                Array::Bool(vec![true]),
            ])),
        );
    let a: Vec<u8> = (0..34 * 2).map(|i| i as u8).collect();
    let b: Vec<u8> = (0..4 * 3).map(|i| 100 + i as u8).collect();
    w.add_tensor("a", DType::Q8_0, &[64], a.clone()).unwrap();
    w.add_tensor("b", DType::F32, &[1, 3], b.clone()).unwrap();
    assert!(
        w.add_tensor("c", DType::Q8_0, &[64], vec![0; 10]).is_err(),
        "wrong byte length is refused"
    );
    assert!(
        w.add_tensor("a", DType::F32, &[1], vec![0; 4]).is_err(),
        "duplicate name is refused"
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    w.write_to(&path).unwrap();
    for file in [
        GgufFile::open(&path).unwrap(),
        GgufFile::from_bytes(w.to_bytes()).unwrap(),
    ] {
        let h = file.header();
        assert_eq!(h.version, 3);
        assert_eq!(h.alignment, 64);
        assert_eq!(h.architecture().unwrap(), "llama");
        assert_eq!(h.metadata.u32("llama.block_count").unwrap(), 2);
        assert_eq!(
            h.metadata.string_array("tokenizer.ggml.tokens").unwrap(),
            &tokens[..]
        );
        assert_eq!(h.metadata.get("x.f64"), Some(&Value::F64(-1.5)));
        let ta = file.tensor("a").unwrap();
        assert_eq!(
            (ta.dtype(), ta.shape(), ta.data),
            (DType::Q8_0, &[64u64][..], &a[..])
        );
        assert_eq!(ta.info.file_offset % 64, 0);
        let tb = file.tensor("b").unwrap();
        assert_eq!(
            (tb.dtype(), tb.shape(), tb.data),
            (DType::F32, &[1u64, 3][..], &b[..])
        );
        assert_eq!(tb.row(2), Some(&b[8..12]));
        assert!(file.tensor("zzz").is_err());
        assert_eq!(file.tensors().count(), 2);
    }
}

#[test]
fn a_missing_file_names_its_path() {
    let e = GgufFile::open("/nonexistent/model.gguf").err().unwrap();
    assert!(e.to_string().contains("/nonexistent/model.gguf"), "{e}");
}
