//! A managed session's egress input: the plan's egress policy (at most
//! one with endpoints) with only the brokered credentials the plan names.
//! The proxy itself is the assembly's egress part
//! ([`crate::assembly::egress`]).

use glove_types::codes::control::{SESSION_CREDENTIAL_UNSUPPORTED, SESSION_EGRESS_CONFLICT};
use glove_types::egress::settings::EgressSettings;
use glove_types::ids::SecretHandle;
use glove_types::plan::AdmittedPlan;
use glove_types::policy::ValidatedPolicy;
use glove_types::Rejection;

/// The handles the plan's egress policy brokers that the plan names (each
/// one the proxy's; none of them is a lease).
pub(super) fn brokered_handles(
    policy: &ValidatedPolicy,
    admitted: &AdmittedPlan,
) -> Vec<SecretHandle> {
    match settings_for(policy, admitted) {
        Ok(Some(s)) => s
            .brokered()
            .iter()
            .map(|b| b.secret_handle.clone())
            .filter(|h| admitted.secret_handles().contains(h))
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether any egress policy of the policy brokers `handle` (such a key
/// is only ever the proxy's, never a lease).
pub(super) fn brokered_by_any(policy: &ValidatedPolicy, handle: &SecretHandle) -> bool {
    policy.egress_policies().iter().any(|e| {
        e.settings()
            .is_some_and(|s| s.brokered().iter().any(|b| &b.secret_handle == handle))
    })
}

/// What the session's proxy enforces: the plan's egress policy, with only
/// the brokered credentials the plan names in `secret_handles` (so an
/// approver sees every credential a session can use; the others are not
/// even given a placeholder). A credential source bound to a runtime
/// (`runtime_id`) is brokered only for that runtime.
pub(super) fn session_settings(
    policy: &ValidatedPolicy,
    admitted: &AdmittedPlan,
    runtime: &str,
) -> Result<Option<EgressSettings>, Rejection> {
    let Some(s) = settings_for(policy, admitted)? else {
        return Ok(None);
    };
    let s = s.keep_brokered(admitted.secret_handles());
    for b in s.brokered() {
        let bound = policy
            .credential_sources()
            .iter()
            .find(|c| c.handle() == &b.secret_handle)
            .and_then(|c| c.runtime_id());
        if let Some(r) = bound {
            if r.as_str() != runtime {
                return Err(Rejection::new(
                    SESSION_CREDENTIAL_UNSUPPORTED,
                    format!(
                        "the credential source of {} is bound to runtime {}",
                        b.secret_handle.as_str(),
                        r.as_str()
                    ),
                )
                .at("secret_handles"));
            }
        }
    }
    Ok(Some(s))
}

/// The egress policy a plan's session gets: `None` (offline) when it names
/// none with endpoints; more than one is refused.
fn settings_for<'a>(
    policy: &'a ValidatedPolicy,
    admitted: &AdmittedPlan,
) -> Result<Option<&'a EgressSettings>, Rejection> {
    let mut found: Option<&EgressSettings> = None;
    for id in admitted.egress_policy_ids() {
        let Some(s) = policy
            .egress_policies()
            .iter()
            .find(|e| e.id() == id)
            .and_then(|e| e.settings())
        else {
            continue;
        };
        if found.is_some() {
            return Err(Rejection::new(
                SESSION_EGRESS_CONFLICT,
                "the plan names more than one egress policy with endpoints",
            ));
        }
        found = Some(s);
    }
    Ok(found)
}
