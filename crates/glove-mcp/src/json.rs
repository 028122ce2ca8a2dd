//! JSON as the mediator reads and digests it.
//!
//! MCP traffic carries non-integer numbers (a sampling `temperature`, a
//! schema's `minimum: 0.5`), which Glove's canonical documents refuse. So
//! frames are parsed with [`parse`]: `serde_json` does the tokenising and
//! the mediator builds the value itself, refusing what `serde_json` would
//! silently accept — a repeated key in any object at any depth (the SDK
//! peers keep the last one, so a checker that saw the first could be
//! bypassed), nesting past [`MAX_DEPTH`], invalid UTF-8 and trailing bytes.
//!
//! Digests of such values use [`canonical`]: Glove's canonical JSON
//! ([`glove_types::canon::to_canonical`]) for every value it accepts, and
//! the same rules (sorted keys by UTF-16 code units, no whitespace, the
//! canonical string escaping) with `serde_json`'s shortest round-trip
//! spelling for a number it refuses (a fraction, an exponent, or an
//! integer beyond ±(2^53−1)). Equal values (as `serde_json` parses them)
//! have equal encodings.

use glove_types::canon;
use glove_types::Sha256Digest;
use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// Deepest nesting of arrays and objects accepted in a frame.
pub const MAX_DEPTH: usize = 64;

/// Why bytes are not strict JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JsonError {
    /// Not UTF-8.
    InvalidUtf8,
    /// A key repeated in one object.
    DuplicateKey,
    /// Deeper than [`MAX_DEPTH`].
    TooDeep,
    /// Not well-formed JSON, or bytes after the value (the message says).
    Malformed(String),
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonError::InvalidUtf8 => f.write_str("invalid UTF-8"),
            JsonError::DuplicateKey => f.write_str("a key is repeated in one object"),
            JsonError::TooDeep => write!(f, "nested deeper than {MAX_DEPTH}"),
            JsonError::Malformed(m) => write!(f, "malformed JSON: {m}"),
        }
    }
}

const DUP: &str = "glove-mcp:duplicate-key";
const DEEP: &str = "glove-mcp:too-deep";

/// Parses one JSON value strictly (see the module docs).
pub fn parse(bytes: &[u8]) -> Result<Value, JsonError> {
    if core::str::from_utf8(bytes).is_err() {
        return Err(JsonError::InvalidUtf8);
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let classify = |e: serde_json::Error| {
        let m = e.to_string();
        if m.contains(DUP) {
            JsonError::DuplicateKey
        } else if m.contains(DEEP) || m.contains("recursion limit") {
            JsonError::TooDeep
        } else {
            JsonError::Malformed(m)
        }
    };
    let v = Seed { depth: 0 }.deserialize(&mut de).map_err(classify)?;
    de.end().map_err(classify)?;
    Ok(v)
}

#[derive(Clone, Copy)]
struct Seed {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Seed {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        if self.depth >= MAX_DEPTH {
            return Err(A::Error::custom(DEEP));
        }
        let inner = Seed {
            depth: self.depth + 1,
        };
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(inner)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        if self.depth >= MAX_DEPTH {
            return Err(A::Error::custom(DEEP));
        }
        let inner = Seed {
            depth: self.depth + 1,
        };
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.contains_key(&k) {
                return Err(A::Error::custom(DUP));
            }
            let v = map.next_value_seed(inner)?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// The canonical encoding of any parsed value (see the module docs).
pub fn canonical(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    write(&mut out, value);
    out
}

fn write(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Array(a) => {
            out.push(b'[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(out, item);
            }
            out.push(b']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                leaf(out, &Value::String(k.clone()));
                out.push(b':');
                if let Some(item) = m.get(k) {
                    write(out, item);
                }
            }
            out.push(b'}');
        }
        other => leaf(out, other),
    }
}

fn leaf(out: &mut Vec<u8>, v: &Value) {
    match canon::to_canonical(v) {
        Ok(b) => out.extend_from_slice(&b),
        // Only a number canon refuses reaches here.
        Err(_) => out.extend_from_slice(v.to_string().as_bytes()),
    }
}

/// `SHA-256(domain || 0x00 || canonical(value))`.
pub fn digest(domain: &str, value: &Value) -> Sha256Digest {
    Sha256Digest::of_domain(domain, &canonical(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_duplicates_at_depth_and_accepts_floats() {
        assert_eq!(
            parse(br#"{"a":{"b":1,"b":2}}"#),
            Err(JsonError::DuplicateKey)
        );
        assert_eq!(parse(br#"[{"x":1,"x":1}]"#), Err(JsonError::DuplicateKey));
        let v = parse(br#"{"t":0.7,"n":-3,"big":18446744073709551616}"#).expect("floats");
        assert_eq!(v["t"], serde_json::json!(0.7));
        assert!(matches!(parse(b"{} x"), Err(JsonError::Malformed(_))));
        assert_eq!(parse(b"\"\xff\""), Err(JsonError::InvalidUtf8));
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(parse(deep.as_bytes()), Err(JsonError::TooDeep));
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse(ok.as_bytes()).is_ok());
    }

    #[test]
    fn canonical_matches_canon_for_integers_and_sorts_keys() {
        let v = serde_json::json!({"b":[1,"\u{1}\"x"],"a":{"é":true,"z":null}});
        assert_eq!(
            canonical(&v),
            canon::to_canonical(&v).expect("integer-only value")
        );
        let f = parse(br#"{"b":1.50,"a":1e2}"#).expect("parse");
        assert_eq!(canonical(&f), br#"{"a":100.0,"b":1.5}"#);
    }
}
