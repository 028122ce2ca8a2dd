//! Strict and canonical JSON.
//!
//! Glove reads every document (policy, plan, stored records, protocol frames)
//! through one strict decoder. On top of ordinary JSON well-formedness it
//! rejects, each with its own code:
//!
//! * input larger than the caller's bound ([`JSON_TOO_LARGE`]);
//! * invalid UTF-8 anywhere ([`JSON_INVALID_UTF8`]);
//! * bytes after the value ([`JSON_TRAILING_BYTES`]);
//! * a repeated key in any object at any depth ([`JSON_DUPLICATE_KEY`]) —
//!   `serde_json` would silently keep the last one;
//! * numbers with a fraction or exponent, or too large for an integer
//!   ([`JSON_FLOAT`]), and integers outside ±(2^53−1)
//!   ([`JSON_INTEGER_OUT_OF_RANGE`]) so every value survives a round trip
//!   through any JSON implementation;
//! * nesting deeper than [`MAX_DEPTH`] containers ([`JSON_TOO_DEEP`]).
//!
//! The canonical form follows RFC 8785 (JCS) restricted to integers: no
//! insignificant whitespace, object keys sorted by their UTF-16 code units,
//! strings escaped minimally (`\"`, `\\`, the short escapes `\b \t \n \f \r`,
//! `\u00xx` with lowercase hex for other control characters, everything else
//! literal). Where a document must be canonical, [`parse_canonical`] also
//! rejects input whose bytes differ from their canonical re-encoding
//! ([`JSON_NONCANONICAL`]).

use crate::codes::json::*;
use crate::codes::ErrorCode;
use crate::error::Rejection;
use core::fmt;
use serde::de::{DeserializeOwned, DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde::Serialize;
use serde_json::{Map, Value};

/// Deepest nesting of arrays and objects accepted.
pub const MAX_DEPTH: usize = 64;

/// Largest integer magnitude accepted (2^53 − 1).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

const MARK: &str = "glove-code:";

fn marked(code: ErrorCode, msg: impl fmt::Display) -> String {
    format!("{MARK}{}:{msg}", code.as_str())
}

/// Parses `bytes` strictly into a JSON value (see the module docs).
pub fn parse_strict(bytes: &[u8], max_bytes: usize) -> Result<Value, Rejection> {
    if bytes.len() > max_bytes {
        return Err(Rejection::new(
            JSON_TOO_LARGE,
            format!("input is {} bytes; the bound is {max_bytes}", bytes.len()),
        ));
    }
    if let Err(e) = core::str::from_utf8(bytes) {
        return Err(Rejection::new(
            JSON_INVALID_UTF8,
            format!("invalid UTF-8 at byte {}", e.valid_up_to()),
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = StrictSeed { depth: 0 }
        .deserialize(&mut de)
        .map_err(map_parse_error)?;
    de.end().map_err(map_parse_error)?;
    Ok(value)
}

/// Parses `bytes` strictly and also requires them to be canonical.
pub fn parse_canonical(bytes: &[u8], max_bytes: usize) -> Result<Value, Rejection> {
    let value = parse_strict(bytes, max_bytes)?;
    let again = to_canonical(&value)?;
    if again != bytes {
        let at = bytes
            .iter()
            .zip(again.iter())
            .position(|(a, b)| a != b)
            .unwrap_or(bytes.len().min(again.len()));
        return Err(Rejection::new(
            JSON_NONCANONICAL,
            format!("input differs from its canonical encoding at byte {at}"),
        ));
    }
    Ok(value)
}

/// Whether a typed decode also requires canonical input bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// Any strict JSON (whitespace and key order are free).
    Strict,
    /// Only the exact canonical bytes.
    Canonical,
}

/// Strictly parses `bytes` and decodes them into `T`, mapping schema errors
/// (unknown field, missing field, negative number, wrong type) to codes.
pub fn decode<T: DeserializeOwned>(
    bytes: &[u8],
    max_bytes: usize,
    form: Form,
) -> Result<T, Rejection> {
    let value = match form {
        Form::Strict => parse_strict(bytes, max_bytes)?,
        Form::Canonical => parse_canonical(bytes, max_bytes)?,
    };
    from_value(value)
}

/// Decodes an already strictly parsed value into `T`.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, Rejection> {
    // The value is kept only when an unknown field must be placed.
    T::deserialize(&value).map_err(|e| place_unknown(map_schema_error(&e.to_string()), &value))
}

/// Nodes [`objects_with`] looks at, at most; keys are shortened in paths.
const PLACE_MAX_NODES: usize = 4096;
const PLACE_MAX_KEY: usize = 64;

/// Where objects holding `key` are, as locations (`""` for the top level);
/// at most 9 places and [`PLACE_MAX_NODES`] nodes looked at (`budget`).
fn objects_with(v: &Value, key: &str, at: &str, out: &mut Vec<String>, budget: &mut usize) {
    if out.len() > 8 || *budget == 0 {
        return;
    }
    *budget -= 1;
    match v {
        Value::Object(m) => {
            if m.contains_key(key) {
                out.push(at.to_owned());
            }
            for (k, child) in m {
                let k: String = k.chars().take(PLACE_MAX_KEY).collect();
                let sub = if at.is_empty() {
                    k
                } else {
                    format!("{at}.{k}")
                };
                objects_with(child, key, &sub, out, budget);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                objects_with(child, key, &format!("{at}[{i}]"), out, budget);
            }
        }
        _ => {}
    }
}

/// Says which object an unknown field is in: serde names the field, not
/// its place. When exactly one object holds a key of that name, that is
/// the place; otherwise every candidate is named.
fn place_unknown(r: Rejection, value: &Value) -> Rejection {
    if r.code() != JSON_UNKNOWN_FIELD || !r.location().is_empty() {
        return r;
    }
    let Some(key) = r
        .message()
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split('`').next())
        .map(str::to_owned)
    else {
        return r;
    };
    let mut places = Vec::new();
    let mut budget = PLACE_MAX_NODES;
    objects_with(value, &key, "", &mut places, &mut budget);
    let shown = |p: &str| {
        if p.is_empty() {
            "the top-level object".to_owned()
        } else {
            format!("the object at {p}")
        }
    };
    match places.as_slice() {
        [one] => {
            let msg = r.message().replacen(
                &format!("`{key}`"),
                &format!("`{key}` in {}", shown(one)),
                1,
            );
            let placed = Rejection::new(JSON_UNKNOWN_FIELD, msg);
            if one.is_empty() {
                placed
            } else {
                placed.at(one)
            }
        }
        [] => r,
        many => {
            let names: Vec<String> = many.iter().map(|p| shown(p)).collect();
            let msg = r.message().replacen(
                &format!("`{key}`"),
                &format!("`{key}` (in one of: {})", names.join(", ")),
                1,
            );
            Rejection::new(JSON_UNKNOWN_FIELD, msg)
        }
    }
}

/// Encodes a serializable value canonically.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, Rejection> {
    let v = serde_json::to_value(value)
        .map_err(|e| Rejection::new(JSON_INVALID_TYPE, format!("cannot encode: {e}")))?;
    to_canonical(&v)
}

/// Encodes a JSON value canonically. Fails only on a non-integer number or
/// an integer outside the interoperable range.
pub fn to_canonical(value: &Value) -> Result<Vec<u8>, Rejection> {
    let mut out = Vec::with_capacity(128);
    write_value(&mut out, value)?;
    Ok(out)
}

fn write_value(out: &mut Vec<u8>, v: &Value) -> Result<(), Rejection> {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                check_range(u)?;
                out.extend_from_slice(u.to_string().as_bytes());
            } else if let Some(i) = n.as_i64() {
                check_range(i.unsigned_abs())?;
                out.extend_from_slice(i.to_string().as_bytes());
            } else {
                return Err(Rejection::new(JSON_FLOAT, "numbers must be integers"));
            }
        }
        Value::String(s) => write_string(out, s),
        Value::Array(a) => {
            out.push(b'[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item)?;
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
                write_string(out, k);
                out.push(b':');
                if let Some(item) = m.get(k) {
                    write_value(out, item)?;
                }
            }
            out.push(b'}');
        }
    }
    Ok(())
}

fn check_range(magnitude: u64) -> Result<(), Rejection> {
    if magnitude > MAX_SAFE_INTEGER {
        Err(Rejection::new(
            JSON_INTEGER_OUT_OF_RANGE,
            format!("integers must lie within ±{MAX_SAFE_INTEGER}"),
        ))
    } else {
        Ok(())
    }
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            0x08 => Some(b"\\b"),
            0x09 => Some(b"\\t"),
            0x0a => Some(b"\\n"),
            0x0c => Some(b"\\f"),
            0x0d => Some(b"\\r"),
            0x00..=0x1f => None,
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        match esc {
            Some(e) => out.extend_from_slice(e),
            None => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]),
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn map_parse_error(e: serde_json::Error) -> Rejection {
    let text = e.to_string();
    if let Some(r) = unmark(&text) {
        return r;
    }
    let code = if text.starts_with("trailing characters") {
        JSON_TRAILING_BYTES
    } else if text.starts_with("recursion limit exceeded") {
        JSON_TOO_DEEP
    } else {
        JSON_SYNTAX
    };
    Rejection::new(code, text)
}

fn unmark(text: &str) -> Option<Rejection> {
    let rest = text.strip_prefix(MARK)?;
    let (code, msg) = rest.split_once(':')?;
    let code = ErrorCode::from_code(code)?;
    Some(Rejection::new(code, msg.to_owned()))
}

fn map_schema_error(text: &str) -> Rejection {
    if let Some(r) = unmark(text) {
        return r;
    }
    let code = if text.starts_with("unknown field") {
        JSON_UNKNOWN_FIELD
    } else if text.starts_with("missing field") {
        JSON_MISSING_FIELD
    } else if text.starts_with("invalid value: integer `-") {
        JSON_NEGATIVE_NUMBER
    } else {
        JSON_INVALID_TYPE
    };
    Rejection::new(code, text.to_owned())
}

struct StrictSeed {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for StrictSeed {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor { depth: self.depth })
    }
}

struct StrictVisitor {
    depth: usize,
}

impl StrictVisitor {
    fn enter<E: serde::de::Error>(&self) -> Result<usize, E> {
        let depth = self.depth + 1;
        if depth > MAX_DEPTH {
            Err(E::custom(marked(
                JSON_TOO_DEEP,
                format!("nesting exceeds {MAX_DEPTH} levels"),
            )))
        } else {
            Ok(depth)
        }
    }
}

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        if v.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(E::custom(marked(
                JSON_INTEGER_OUT_OF_RANGE,
                format!("integers must lie within ±{MAX_SAFE_INTEGER}"),
            )));
        }
        Ok(Value::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        if v > MAX_SAFE_INTEGER {
            return Err(E::custom(marked(
                JSON_INTEGER_OUT_OF_RANGE,
                format!("integers must lie within ±{MAX_SAFE_INTEGER}"),
            )));
        }
        Ok(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, _v: f64) -> Result<Value, E> {
        Err(E::custom(marked(
            JSON_FLOAT,
            "numbers must be integers without fraction or exponent",
        )))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let depth = self.enter()?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(StrictSeed { depth })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let depth = self.enter()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                let shown: String = key.chars().take(64).collect();
                return Err(A::Error::custom(marked(
                    JSON_DUPLICATE_KEY,
                    format!("duplicate key {shown:?}"),
                )));
            }
            let v = map.next_value_seed(StrictSeed { depth })?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(input: &str) -> ErrorCode {
        parse_strict(input.as_bytes(), 1 << 20).unwrap_err().code()
    }

    #[test]
    fn strict_rejections() {
        assert_eq!(code(r#"{"a":1,"a":2}"#), JSON_DUPLICATE_KEY);
        assert_eq!(
            code(r#"{"x":[{"a":1,"b":{"c":1,"c":1}}]}"#),
            JSON_DUPLICATE_KEY
        );
        assert_eq!(code(r#"{"a":1.0}"#), JSON_FLOAT);
        assert_eq!(code(r#"{"a":1e3}"#), JSON_FLOAT);
        assert_eq!(code("18446744073709551616"), JSON_FLOAT);
        assert_eq!(code("9007199254740992"), JSON_INTEGER_OUT_OF_RANGE);
        assert_eq!(code("-9007199254740992"), JSON_INTEGER_OUT_OF_RANGE);
        assert_eq!(code("{} x"), JSON_TRAILING_BYTES);
        assert_eq!(code("{}{}"), JSON_TRAILING_BYTES);
        assert_eq!(code("{"), JSON_SYNTAX);
        assert_eq!(code(""), JSON_SYNTAX);
        assert_eq!(code(&"[".repeat(65)), JSON_TOO_DEEP);
        assert_eq!(code(&"[".repeat(200)), JSON_TOO_DEEP);
        assert!(parse_strict(
            format!("{}{}", "[".repeat(64), "]".repeat(64)).as_bytes(),
            1 << 20
        )
        .is_ok());
        assert_eq!(
            parse_strict(b"\"\xff\"", 10).unwrap_err().code(),
            JSON_INVALID_UTF8
        );
        assert_eq!(
            parse_strict(b"[1,2,3]", 3).unwrap_err().code(),
            JSON_TOO_LARGE
        );
    }

    #[test]
    fn canonical_form() {
        let v = parse_strict(
            br#" { "b" : [1, -2, true, null], "a" : "x\u0001\n\"\\/\u00e9" } "#,
            1024,
        )
        .unwrap();
        let c = to_canonical(&v).unwrap();
        assert_eq!(
            String::from_utf8(c.clone()).unwrap(),
            "{\"a\":\"x\\u0001\\n\\\"\\\\/\u{e9}\",\"b\":[1,-2,true,null]}"
        );
        assert!(parse_canonical(&c, 1024).is_ok());
        assert_eq!(
            parse_canonical(br#"{"b":1,"a":1}"#, 1024)
                .unwrap_err()
                .code(),
            JSON_NONCANONICAL
        );
        assert_eq!(
            parse_canonical(b"{ }", 1024).unwrap_err().code(),
            JSON_NONCANONICAL
        );
        // serde_json reads `-0` as a float; a leading zero is a syntax error.
        assert_eq!(parse_canonical(b"-0", 1024).unwrap_err().code(), JSON_FLOAT);
        assert_eq!(
            parse_canonical(b"01", 1024).unwrap_err().code(),
            JSON_SYNTAX
        );
    }

    #[test]
    fn utf16_key_order() {
        // U+FF61 sorts before U+1F600 in UTF-8 byte order, after it in UTF-16.
        let v = parse_strict("{\"\u{ff61}\":1,\"\u{1f600}\":2}".as_bytes(), 1024).unwrap();
        let c = String::from_utf8(to_canonical(&v).unwrap()).unwrap();
        assert_eq!(c, "{\"\u{1f600}\":2,\"\u{ff61}\":1}");
    }

    #[test]
    fn schema_errors_have_codes() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct T {
            a: u64,
        }
        let c = |s: &str| {
            decode::<T>(s.as_bytes(), 1024, Form::Strict)
                .unwrap_err()
                .code()
        };
        assert_eq!(c(r#"{"a":1,"b":2}"#), JSON_UNKNOWN_FIELD);
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Outer {
            a: u64,
            list: Vec<T>,
        }
        let r = decode::<Outer>(
            br#"{"a":1,"list":[{"a":1},{"a":2,"zz":3}]}"#,
            1024,
            Form::Strict,
        )
        .unwrap_err();
        assert_eq!(r.code(), JSON_UNKNOWN_FIELD);
        assert_eq!(r.location(), "list[1]");
        assert!(
            r.message().contains("`zz` in the object at list[1]"),
            "{}",
            r.message()
        );
        let r = decode::<Outer>(br#"{"a":1,"list":[],"zz":1}"#, 1024, Form::Strict).unwrap_err();
        assert!(
            r.message().contains("in the top-level object"),
            "{}",
            r.message()
        );
        assert_eq!(c(r#"{}"#), JSON_MISSING_FIELD);
        assert_eq!(c(r#"{"a":-1}"#), JSON_NEGATIVE_NUMBER);
        assert_eq!(c(r#"{"a":"1"}"#), JSON_INVALID_TYPE);
    }
}
