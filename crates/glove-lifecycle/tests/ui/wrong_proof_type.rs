// A proof proves one record: the proof of a running record cannot move a
// created session to preparing (twin: `pass/wrong_proof_type.rs`).
use glove_lifecycle::{Created, Durable, Running, Session};

fn skip<'id>(s: Session<'id, Created>, proof: Durable<'id, Running>) {
    let _ = s.prepare(proof);
}

fn main() {}
