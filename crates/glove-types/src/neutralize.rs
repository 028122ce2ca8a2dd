//! A control-sequence neutraliser for text an agent or a tool produced,
//! before a person's terminal shows it: `glove exec` output
//! (`glove_sandbox::sink`) and MCP tool results (`glove_mcp`). Pure: bytes
//! in, bytes out, no I/O.
//!
//! [`Neutralizer`] renders control sequences visibly, as `less -R` does:
//! SGR colour sequences (`ESC [ digits;… m`) pass; every other escape,
//! C0 control (except tab, newline, carriage return and backspace), DEL
//! and UTF-8-encoded C1 control becomes caret notation (`^[`, `^G`, `^?`,
//! `M-^[`), and every byte that is not part of a valid UTF-8 character
//! (among them bare 8-bit C1 controls and a lead byte left dangling)
//! becomes `\xNN`, so an OSC 52 clipboard write, a title change or a
//! cursor report query never reaches the operator's terminal as one, and
//! two neutralised streams interleaved cannot assemble one either. (A
//! terminal in 8-bit, non-UTF-8 mode reads C1 controls inside valid UTF-8
//! text; such terminals are not supported.)

/// Longest SGR sequence passed through (longer ones are neutralised).
const SGR_MAX: usize = 64;

/// The state of a streaming control-sequence neutraliser.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Neutralizer {
    state: State,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum State {
    #[default]
    Text,
    /// After ESC.
    Escape,
    /// After `ESC [`, with the parameter bytes so far.
    Csi(Vec<u8>),
    /// Inside a UTF-8 sequence: the bytes so far and how many are due.
    Utf8 { bytes: [u8; 4], len: u8, need: u8 },
}

impl Neutralizer {
    /// Appends the neutralised form of `input` to `out`.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            self.byte(b, out);
        }
    }

    /// Flushes a sequence left open at the end of the stream.
    pub fn end(&mut self, out: &mut Vec<u8>) {
        match std::mem::take(&mut self.state) {
            State::Text => {}
            State::Escape => out.extend_from_slice(b"^["),
            State::Csi(params) => {
                out.extend_from_slice(b"^[[");
                out.extend_from_slice(&params);
            }
            State::Utf8 { bytes, len, .. } => hex(&bytes[..usize::from(len)], out),
        }
    }

    fn byte(&mut self, b: u8, out: &mut Vec<u8>) {
        match std::mem::take(&mut self.state) {
            State::Text => self.text(b, out),
            State::Escape => {
                if b == b'[' {
                    self.state = State::Csi(Vec::new());
                } else {
                    out.extend_from_slice(b"^[");
                    self.text(b, out);
                }
            }
            State::Csi(mut params) => {
                if b == b'm' {
                    out.extend_from_slice(b"\x1b[");
                    out.extend_from_slice(&params);
                    out.push(b'm');
                } else if (b.is_ascii_digit() || b == b';' || b == b':') && params.len() < SGR_MAX {
                    params.push(b);
                    self.state = State::Csi(params);
                } else {
                    out.extend_from_slice(b"^[[");
                    out.extend_from_slice(&params);
                    self.text(b, out);
                }
            }
            State::Utf8 {
                mut bytes,
                len,
                need,
            } => {
                if (0x80..=0xBF).contains(&b) {
                    bytes[usize::from(len)] = b;
                    let len = len + 1;
                    if len < need {
                        self.state = State::Utf8 { bytes, len, need };
                    } else {
                        utf8(&bytes[..usize::from(len)], out);
                    }
                } else {
                    hex(&bytes[..usize::from(len)], out);
                    self.text(b, out);
                }
            }
        }
    }

    fn text(&mut self, b: u8, out: &mut Vec<u8>) {
        let need = match b {
            0x1B => {
                self.state = State::Escape;
                return;
            }
            b'\t' | b'\n' | b'\r' | 0x08 => {
                out.push(b);
                return;
            }
            0x00..=0x1F => {
                out.push(b'^');
                out.push(b ^ 0x40);
                return;
            }
            0x7F => {
                out.extend_from_slice(b"^?");
                return;
            }
            0x20..=0x7E => {
                out.push(b);
                return;
            }
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            // A continuation byte alone, or a byte no UTF-8 has (and a bare
            // 8-bit C1 control among them).
            _ => {
                hex(&[b], out);
                return;
            }
        };
        let mut bytes = [0u8; 4];
        bytes[0] = b;
        self.state = State::Utf8 {
            bytes,
            len: 1,
            need,
        };
    }
}

/// A complete UTF-8 sequence: passed when it is a valid character that is
/// not a C1 control; a C1 control in caret notation (`M-^[` for U+009B);
/// anything invalid (overlong, surrogate) as hex.
fn utf8(seq: &[u8], out: &mut Vec<u8>) {
    match std::str::from_utf8(seq).ok().and_then(|s| s.chars().next()) {
        Some(c) if ('\u{80}'..='\u{9f}').contains(&c) => {
            out.extend_from_slice(b"M-^");
            out.push(((c as u32 - 0x80) as u8) ^ 0x40);
        }
        Some(_) => out.extend_from_slice(seq),
        None => hex(seq, out),
    }
}

/// Bytes that are not text, as `\xNN` each.
fn hex(bytes: &[u8], out: &mut Vec<u8>) {
    for b in bytes {
        out.extend_from_slice(format!("\\x{b:02X}").as_bytes());
    }
}

/// Neutralises `input` in one go (a whole stream).
pub fn neutralize(input: &[u8]) -> Vec<u8> {
    let mut n = Neutralizer::default();
    let mut out = Vec::with_capacity(input.len());
    n.feed(input, &mut out);
    n.end(&mut out);
    out
}

/// For the fuzz target: neutralising never panics, and its output is
/// valid UTF-8 with no escape but SGR and no control character but tab,
/// newline, return and backspace (so two neutralised streams, interleaved
/// anywhere, still hold none).
pub fn fuzz_neutralize(input: &[u8]) {
    let out = neutralize(input);
    assert!(only_harmless(&out));
}

/// Whether `out` is valid UTF-8 holding only text, the four harmless
/// controls and SGR sequences.
pub fn only_harmless(out: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(out) else {
        return false;
    };
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == 0x1B {
            // Must be ESC [ params m.
            let rest = &bytes[i + 1..];
            if rest.first() != Some(&b'[') {
                return false;
            }
            let Some(end) = rest.iter().position(|b| *b == b'm') else {
                return false;
            };
            if !rest[1..end]
                .iter()
                .all(|b| b.is_ascii_digit() || *b == b';' || *b == b':')
            {
                return false;
            }
            i += end + 2;
            continue;
        }
        i += 1;
    }
    text.chars().all(|c| {
        matches!(c, '\t' | '\n' | '\r' | '\u{8}' | '\u{1b}')
            || !(c.is_control() || ('\u{80}'..='\u{9f}').contains(&c))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_reviewed_sequences_are_shown_not_obeyed() {
        // OSC 52 clipboard write, a title change, a cursor position query.
        let osc52 = b"\x1b]52;c;aGk=\x07";
        assert_eq!(neutralize(osc52), b"^[]52;c;aGk=^G");
        assert_eq!(neutralize(b"\x1b]0;pwned\x1b\\"), b"^[]0;pwned^[\\");
        assert_eq!(neutralize(b"\x1b[6n"), b"^[[6n");
        // C1 CSI (U+009B) and OSC (U+009D) in UTF-8.
        assert_eq!(neutralize(b"\xc2\x9b6n"), b"M-^[6n");
        assert_eq!(neutralize(b"\x7f\x00"), b"^?^@");
        // Bare 8-bit C1 bytes and a lead byte left dangling (the review's
        // cross-stream CSI: C2 on one stream, 9B on the other).
        assert_eq!(neutralize(b"\x9b6n"), b"\\x9B6n");
        assert_eq!(neutralize(b"\xc2\x1b"), b"\\xC2^[");
        assert_eq!(neutralize(b"\xc2"), b"\\xC2");
        // Overlong and surrogate encodings are not characters.
        assert_eq!(neutralize(b"\xc0\xaf"), b"\\xC0\\xAF");
        assert_eq!(neutralize(b"\xed\xa0\x80"), b"\\xED\\xA0\\x80");
    }

    #[test]
    fn colours_and_ordinary_text_pass() {
        let s = "é \x1b[1;31mred\x1b[0m\tcol\r\nnext\x08".as_bytes();
        assert_eq!(neutralize(s), s);
        // Split anywhere, the stream gives the same result.
        for cut in 0..s.len() {
            let mut n = Neutralizer::default();
            let mut out = Vec::new();
            n.feed(&s[..cut], &mut out);
            n.feed(&s[cut..], &mut out);
            n.end(&mut out);
            assert_eq!(out, s, "cut at {cut}");
        }
    }

    proptest! {
        #[test]
        fn neutralised_output_is_harmless(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            prop_assert!(only_harmless(&neutralize(&bytes)));
        }

        #[test]
        fn chunking_does_not_matter(
            bytes in prop::collection::vec(any::<u8>(), 0..256),
            cut in 0usize..256,
        ) {
            let cut = cut.min(bytes.len());
            let mut n = Neutralizer::default();
            let mut out = Vec::new();
            n.feed(&bytes[..cut], &mut out);
            n.feed(&bytes[cut..], &mut out);
            n.end(&mut out);
            prop_assert_eq!(out, neutralize(&bytes));
        }

        #[test]
        fn harmless_text_is_unchanged(s in "[ -~\\t\\n]{0,200}") {
            prop_assert_eq!(neutralize(s.as_bytes()), s.as_bytes());
        }

        #[test]
        fn unicode_text_is_unchanged(s in "\\PC{0,100}") {
            // Printable characters of any script (no controls) pass as they are.
            let printable: String = s.chars().filter(|c| !c.is_control()).collect();
            prop_assert_eq!(neutralize(printable.as_bytes()), printable.as_bytes());
        }

        #[test]
        fn two_streams_interleaved_stay_harmless(
            a in prop::collection::vec(any::<u8>(), 0..128),
            b in prop::collection::vec(any::<u8>(), 0..128),
            cuts in prop::collection::vec(0usize..128, 0..8),
        ) {
            // Whole neutralised chunks of two streams, interleaved as two
            // descriptors may reach one terminal.
            let (na, nb) = (neutralize(&a), neutralize(&b));
            let mut out = Vec::new();
            let (mut ia, mut ib) = (0, 0);
            for (k, c) in cuts.iter().enumerate() {
                let (src, i) = if k % 2 == 0 { (&na, &mut ia) } else { (&nb, &mut ib) };
                let end = (*i + c).min(src.len());
                // Only at character boundaries: a write never splits one
                // unless it is partial, and a partial one is continued
                // before the other stream's next write on a terminal we
                // own; this checks what the neutraliser promises.
                let mut e = end;
                while e < src.len() && (src[e] & 0xC0) == 0x80 { e += 1; }
                out.extend_from_slice(&src[*i..e]);
                *i = e;
            }
            out.extend_from_slice(&na[ia..]);
            out.extend_from_slice(&nb[ib..]);
            prop_assert!(only_harmless(&out));
        }
    }
}
