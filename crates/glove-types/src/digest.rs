//! Digests: SHA-256 and BLAKE3 values written as 64 lowercase hex characters.
//!
//! Glove's domain-separated digest definitions (adapter command, plan content,
//! plan context) live here too; `docs/digests.md` documents them with test
//! vectors that a test checks.

use crate::codes::ids::DIGEST_INVALID;
use crate::error::Rejection;
use core::fmt;
use sha2::{Digest as _, Sha256};

fn parse_hex32(s: &str) -> Result<[u8; 32], Rejection> {
    let b = s.as_bytes();
    let bad = || {
        Rejection::new(
            DIGEST_INVALID,
            "a digest must be exactly 64 lowercase hexadecimal characters",
        )
    };
    if b.len() != 64 {
        return Err(bad());
    }
    let nib = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        let hi = nib(b[2 * i]).ok_or_else(bad)?;
        let lo = nib(b[2 * i + 1]).ok_or_else(bad)?;
        *o = (hi << 4) | lo;
    }
    Ok(out)
}

/// Lowercase hex of a byte slice.
pub fn to_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    s
}

macro_rules! define_digest {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name([u8; 32]);

        impl $name {
            /// Parses 64 lowercase hex characters.
            pub fn parse(s: &str) -> Result<Self, Rejection> {
                parse_hex32(s).map(Self)
            }

            /// Wraps raw digest bytes.
            pub const fn from_bytes(b: [u8; 32]) -> Self {
                Self(b)
            }

            /// The raw digest bytes.
            pub const fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }

            /// Lowercase hex form.
            pub fn to_hex(&self) -> String {
                to_hex(&self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.to_hex())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_hex())
            }
        }
    };
}

define_digest!(
    /// A SHA-256 digest.
    Sha256Digest
);
define_digest!(
    /// A BLAKE3 (256-bit output) digest.
    Blake3Digest
);

impl Sha256Digest {
    /// SHA-256 of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// SHA-256 of `domain || 0x00 || bytes`: the domain-separated form every
    /// Glove-defined digest uses.
    pub fn of_domain(domain: &str, bytes: &[u8]) -> Self {
        let mut h = Sha256::new();
        h.update(domain.as_bytes());
        h.update([0u8]);
        h.update(bytes);
        Self(h.finalize().into())
    }
}

impl Blake3Digest {
    /// BLAKE3 of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(*blake3::hash(bytes).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_roundtrip_and_rejects() {
        let d = Sha256Digest::of(b"abc");
        assert_eq!(
            d.to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Sha256Digest::parse(&d.to_hex()).unwrap(), d);
        for bad in [
            "",
            "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD",
            &"g".repeat(64),
            &"a".repeat(63),
            &"a".repeat(65),
        ] {
            assert_eq!(Sha256Digest::parse(bad).unwrap_err().code(), DIGEST_INVALID);
        }
    }
}
