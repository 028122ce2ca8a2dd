//! Streaming UTF-8 validation: the state between chunks is the part of a
//! sequence still owed (at most three continuation bytes and the range the
//! next one must lie in), so validity does not depend on how the stream
//! was cut.

/// The validator's state.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Utf8Stream {
    /// Continuation bytes still owed by the current sequence.
    need: u8,
    /// The range the next continuation byte must lie in.
    lo: u8,
    hi: u8,
    /// Whether an invalid byte was seen (final).
    invalid: bool,
}

impl Utf8Stream {
    pub(crate) fn new() -> Utf8Stream {
        Utf8Stream {
            need: 0,
            lo: 0x80,
            hi: 0xbf,
            invalid: false,
        }
    }

    /// One byte through the state machine (RFC 3629's table: no overlong
    /// forms, no surrogates, nothing past U+10FFFF).
    fn step(&mut self, b: u8) {
        if self.need > 0 {
            if (self.lo..=self.hi).contains(&b) {
                self.need -= 1;
                self.lo = 0x80;
                self.hi = 0xbf;
            } else {
                self.invalid = true;
            }
            return;
        }
        let (need, lo, hi) = match b {
            0x00..=0x7f => (0, 0x80, 0xbf),
            0xc2..=0xdf => (1, 0x80, 0xbf),
            0xe0 => (2, 0xa0, 0xbf),
            0xe1..=0xec | 0xee..=0xef => (2, 0x80, 0xbf),
            0xed => (2, 0x80, 0x9f),
            0xf0 => (3, 0x90, 0xbf),
            0xf1..=0xf3 => (3, 0x80, 0xbf),
            0xf4 => (3, 0x80, 0x8f),
            _ => {
                self.invalid = true;
                return;
            }
        };
        self.need = need;
        self.lo = lo;
        self.hi = hi;
    }

    /// Validates the next chunk of the stream.
    pub(crate) fn feed(&mut self, mut chunk: &[u8]) {
        // Finish a sequence the previous chunk began (at most 3 bytes).
        while self.need > 0 && !self.invalid {
            let Some((&b, rest)) = chunk.split_first() else {
                return;
            };
            self.step(b);
            chunk = rest;
        }
        if self.invalid {
            return;
        }
        match core::str::from_utf8(chunk) {
            Ok(_) => {}
            Err(e) if e.error_len().is_some() => self.invalid = true,
            Err(e) => {
                // A sequence cut by the chunk's end: carry its state.
                for &b in chunk.get(e.valid_up_to()..).unwrap_or_default() {
                    self.step(b);
                }
            }
        }
    }

    /// Whether the stream so far is UTF-8 and ends on a character boundary.
    pub(crate) fn valid_at_end(&self) -> bool {
        !self.invalid && self.need == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_std_under_every_two_way_split() {
        let samples: [&[u8]; 10] = [
            "plain ascii".as_bytes(),
            "caf\u{e9} \u{1f600} \u{10ffff}".as_bytes(),
            b"\xc3",
            b"\xe2\x82",
            b"\xf0\x9f\x98",
            b"\xc0\x80",
            b"\xed\xa0\x80",
            b"\xf4\x90\x80\x80",
            b"ok\xffok",
            b"\xe2\x82\xac\xe2",
        ];
        for s in samples {
            let want = core::str::from_utf8(s).is_ok();
            for cut in 0..=s.len() {
                let mut v = Utf8Stream::new();
                v.feed(&s[..cut]);
                v.feed(&s[cut..]);
                assert_eq!(v.valid_at_end(), want, "{s:?} cut at {cut}");
            }
            let mut v = Utf8Stream::new();
            for b in s {
                v.feed(core::slice::from_ref(b));
            }
            assert_eq!(v.valid_at_end(), want, "{s:?} bytewise");
        }
    }
}
