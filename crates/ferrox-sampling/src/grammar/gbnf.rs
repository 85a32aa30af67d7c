//! llama.cpp's GBNF grammars, rewritten into llguidance's Lark syntax so that
//! llama-server users' `grammar` fields work unchanged.
//!
//! GBNF: `name ::= ...` rules (a rule runs until the next `name ::=`), `root` the
//! start, `"strings"` with C-like escapes, `[character classes]`, `.` for any
//! character, `( )`, `|`, `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}` and `#` comments.
//! The rewrite: one Lark rule per line, rule names mapped one-to-one onto Lark's
//! lowercase names, strings re-quoted as JSON strings, classes and `.` as
//! regular expressions, an empty alternative as `""`, and `start: root`.

use super::GrammarError;

/// One lexical element of a GBNF grammar.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    Name(String),
    Defines,
    Literal(String),
    /// A character class, as a regular expression.
    Class(String),
    Any,
    /// `(`, `)`, `|`, `*`, `+`, `?`.
    Op(char),
    /// `{m}`, `{m,}`, `{m,n}` as written.
    Repeat(String),
}

fn error(reason: impl Into<String>) -> GrammarError {
    GrammarError::Compile {
        what: "GBNF grammar",
        reason: reason.into(),
    }
}

/// Whether `text` looks like GBNF rather than Lark: a line starts with a rule
/// definition, `name ::=`.
pub fn looks_like_gbnf(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim_start();
        let name = l
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .unwrap_or(l.len());
        name > 0 && l[name..].trim_start().starts_with("::=")
    })
}

/// `text` (GBNF) as a Lark grammar.
pub fn to_lark(text: &str) -> Result<String, GrammarError> {
    let tokens = lex(text)?;
    let mut out = String::from("start: ");
    out.push_str(&rule_name("root"));
    let mut i = 0;
    let mut rules = 0;
    while i < tokens.len() {
        let (Token::Name(name), Some(Token::Defines)) = (&tokens[i], tokens.get(i + 1)) else {
            return Err(error(format!("expected `name ::=`, found {:?}", tokens[i])));
        };
        let end = (i + 2..tokens.len())
            .find(|&j| {
                matches!(tokens[j], Token::Name(_)) && tokens.get(j + 1) == Some(&Token::Defines)
            })
            .unwrap_or(tokens.len());
        out.push('\n');
        out.push_str(&rule_name(name));
        out.push(':');
        body(&tokens[i + 2..end], &mut out)?;
        rules += 1;
        i = end;
    }
    if rules == 0 {
        return Err(error("the grammar defines no rules"));
    }
    if !tokens.contains(&Token::Name("root".into())) {
        return Err(error("the grammar has no `root` rule"));
    }
    out.push('\n');
    Ok(out)
}

/// A rule's body in Lark, an empty alternative as `""`.
fn body(tokens: &[Token], out: &mut String) -> Result<(), GrammarError> {
    let mut empty = true;
    for t in tokens {
        let starts_alternative = matches!(t, Token::Op('|' | ')'));
        if starts_alternative && empty {
            out.push_str(" \"\"");
        }
        out.push(' ');
        match t {
            Token::Name(n) => out.push_str(&rule_name(n)),
            Token::Literal(s) => {
                out.push_str(&serde_json::to_string(s).expect("strings serialize"))
            }
            Token::Class(c) => {
                out.push('/');
                out.push_str(c);
                out.push('/');
            }
            Token::Any => out.push_str("/(?s:.)/"),
            Token::Op(c @ ('*' | '+' | '?')) => {
                out.pop();
                out.push(*c);
            }
            Token::Op(c) => out.push(*c),
            Token::Repeat(r) => {
                out.pop();
                out.push_str(r);
            }
            Token::Defines => return Err(error("`::=` inside a rule")),
        }
        empty = matches!(t, Token::Op('|' | '('));
    }
    if empty {
        out.push_str(" \"\"");
    }
    Ok(())
}

/// A GBNF rule name as a Lark rule name, one-to-one: `g_` and the name with `_`
/// doubled, `-` as `_d` and an upper-case letter as `_u` and the letter.
fn rule_name(name: &str) -> String {
    let mut out = String::from("g_");
    for c in name.chars() {
        match c {
            '_' => out.push_str("__"),
            '-' => out.push_str("_d"),
            c if c.is_ascii_uppercase() => {
                out.push_str("_u");
                out.push(c.to_ascii_lowercase());
            }
            c => out.push(c),
        }
    }
    out
}

fn lex(text: &str) -> Result<Vec<Token>, GrammarError> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ':' if chars[i..].starts_with(&[':', ':', '=']) => {
                tokens.push(Token::Defines);
                i += 3;
            }
            '"' => {
                let (s, next) = literal(&chars, i + 1)?;
                tokens.push(Token::Literal(s));
                i = next;
            }
            '[' => {
                let (class, next) = class(&chars, i + 1)?;
                tokens.push(Token::Class(class));
                i = next;
            }
            '{' => {
                let end = (i..chars.len())
                    .find(|&j| chars[j] == '}')
                    .ok_or_else(|| error("a `{` repetition is not closed"))?;
                tokens.push(Token::Repeat(chars[i..=end].iter().collect()));
                i = end + 1;
            }
            '.' => {
                tokens.push(Token::Any);
                i += 1;
            }
            '(' | ')' | '|' | '*' | '+' | '?' => {
                tokens.push(Token::Op(c));
                i += 1;
            }
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '-' || chars[i] == '_')
                {
                    i += 1;
                }
                tokens.push(Token::Name(chars[start..i].iter().collect()));
            }
            c => return Err(error(format!("unexpected character {c:?}"))),
        }
    }
    Ok(tokens)
}

/// The string literal starting at `chars[start]` (after the quote), decoded, and
/// the index after its closing quote.
fn literal(chars: &[char], start: usize) -> Result<(String, usize), GrammarError> {
    let mut s = String::new();
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '"' => return Ok((s, i + 1)),
            '\\' => {
                let (c, next) = escape(chars, i + 1)?;
                s.push(c);
                i = next;
            }
            c => {
                s.push(c);
                i += 1;
            }
        }
    }
    Err(error("a string is not closed"))
}

/// The escape after a backslash at `chars[i]`, and the index after it.
fn escape(chars: &[char], i: usize) -> Result<(char, usize), GrammarError> {
    let hex = |len: usize| -> Result<(char, usize), GrammarError> {
        let digits: String = chars
            .get(i + 1..i + 1 + len)
            .unwrap_or(&[])
            .iter()
            .collect();
        u32::from_str_radix(&digits, 16)
            .ok()
            .filter(|_| digits.len() == len)
            .and_then(char::from_u32)
            .map(|c| (c, i + 1 + len))
            .ok_or_else(|| error(format!("bad escape \\{}{digits}", chars[i])))
    };
    match chars.get(i) {
        Some('n') => Ok(('\n', i + 1)),
        Some('t') => Ok(('\t', i + 1)),
        Some('r') => Ok(('\r', i + 1)),
        Some('x') => hex(2),
        Some('u') => hex(4),
        Some('U') => hex(8),
        Some(&c) => Ok((c, i + 1)),
        None => Err(error("a string ends in a backslash")),
    }
}

/// The character class whose content starts at `chars[start]` (after the `[`),
/// as a regular expression (every character escaped where the regex syntax gives
/// it a meaning: GBNF's `[` and `&` are plain characters), and the index after
/// its `]`.
fn class(chars: &[char], start: usize) -> Result<(String, usize), GrammarError> {
    let mut out = String::from("[");
    let mut i = start;
    if chars.get(i) == Some(&'^') {
        out.push('^');
        i += 1;
    }
    let mut first = true;
    while i < chars.len() {
        let c = match chars[i] {
            ']' if !first => return Ok((out + "]", i + 1)),
            '\\' => {
                let (c, next) = escape(chars, i + 1)?;
                i = next;
                c
            }
            c => {
                i += 1;
                c
            }
        };
        first = false;
        // A range: `-` between two members, not at the class's end.
        let dash = chars.get(i) == Some(&'-') && chars.get(i + 1).is_some_and(|&n| n != ']');
        class_char(c, &mut out);
        if dash {
            out.push('-');
            i += 1;
        }
    }
    Err(error("a character class is not closed"))
}

/// `c` inside a regex class.
fn class_char(c: char, out: &mut String) {
    if c.is_ascii_alphanumeric() || (!c.is_ascii() && !c.is_control()) || c == ' ' {
        out.push(c);
    } else {
        out.push_str(&format!("\\x{{{:X}}}", c as u32));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_become_one_lark_line_each() {
        let g = "root ::= item+ # items\nitem ::=\n  \"a\\n\" | [b-c] ( \"d\" )? | .{2,3}\nws ::= | \" \"\n";
        assert!(looks_like_gbnf(g));
        assert_eq!(
            to_lark(g).unwrap(),
            "start: g_root\ng_root: g_item+\ng_item: \"a\\n\" | /[b-c]/ ( \"d\" )? | /(?s:.)/{2,3}\ng_ws: \"\" | \" \"\n"
        );
    }

    #[test]
    fn classes_escape_what_regexes_read_as_syntax() {
        let g = r#"root ::= [^"\\\x7F\x00-\x1F] [!#&[.-/] [\]a-] [\u00e9-\U0001F600]"#;
        assert_eq!(
            to_lark(g).unwrap(),
            "start: g_root\ng_root: /[^\\x{22}\\x{5C}\\x{7F}\\x{0}-\\x{1F}]/ /[\\x{21}\\x{23}\\x{26}\\x{5B}\\x{2E}-\\x{2F}]/ /[\\x{5D}a\\x{2D}]/ /[é-😀]/\n"
        );
    }

    #[test]
    fn names_map_one_to_one() {
        let names = [
            "data-type",
            "dataType",
            "data_type",
            "datatype",
            "data_dtype",
        ];
        let mapped: std::collections::BTreeSet<String> =
            names.iter().map(|n| rule_name(n)).collect();
        assert_eq!(mapped.len(), names.len());
        assert!(mapped.iter().all(|n| {
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
        }));
    }

    #[test]
    fn malformed_grammars_say_what_is_wrong() {
        for (g, says) in [
            ("root ::= \"a", "not closed"),
            ("root ::= [a-", "not closed"),
            ("item ::= \"a\"", "no `root` rule"),
            ("\"a\" ::= b", "expected `name ::=`"),
            ("root ::= a{2", "not closed"),
            ("root ::= \"\\xZZ\"", "bad escape"),
            ("root ::= @", "unexpected character"),
        ] {
            let e = to_lark(g).unwrap_err().to_string();
            assert!(e.contains(says), "{g}: {e}");
        }
        assert!(!looks_like_gbnf("start: \"::=\" # not ::= gbnf"));
    }
}
