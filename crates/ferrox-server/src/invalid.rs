//! Why a request is refused with a 400, as typed causes: each names its field,
//! and its message is written once, here.

use std::borrow::Cow;

use crate::error::ApiError;

/// A refused request's cause.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Invalid {
    #[error("the request body must be a JSON object")]
    NotAnObject,
    /// A field no policy of this route lists; `implemented_on` names a route
    /// that has it.
    #[error("unknown field {field:?}{}", implemented_on.map(|r| format!("; it belongs to {r}")).unwrap_or_default())]
    UnknownField {
        field: String,
        implemented_on: Option<&'static str>,
    },
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
            Invalid::NotAnObject => None,
            Invalid::UnknownField { field, .. } | Invalid::Refused { field, .. } => Some(field),
            Invalid::Ambiguous { alias, .. } => Some(alias),
            Invalid::Body { path, .. } => path.as_deref(),
            Invalid::Unsupported { field, .. } => Some(field),
            Invalid::Empty { field, .. }
            | Invalid::Conflict { field, .. }
            | Invalid::Needs { field, .. }
            | Invalid::Missing { field }
            | Invalid::OutOfRange { field, .. }
            | Invalid::NotFinite { field } => Some(field),
            Invalid::NotATokenId { .. } => Some("logit_bias"),
            Invalid::Sampling(e) => Some(e.field()),
        }
    }
}

impl From<Invalid> for ApiError {
    fn from(cause: Invalid) -> ApiError {
        ApiError::invalid(cause.field(), cause.to_string())
    }
}
