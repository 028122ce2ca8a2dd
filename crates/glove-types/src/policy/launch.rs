//! The adapter command digest: one definition, shared with the controller.
//!
//! ```text
//! adapter_command_digest = SHA-256( "glove.adapter-command.v1" || 0x00 || C )
//! ```
//!
//! where `C` is the canonical JSON (see [`crate::canon`]) of an object with
//! exactly these members:
//!
//! * `runtime_id` — the template's runtime id;
//! * either `executable_path` (pinned mode) or both `runtime_discovery` and
//!   `executable_search_paths` (discovery mode, search order kept);
//! * `arguments` (order kept), `environment` (sorted), `read_only_paths`
//!   (sorted).
//!
//! The template id, backend and allowed aliases are not part of the digest:
//! it commits to *what runs*, not to what it may touch. Vectors are in
//! `docs/digests.md`.

use super::model::{Launch, LaunchTarget};
use crate::digest::Sha256Digest;
use crate::{canon, Rejection};
use serde_json::{json, Value};

/// Domain string of the adapter command digest.
pub const ADAPTER_COMMAND_DOMAIN: &str = "glove.adapter-command.v1";

/// Computes the adapter command digest of a runtime id and launch fields.
pub fn adapter_command_digest(
    runtime_id: &str,
    launch: &Launch,
) -> Result<Sha256Digest, Rejection> {
    let mut obj = json!({
        "runtime_id": runtime_id,
        "arguments": launch.arguments,
        "environment": launch.environment,
        "read_only_paths": launch.read_only_paths,
    });
    if let Value::Object(m) = &mut obj {
        match &launch.target {
            LaunchTarget::Pinned { executable_path } => {
                m.insert("executable_path".into(), json!(executable_path));
            }
            LaunchTarget::Discovery {
                runtime,
                executable_search_paths,
            } => {
                m.insert("runtime_discovery".into(), json!(runtime.runtime_id()));
                m.insert(
                    "executable_search_paths".into(),
                    json!(executable_search_paths),
                );
            }
        }
    }
    let bytes = canon::to_canonical(&obj)?;
    Ok(Sha256Digest::of_domain(ADAPTER_COMMAND_DOMAIN, &bytes))
}
