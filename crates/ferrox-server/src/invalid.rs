//! Why a request is refused with a 400, as typed causes: each names its field,
//! and its message is written once, here.

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
    #[error("{field} is required")]
    Missing { field: &'static str },
    /// A number outside its bounds (`bound` says them in words).
    #[error("{field} must be {bound}, got {got}")]
    OutOfRange {
        field: &'static str,
        bound: &'static str,
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
            Invalid::Missing { field }
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
