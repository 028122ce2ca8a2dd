//! A strict, bounded scanner over stored envelope bytes: the cheap check
//! replay uses instead of parsing every envelope into a JSON tree and
//! re-encoding it.
//!
//! The scanner never builds a value and never allocates. It answers one
//! question — "are these bytes *certainly* the canonical encoding of a
//! receipt envelope, and where are its fields?" — and says `None` whenever
//! it is not sure. It is deliberately *conservative*: it accepts a subset of
//! what [`glove_types::canon::parse_canonical`] accepts (every envelope Glove
//! seals, and more), and gives up on rare shapes it does not need to decide
//! (escaped object keys, `-0`, nesting within one level of
//! [`glove_types::canon::MAX_DEPTH`]). A `None` sends the caller to the full
//! check, which decides — and names the error — exactly as before, so the
//! scanner only has to be *sound*: `Some` implies the full parse accepts
//! the same bytes with the same fields (see `docs/journal.md`, "The cheap
//! check on open").
//!
//! Envelope frame, from [`super::envelope`] (keys sorted, no whitespace):
//!
//! ```text
//! {"body":BODY,"body_mac":"H1","chain":"H2","receipt_kind":"KIND","seq":N}
//! ```
//!
//! Everything after `BODY` has a fixed grammar without quotes or
//! backslashes inside its variable parts (64 hex digits, a kind name, a
//! decimal number), so it is located from the end; `BODY` is what is left
//! and is then checked to be a canonical JSON object.

use super::envelope::ReceiptKind;
use glove_types::canon::{MAX_DEPTH, MAX_SAFE_INTEGER};

const PREFIX: &[u8] = b"{\"body\":";
const BODY_MAC: &[u8] = b",\"body_mac\":\"";
const CHAIN: &[u8] = b"\",\"chain\":\"";
const KIND: &[u8] = b"\",\"receipt_kind\":\"";
const SEQ: &[u8] = b"\",\"seq\":";
const HEX_LEN: usize = 64;

/// The fields of an envelope the scanner accepted, as slices of its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScannedEnvelope<'a> {
    /// The canonical body bytes (the `body_mac` message).
    pub body: &'a [u8],
    /// The `body_mac` value, 64 characters (not yet checked to be hex).
    pub body_mac: &'a [u8],
    /// The `chain` value, 64 characters (not yet checked to be hex).
    pub chain: &'a [u8],
    /// The kind named by both the envelope and the body.
    pub kind: ReceiptKind,
    /// The sequence number.
    pub seq: u64,
    /// The envelope up to and including the `,` before `"chain"`; followed
    /// by [`unsigned_tail`](Self::unsigned_tail) it is the canonical
    /// envelope without its `chain` field (the chain MAC's message).
    pub unsigned_head: &'a [u8],
    /// The envelope from `"receipt_kind"` to the end.
    pub unsigned_tail: &'a [u8],
}

/// Scans stored envelope bytes (see the module docs). `None` when they are
/// not certainly a canonical envelope whose body is an object naming the
/// envelope's kind.
pub fn scan_envelope(env: &[u8]) -> Option<ScannedEnvelope<'_>> {
    let rest = env.strip_prefix(PREFIX)?.strip_suffix(b"}")?;
    let digits = rest.len() - rest.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    let (rest, seq) = rest.split_at(digits);
    let seq = canonical_u64(seq)?;
    let rest = rest.strip_suffix(SEQ)?;
    let (rest, kind) = ReceiptKind::ALL.into_iter().find_map(|k| {
        let r = rest
            .strip_suffix(k.as_str().as_bytes())?
            .strip_suffix(KIND)?;
        Some((r, k))
    })?;
    let (rest, chain) = rest.split_at(rest.len().checked_sub(HEX_LEN)?);
    let rest = rest.strip_suffix(CHAIN)?;
    let (rest, body_mac) = rest.split_at(rest.len().checked_sub(HEX_LEN)?);
    let body = rest.strip_suffix(BODY_MAC)?;
    // The body sits one level inside the envelope object.
    if body_kind(body, 2)? != kind.as_str().as_bytes() {
        return None;
    }
    // `"chain":"H2",` runs from just after `H1",` to just before
    // `"receipt_kind"`.
    let cut_start = PREFIX.len() + body.len() + BODY_MAC.len() + HEX_LEN + 2;
    let cut_end = cut_start + CHAIN.len() - 2 + HEX_LEN + 2;
    Some(ScannedEnvelope {
        body,
        body_mac,
        chain,
        kind,
        seq,
        unsigned_head: env.get(..cut_start)?,
        unsigned_tail: env.get(cut_end..)?,
    })
}

/// Whether `body` is certainly a canonical JSON object (a container at
/// nesting level `level`); if so, the raw bytes of its top-level
/// `receipt_kind` string (which must be present and unescaped).
pub fn body_kind(body: &[u8], level: usize) -> Option<&[u8]> {
    // Every byte outside strings is ASCII, so UTF-8 validity of the whole
    // is that of the strings; one pass up front is cheapest.
    core::str::from_utf8(body).ok()?;
    let mut s = Scanner { b: body, i: 0 };
    let kind = s.object(level, true)?;
    (s.i == body.len()).then_some(kind?)
}

/// Canonical unsigned decimal within the interoperable range: `0` or a
/// non-zero digit followed by digits, at most 2^53 - 1.
fn canonical_u64(d: &[u8]) -> Option<u64> {
    match d {
        [] => None,
        [b'0'] => Some(0),
        [b'0', ..] => None,
        _ if d.len() > 16 => None,
        _ => {
            let mut v: u64 = 0;
            for &c in d {
                if !c.is_ascii_digit() {
                    return None;
                }
                v = v * 10 + u64::from(c - b'0');
            }
            (v <= MAX_SAFE_INTEGER).then_some(v)
        }
    }
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    fn value(&mut self, level: usize) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(level + 1, false).map(|_| ()),
            b'[' => self.array(level + 1),
            b'"' => self.string(false).map(|_| ()),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, lit: &[u8]) -> Option<()> {
        let end = self.i.checked_add(lit.len())?;
        (self.b.get(self.i..end)? == lit).then(|| self.i = end)
    }

    fn number(&mut self) -> Option<()> {
        let neg = self.peek()? == b'-';
        if neg {
            self.i += 1;
        }
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        let v = canonical_u64(self.b.get(start..self.i)?)?;
        // `-0` is not the canonical form of anything; leave it to the full
        // check. A fraction or exponent is left to the caller's next byte
        // check, which refuses `.`, `e` and `E`.
        (!(neg && v == 0)).then_some(())
    }

    /// A string; with `plain`, one without escapes, returned raw.
    fn string(&mut self, plain: bool) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        loop {
            let c = self.peek()?;
            match c {
                b'"' => {
                    let s = self.b.get(start..self.i)?;
                    self.i += 1;
                    return Some(s);
                }
                b'\\' if !plain => {
                    let e = *self.b.get(self.i + 1)?;
                    match e {
                        b'"' | b'\\' | b'b' | b't' | b'n' | b'f' | b'r' => self.i += 2,
                        b'u' => {
                            // Only control characters without a short
                            // escape, in lowercase hex.
                            let code = match self.b.get(self.i + 2..self.i + 6)? {
                                [b'0', b'0', hi @ (b'0' | b'1'), lo] => {
                                    (hi - b'0') * 16 + hex_val(*lo)?
                                }
                                _ => return None,
                            };
                            if matches!(code, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                                return None;
                            }
                            self.i += 6;
                        }
                        _ => return None,
                    }
                }
                0x00..=0x1f | b'\\' => return None,
                _ => self.i += 1,
            }
        }
    }

    fn array(&mut self, level: usize) -> Option<()> {
        if level >= MAX_DEPTH {
            return None;
        }
        self.eat(b'[')?;
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            self.value(level)?;
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An object whose keys are unescaped and strictly increasing in UTF-16
    /// order. With `top`, returns its `receipt_kind` value (if a plain
    /// string).
    fn object(&mut self, level: usize, top: bool) -> Option<Option<&'a [u8]>> {
        if level >= MAX_DEPTH {
            return None;
        }
        self.eat(b'{')?;
        let mut kind = None;
        if self.eat(b'}').is_some() {
            return Some(kind);
        }
        let mut last: Option<&[u8]> = None;
        loop {
            let key = self.string(true)?;
            if let Some(prev) = last {
                if !utf16_less(prev, key)? {
                    return None;
                }
            }
            last = Some(key);
            self.eat(b':')?;
            if top && key == b"receipt_kind" && self.peek()? == b'"' {
                let at = self.i;
                match self.string(true) {
                    Some(v) => kind = Some(v),
                    None => {
                        self.i = at;
                        self.value(level)?;
                    }
                }
            } else {
                self.value(level)?;
            }
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(kind);
                }
                _ => return None,
            }
        }
    }
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// `a < b` in UTF-16 code-unit order (the canonical key order); `None` when
/// either is not UTF-8.
fn utf16_less(a: &[u8], b: &[u8]) -> Option<bool> {
    if a.is_ascii() && b.is_ascii() {
        return Some(a < b);
    }
    let (a, b) = (core::str::from_utf8(a).ok()?, core::str::from_utf8(b).ok()?);
    Some(a.encode_utf16().lt(b.encode_utf16()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use glove_types::canon::{parse_canonical, to_canonical};
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    fn kind_of(v: &Value) -> Option<&str> {
        v.as_object()?.get("receipt_kind")?.as_str()
    }

    #[test]
    fn accepts_plain_bodies_and_finds_the_kind() {
        let b = br#"{"a":[1,-2,true,false,null,{}],"receipt_kind":"resource_v1","z":"\u001f\n"}"#;
        assert_eq!(body_kind(b, 2), Some(&b"resource_v1"[..]));
        for bad in [
            &br#"{"receipt_kind":"resource_v1","a":1}"#[..], // unsorted
            br#"{"a":1,"a":2,"receipt_kind":"x"}"#,          // duplicate
            br#"{"a":01,"receipt_kind":"x"}"#,               // leading zero
            br#"{"a":-0,"receipt_kind":"x"}"#,               // -0
            br#"{"a":1.5,"receipt_kind":"x"}"#,              // fraction
            br#"{"a":"\u000a","receipt_kind":"x"}"#,         // escape not minimal
            br#"{"a":"\/","receipt_kind":"x"}"#,             // escape not minimal
            br#"{"a":9007199254740992,"receipt_kind":"x"}"#, // out of range
            br#"{ "receipt_kind":"x"}"#,                     // whitespace
            br#"{"receipt_kind":1}"#,                        // not a string
            br#"{"a":1}"#,                                   // no kind
            br#"{"receipt_kind":"x"}x"#,                     // trailing
            br#"[]"#,
        ] {
            assert_eq!(body_kind(bad, 2), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn depth_is_bounded_conservatively() {
        let deep = |n: usize| {
            format!(
                r#"{{"a":{}1{},"receipt_kind":"x"}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        assert!(body_kind(deep(10).as_bytes(), 2).is_some());
        assert!(body_kind(deep(MAX_DEPTH).as_bytes(), 2).is_none());
        // Far past any bound: no stack growth beyond MAX_DEPTH frames.
        assert!(body_kind(deep(100_000).as_bytes(), 2).is_none());
    }

    fn json() -> impl Strategy<Value = Value> {
        let s = "[a-z\\\\\"\\x00-\\x1f\\x7f\u{e9}\u{ff5e}\u{1f600}]{0,6}";
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-(MAX_SAFE_INTEGER as i64)..=MAX_SAFE_INTEGER as i64).prop_map(Value::from),
            s.prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 5, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[a-z\u{e9}\u{ff5e}\u{1f600}]{0,4}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    fn body_value() -> impl Strategy<Value = Value> {
        (
            prop::collection::btree_map("[a-z\u{e9}\u{1f600}]{1,4}", json(), 0..5),
            prop_oneof![Just("resource_v1"), Just("refinement_v1"), Just("x")],
        )
            .prop_map(|(m, k)| {
                let mut m: Map<String, Value> = m.into_iter().collect();
                m.insert("receipt_kind".into(), Value::String(k.into()));
                Value::Object(m)
            })
    }

    /// One byte-level mutation of `b`.
    fn mutate(b: &[u8], at: usize, how: u8, byte: u8) -> Vec<u8> {
        const ALPHABET: &[u8] = b"{}[]\",:\\-0159.eEtfnu \x00\x1f\x7fa";
        let mut v = b.to_vec();
        let at = if v.is_empty() { 0 } else { at % (v.len() + 1) };
        let byte = if how & 4 == 0 {
            ALPHABET[usize::from(byte) % ALPHABET.len()]
        } else {
            byte
        };
        match how % 4 {
            0 if at < v.len() => v[at] = byte,
            1 => v.insert(at, byte),
            2 if at < v.len() => {
                v.remove(at);
            }
            _ if at < v.len() => {
                let last = v.len() - 1;
                v.swap(at, last);
            }
            _ => v.push(byte),
        }
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Soundness: whenever the scanner accepts, the full canonical parse
        /// accepts the same bytes and finds the same kind.
        #[test]
        fn scanner_accepts_only_canonical(
            v in body_value(),
            muts in prop::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..4),
        ) {
            let mut b = to_canonical(&v).unwrap();
            for (at, how, byte) in muts {
                b = mutate(&b, at, how, byte);
            }
            if let Some(kind) = body_kind(&b, 2) {
                let parsed = parse_canonical(&b, 1 << 20);
                prop_assert!(parsed.is_ok(), "scanner accepted {:?}", String::from_utf8_lossy(&b));
                let parsed = parsed.unwrap();
                prop_assert_eq!(kind_of(&parsed).map(str::as_bytes), Some(kind));
            }
        }

        /// Completeness where it matters: every canonical body without
        /// escaped keys is accepted, with its kind.
        #[test]
        fn scanner_accepts_canonical_bodies(v in body_value()) {
            let b = to_canonical(&v).unwrap();
            prop_assert_eq!(body_kind(&b, 2), kind_of(&v).map(str::as_bytes));
        }

        /// Arbitrary bytes never panic.
        #[test]
        fn scanner_never_panics(b in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = body_kind(&b, 2);
            let _ = scan_envelope(&b);
        }
    }
}
