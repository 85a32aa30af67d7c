//! `ferrox pull hf.co/...` and `-m hf.co/...` against a loopback fake of the
//! Hugging Face Hub (there is no internet here): the repository listing
//! (`/api/models/USER/REPO/revision/main`) and `resolve` downloads with the
//! headers the real Hub sends (`x-repo-commit`, `x-linked-etag`, ranges).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// A file the fake serves, and the sha256 it announces.
struct Served {
    name: &'static str,
    bytes: Vec<u8>,
    etag: String,
}

/// Starts the fake on a free port: serves `files` of repository `user/tiny`,
/// records every `Range` header asked for. Returns its URL.
fn fake_hub(files: Vec<Served>, ranges: Arc<Mutex<Vec<String>>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            let mut range = None;
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("range: ") {
                    range = Some(v.trim().to_string());
                }
            }
            let mut out = stream;
            let reply = respond(&files, &path, range.as_deref(), &ranges);
            let _ = out.write_all(&reply);
        }
    });
    url
}

fn respond(
    files: &[Served],
    path: &str,
    range: Option<&str>,
    ranges: &Mutex<Vec<String>>,
) -> Vec<u8> {
    let head = |status: &str, extra: &str, len: usize| {
        format!("HTTP/1.1 {status}\r\nContent-Length: {len}\r\nConnection: close\r\n{extra}\r\n")
            .into_bytes()
    };
    if path == "/api/models/user/tiny/revision/main" {
        let siblings: Vec<String> = files
            .iter()
            .map(|f| format!("{{\"rfilename\":\"{}\"}}", f.name))
            .chain(["{\"rfilename\":\"README.md\"}".to_string()])
            .collect();
        let body = format!(
            "{{\"sha\":\"{COMMIT}\",\"siblings\":[{}]}}",
            siblings.join(",")
        );
        let mut r = head("200 OK", "Content-Type: application/json\r\n", body.len());
        r.extend(body.as_bytes());
        return r;
    }
    let Some(f) = files
        .iter()
        .find(|f| path == format!("/user/tiny/resolve/main/{}", f.name))
    else {
        return head("404 Not Found", "", 0);
    };
    let range = range.unwrap_or("bytes=0-").to_string();
    ranges.lock().unwrap().push(range.clone());
    let spec = range.trim_start_matches("bytes=");
    let (a, b) = spec.split_once('-').unwrap();
    let start: usize = a.parse().unwrap();
    let end: usize = if b.is_empty() {
        f.bytes.len() - 1
    } else {
        b.parse().unwrap()
    };
    let body = &f.bytes[start..=end];
    let extra = format!(
        "Content-Range: bytes {start}-{end}/{}\r\nx-repo-commit: {COMMIT}\r\nx-linked-etag: \"{}\"\r\netag: \"W/git\"\r\n",
        f.bytes.len(),
        f.etag
    );
    let mut r = head("206 Partial Content", &extra, body.len());
    r.extend(body);
    r
}

fn ferrox(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferrox"));
    c.args(args).env_remove("HF_TOKEN");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("ferrox runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn pull_from_a_hub_resumes_checks_sha256_and_serves_from_its_cache() {
    let model = ferrox_testkit::TinyModel::new(ferrox_models::Architecture::Llama).gguf();
    let sha = format!("{:x}", Sha256::digest(&model));
    let files = vec![
        Served {
            name: "tiny-Q8_0.gguf",
            bytes: model.clone(),
            etag: sha.clone(),
        },
        Served {
            name: "tiny-Q4_K_M.gguf",
            bytes: model.clone(),
            // The announced sha256 does not match the bytes.
            etag: "ab".repeat(32),
        },
    ];
    let ranges = Arc::new(Mutex::new(Vec::new()));
    let url = fake_hub(files, Arc::clone(&ranges));
    let home = tempfile::tempdir().unwrap();
    let hf_home = home.path().to_str().unwrap();
    let env = [("HF_ENDPOINT", url.as_str()), ("HF_HOME", hf_home)];
    let repo_dir = home.path().join("hub/models--user--tiny");

    // A partial download from before: the pull resumes after its bytes.
    let blobs = repo_dir.join("blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::write(blobs.join(format!("{sha}.part")), &model[..1000]).unwrap();

    let o = ferrox(&["pull", "hf.co/user/tiny:q8_0"], &env);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let want = repo_dir.join(format!("snapshots/{COMMIT}/tiny-Q8_0.gguf"));
    assert!(
        text(&o.stdout).contains(want.to_str().unwrap()),
        "{}",
        text(&o.stdout)
    );
    assert_eq!(std::fs::read(&want).unwrap(), model);
    assert!(
        ranges.lock().unwrap().iter().any(|r| r == "bytes=1000-"),
        "no resumed range in {:?}",
        ranges.lock().unwrap()
    );

    // Cached: runs with the hub gone (a closed port).
    let offline = [("HF_ENDPOINT", "http://127.0.0.1:9"), ("HF_HOME", hf_home)];
    let o = ferrox(
        &[
            "run",
            "-m",
            "hf.co/user/tiny:Q8_0",
            "-p",
            "abc",
            "-n",
            "3",
            "--no-cnv",
        ],
        &offline,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));

    // A tag no file has: the error lists the files there are.
    let o = ferrox(&["pull", "hf.co/user/tiny:IQ2_XS"], &env);
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(e.contains("IQ2_XS") && e.contains("tiny-Q8_0.gguf"), "{e}");

    // A download whose bytes do not match the announced sha256 is refused and removed.
    let o = ferrox(&["pull", "hf.co/user/tiny:Q4_K_M"], &env);
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(e.contains("sha256") && e.contains("deleted"), "{e}");
    assert!(
        !repo_dir
            .join(format!("snapshots/{COMMIT}/tiny-Q4_K_M.gguf"))
            .exists()
    );
}
