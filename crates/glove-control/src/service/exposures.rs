//! The exposure methods: `exposure_create` and `exposure_revoke` answer
//! only a caller on the owner socket ([`Caller::is_owner`]); a
//! controller, local or remote, is refused with `control_owner_only`, so
//! enrollment never takes a host path from one. `exposure_catalog` answers
//! every authenticated caller with the redacted entries only.

use super::*;
use crate::exposures::{CreateParams, Exposures, RevokeParams};
use glove_types::codes::control::CONTROL_OWNER_ONLY;
use glove_types::codes::exposure::EXPOSURE_UNAVAILABLE;

impl Service {
    /// Enables the exposure methods (and the plans' `path_exposures`) with
    /// the loaded exposures. Call before [`Service::with_runtime`], which
    /// hands them to the runtime.
    pub fn with_exposures(mut self, x: Exposures) -> Service {
        self.exposures = Some(Arc::new(x));
        self.components.path_exposures = true;
        self.caps = Capabilities::derive(&self.components);
        self
    }

    fn exposures(&self) -> Result<&Arc<Exposures>, ControlError> {
        self.exposures.as_ref().ok_or_else(internal)
    }

    pub(super) fn exposure_create(
        &self,
        auth: &Caller,
        p: CreateParams,
    ) -> Result<Value, ControlError> {
        stages::owner_only(auth, CONTROL_OWNER_ONLY)?;
        Ok(self.exposures()?.create(&p, self.clock.now_ms())?)
    }

    pub(super) fn exposure_revoke(
        &self,
        auth: &Caller,
        p: RevokeParams,
    ) -> Result<Value, ControlError> {
        stages::owner_only(auth, CONTROL_OWNER_ONLY)?;
        Ok(self.exposures()?.revoke(&p, self.clock.now_ms())?)
    }

    pub(super) fn exposure_catalog(&self) -> Result<Value, ControlError> {
        Ok(self.exposures()?.catalog(self.clock.now_ms())?)
    }

    /// A plan's exposures must be usable now (`exposure_unavailable` when
    /// this service has none).
    pub(super) fn check_exposures(&self, plan: &DecodedPlan) -> Result<(), ControlError> {
        if plan.path_exposures().is_empty() {
            return Ok(());
        }
        let Some(x) = &self.exposures else {
            return Err(reject(
                &Rejection::new(
                    EXPOSURE_UNAVAILABLE,
                    "the plan names path exposures; this service has none",
                )
                .at("path_exposures"),
            ));
        };
        x.check_plan(
            plan.path_exposures(),
            plan.runtime_template_id(),
            self.clock.now_ms(),
        )
        .map(drop)
        .map_err(|r| reject(&r))
    }
}
