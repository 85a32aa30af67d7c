//! `ferrox chat` (and `ferrox run` without a prompt): an interactive conversation
//! in the terminal, as `llama-cli` and `ollama run` give one.
//!
//! Lines are read with `rustyline` (editing and history); a line ending in `\`
//! continues on the next. Answers stream as they are generated, and the history
//! stays in the conversation (the prefix cache keeps it from being run again each
//! turn). Ctrl-C stops an answer and keeps the session; Ctrl-D (or `/exit`) ends
//! it and prints the stats. Commands: `/clear`, `/system TEXT`, `/save FILE`,
//! `/load FILE`, `/help`, `/exit`.

use std::path::Path;

use anyhow::{Context, Result, bail};
use ferrox_text::chat::ChatMessage;
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use serde::{Deserialize, Serialize};

use crate::run_cmd::{RunArgs, Session, print_speed};

const HELP: &str = "\
/clear         forget the conversation (the system prompt stays)
/system TEXT   set the system prompt (empty: none)
/save FILE     write the conversation to FILE (JSON)
/load FILE     read a conversation written by /save
/help          this list
/exit          end the chat (Ctrl-D too)
A line ending in \\ continues on the next. Ctrl-C stops an answer.";

/// A conversation as `/save` writes it.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Conversation {
    system: Option<String>,
    messages: Vec<ChatMessage>,
}

impl Conversation {
    /// The messages the template renders, system prompt first.
    fn rendered(&self) -> Vec<ChatMessage> {
        let system = self.system.iter().map(|s| ChatMessage::new("system", s));
        system.chain(self.messages.iter().cloned()).collect()
    }

    fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
    }

    fn load(path: &Path) -> Result<Conversation> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a conversation saved by /save", path.display()))
    }
}

/// What the session added up to.
#[derive(Default)]
struct Totals {
    answers: usize,
    prompt_tokens: usize,
    cached_tokens: usize,
    generated: usize,
    prompt_s: f64,
    gen_s: f64,
}

/// A command's outcome.
enum Next {
    Continue,
    Exit,
}

/// Runs the chat.
pub fn chat(a: RunArgs) -> Result<()> {
    let session = Session::start(&a, true)?;
    if session.chat.is_none() {
        bail!(
            "this model has no chat template (a base model), so it cannot chat; give it text to continue with `ferrox run -p TEXT`"
        );
    }
    let mut editor = DefaultEditor::new().context("cannot start the line editor")?;
    let mut conv = Conversation {
        system: a.system.clone(),
        messages: Vec::new(),
    };
    let mut totals = Totals::default();
    eprintln!("ferrox chat: /help lists the commands; Ctrl-C stops an answer, Ctrl-D exits.");
    if let Some(first) = &a.prompt {
        println!("> {first}");
        answer(&session, &mut conv, first, &mut totals)?;
    }
    while let Some(line) = read_message(&mut editor)? {
        if line.trim().is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(line.as_str());
        if line.starts_with('/') {
            match command(&line, &mut conv) {
                Ok(Next::Continue) => continue,
                Ok(Next::Exit) => break,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    continue;
                }
            }
        }
        if let Err(e) = answer(&session, &mut conv, &line, &mut totals) {
            eprintln!("error: {e:#}");
        }
    }
    print_totals(&session, &a, &totals);
    Ok(())
}

/// One message: lines joined while they end in `\`. `None` at Ctrl-D.
fn read_message(editor: &mut DefaultEditor) -> Result<Option<String>> {
    // A Ctrl-C that came after the last answer ended stops nothing.
    crate::interrupt::take();
    let mut text = String::new();
    let mut prompt = "> ";
    loop {
        match editor.readline(prompt) {
            Ok(line) => match line.strip_suffix('\\') {
                Some(part) => {
                    text.push_str(part);
                    text.push('\n');
                    prompt = "… ";
                }
                None => {
                    text.push_str(&line);
                    return Ok(Some(text));
                }
            },
            // Ctrl-C at the prompt drops the line being typed.
            Err(ReadlineError::Interrupted) => {
                text.clear();
                prompt = "> ";
            }
            Err(ReadlineError::Eof) => return Ok(None),
            Err(e) => return Err(e).context("cannot read the terminal"),
        }
    }
}

/// Runs a `/command`.
fn command(line: &str, conv: &mut Conversation) -> Result<Next> {
    let (name, arg) = line.split_once(' ').unwrap_or((line, ""));
    let arg = arg.trim();
    let file = || {
        if arg.is_empty() {
            bail!("{name} needs a file name");
        }
        Ok(Path::new(arg))
    };
    match name {
        "/help" => eprintln!("{HELP}"),
        "/clear" => {
            conv.messages.clear();
            eprintln!("(conversation cleared)");
        }
        "/system" => {
            conv.system = (!arg.is_empty()).then(|| arg.to_string());
            eprintln!(
                "(system prompt {})",
                if arg.is_empty() { "removed" } else { "set" }
            );
        }
        "/save" => {
            conv.save(file()?)?;
            eprintln!("(saved {} messages to {arg})", conv.messages.len());
        }
        "/load" => {
            *conv = Conversation::load(file()?)?;
            eprintln!("(loaded {} messages from {arg})", conv.messages.len());
        }
        "/exit" | "/quit" => return Ok(Next::Exit),
        other => bail!("unknown command {other}; /help lists them"),
    }
    Ok(Next::Continue)
}

/// Answers `text` as the next user message; the answer (even a stopped one)
/// joins the conversation.
fn answer(
    session: &Session,
    conv: &mut Conversation,
    text: &str,
    totals: &mut Totals,
) -> Result<()> {
    conv.messages.push(ChatMessage::new("user", text));
    let ids = match session.chat_ids(&conv.rendered()) {
        Ok(ids) if ids.len() < session.ctx => ids,
        Ok(ids) => {
            conv.messages.pop();
            bail!(
                "the conversation is {} tokens, over the context of {}; /clear starts over (or raise --ctx-size)",
                ids.len(),
                session.ctx
            );
        }
        Err(e) => {
            conv.messages.pop();
            return Err(e);
        }
    };
    let prompt_tokens = ids.len();
    let t = session.generate(ids)?;
    if t.interrupted {
        eprintln!("[interrupted]");
    }
    conv.messages.push(ChatMessage::new("assistant", &t.text));
    totals.answers += 1;
    totals.prompt_tokens += prompt_tokens;
    totals.cached_tokens += t.usage.map_or(0, |u| u.cached_tokens);
    totals.generated += t.generated;
    totals.prompt_s += t.prompt_s;
    totals.gen_s += t.gen_s;
    Ok(())
}

fn print_totals(session: &Session, a: &RunArgs, t: &Totals) {
    eprintln!();
    eprintln!(
        "chat:        {} answers, {} prompt tokens ({} from the prefix cache), {} generated",
        t.answers, t.prompt_tokens, t.cached_tokens, t.generated
    );
    session.print_load(a.path.activations);
    print_speed(
        t.prompt_tokens - t.cached_tokens,
        t.prompt_s,
        t.generated.saturating_sub(t.answers),
        t.gen_s,
    );
}
