//! ferrox-sampling: how each next token is chosen.
//!
//! * [`sampler`]: per-request sampling (penalties, top-k / top-p / min-p,
//!   temperature, a seeded draw), SPEC S5.
//! * [`grammar`]: output constraints on `llguidance`, a token mask per step
//!   from a JSON schema, a Lark or GBNF grammar or a regular expression.

pub mod grammar;
pub mod sampler;
