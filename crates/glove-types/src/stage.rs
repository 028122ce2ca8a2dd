//! Stage names and the legal-transition tables, as plain data.
//!
//! The typestates in `glove-lifecycle` are the compile-time form of these
//! graphs; the session store in `glove-journal` uses the same tables to reject
//! an impossible transition sequence found on disk. Keeping the graph here
//! (a crate both depend on) means the two can never disagree.

use serde::{Deserialize, Serialize};

/// A session stage as stored and reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStage {
    /// Created from an admitted plan; nothing prepared.
    Created,
    /// Materializations and bindings are being prepared.
    Preparing,
    /// The sandbox is being launched; a launch binding is recorded.
    Starting,
    /// The agent runs; its process identity is recorded.
    Running,
    /// A stop was requested or the agent ended; finalization is under way.
    Stopping,
    /// Terminal: ended with a durable terminal receipt.
    Exited,
    /// Terminal: failed with a code, with a durable terminal receipt.
    Failed,
}

impl SessionStage {
    /// Every stage, in lifecycle order.
    pub const ALL: [SessionStage; 7] = [
        SessionStage::Created,
        SessionStage::Preparing,
        SessionStage::Starting,
        SessionStage::Running,
        SessionStage::Stopping,
        SessionStage::Exited,
        SessionStage::Failed,
    ];

    /// Whether no transition leaves this stage.
    pub const fn is_terminal(self) -> bool {
        matches!(self, SessionStage::Exited | SessionStage::Failed)
    }

    /// Whether `self → to` is a legal transition.
    pub const fn can_transition(self, to: SessionStage) -> bool {
        use SessionStage::*;
        matches!(
            (self, to),
            (Created, Preparing)
                | (Preparing, Starting)
                | (Starting, Running)
                | (Running, Stopping)
                | (Stopping, Exited)
                | (Created | Preparing | Starting | Running | Stopping, Failed)
        )
    }

    /// The snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            SessionStage::Created => "created",
            SessionStage::Preparing => "preparing",
            SessionStage::Starting => "starting",
            SessionStage::Running => "running",
            SessionStage::Stopping => "stopping",
            SessionStage::Exited => "exited",
            SessionStage::Failed => "failed",
        }
    }
}

/// An apply-transaction state as stored and reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyState {
    /// Grant, authorization and manifest reserved (single-use ids consumed).
    Reserved,
    /// The candidate tree is staged and synced beside the source.
    Prepared,
    /// The atomic exchange happened.
    Committed,
    /// Terminal: applied, with a durable receipt; baseline cleanup may follow.
    Applied,
    /// Terminal: failed before commit, with a durable receipt.
    Failed,
    /// Evidence cannot prove reserved, prepared or committed: never retried
    /// or terminalized automatically.
    Ambiguous,
}

impl ApplyState {
    /// The wire name (as serialized).
    pub const fn as_str(self) -> &'static str {
        match self {
            ApplyState::Reserved => "reserved",
            ApplyState::Prepared => "prepared",
            ApplyState::Committed => "committed",
            ApplyState::Applied => "applied",
            ApplyState::Failed => "failed",
            ApplyState::Ambiguous => "ambiguous",
        }
    }

    /// Every state.
    pub const ALL: [ApplyState; 6] = [
        ApplyState::Reserved,
        ApplyState::Prepared,
        ApplyState::Committed,
        ApplyState::Applied,
        ApplyState::Failed,
        ApplyState::Ambiguous,
    ];

    /// Whether `self → to` is a legal transition. `Ambiguous` is entered only
    /// by recovery classification and never left automatically.
    pub const fn can_transition(self, to: ApplyState) -> bool {
        use ApplyState::*;
        matches!(
            (self, to),
            (Reserved, Prepared)
                | (Prepared, Committed)
                | (Committed, Applied)
                | (Reserved | Prepared, Failed)
                | (Reserved | Prepared | Committed, Ambiguous)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_state_names_are_the_wire_names() {
        for st in ApplyState::ALL {
            assert_eq!(
                serde_json::to_value(st).expect("json"),
                serde_json::json!(st.as_str())
            );
        }
    }

    #[test]
    fn terminal_stages_have_no_exit() {
        for from in SessionStage::ALL {
            for to in SessionStage::ALL {
                if from.is_terminal() {
                    assert!(!from.can_transition(to));
                }
            }
        }
        assert!(SessionStage::Running.can_transition(SessionStage::Failed));
        assert!(!SessionStage::Created.can_transition(SessionStage::Running));
        for to in ApplyState::ALL {
            assert!(!ApplyState::Ambiguous.can_transition(to));
            assert!(!ApplyState::Applied.can_transition(to));
        }
    }
}
