//! Validated identifiers.
//!
//! Every identifier a controller or operator can name (runtime templates,
//! runtimes, aliases, profiles, projections, policy ids, secret handles,
//! sessions, idempotency keys) shares one charset and one length bound:
//!
//! * 1 to [`MAX_ID_LEN`] bytes;
//! * ASCII lowercase letters, digits, `.`, `_` and `-`;
//! * the first character is a letter or a digit.
//!
//! The charset keeps identifiers safe to print, to use as file names and to
//! sort (byte order equals UTF-16 order for ASCII).

use crate::codes::ids::ID_INVALID;
use crate::error::Rejection;
use core::fmt;

/// Longest identifier, in bytes.
pub const MAX_ID_LEN: usize = 64;

/// Checks the shared identifier rules.
pub fn check_id(s: &str) -> Result<(), Rejection> {
    let bytes = s.as_bytes();
    let first_ok = bytes
        .first()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest_ok = bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'));
    if first_ok && rest_ok && bytes.len() <= MAX_ID_LEN {
        Ok(())
    } else {
        Err(Rejection::new(
            ID_INVALID,
            format!(
                "identifier must be 1-{MAX_ID_LEN} bytes of [a-z0-9._-] starting with a letter or digit (got {} bytes)",
                bytes.len()
            ),
        ))
    }
}

macro_rules! define_id {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps an identifier.
            pub fn new(s: impl Into<String>) -> Result<Self, Rejection> {
                let s = s.into();
                check_id(&s)?;
                Ok(Self(s))
            }

            /// The identifier as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }
    };
}

define_id!(
    /// A runtime template id (`runtime_template_id`).
    RuntimeTemplateId
);
define_id!(
    /// A runtime id (`runtime_id`), e.g. `codex` or `cloudflare-os`.
    RuntimeId
);
define_id!(
    /// A path alias (`alias`) or library projection destination alias.
    AliasId
);
define_id!(
    /// A resource profile id (`profile_id`).
    ProfileId
);
define_id!(
    /// A library projection id (`projection_id`).
    ProjectionId
);
define_id!(
    /// An egress, tool or other named policy id.
    PolicyId
);
define_id!(
    /// An opaque secret handle.
    SecretHandle
);
define_id!(
    /// A session id chosen by the controller.
    SessionId
);
define_id!(
    /// An idempotency key chosen by the controller.
    IdempotencyKey
);
define_id!(
    /// An id an evaluation fixture carries: its evaluation run, matched
    /// pair and fixture ids (`refinement-eval-v1`).
    EvaluationId
);
define_id!(
    /// What an apply authorization applies: a path alias or an exposure id
    /// (an identifier, never a path).
    ApplyTargetId
);
define_id!(
    /// An apply grant id, globally single-use.
    ApplyGrantId
);
define_id!(
    /// The id of a key in the apply trust policy.
    TrustKeyId
);
define_id!(
    /// A path exposure's id: stable across the generations of one project.
    ExposureId
);
define_id!(
    /// The id of an owner-approved exposure root (local only: never in a
    /// catalog or a plan).
    ExposureRootId
);
define_id!(
    /// A path exposure's label: what the catalog shows and where the
    /// project appears in a sandbox (`/work/<label>`).
    ExposureLabel
);
define_id!(
    /// An apply transaction id (the lifecycle's `TransactionId`, as the
    /// apply receipt body names it).
    ApplyTransactionId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_and_rejects() {
        for ok in ["a", "codex-safe", "0", "a.b_c-d", &"x".repeat(64)] {
            assert!(check_id(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            ".a",
            "_a",
            "A",
            "a b",
            "a/b",
            "é",
            &"x".repeat(65),
        ] {
            let e = check_id(bad).unwrap_err();
            assert_eq!(e.code(), ID_INVALID, "{bad}");
        }
    }
}
