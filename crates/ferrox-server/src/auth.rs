//! The API key: `Authorization: Bearer KEY` on the API routes.
//!
//! The scheme is matched case-insensitively (RFC 7235 §2.1), and keys are
//! compared in constant time: both sides are hashed with SHA-256 and the digests
//! compared with `subtle`, so neither the key's content nor its length shows in
//! the time a wrong guess takes. An empty or whitespace-only key is refused when
//! the server is configured, never accepted as "every route locked".

use std::path::Path;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Why an API key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ApiKeyError {
    #[error("the API key is empty or only whitespace; give a key, or no --api-key at all")]
    Empty,
    #[error(
        "the API key contains whitespace or control characters, which no Authorization header can carry"
    )]
    Unsendable,
    #[error("cannot read the API key file {path}: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
}

/// A configured API key (kept only as its digest).
#[derive(Clone)]
pub struct ApiKey {
    digest: [u8; 32],
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(..)")
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl ApiKey {
    /// The key `key`, refused when empty, whitespace-only or unsendable.
    pub fn new(key: &str) -> Result<ApiKey, ApiKeyError> {
        if key.trim().is_empty() {
            return Err(ApiKeyError::Empty);
        }
        if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ApiKeyError::Unsendable);
        }
        Ok(ApiKey {
            digest: digest(key.as_bytes()),
        })
    }

    /// The key in the file at `path`: its content with surrounding whitespace
    /// (a trailing newline) removed.
    pub fn from_file(path: &Path) -> Result<ApiKey, ApiKeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| ApiKeyError::File {
            path: path.display().to_string(),
            source,
        })?;
        ApiKey::new(text.trim())
    }

    /// Whether an `Authorization` header value carries this key.
    pub fn accepts(&self, header: Option<&str>) -> bool {
        header.and_then(bearer_token).is_some_and(|t| self.is(t))
    }

    /// Whether `token` (an `x-api-key` header, as Anthropic's clients send it) is
    /// this key.
    pub fn is(&self, token: &str) -> bool {
        bool::from(digest(token.trim().as_bytes()).ct_eq(&self.digest))
    }
}

/// The token of `Bearer TOKEN`, the scheme in any case.
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue F4: the scheme is case-insensitive; a wrong, missing or empty key
    /// is refused.
    #[test]
    fn the_scheme_is_case_insensitive_and_only_the_key_opens() {
        let k = ApiKey::new("s3cret").unwrap();
        for ok in [
            "Bearer s3cret",
            "bearer s3cret",
            "BEARER  s3cret ",
            "BeArEr s3cret",
        ] {
            assert!(k.accepts(Some(ok)), "{ok}");
        }
        for bad in [
            None,
            Some(""),
            Some("Bearer"),
            Some("Bearer "),
            Some("Bearer s3cre"),
            Some("Bearer s3cret2"),
            Some("Basic s3cret"),
            Some("s3cret"),
        ] {
            assert!(!k.accepts(bad), "{bad:?}");
        }
    }

    /// Issue F4: an empty or whitespace key is an error, not a lock on every route.
    #[test]
    fn empty_and_unsendable_keys_are_refused() {
        for k in ["", " ", "\t\n"] {
            assert!(matches!(ApiKey::new(k), Err(ApiKeyError::Empty)), "{k:?}");
        }
        assert!(matches!(ApiKey::new("a b"), Err(ApiKeyError::Unsendable)));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("key");
        std::fs::write(&p, "from-file\n").unwrap();
        assert!(
            ApiKey::from_file(&p)
                .unwrap()
                .accepts(Some("Bearer from-file"))
        );
        std::fs::write(&p, "\n").unwrap();
        assert!(matches!(ApiKey::from_file(&p), Err(ApiKeyError::Empty)));
        assert!(matches!(
            ApiKey::from_file(&dir.path().join("missing")),
            Err(ApiKeyError::File { .. })
        ));
    }
}
