//! Fill-in-the-middle prompts on real vocabularies (llama.cpp's vocab-only
//! GGUFs): the FIM tokens are found as llama.cpp finds them, and the prompt
//! has llama-server's layout, trimmed as it trims.

use ferrox_gguf::GgufFile;
use ferrox_testkit::vocab_file;
use ferrox_text::Tokenizer;
use ferrox_text::fim::{ExtraFile, Infill, Room, prompt_ids};

fn tokenizer(name: &str) -> Option<Tokenizer> {
    let path = vocab_file(name)?;
    let file = GgufFile::open(&path).unwrap();
    Some(Tokenizer::from_metadata(&file.header().metadata).unwrap())
}

fn infill(extra: Vec<ExtraFile>) -> Infill {
    Infill {
        prefix: "def add(a, b):\n".into(),
        suffix: "\nprint(add(1, 2))\n".into(),
        extra,
        prompt: "    return".into(),
    }
}

const ROOM: Room = Room {
    batch: 2048,
    context: 4096,
    answer: Some(64),
};

/// The ids of `text`'s pieces: a special token by its text, else plain text.
fn ids(tok: &Tokenizer, parts: &[&str], specials: &[&str]) -> Vec<u32> {
    parts
        .iter()
        .flat_map(|p| match specials.contains(p) {
            true => vec![tok.vocab().id_of(p).unwrap_or_else(|| panic!("{p}"))],
            false => tok.encode(p, false, false),
        })
        .collect()
}

#[test]
fn extra_files_go_first_each_after_a_snippet_line() {
    // StarCoder 2's vocabulary: <fim_prefix>, <fim_suffix> and <fim_middle>;
    // its <repo_name> and <file_sep> are spellings llama.cpp does not look for.
    let Some(tok) = tokenizer("starcoder") else {
        return;
    };
    let fim = tok.fim();
    assert_eq!((fim.rep, fim.sep), (None, None), "{fim:?}");
    let extra = vec![ExtraFile {
        filename: "util.py".into(),
        text: "def sub(a, b):\n    return a - b\n".into(),
    }];
    let got = prompt_ids(&tok, &infill(extra), ROOM).unwrap();
    let mut want = tok.encode("\n\n--- snippet ---\n\n", false, false);
    want.extend(tok.encode("def sub(a, b):\n    return a - b\n", false, false));
    want.extend(tok.bos().filter(|_| tok.adds_bos()));
    want.extend(ids(
        &tok,
        &[
            "<fim_prefix>",
            "def add(a, b):\n",
            "    return",
            "<fim_suffix>",
            "\nprint(add(1, 2))\n",
            "<fim_middle>",
        ],
        &["<fim_prefix>", "<fim_suffix>", "<fim_middle>"],
    ));
    assert_eq!(got, want);
}

#[test]
fn a_repository_token_names_the_project_first() {
    // Refact's vocabulary has <reponame> (llama.cpp's FIM_REP) and no file
    // separator.
    let Some(tok) = tokenizer("refact") else {
        return;
    };
    let got = prompt_ids(&tok, &infill(Vec::new()), ROOM).unwrap();
    let mut want = ids(&tok, &["<reponame>", "myproject\n"], &["<reponame>"]);
    want.extend(tok.bos().filter(|_| tok.adds_bos()));
    want.extend(ids(
        &tok,
        &[
            "<fim_prefix>",
            "def add(a, b):\n",
            "    return",
            "<fim_suffix>",
            "\nprint(add(1, 2))\n",
            "<fim_middle>",
        ],
        &["<fim_prefix>", "<fim_suffix>", "<fim_middle>"],
    ));
    assert_eq!(got, want);
}

#[test]
fn prompts_are_trimmed_as_llama_server_trims_them() {
    let Some(tok) = tokenizer("starcoder") else {
        return;
    };
    let long = Infill {
        prefix: "x = 1\n".repeat(2000),
        suffix: "y = 2\n".repeat(2000),
        extra: vec![ExtraFile {
            filename: "big.py".into(),
            text: "z = 3\n".repeat(2000),
        }],
        prompt: String::new(),
    };
    let room = Room {
        batch: 64,
        context: 200,
        answer: Some(10),
    };
    let got = prompt_ids(&tok, &long, room).unwrap();
    let fim = tok.fim();
    let at = |id| got.iter().position(|&t| Some(t) == id).unwrap();
    let (pre, suf, mid) = (at(fim.pre), at(fim.suf), at(fim.mid));
    // Prefix: the last 3/4 of a batch; suffix: a quarter less 2; extra: what
    // is left of the context beside a batch and twice the answer.
    assert_eq!(suf - pre - 1, 48);
    assert_eq!(mid - suf - 1, 14);
    assert_eq!(pre, 200 - 64 - 20);
}

#[test]
fn a_vocabulary_without_fim_tokens_is_refused_naming_them() {
    let Some(tok) = tokenizer("llama-bpe") else {
        return;
    };
    let e = prompt_ids(&tok, &infill(Vec::new()), ROOM).unwrap_err();
    assert_eq!(e.missing, ["prefix token", "suffix token", "middle token"]);
    assert!(e.to_string().contains("not supported by this model"), "{e}");
}

#[test]
fn deepseek_coders_fim_tokens_are_found_and_laid_out() {
    // DeepSeek-Coder's vocabulary: <｜fim▁begin｜>, <｜fim▁hole｜>, <｜fim▁end｜>
    // (prefix, suffix, middle), behind its BOS.
    let Some(tok) = tokenizer("deepseek-coder") else {
        return;
    };
    let (begin, hole, end) = ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>");
    let got = prompt_ids(&tok, &infill(Vec::new()), ROOM).unwrap();
    let mut want: Vec<u32> = tok.bos().filter(|_| tok.adds_bos()).into_iter().collect();
    want.extend(ids(
        &tok,
        &[
            begin,
            "def add(a, b):\n",
            "    return",
            hole,
            "\nprint(add(1, 2))\n",
            end,
        ],
        &[begin, hole, end],
    ));
    assert_eq!(got, want);
}
