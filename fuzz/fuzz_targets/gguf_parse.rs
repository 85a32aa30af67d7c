//! Fuzz target: `Gguf::parse` on arbitrary bytes must return, never panic or
//! over-allocate (run: `RUSTC_BOOTSTRAP=1 cargo fuzz run gguf_parse`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ferrox_gguf::Gguf::parse(data);
});
