//! Fill-in-the-middle prompts, built as llama-server builds them
//! (`format_prompt_infill` in `tools/server/server-common.cpp`), so that
//! editor plugins written for it (llama.vscode, llama.vim) get the same
//! prompt:
//!
//! ```text
//! [extra context] [BOS] <FIM_PRE> prefix prompt <FIM_SUF> suffix <FIM_MID>
//! ```
//!
//! The extra context is the repository-level pattern when the vocabulary has
//! the repository and file-separator tokens (`<FIM_REP>myproject\n`, then
//! `<FIM_SEP>filename\n text` per file and `<FIM_SEP>filename\n` for the file
//! being edited), else the files' texts each after a `--- snippet ---` line.
//! As there, the prefix keeps its last 3/4 of a batch of tokens, the suffix
//! its first quarter less the prompt, and the extra context its last tokens
//! that fit beside a batch and twice the answer.

use crate::tokenizer::Tokenizer;

/// What an infill request gives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Infill {
    /// The code before the cursor.
    pub prefix: String,
    /// The code after it.
    pub suffix: String,
    /// Other files for context.
    pub extra: Vec<ExtraFile>,
    /// Text the answer starts with (after the prefix).
    pub prompt: String,
}

/// A file given as context.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtraFile {
    pub filename: String,
    pub text: String,
}

/// The room the prompt is trimmed to.
#[derive(Clone, Copy, Debug)]
pub struct Room {
    /// llama-server's batch (`-b`, 2048 by default).
    pub batch: usize,
    /// The request's context.
    pub context: usize,
    /// Tokens the answer may take (`None`: no limit, llama-server's -1).
    pub answer: Option<usize>,
}

/// A vocabulary without the tokens infill needs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("fill-in-the-middle is not supported by this model: its vocabulary has no {}", missing.join(", "))]
pub struct NoFim {
    /// The roles it lacks: `prefix`, `suffix`, `middle` tokens.
    pub missing: Vec<&'static str>,
}

/// The token ids of `infill` for `tok`'s model, trimmed to `room`.
pub fn prompt_ids(tok: &Tokenizer, infill: &Infill, room: Room) -> Result<Vec<u32>, NoFim> {
    let fim = tok.fim();
    let (Some(pre), Some(suf), Some(mid)) = (fim.pre, fim.suf, fim.mid) else {
        let missing = [
            ("prefix token", fim.pre),
            ("suffix token", fim.suf),
            ("middle token", fim.mid),
        ]
        .into_iter()
        .filter(|(_, id)| id.is_none())
        .map(|(name, _)| name)
        .collect();
        return Err(NoFim { missing });
    };
    let text = |s: &str| tok.encode(s, false, false);
    let mut extra = Vec::new();
    if let Some(rep) = fim.rep {
        extra.push(rep);
        extra.extend(text("myproject\n"));
    }
    for file in &infill.extra {
        match fim.sep {
            Some(sep) => {
                extra.push(sep);
                extra.extend(text(&format!("{}\n", file.filename)));
            }
            None => extra.extend(text("\n\n--- snippet ---\n\n")),
        }
        extra.extend(text(&file.text));
    }
    if let Some(sep) = fim.sep {
        extra.push(sep);
        extra.extend(text("filename\n"));
    }
    let prompt = tok.encode(&infill.prompt, false, true);
    let mut prefix = text(&infill.prefix);
    let mut suffix = text(&infill.suffix);
    let prefix_take = prefix.len().min(3 * (room.batch / 4));
    let suffix_take = suffix
        .len()
        .min((room.batch / 4).saturating_sub(2 + prompt.len()));
    let answer = room.answer.map_or(-2, |n| 2 * n as i64);
    let extra_room = (room.context as i64 - room.batch as i64 - answer).max(0) as usize;
    let extra_take = extra.len().min(extra_room);
    prefix.drain(..prefix.len() - prefix_take);
    suffix.truncate(suffix_take);
    let mut ids = extra[extra.len() - extra_take..].to_vec();
    if tok.adds_bos()
        && let Some(bos) = tok.bos()
    {
        ids.push(bos);
    }
    ids.push(pre);
    ids.extend(prefix);
    ids.extend(prompt);
    ids.push(suf);
    ids.extend(suffix);
    ids.push(mid);
    Ok(ids)
}
