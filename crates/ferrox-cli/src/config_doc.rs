//! `docs/CONFIGURATION.md`, generated from the CLI's own definition (as
//! llama.cpp generates llama-server's flag table): every subcommand, and for
//! each of its options the flags, the environment variable, the default and
//! the help text. A test renders it and compares it with the file, so the
//! reference cannot drift from `--help`; `FERROX_BLESS=1` rewrites the file.

use clap::Command;
use std::fmt::Write;

/// The whole reference page for the `ferrox` command.
pub fn render(cli: &Command) -> String {
    let mut out = String::from(
        "# Configuration\n\n\
         Generated from `ferrox --help` by `crates/ferrox-cli/src/config_doc.rs`\n\
         (`FERROX_BLESS=1 cargo test -p ferrox-cli config_doc` rewrites it; the same\n\
         test fails when this page and the binary disagree). A flag wins over its\n\
         environment variable; a malformed value of either is a startup error that\n\
         names it.\n\n\
         The kernel build is chosen once per process from the CPU: `FERROX_ISA=portable|avx2|avx2vnni|avx512|avx512vnni|neon`\n\
         caps it (every command; a lower build gives the same bits, slower), and\n\
         `RUST_LOG` filters `ferrox serve`'s log.\n",
    );
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        render_command(&mut out, sub);
    }
    out
}

fn render_command(out: &mut String, cmd: &Command) {
    let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
    write!(
        out,
        "\n## `ferrox {}`\n\n{}\n",
        cmd.get_name(),
        one_line(&about)
    )
    .unwrap();
    let positionals: Vec<_> = cmd.get_positionals().collect();
    if !positionals.is_empty() {
        out.push('\n');
        for p in positionals {
            let name = p
                .get_value_names()
                .and_then(|v| v.first())
                .map(|v| v.to_string())
                .unwrap_or_else(|| p.get_id().to_string());
            let help = p.get_help().map(|h| h.to_string()).unwrap_or_default();
            writeln!(out, "- `{name}`: {}", one_line(&help)).unwrap();
        }
    }
    let options: Vec<_> = cmd
        .get_arguments()
        .filter(|a| !a.is_positional() && !a.is_hide_set())
        .collect();
    if options.is_empty() {
        return;
    }
    out.push_str("\n| flag | variable | default | what it sets |\n|---|---|---|---|\n");
    for a in options {
        let flag = flag_cell(a);
        let env = a
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let default = a
            .get_default_values()
            .iter()
            .map(|v| format!("`{}`", v.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(", ");
        let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
        writeln!(out, "| {flag} | {env} | {default} | {} |", cell(&help)).unwrap();
    }
}

/// `-m, --model MODEL`: every spelling (visible aliases too), then the value's
/// name when it takes one.
fn flag_cell(a: &clap::Arg) -> String {
    let mut names = Vec::new();
    if let Some(s) = a.get_short() {
        names.push(format!("-{s}"));
    }
    if let Some(l) = a.get_long() {
        names.push(format!("--{l}"));
    }
    names.extend(
        a.get_visible_aliases()
            .into_iter()
            .flatten()
            .map(|l| format!("--{l}")),
    );
    let takes_value =
        a.get_action().takes_values() && a.get_num_args().is_none_or(|n| n.max_values() > 0);
    let value = match a.get_value_names() {
        Some(v) if takes_value => format!(" {}", v.join(" ")),
        None if takes_value => format!(" {}", a.get_id().as_str().to_uppercase()),
        _ => String::new(),
    };
    format!("`{}{value}`", names.join(", ")).replace('|', "\\|")
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Text safe inside a markdown table cell.
fn cell(text: &str) -> String {
    one_line(text).replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn docs_configuration_md_is_what_the_cli_defines() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/CONFIGURATION.md");
        let rendered = super::render(&crate::Cli::command());
        if std::env::var_os("FERROX_BLESS").is_some() {
            std::fs::write(&path, &rendered).unwrap();
            return;
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == rendered,
            "docs/CONFIGURATION.md differs from the CLI's flags: run `FERROX_BLESS=1 cargo test -p ferrox-cli config_doc` and commit the result"
        );
    }
}
