//! Download progress, reported to whoever fetches: a bar on a terminal (the
//! CLI), lines of a stream (the server's `/api/pull`).

use indicatif::{ProgressBar, ProgressStyle};

/// What a download reports as it goes.
pub trait Progress: Send {
    /// A file of `total` bytes (0: unknown) starts downloading.
    fn start(&mut self, label: &str, total: u64);
    /// `bytes` more arrived.
    fn advance(&mut self, bytes: u64);
    /// The file is in.
    fn done(&mut self);
}

/// A bar on standard error, drawn only when it is a terminal.
#[derive(Default)]
pub struct TerminalBar(Option<ProgressBar>);

impl Progress for TerminalBar {
    fn start(&mut self, label: &str, total: u64) {
        if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return;
        }
        let pb = ProgressBar::new(total).with_message(label.to_string());
        pb.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .expect("static template")
            .progress_chars("=> "),
        );
        self.0 = Some(pb);
    }

    fn advance(&mut self, bytes: u64) {
        if let Some(pb) = &self.0 {
            pb.inc(bytes);
        }
    }

    fn done(&mut self) {
        if let Some(pb) = self.0.take() {
            pb.finish_and_clear();
        }
    }
}

/// hf-hub's progress hooks, reporting to a [`Progress`].
pub(crate) struct ForHf<'a>(pub &'a mut dyn Progress);

impl hf_hub::api::Progress for ForHf<'_> {
    fn init(&mut self, size: usize, filename: &str) {
        self.0.start(filename, size as u64);
    }

    fn update(&mut self, size: usize) {
        self.0.advance(size as u64);
    }

    fn finish(&mut self) {
        self.0.done();
    }
}
