//! Start-authorization keys and issuing authorizations (the CLI and tests).

use glove_lifecycle::{ServiceKey, StartAuthorization};
use glove_types::codes::control::*;
use glove_types::ids::SessionId;
use glove_types::{Rejection, Sha256Digest};
use std::path::Path;

/// Reads a start-authorization key file (protected, 64 lowercase hex).
pub fn read_key(path: &Path) -> Result<ServiceKey, Rejection> {
    let bytes = crate::protected::read(
        path,
        crate::protected::Requirements {
            max_bytes: 128,
            mode: 0o600,
        },
    )?;
    let text = core::str::from_utf8(bytes.strip_suffix(b"\n").unwrap_or(&bytes)).unwrap_or("");
    let raw = Sha256Digest::parse(text).map_err(|_| {
        Rejection::new(
            CONTROL_CONFIG_INVALID,
            format!(
                "the start-authorization key {} must hold 64 lowercase hex characters",
                path.display()
            ),
        )
    })?;
    ServiceKey::new(raw.as_bytes()).map_err(|e| Rejection::new(e.code(), e.to_string()))
}

/// Issues a start authorization for `id` with its two digests (hex), valid
/// from `now_ms` for `ttl_ms`; returns its wire form.
pub fn issue_authorization(
    key: &ServiceKey,
    id: &str,
    plan_content_digest: &str,
    controller_plan_digest: &str,
    now_ms: u64,
    ttl_ms: u64,
) -> Result<String, Rejection> {
    let fields = glove_lifecycle::StartAuthFields {
        session_id: SessionId::new(id)?,
        digests: glove_lifecycle::PlanDigests::new(
            Sha256Digest::parse(plan_content_digest)?,
            glove_types::Blake3Digest::parse(controller_plan_digest)?,
        ),
        nonce: glove_lifecycle::Nonce::from_bytes(crate::random_bytes::<16>()?),
        issued_at_ms: now_ms,
        expires_at_ms: now_ms.saturating_add(ttl_ms),
    };
    let a = StartAuthorization::issue(key, fields)
        .and_then(|a| a.to_bytes())
        .map_err(|e| Rejection::new(e.code(), e.to_string()))?;
    String::from_utf8(a).map_err(|_| Rejection::new(CONTROL_INTERNAL, "authorization encoding"))
}
