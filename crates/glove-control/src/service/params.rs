//! The control methods' parameters, strictly decoded, and the checks on
//! their values (session ids, the supplied plan digest).

use super::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NoParams {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StartParams {
    pub(super) session_id: String,
    pub(super) authorization: String,
    #[serde(default)]
    pub(super) rows: Option<u16>,
    #[serde(default)]
    pub(super) cols: Option<u16>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StdinParams {
    pub(super) session_id: String,
    #[serde(default)]
    pub(super) data: Option<String>,
    #[serde(default)]
    pub(super) data_hex: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ResizeParams {
    pub(super) session_id: String,
    pub(super) rows: u16,
    pub(super) cols: u16,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SignalParams {
    pub(super) session_id: String,
    pub(super) signal: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StopParams {
    pub(super) session_id: String,
    #[serde(default)]
    pub(super) grace_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AttachParams {
    pub(super) session_id: String,
    #[serde(default)]
    pub(super) after_seq: Option<u64>,
}

pub(super) fn session_id(s: String) -> Result<SessionId, ControlError> {
    SessionId::new(s).map_err(|r| invalid_params(&r.at("session_id")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PlanParams {
    pub(super) plan: String,
    #[serde(default)]
    pub(super) controller_plan_digest: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StatusParams {
    pub(super) session_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListParams {
    pub(super) after_seq: Option<u64>,
    pub(super) max_sessions: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PageParams {
    pub(super) after_seq: u64,
    #[serde(default)]
    pub(super) max_records: Option<u64>,
    #[serde(default)]
    pub(super) max_bytes: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AckParams {
    pub(super) head: String,
}

pub(super) fn params<T: DeserializeOwned>(p: &Map<String, Value>) -> Result<T, ControlError> {
    canon::from_value(Value::Object(p.clone())).map_err(|r| invalid_params(&r))
}

pub(super) fn supplied_digest(p: &PlanParams) -> Result<Option<Blake3Digest>, ControlError> {
    p.controller_plan_digest
        .as_deref()
        .map(Blake3Digest::parse)
        .transpose()
        .map_err(|r| invalid_params(&r.at("controller_plan_digest")))
}
