//! Running the `ferrox` binary from a test.

use std::process::{Command, Output};

/// `ferrox ARGS` with `env` set, run to its end.
pub fn ferrox(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferrox"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("ferrox runs")
}

/// Its standard error, as text.
#[allow(dead_code)]
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
