// Twin of `verified_start_forged.rs`: verification makes the token.
use glove_lifecycle::{
    Clock, PlanDigests, ServiceKey, StartAuthError, StartAuthPolicy, StartAuthorization,
    UsedNonces, VerifiedStart,
};
use glove_types::ids::SessionId;

fn verified<C: Clock>(
    auth: &StartAuthorization,
    key: &ServiceKey,
    id: &SessionId,
    digests: &PlanDigests,
    clock: &C,
    nonces: &mut UsedNonces,
) -> Result<VerifiedStart, StartAuthError> {
    auth.verify(key, id, digests, StartAuthPolicy::default(), clock, nonces)
}

fn main() {
    let _ = verified::<glove_lifecycle::memory::ManualClock>;
}
