// The set of stages is closed: `Stage` and `Recordable` are sealed by a
// supertrait that cannot be named outside the crate.
use glove_lifecycle::proof::{Recordable, SubjectKind};
use glove_lifecycle::Stage;
use glove_types::stage::SessionStage;

struct Paused;

impl Recordable for Paused {
    const KIND: SubjectKind = SubjectKind::Session;
}

impl Stage for Paused {
    const STAGE: SessionStage = SessionStage::Running;
}

fn main() {}
