//! Writes the random-weight family GGUFs (`ferrox_testkit::family`) into a
//! folder, for llama.cpp and the float64 reference to read:
//! `cargo run --release -p ferrox-models --example family_models -- OUT_DIR`.

use ferrox_testkit::family::FAMILIES;
use ferrox_testkit::family_vocab;

fn main() {
    let out = std::env::args()
        .nth(1)
        .expect("usage: family_models OUT_DIR");
    std::fs::create_dir_all(&out).expect("output folder");
    for f in FAMILIES {
        let vocab = family_vocab(&f).expect("vocabulary (scripts/fetch-llama-refs)");
        for &v in f.variants() {
            let path = std::path::Path::new(&out).join(f.file_name(v));
            std::fs::write(&path, f.gguf(v, &vocab)).expect("write");
            println!("{}", path.display());
        }
    }
}
