//! llama-perplexity's measure of a text, computed the same way so that the two
//! figures compare: the text's tokens cut into chunks of `ctx` tokens (the rest
//! dropped), each run from an empty context with its first token replaced by
//! BOS where the model's tokenizer adds one, and scored on its second half:
//! positions `ctx / 2 .. ctx - 1` each predict the token after them. The
//! perplexity is `exp` of the mean negative log-likelihood over every chunk's
//! scored tokens, and its error the standard error of that mean times the
//! perplexity, as llama-perplexity prints it.

use ferrox_core::ops::exp::log_sum_exp;

use crate::decoder::{Decoder, Span, Want};
use crate::error::ModelError;
use crate::kv_store::KvStore;

/// How the text is cut.
#[derive(Clone, Copy, Debug)]
pub struct Chunking {
    /// Tokens per chunk (llama-perplexity's `-c`, 512 by default).
    pub ctx: usize,
    /// Most chunks scored (`--chunks`); every whole chunk without.
    pub chunks: Option<usize>,
    /// The token each chunk starts with in place of its own, when the model's
    /// tokenizer adds BOS.
    pub bos: Option<u32>,
}

/// The measure, and its course chunk by chunk.
#[derive(Clone, Debug, PartialEq)]
pub struct Perplexity {
    pub ppl: f64,
    /// The perplexity's standard error (`+/-`).
    pub error: f64,
    /// The perplexity over the chunks so far, after each chunk.
    pub running: Vec<f64>,
    /// Tokens scored.
    pub scored: usize,
}

/// Why a text cannot be measured.
#[derive(Debug, thiserror::Error)]
pub enum PerplexityError {
    #[error(
        "the text tokenizes to {tokens} tokens; a context of {ctx} needs at least {} (two chunks)",
        2 * ctx
    )]
    TooShort { tokens: usize, ctx: usize },
    #[error("a context of {0} tokens is too small: at least 4")]
    SmallContext(usize),
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// Scored tokens run per forward call (bounds the logits held at once).
const SCORED_PER_CALL: usize = 256;

/// The perplexity of `tokens` under `m`, cut as `c` says; `on_chunk` hears
/// the running perplexity after each chunk (llama-perplexity's `[k]ppl,`).
pub fn perplexity(
    m: &dyn Decoder,
    tokens: &[u32],
    c: Chunking,
    mut on_chunk: impl FnMut(usize, f64),
) -> Result<Perplexity, PerplexityError> {
    if c.ctx < 4 {
        return Err(PerplexityError::SmallContext(c.ctx));
    }
    if tokens.len() < 2 * c.ctx {
        return Err(PerplexityError::TooShort {
            tokens: tokens.len(),
            ctx: c.ctx,
        });
    }
    let whole = tokens.len() / c.ctx;
    let n = c.chunks.map_or(whole, |k| k.min(whole));
    let (mut nll, mut nll2, mut count) = (0.0f64, 0.0f64, 0usize);
    let mut running = Vec::with_capacity(n);
    for k in 0..n {
        let chunk = &tokens[k * c.ctx..(k + 1) * c.ctx];
        for lp in chunk_log_likelihoods(m, chunk, c.bos)? {
            nll -= lp;
            nll2 += lp * lp;
            count += 1;
        }
        let ppl = (nll / count as f64).exp();
        running.push(ppl);
        on_chunk(k + 1, ppl);
    }
    let mean = nll / count as f64;
    let ppl = mean.exp();
    let var = nll2 / count as f64 - mean * mean;
    let error = if var > 0.0 && count > 1 {
        (var / (count - 1) as f64).sqrt() * ppl
    } else {
        0.0
    };
    Ok(Perplexity {
        ppl,
        error,
        running,
        scored: count,
    })
}

/// The log-likelihoods of a chunk's second half: position `p` (from
/// `ctx / 2` to `ctx - 2`) scores token `p + 1`.
fn chunk_log_likelihoods(
    m: &dyn Decoder,
    chunk: &[u32],
    bos: Option<u32>,
) -> Result<Vec<f64>, ModelError> {
    let ctx = chunk.len();
    let first = ctx / 2;
    let mut run = chunk.to_vec();
    if let Some(b) = bos {
        run[0] = b;
    }
    let mut store = KvStore::new(m.kv_layout(), 16);
    let pages = store.fresh_table(ctx);
    m.forward(
        &mut store,
        &[Span {
            pages: &pages,
            start: 0,
            tokens: &run[..first],
            want: Want::Nothing,
        }],
    )?;
    let mut out = Vec::with_capacity(ctx - 1 - first);
    let mut start = first;
    while start < ctx - 1 {
        let end = (start + SCORED_PER_CALL).min(ctx - 1);
        let logits = m
            .forward(
                &mut store,
                &[Span {
                    pages: &pages,
                    start,
                    tokens: &run[start..end],
                    want: Want::All,
                }],
            )?
            .logits;
        for (j, row) in logits.rows_of(0) {
            out.push(row[chunk[start + j + 1] as usize] as f64 - log_sum_exp(row));
        }
        start = end;
    }
    Ok(out)
}
