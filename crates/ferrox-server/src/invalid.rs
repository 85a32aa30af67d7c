//! Why a request is refused with a 400, as typed causes: each names its field,
//! and its message is written once, here.

use std::borrow::Cow;

use crate::error::ApiError;

/// A refused request's cause.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Invalid {
    #[error("cannot read the request body: {detail}")]
    Unreadable { detail: String },
    #[error("the body must be JSON with Content-Type: application/json (the request gave {given})")]
    ContentType { given: String },
    #[error("invalid JSON body: {detail}")]
    NotJson { detail: String },
    #[error("the request body must be a JSON object")]
    NotAnObject,
    /// A field no policy of this route lists; `implemented_on` names a route
    /// that has it.
    #[error("unknown field {field:?}{}", implemented_on.map(|r| format!("; it belongs to {r}")).unwrap_or_default())]
    UnknownField {
        field: String,
        implemented_on: Option<&'static str>,
    },
    /// A sampler field given at the top of an Ollama request, where Ollama's
    /// API takes it inside `options`.
    #[error("{field} goes inside options in Ollama's API (\"options\": {{\"{field}\": ...}})")]
    OutsideOptions { field: String },
    /// A field this server refuses, with the reason.
    #[error("{why} by this server")]
    Refused { field: String, why: &'static str },
    /// Another server's name for a field, given beside the field itself.
    #[error("{alias} and {field} name the same thing; give one")]
    Ambiguous {
        alias: &'static str,
        field: &'static str,
    },
    /// A body that is not JSON of the request's shape; `path` names the
    /// field whose value is wrong.
    #[error("{}{detail}", path.as_ref().map_or("invalid request body: ".to_string(), |p| format!("{p}: ")))]
    Body {
        path: Option<String>,
        detail: String,
    },
    #[error("{field} is required")]
    Missing { field: &'static str },
    /// An empty list where one `item` at least is needed.
    #[error("{field} must hold at least one {item}")]
    Empty {
        field: &'static str,
        item: &'static str,
    },
    /// A field that cannot be given with another, for this reason.
    #[error("{why}")]
    Conflict {
        field: &'static str,
        why: &'static str,
    },
    /// A field that needs another to be set.
    #[error("{field} needs {needs}")]
    Needs {
        field: &'static str,
        needs: &'static str,
    },
    /// Several output constraints where one may be given.
    #[error("give one output constraint, not several: {}", given.join(", "))]
    SeveralConstraints { given: Vec<&'static str> },
    /// A forced tool that is not among the tools.
    #[error("tool_choice names {name:?}, which is not in tools")]
    NotOffered { name: String },
    /// An output constraint that cannot be compiled, or a model without a
    /// grammar compiler.
    #[error("{detail}")]
    Grammar { detail: String },
    /// A conversation the chat template cannot render.
    #[error("{detail}")]
    Template { detail: String },
    /// One of Anthropic's server tools (web search, code execution, ...).
    #[error(
        "{field}: server tools ({kind}) are not supported here; give a custom tool with an input_schema"
    )]
    ServerTool { field: String, kind: String },
    /// A token id outside the vocabulary.
    #[error("{field} must be ids below the vocabulary size {vocab}")]
    NotAToken { field: &'static str, vocab: usize },
    /// A value of a kind this server does not take there.
    #[error("{field}: {what}")]
    Unsupported { field: String, what: &'static str },
    /// A number outside its bounds (`bound` says them in words).
    #[error("{field} must be {bound}, got {got}")]
    OutOfRange {
        field: &'static str,
        bound: Cow<'static, str>,
        got: String,
    },
    /// Fill-in-the-middle asked of a model without its tokens.
    #[error("{field}: {detail}")]
    NoFim { field: &'static str, detail: String },
    /// A prompt that fills the context a request asked for.
    #[error(
        "the prompt's {prompt} tokens leave no room to answer in the {limit}-token context {field} asks for"
    )]
    OverContext {
        field: &'static str,
        prompt: usize,
        limit: usize,
    },
    #[error("{field} must be a finite number")]
    NotFinite { field: &'static str },
    /// Outside the sampler's own bounds.
    #[error(transparent)]
    Sampling(ferrox_sampling::sampler::SamplingError),
    /// A `logit_bias` key that is not a token id.
    #[error("logit_bias: key {key:?} is not a token id")]
    NotATokenId { key: String },
}

impl Invalid {
    /// The field it names, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            Invalid::Unreadable { .. }
            | Invalid::ContentType { .. }
            | Invalid::NotJson { .. }
            | Invalid::NotAnObject => None,
            Invalid::SeveralConstraints { given } => given.get(1).copied(),
            Invalid::NotOffered { .. } => Some("tool_choice"),
            Invalid::Grammar { .. } => Some("response_format"),
            Invalid::Template { .. } => Some("messages"),
            Invalid::UnknownField { field, .. }
            | Invalid::Refused { field, .. }
            | Invalid::OutsideOptions { field } => Some(field),
            Invalid::Ambiguous { alias, .. } => Some(alias),
            Invalid::Body { path, .. } => path.as_deref(),
            Invalid::Unsupported { field, .. } | Invalid::ServerTool { field, .. } => Some(field),
            Invalid::NotAToken { field, .. } => Some(field),
            Invalid::Empty { field, .. }
            | Invalid::Conflict { field, .. }
            | Invalid::Needs { field, .. }
            | Invalid::Missing { field }
            | Invalid::OutOfRange { field, .. }
            | Invalid::NotFinite { field }
            | Invalid::OverContext { field, .. }
            | Invalid::NoFim { field, .. } => Some(field),
            Invalid::NotATokenId { .. } => Some("logit_bias"),
            Invalid::Sampling(e) => Some(e.field()),
        }
    }
}

impl Invalid {
    /// This cause with the field it names taken as a field of the object
    /// `parent` (`temperature` becomes `options.temperature`).
    pub fn within(self, parent: &str) -> Invalid {
        let nest = |f: String| format!("{parent}.{f}");
        match self {
            Invalid::UnknownField {
                field,
                implemented_on,
            } => Invalid::UnknownField {
                field: nest(field),
                implemented_on,
            },
            Invalid::Refused { field, why } => Invalid::Refused {
                field: nest(field),
                why,
            },
            other => other,
        }
    }
}

impl From<Invalid> for ApiError {
    fn from(cause: Invalid) -> ApiError {
        ApiError::invalid(cause.field(), cause.to_string())
    }
}
