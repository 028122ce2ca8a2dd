//! Start authorization: a short-lived, MAC-authenticated permission to launch
//! one session.
//!
//! An authorization names the session, both plan digests, a random 128-bit
//! nonce and a validity window `[issued_at_ms, expires_at_ms)`. Its MAC is
//!
//! ```text
//! HMAC-SHA-256(service_key, START_AUTH_DOMAIN || 0x00 || canonical_json(body))
//! body = {"controller_plan_digest", "expires_at_ms", "issued_at_ms",
//!         "nonce", "plan_content_digest", "session_id"}
//! ```
//!
//! and the wire form is the canonical JSON of the body plus `"mac"` (64 hex).
//! [`StartAuthorization::verify`] checks, in this order, each with its own
//! code: the MAC (constant-time), the session, both digests, the window
//! against the policy's maximum lifetime, not-yet-valid (beyond the allowed
//! skew), expired, and replay against a [`UsedNonces`] set. Only a fully
//! successful check consumes the nonce and yields a [`VerifiedStart`], the
//! proof token `Session<Preparing>::log_start` needs.

use crate::evidence::PlanDigests;
use crate::ports::Clock;
use core::fmt;
use glove_types::canon::{self, Form};
use glove_types::codes::ids::DIGEST_INVALID;
use glove_types::codes::lifecycle as c;
use glove_types::ids::SessionId;
use glove_types::{Blake3Digest, ErrorCode, Rejection, Sha256Digest};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::collections::BTreeMap;
use subtle::ConstantTimeEq;

/// MAC domain of start authorizations.
pub const START_AUTH_DOMAIN: &str = "glove.lifecycle.start-authorization.v1";
/// Digest domain of an authorization's wire bytes (recorded on start).
pub const START_AUTH_DIGEST_DOMAIN: &str = "glove.lifecycle.start-authorization-digest.v1";
/// Largest encoded authorization accepted.
pub const MAX_START_AUTH_BYTES: usize = 1024;
/// Shortest service key accepted, in bytes.
pub const MIN_SERVICE_KEY_BYTES: usize = 32;

/// The service's secret MAC key. Never printed.
pub struct ServiceKey(Vec<u8>);

impl ServiceKey {
    /// Wraps key bytes; at least [`MIN_SERVICE_KEY_BYTES`] long.
    pub fn new(bytes: &[u8]) -> Result<Self, StartAuthError> {
        if bytes.len() < MIN_SERVICE_KEY_BYTES {
            return Err(StartAuthError::KeyInvalid { len: bytes.len() });
        }
        Ok(Self(bytes.to_vec()))
    }

    /// The MAC of `body`. HMAC accepts keys of any length, so the `None`
    /// arm is unreachable in practice; callers treat it as a failure.
    fn mac(&self, body: &[u8]) -> Option<[u8; 32]> {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.0).ok()?;
        m.update(START_AUTH_DOMAIN.as_bytes());
        m.update(&[0u8]);
        m.update(body);
        Some(m.finalize().into_bytes().into())
    }
}

impl fmt::Debug for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServiceKey(..)")
    }
}

/// A 128-bit authorization nonce, written as 32 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nonce([u8; 16]);

impl Nonce {
    /// Wraps 16 random bytes (the issuer draws them from the OS).
    pub const fn from_bytes(b: [u8; 16]) -> Self {
        Self(b)
    }

    /// The 16 bytes (what a store carries across compaction).
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Parses 32 lowercase hex characters.
    pub fn parse(s: &str) -> Result<Self, Rejection> {
        let b = s.as_bytes();
        let bad = || {
            Rejection::new(
                DIGEST_INVALID,
                "a nonce must be 32 lowercase hex characters",
            )
        };
        if b.len() != 32 {
            return Err(bad());
        }
        let nib = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut out = [0u8; 16];
        for (i, o) in out.iter_mut().enumerate() {
            let hi = nib(b[2 * i]).ok_or_else(bad)?;
            let lo = nib(b[2 * i + 1]).ok_or_else(bad)?;
            *o = (hi << 4) | lo;
        }
        Ok(Self(out))
    }

    /// Lowercase hex form.
    pub fn to_hex(&self) -> String {
        glove_types::digest::to_hex(&self.0)
    }
}

impl fmt::Debug for Nonce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Nonce({})", self.to_hex())
    }
}

/// Limits applied when verifying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartAuthPolicy {
    /// Longest allowed window `expires_at_ms - issued_at_ms`.
    pub max_lifetime_ms: u64,
    /// How far in the future `issued_at_ms` may lie (clock skew).
    pub max_skew_ms: u64,
}

impl Default for StartAuthPolicy {
    /// One minute of validity, two seconds of skew.
    fn default() -> Self {
        Self {
            max_lifetime_ms: 60_000,
            max_skew_ms: 2_000,
        }
    }
}

/// The fields an authorization commits to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartAuthFields {
    /// The session to start.
    pub session_id: SessionId,
    /// Both plan digests of that session.
    pub digests: PlanDigests,
    /// A fresh random nonce.
    pub nonce: Nonce,
    /// Start of validity (Unix ms).
    pub issued_at_ms: u64,
    /// End of validity, exclusive (Unix ms).
    pub expires_at_ms: u64,
}

/// A start authorization as issued and carried on the wire.
#[derive(Clone, PartialEq, Eq)]
pub struct StartAuthorization {
    fields: StartAuthFields,
    mac: [u8; 32],
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireBody {
    controller_plan_digest: String,
    expires_at_ms: u64,
    issued_at_ms: u64,
    nonce: String,
    plan_content_digest: String,
    session_id: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireAuth {
    controller_plan_digest: String,
    expires_at_ms: u64,
    issued_at_ms: u64,
    mac: String,
    nonce: String,
    plan_content_digest: String,
    session_id: String,
}

fn body_bytes(f: &StartAuthFields) -> Result<Vec<u8>, StartAuthError> {
    canon::encode(&WireBody {
        controller_plan_digest: f.digests.controller_plan_digest().to_hex(),
        expires_at_ms: f.expires_at_ms,
        issued_at_ms: f.issued_at_ms,
        nonce: f.nonce.to_hex(),
        plan_content_digest: f.digests.plan_content_digest().to_hex(),
        session_id: f.session_id.as_str().to_owned(),
    })
    .map_err(|detail| StartAuthError::Malformed { detail })
}

impl StartAuthorization {
    /// Issues (MACs) an authorization. Fails only if a time exceeds the
    /// canonical-JSON integer range.
    pub fn issue(key: &ServiceKey, fields: StartAuthFields) -> Result<Self, StartAuthError> {
        let mac = key
            .mac(&body_bytes(&fields)?)
            .ok_or(StartAuthError::KeyInvalid { len: key.0.len() })?;
        Ok(Self { fields, mac })
    }

    /// The committed fields (not yet verified unless this value came from
    /// [`StartAuthorization::issue`]).
    pub fn fields(&self) -> &StartAuthFields {
        &self.fields
    }

    /// The canonical wire bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, StartAuthError> {
        let f = &self.fields;
        canon::encode(&WireAuth {
            controller_plan_digest: f.digests.controller_plan_digest().to_hex(),
            expires_at_ms: f.expires_at_ms,
            issued_at_ms: f.issued_at_ms,
            mac: glove_types::digest::to_hex(&self.mac),
            nonce: f.nonce.to_hex(),
            plan_content_digest: f.digests.plan_content_digest().to_hex(),
            session_id: f.session_id.as_str().to_owned(),
        })
        .map_err(|detail| StartAuthError::Malformed { detail })
    }

    /// Strictly decodes canonical wire bytes (no MAC check yet).
    pub fn decode(bytes: &[u8]) -> Result<Self, StartAuthError> {
        let m = |detail: Rejection| StartAuthError::Malformed { detail };
        let w: WireAuth = canon::decode(bytes, MAX_START_AUTH_BYTES, Form::Canonical).map_err(m)?;
        let mac = Sha256Digest::parse(&w.mac).map_err(|r| m(r.at("mac")))?;
        Ok(Self {
            fields: StartAuthFields {
                session_id: SessionId::new(w.session_id).map_err(|r| m(r.at("session_id")))?,
                digests: PlanDigests::new(
                    Sha256Digest::parse(&w.plan_content_digest)
                        .map_err(|r| m(r.at("plan_content_digest")))?,
                    Blake3Digest::parse(&w.controller_plan_digest)
                        .map_err(|r| m(r.at("controller_plan_digest")))?,
                ),
                nonce: Nonce::parse(&w.nonce).map_err(|r| m(r.at("nonce")))?,
                issued_at_ms: w.issued_at_ms,
                expires_at_ms: w.expires_at_ms,
            },
            mac: *mac.as_bytes(),
        })
    }

    /// `SHA-256(START_AUTH_DIGEST_DOMAIN || 0x00 || wire bytes)`: what the
    /// starting record stores, and what a repeated start compares.
    pub fn digest(&self) -> Result<Sha256Digest, StartAuthError> {
        Ok(Sha256Digest::of_domain(
            START_AUTH_DIGEST_DOMAIN,
            &self.to_bytes()?,
        ))
    }

    /// Verifies the authorization for `session_id` with `digests` now, and
    /// consumes its nonce. See the module docs for the order of checks.
    pub fn verify<C: Clock + ?Sized>(
        &self,
        key: &ServiceKey,
        session_id: &SessionId,
        digests: &PlanDigests,
        policy: StartAuthPolicy,
        clock: &C,
        nonces: &mut UsedNonces,
    ) -> Result<VerifiedStart, StartAuthError> {
        let f = &self.fields;
        let Some(expected) = key.mac(&body_bytes(f)?) else {
            return Err(StartAuthError::BadMac);
        };
        if !bool::from(expected.ct_eq(&self.mac)) {
            return Err(StartAuthError::BadMac);
        }
        if f.session_id != *session_id {
            return Err(StartAuthError::SessionMismatch);
        }
        if f.digests.plan_content_digest() != digests.plan_content_digest() {
            return Err(StartAuthError::PlanContentDigestMismatch);
        }
        if f.digests.controller_plan_digest() != digests.controller_plan_digest() {
            return Err(StartAuthError::ControllerDigestMismatch);
        }
        let lifetime = f.expires_at_ms.checked_sub(f.issued_at_ms);
        if !matches!(lifetime, Some(l) if l > 0 && l <= policy.max_lifetime_ms) {
            return Err(StartAuthError::LifetimeInvalid {
                issued_at_ms: f.issued_at_ms,
                expires_at_ms: f.expires_at_ms,
                max_lifetime_ms: policy.max_lifetime_ms,
            });
        }
        let now = clock.now_ms();
        if f.issued_at_ms > now.saturating_add(policy.max_skew_ms) {
            return Err(StartAuthError::NotYetValid {
                issued_at_ms: f.issued_at_ms,
                now_ms: now,
            });
        }
        if now >= f.expires_at_ms {
            return Err(StartAuthError::Expired {
                expires_at_ms: f.expires_at_ms,
                now_ms: now,
            });
        }
        nonces.consume(f.nonce, f.expires_at_ms, now)?;
        Ok(VerifiedStart {
            session_id: f.session_id.clone(),
            digests: f.digests,
            nonce: f.nonce,
            expires_at_ms: f.expires_at_ms,
            authorization: self.digest()?,
        })
    }
}

impl fmt::Debug for StartAuthorization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StartAuthorization")
            .field("fields", &self.fields)
            .finish_non_exhaustive()
    }
}

/// Proof that a start authorization verified for one session and that its
/// nonce is now used. Spent by `Session<Preparing>::log_start`.
#[must_use = "a verified start must be spent on log_start"]
#[derive(Debug)]
pub struct VerifiedStart {
    pub(crate) session_id: SessionId,
    pub(crate) digests: PlanDigests,
    pub(crate) nonce: Nonce,
    pub(crate) expires_at_ms: u64,
    pub(crate) authorization: Sha256Digest,
}

/// The bounded set of used nonces, with each nonce's expiry.
///
/// The caller owns it: keep it for the service's lifetime and rebuild it at
/// startup from the starting records (see [`crate::recovery::RecoveryReport`]).
/// Entries whose authorization has expired are pruned when room is needed,
/// since an expired authorization is refused anyway; if the set is still full,
/// verification fails closed with `start_auth_nonce_store_full`.
/// Not `Clone`: two copies would each accept the same value once.
#[derive(Debug)]
pub struct UsedNonces {
    entries: BTreeMap<Nonce, u64>,
    capacity: usize,
}

impl UsedNonces {
    /// An empty set holding at most `capacity` unexpired nonces.
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: BTreeMap::new(),
            capacity,
        }
    }

    /// Whether `nonce` is recorded as used.
    pub fn contains(&self, nonce: &Nonce) -> bool {
        self.entries.contains_key(nonce)
    }

    /// Number of nonces held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no nonce is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every held nonce with its expiry, for persistence.
    pub fn iter(&self) -> impl Iterator<Item = (Nonce, u64)> + '_ {
        self.entries.iter().map(|(n, e)| (*n, *e))
    }

    /// Re-inserts a nonce found in durable history. Ignores the bound: a
    /// durable use must never be forgotten.
    pub fn insert_recovered(&mut self, nonce: Nonce, expires_at_ms: u64) {
        let e = self.entries.entry(nonce).or_insert(expires_at_ms);
        *e = (*e).max(expires_at_ms);
    }

    fn consume(
        &mut self,
        nonce: Nonce,
        expires_at_ms: u64,
        now_ms: u64,
    ) -> Result<(), StartAuthError> {
        if self.entries.contains_key(&nonce) {
            return Err(StartAuthError::Replayed);
        }
        if self.entries.len() >= self.capacity {
            self.entries.retain(|_, exp| *exp > now_ms);
        }
        if self.entries.len() >= self.capacity {
            return Err(StartAuthError::NonceStoreFull {
                capacity: self.capacity,
            });
        }
        self.entries.insert(nonce, expires_at_ms);
        Ok(())
    }
}

/// Why a start authorization was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartAuthError {
    /// Not well-formed (strict canonical JSON, ids, digests).
    Malformed {
        /// The decoding rejection.
        detail: Rejection,
    },
    /// The service key is too short.
    KeyInvalid {
        /// The key length given.
        len: usize,
    },
    /// The MAC does not verify.
    BadMac,
    /// Issued for another session.
    SessionMismatch,
    /// Issued for another `plan_content_digest`.
    PlanContentDigestMismatch,
    /// Issued for another `controller_plan_digest`.
    ControllerDigestMismatch,
    /// Window empty, reversed or longer than the policy allows.
    LifetimeInvalid {
        /// Start of validity.
        issued_at_ms: u64,
        /// End of validity.
        expires_at_ms: u64,
        /// The policy's bound.
        max_lifetime_ms: u64,
    },
    /// Issued in the future beyond the allowed skew.
    NotYetValid {
        /// Start of validity.
        issued_at_ms: u64,
        /// The clock's time.
        now_ms: u64,
    },
    /// Expired.
    Expired {
        /// End of validity.
        expires_at_ms: u64,
        /// The clock's time.
        now_ms: u64,
    },
    /// The nonce was already used.
    Replayed,
    /// The used-nonce set is full of unexpired nonces.
    NonceStoreFull {
        /// The set's bound.
        capacity: usize,
    },
}

impl StartAuthError {
    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            StartAuthError::Malformed { .. } => c::START_AUTH_MALFORMED,
            StartAuthError::KeyInvalid { .. } => c::START_AUTH_KEY_INVALID,
            StartAuthError::BadMac => c::START_AUTH_BAD_MAC,
            StartAuthError::SessionMismatch => c::START_AUTH_SESSION_MISMATCH,
            StartAuthError::PlanContentDigestMismatch => c::START_AUTH_PLAN_CONTENT_DIGEST_MISMATCH,
            StartAuthError::ControllerDigestMismatch => c::START_AUTH_CONTROLLER_DIGEST_MISMATCH,
            StartAuthError::LifetimeInvalid { .. } => c::START_AUTH_LIFETIME_INVALID,
            StartAuthError::NotYetValid { .. } => c::START_AUTH_NOT_YET_VALID,
            StartAuthError::Expired { .. } => c::START_AUTH_EXPIRED,
            StartAuthError::Replayed => c::START_AUTH_REPLAYED,
            StartAuthError::NonceStoreFull { .. } => c::START_AUTH_NONCE_STORE_FULL,
        }
    }
}

impl fmt::Display for StartAuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.code().meaning())?;
        match self {
            StartAuthError::Malformed { detail } => write!(f, " ({detail})"),
            StartAuthError::KeyInvalid { len } => write!(f, " (got {len} bytes)"),
            StartAuthError::LifetimeInvalid {
                issued_at_ms,
                expires_at_ms,
                max_lifetime_ms,
            } => write!(
                f,
                " (window {issued_at_ms}..{expires_at_ms}, bound {max_lifetime_ms} ms)"
            ),
            StartAuthError::NotYetValid {
                issued_at_ms,
                now_ms,
            } => {
                write!(f, " (issued {issued_at_ms}, now {now_ms})")
            }
            StartAuthError::Expired {
                expires_at_ms,
                now_ms,
            } => {
                write!(f, " (expired {expires_at_ms}, now {now_ms})")
            }
            StartAuthError::NonceStoreFull { capacity } => write!(f, " (bound {capacity})"),
            StartAuthError::BadMac
            | StartAuthError::SessionMismatch
            | StartAuthError::PlanContentDigestMismatch
            | StartAuthError::ControllerDigestMismatch
            | StartAuthError::Replayed => Ok(()),
        }
    }
}

impl std::error::Error for StartAuthError {}
