//! Constrained decoding (structured output) on `llguidance`: a grammar (a JSON
//! schema, any JSON object, a Lark grammar or a regular expression) becomes a
//! per-request [`Constraint`] that says, before each sampling step, which tokens
//! may come next.
//!
//! * GBNF grammars (llama.cpp's) are rewritten into Lark first ([`GrammarSpec::grammar`]).
//! * [`Grammars`] is built once per model: the tokenizer's vocabulary as
//!   `llguidance`'s token trie (control tokens marked special, so text never
//!   matches them; the end-of-generation tokens are its EOS set).
//! * [`Grammars::compile`] turns a [`GrammarSpec`] into a [`Grammar`] or a
//!   [`GrammarError`] that says why (the server answers it with a 400).
//! * [`Grammar::start`] gives each request (each choice) its own [`Constraint`]:
//!   nothing is shared between requests, so one request's mask never touches
//!   another row's logits (SPEC S3).
//!
//! When the grammar is complete and nothing may follow, the mask allows only the
//! end-of-generation tokens, so the request stops by the ordinary stop rules.

mod gbnf;

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{self, SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::{Value, json};

use ferrox_text::Tokenizer;
use ferrox_text::tokenizer::TokenType;

/// What a request constrains its output to.
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarSpec {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid for `schema`. `strict`: keywords the library cannot enforce are
    /// an error instead of being ignored.
    JsonSchema { schema: Value, strict: bool },
    /// A grammar in llguidance's Lark syntax.
    Lark(String),
    /// A grammar in llama.cpp's GBNF (rewritten into Lark).
    Gbnf(String),
    /// A regular expression the whole output must match.
    Regex(String),
}

impl GrammarSpec {
    /// A grammar given as text: GBNF when it defines rules with `name ::=`, else
    /// llguidance's Lark.
    pub fn grammar(text: &str) -> GrammarSpec {
        if gbnf::looks_like_gbnf(text) {
            GrammarSpec::Gbnf(text.to_string())
        } else {
            GrammarSpec::Lark(text.to_string())
        }
    }
}

/// Why a grammar cannot constrain a request.
#[derive(Debug, thiserror::Error)]
pub enum GrammarError {
    /// The library refused the grammar (syntax, an unsupported or unsatisfiable
    /// schema keyword, a size limit); `reason` is its message.
    #[error("cannot compile the {what}: {reason}")]
    Compile { what: &'static str, reason: String },
    /// The tokenizer's vocabulary cannot back a token trie.
    #[error("the tokenizer cannot back a grammar: {0}")]
    Tokenizer(String),
}

/// Why a running constraint failed (the request fails with it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the output grammar failed: {0}")]
pub struct ConstraintError(pub String);

/// The model's vocabulary as `llguidance` sees it.
struct TokenizerBridge {
    trie: TokTrie,
    tokenizer: Tokenizer,
}

impl TokenizerEnv for TokenizerBridge {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<toktrie::TokenId> {
        match std::str::from_utf8(s) {
            Ok(text) => self.tokenizer.encode(text, false, false),
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}

/// The bytes `llguidance` matches token `id` against: its text, or, for control
/// tokens, the special-token marker and its name (so no text produces them).
fn trie_word(tokenizer: &Tokenizer, id: u32) -> Vec<u8> {
    match tokenizer.vocab().token_type(id) {
        Some(TokenType::Control | TokenType::Unused | TokenType::Unknown) => {
            let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
            w.extend_from_slice(&tokenizer.token_bytes(id, true));
            w
        }
        _ => tokenizer.token_bytes(id, false).into_owned(),
    }
}

/// The grammar compiler of one model.
pub struct Grammars {
    factory: ParserFactory,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Grammars(..)")
    }
}

impl Grammars {
    /// The compiler for `tokenizer`'s vocabulary.
    pub fn new(tokenizer: &Tokenizer) -> Result<Grammars, GrammarError> {
        let n = tokenizer.vocab_size();
        let words: Vec<Vec<u8>> = (0..n as u32).map(|id| trie_word(tokenizer, id)).collect();
        let eog = tokenizer.end_of_generation();
        let Some(&eos) = eog.first().or(tokenizer.eos().as_ref()) else {
            return Err(GrammarError::Tokenizer(
                "the vocabulary has no end-of-generation token".into(),
            ));
        };
        let info = TokRxInfo::new(n as u32, eos);
        let eos_set = if eog.is_empty() {
            vec![eos]
        } else {
            eog.to_vec()
        };
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos_set);
        let env: TokEnv = Arc::new(TokenizerBridge {
            trie,
            tokenizer: tokenizer.clone(),
        });
        let mut factory = ParserFactory::new(&env, Default::default(), &[])
            .map_err(|e| GrammarError::Tokenizer(e.to_string()))?;
        factory.quiet();
        Ok(Grammars { factory })
    }

    /// Compiles `spec`, or says why it cannot constrain output.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Grammar, GrammarError> {
        let (what, grammar) = match spec {
            GrammarSpec::JsonObject => (
                "JSON object format",
                TopLevelGrammar::from_json_schema(with_options(json!({"type": "object"}), false)),
            ),
            GrammarSpec::JsonSchema { schema, strict } => (
                "JSON schema",
                TopLevelGrammar::from_json_schema(with_options(schema.clone(), *strict)),
            ),
            GrammarSpec::Lark(g) => ("grammar", TopLevelGrammar::from_lark(g.clone())),
            GrammarSpec::Gbnf(g) => (
                "GBNF grammar",
                TopLevelGrammar::from_lark(gbnf::to_lark(g)?),
            ),
            GrammarSpec::Regex(r) => ("regular expression", TopLevelGrammar::from_regex(r)),
        };
        let compile_error = |reason: String| GrammarError::Compile { what, reason };
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| compile_error(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(compile_error(e));
        }
        Ok(Grammar { prototype: matcher })
    }
}

/// `schema` with the JSON layout ferrox generates: compact separators and no free
/// whitespace (a small model given free whitespace may emit it forever), objects
/// closed (see [`close_objects`]), and unsupported keywords ignored unless
/// `strict`. A schema's own `x-guidance` options win.
fn with_options(mut schema: Value, strict: bool) -> Value {
    close_objects(&mut schema);
    let options = json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
        "lenient": !strict,
    });
    if let Value::Object(o) = &mut schema {
        let own = o.remove("x-guidance");
        let mut merged = options;
        if let (Some(Value::Object(own)), Value::Object(m)) = (own, &mut merged) {
            m.extend(own);
        }
        o.insert("x-guidance".into(), merged);
    }
    schema
}

/// Objects generate only their declared properties: every object schema with
/// `properties` and no word on others gets `additionalProperties: false`, as
/// xgrammar's strict mode does. Every output still validates against the schema
/// as given, and a model cannot wander into invented keys until `max_tokens`.
fn close_objects(schema: &mut Value) {
    let Value::Object(o) = schema else { return };
    let open = [
        "additionalProperties",
        "patternProperties",
        "unevaluatedProperties",
    ];
    if o.get("properties").is_some_and(Value::is_object) && !open.iter().any(|k| o.contains_key(*k))
    {
        o.insert("additionalProperties".into(), Value::Bool(false));
    }
    for (key, value) in o.iter_mut() {
        match (key.as_str(), value) {
            ("properties" | "patternProperties" | "$defs" | "definitions", Value::Object(m)) => {
                m.values_mut().for_each(close_objects)
            }
            ("prefixItems" | "anyOf" | "oneOf" | "allOf", Value::Array(a)) => {
                a.iter_mut().for_each(close_objects)
            }
            (
                "items"
                | "additionalItems"
                | "additionalProperties"
                | "contains"
                | "not"
                | "if"
                | "then"
                | "else",
                v,
            ) => close_objects(v),
            _ => {}
        }
    }
}

/// A compiled grammar, ready to start constraints from.
pub struct Grammar {
    prototype: Matcher,
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Grammar(..)")
    }
}

impl Grammar {
    /// A fresh constraint for one request.
    pub fn start(&self) -> Constraint {
        Constraint {
            matcher: self.prototype.deep_clone(),
        }
    }
}

/// One request's constraint: which tokens may come next.
pub struct Constraint {
    matcher: Matcher,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Constraint(..)")
    }
}

/// The tokens allowed at one step (a bit per vocabulary entry; ids past the
/// vocabulary are never allowed).
pub struct TokenMask(SimpleVob);

impl TokenMask {
    /// Whether `token` may come next.
    pub fn allows(&self, token: u32) -> bool {
        (token as usize) < self.0.len() && self.0.is_allowed(token)
    }

    /// How many tokens may come next.
    pub fn count(&self) -> usize {
        self.0.num_set()
    }
}

impl Constraint {
    /// The tokens that may come next: the end-of-generation tokens alone once the
    /// grammar is complete.
    pub fn allowed(&mut self) -> Result<TokenMask, ConstraintError> {
        self.matcher
            .compute_mask_or_eos()
            .map(TokenMask)
            .map_err(|e| ConstraintError(e.to_string()))
    }

    /// Whether the grammar is complete and nothing may follow: the request ends.
    pub fn is_complete(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// How many of `tokens`, in order, the grammar would take from here,
    /// without taking them (speculation cuts a draft there); 0 if the
    /// grammar cannot tell.
    pub fn valid_prefix(&mut self, tokens: &[u32]) -> usize {
        self.matcher.validate_tokens(tokens).unwrap_or(0)
    }

    /// Feeds the token that was sampled.
    pub fn commit(&mut self, token: u32) -> Result<(), ConstraintError> {
        self.matcher
            .consume_token(token)
            .map_err(|e| ConstraintError(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_closed_where_the_schema_says_nothing() {
        let mut s = json!({
            "type": "object",
            "properties": {
                "properties": {"type": "object", "properties": {"a": {}}},
                "open": {"type": "object", "properties": {"b": {}}, "additionalProperties": true},
                "list": {"type": "array", "items": {"properties": {"c": {}}}}
            },
            "$defs": {"d": {"properties": {"e": {}}}},
            "anyOf": [{"properties": {"f": {}}}, {"type": "string"}]
        });
        close_objects(&mut s);
        let closed = |v: &Value| v["additionalProperties"] == json!(false);
        assert!(closed(&s));
        assert!(closed(&s["properties"]["properties"]));
        assert_eq!(s["properties"]["open"]["additionalProperties"], json!(true));
        assert!(closed(&s["properties"]["list"]["items"]));
        assert!(closed(&s["$defs"]["d"]));
        assert!(closed(&s["anyOf"][0]));
        assert!(s["anyOf"][1].get("additionalProperties").is_none());
        // A property named "properties" is a property, not a keyword.
        assert!(s["properties"].get("additionalProperties").is_none());
    }
}
