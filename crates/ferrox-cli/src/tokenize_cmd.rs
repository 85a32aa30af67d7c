//! `ferrox tokenize` and `ferrox detokenize`: text on stdin to a JSON array of ids,
//! and back. Scripts rely on the output formats; diagnostics go to stderr.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use ferrox_gguf::GgufFile;
use ferrox_text::Tokenizer;

fn load(path: &Path) -> Result<Tokenizer> {
    let file = GgufFile::open(path)?;
    Ok(Tokenizer::from_metadata(&file.header().metadata)?)
}

fn stdin_string() -> Result<String> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .context("stdin is not valid UTF-8 text")?;
    Ok(s)
}

/// Prints the ids of stdin's text as a JSON array. With `stats`, reports the
/// encode time and throughput on stderr.
pub fn tokenize(path: &Path, parse_special: bool, add_special: bool, stats: bool) -> Result<()> {
    let tok = load(path)?;
    let text = stdin_string()?;
    let t0 = Instant::now();
    let ids = tok.encode(&text, add_special, parse_special);
    let dt = t0.elapsed();
    println!("{}", serde_json::to_string(&ids)?);
    if stats {
        let secs = dt.as_secs_f64();
        eprintln!(
            "encoded {} bytes into {} tokens in {:.3} ms: {:.2} MB/s, {:.0} tokens/s",
            text.len(),
            ids.len(),
            secs * 1e3,
            text.len() as f64 / secs / 1e6,
            ids.len() as f64 / secs
        );
    }
    Ok(())
}

/// Prints the text of a JSON array of ids read from stdin.
pub fn detokenize(path: &Path, render_special: bool) -> Result<()> {
    let tok = load(path)?;
    let ids: Vec<u32> = serde_json::from_str(&stdin_string()?)
        .context("stdin must be a JSON array of token ids, e.g. [1, 2, 3]")?;
    if let Some(bad) = ids.iter().find(|&&id| id as usize >= tok.vocab_size()) {
        anyhow::bail!(
            "token id {bad} is outside the vocabulary of {} tokens",
            tok.vocab_size()
        );
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&tok.decode_bytes(&ids, render_special))?;
    out.flush()?;
    Ok(())
}
