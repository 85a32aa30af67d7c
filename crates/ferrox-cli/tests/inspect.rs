//! `ferrox inspect`: what a file holds and what its KV costs, and its errors.

use ferrox_gguf::{Array, GgufWriter, Value};
use ferrox_testkit::real_model;

mod common;
use common::{ferrox, stderr};

#[test]
fn real_model_inspect_reports_layers_heads_window_and_kv_bytes() {
    let Some(smol) = real_model("smollm2-135m") else {
        return;
    };
    let o = ferrox(
        &[
            "inspect",
            smol.to_str().unwrap(),
            "--json",
            "--ctx",
            "4096",
            "--kv-memory",
            "512MiB",
            "--kv-type",
            "f32",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["hyper_params"]["n_layers"], 30);
    assert_eq!(j["hyper_params"]["n_heads"], 9);
    assert_eq!(j["hyper_params"]["head_dim_k"], 64);
    assert_eq!(j["kv"]["by_layer_kind"][0]["bytes_per_position"], 46080);
    assert_eq!(j["kv"]["plan"]["n_blocks"], (512u64 << 20) / (46080 * 16));
    // 728 blocks of 16 positions; a 4096-position request takes 256 blocks.
    assert_eq!(j["kv"]["full_context_requests_that_fit"], 2);

    let Some(gemma) = real_model("gemma3-270m") else {
        return;
    };
    let o = ferrox(
        &["inspect", "-m", gemma.to_str().unwrap(), "--kv-type", "f32"],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    for want in [
        "layers:          18",
        "heads:           4 query, 1 kv",
        "head dim:        256 (k)",
        "sliding window:  512 on 15 of 18 layers",
        "6.00 KiB per token position",
        "30.00 KiB per token position",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
}

/// `--kv-type f16` (the default on the int16 path, which this CPU runs; and
/// llama-server's `-ctk` / `-ctv`) halves the price of a position and q8_0
/// takes 34 bytes per 32 values; keys and values of different types, and an
/// unknown type, are refused by name.
#[test]
fn real_model_f16_and_q8_0_kv_price_a_position_exactly() {
    let Some(smol) = real_model("smollm2-135m") else {
        return;
    };
    let path = smol.to_str().unwrap();
    for args in [
        &["inspect", path, "--json"][..],
        &["inspect", path, "--json", "--kv-type", "f16"][..],
        &["inspect", path, "--json", "-ctk", "f16", "-ctv", "f16"][..],
    ] {
        let o = ferrox(args, &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(j["kv"]["by_layer_kind"][0]["bytes_per_position"], 23040);
        assert_eq!(j["kv"]["element_bytes"], 2.0);
    }
    let o = ferrox(&["inspect", path, "-ctk", "f16", "-ctv", "f32"], &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("share one type"), "{}", stderr(&o));
    let o = ferrox(
        &["inspect", path, "--json", "-ctk", "q8_0", "-ctv", "q8_0"],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["kv"]["by_layer_kind"][0]["bytes_per_position"], 12240);
    assert_eq!(j["kv"]["element"], "q8_0");
    let o = ferrox(&["inspect", path, "--kv-type", "q4_1"], &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("q4_1"), "{}", stderr(&o));
}

#[test]
fn inspect_of_an_unsupported_architecture_lists_the_supported_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mamba.gguf");
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("mamba".into()));
    w.set(
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(vec!["a".into()])),
    );
    w.write_to(&path).unwrap();
    let o = ferrox(&["inspect", path.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("unsupported architecture \"mamba\"")
            && e.contains(
                "llama, qwen2, qwen3, qwen3moe, phi3, gemma2, gemma3, gpt-oss, qwen35, gemma4"
            ),
        "{e}"
    );
}

#[test]
fn inspect_of_a_missing_or_malformed_file_says_so() {
    let o = ferrox(&["inspect", "/no/such/model.gguf"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/no/such/model.gguf does not exist"),
        "{}",
        stderr(&o)
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.gguf");
    std::fs::write(&path, b"this is not a model").unwrap();
    let o = ferrox(&["inspect", path.to_str().unwrap()], &[]);
    assert!(stderr(&o).contains("not a GGUF file"), "{}", stderr(&o));
}

/// `FERROX_ISA` caps the kernels of every command, so every command refuses a
/// value that names no level, or a level this CPU cannot run, before it does
/// anything else (`serve` is in `cli.rs`'s start-up refusals).
#[test]
fn every_command_refuses_a_kernel_level_it_cannot_run() {
    let missing = if cfg!(target_arch = "x86_64") {
        "neon"
    } else {
        "avx2"
    };
    for (level, says) in [
        ("sse9", "is not a level"),
        (missing, "this CPU does not have those instructions"),
    ] {
        for args in [
            vec!["inspect", "/no/such/model.gguf"],
            vec!["bench", "-m", "/no/such/model.gguf"],
            vec![
                "perplexity",
                "-m",
                "/no/such/model.gguf",
                "-f",
                "/no/such.txt",
            ],
            vec!["models"],
        ] {
            let o = ferrox(&args, &[("FERROX_ISA", level)]);
            let err = stderr(&o);
            assert!(!o.status.success(), "{args:?} ran with FERROX_ISA={level}");
            assert!(
                err.contains(&format!("FERROX_ISA={level:?}")) && err.contains(says),
                "{args:?}: {err}"
            );
        }
    }
}
