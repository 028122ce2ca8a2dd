//! The launch binding: one digest over the launch spec and the prepared facts.

use glove_lifecycle::LaunchBinding;
use glove_sandbox::wire::SpecWire;
use glove_types::codes::control::*;
use glove_types::{canon, Rejection};
use serde_json::json;

/// The domain of the launch binding digest (via
/// `LaunchBinding::of_launch_spec`, whose own domain is
/// `glove.lifecycle.launch-binding.v1`): the committed document is the
/// canonical JSON `{"binding":"glove.control.launch.v1","prepared":…,"spec":…}`.
pub const LAUNCH_DOCUMENT_TAG: &str = "glove.control.launch.v1";
/// The launch binding: the lifecycle's launch-binding digest of the
/// canonical launch document (spec and prepared facts).
pub fn launch_binding(
    spec: &SpecWire,
    facts: &glove_sandbox::launch::PreparedFacts,
) -> Result<LaunchBinding, Rejection> {
    let doc = json!({
        "binding": LAUNCH_DOCUMENT_TAG,
        "spec": serde_json::to_value(spec).map_err(|e| Rejection::new(SESSION_LAUNCH_FAILED, e.to_string()))?,
        "prepared": serde_json::to_value(facts).map_err(|e| Rejection::new(SESSION_LAUNCH_FAILED, e.to_string()))?,
    });
    let bytes = canon::to_canonical(&doc)?;
    LaunchBinding::of_launch_spec(&bytes).map_err(|e| Rejection::new(e.code(), e.code().meaning()))
}
