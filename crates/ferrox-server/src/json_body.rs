//! Request bodies as JSON, read strictly: a POST to the API must say it carries
//! JSON (`Content-Type: application/json`), and an object may not name a key
//! twice (a parser that keeps the last value would hide the client's mistake).

use std::collections::HashSet;
use std::fmt;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, header};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::error::ApiError;
use crate::invalid::Invalid;

/// The body as JSON, or the error naming what is wrong with it (its size was
/// checked by the `limits::read_body` middleware).
pub fn json_body(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let bytes = body.map_err(|e| Invalid::Unreadable {
        detail: e.to_string(),
    })?;
    check_json(&bytes)?;
    serde_json::from_slice(&bytes).map_err(|e| not_json(e).into())
}

/// Refuses a body that is not JSON or names a key twice in an object.
pub fn check_json(bytes: &[u8]) -> Result<(), ApiError> {
    serde_json::from_slice::<NoDuplicateKeys>(bytes)
        .map(|_| ())
        .map_err(|e| not_json(e).into())
}

fn not_json(e: serde_json::Error) -> Invalid {
    Invalid::NotJson {
        detail: e.to_string(),
    }
}

/// Refuses a request whose `Content-Type` is not JSON.
pub fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let given = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = given.split(';').next().unwrap_or("").trim();
    if media.eq_ignore_ascii_case("application/json") {
        return Ok(());
    }
    let said = if given.is_empty() {
        "none".to_string()
    } else {
        format!("{given:?}")
    };
    Err(Invalid::ContentType { given: said }.into())
}

/// A JSON document walked for duplicate object keys (and nothing kept).
struct NoDuplicateKeys;

impl<'de> Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Walk)
    }
}

struct Walk;

impl<'de> Visitor<'de> for Walk {
    type Value = NoDuplicateKeys;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, _: bool) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }

    fn visit_i64<E>(self, _: i64) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }

    fn visit_u64<E>(self, _: u64) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }

    fn visit_f64<E>(self, _: f64) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }

    fn visit_str<E>(self, _: &str) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }

    fn visit_unit<E>(self) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NoDuplicateKeys, A::Error> {
        while seq.next_element::<NoDuplicateKeys>()?.is_some() {}
        Ok(NoDuplicateKeys)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NoDuplicateKeys, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            map.next_value::<NoDuplicateKeys>()?;
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
        }
        Ok(NoDuplicateKeys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        assert!(check_json(br#"{"a": 1, "b": {"c": [1, {"d": 2}]}}"#).is_ok());
        for body in [
            &br#"{"model": "a", "model": "b"}"#[..],
            br#"{"messages": [{"role": "user", "role": "system"}]}"#,
        ] {
            let e = check_json(body).unwrap_err();
            assert!(e.message.contains("duplicate key"), "{}", e.message);
        }
        assert!(check_json(b"{oops").is_err());
    }

    #[test]
    fn only_json_content_types_pass() {
        let with = |v: Option<&'static str>| {
            let mut h = HeaderMap::new();
            if let Some(v) = v {
                h.insert(header::CONTENT_TYPE, HeaderValue::from_static(v));
            }
            check_content_type(&h)
        };
        assert!(with(Some("application/json")).is_ok());
        assert!(with(Some("Application/JSON; charset=utf-8")).is_ok());
        for bad in [
            None,
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
        ] {
            let e = with(bad).unwrap_err();
            assert!(
                e.message.contains("Content-Type: application/json"),
                "{}",
                e.message
            );
        }
    }
}
