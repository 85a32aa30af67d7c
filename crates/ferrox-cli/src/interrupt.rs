//! Ctrl-C while a generation streams: one process-wide SIGINT handler sets a flag
//! that the streaming loop takes. (At a chat prompt the line editor reads Ctrl-C
//! as a key, so the flag only ever stops answers.)

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Result, anyhow};

static PRESSED: AtomicBool = AtomicBool::new(false);
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();

/// Installs the handler (once per process; later calls return its outcome).
pub fn install() -> Result<()> {
    INSTALLED
        .get_or_init(|| {
            ctrlc::set_handler(|| PRESSED.store(true, Ordering::SeqCst)).map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| anyhow!("cannot install the Ctrl-C handler: {e}"))
}

/// Whether Ctrl-C was pressed since the last call (and clears it).
pub fn take() -> bool {
    PRESSED.swap(false, Ordering::SeqCst)
}
