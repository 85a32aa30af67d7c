//! OpenAI's wire format for chat and completions as serde types: what clients
//! send ([`request`]) and what they get back, whole or streamed ([`response`]).
//! Validation lives in [`crate::request`], the handlers in
//! [`crate::completions`].

pub mod request;
pub mod response;
