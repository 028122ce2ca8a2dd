// Rule 4: evidence accumulates along the stages and exists only once
// recorded: a starting session has no process identity yet
// (twin: `pass/evidence_before_run.rs`, a stopping session keeps it).
use glove_lifecycle::{ParkedSession, Starting};

fn identity(s: &ParkedSession<Starting>) {
    let _ = s.process_identity();
}

fn main() {}
