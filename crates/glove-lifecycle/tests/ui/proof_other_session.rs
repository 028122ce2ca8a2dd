// A proof carries the brand of the session that minted it, and a session
// spends only proofs with its own brand. Sessions A and B are branded in
// two different scopes, so spending a proof of A on B does not compile
// (before this was a compile error it was only refused at run time with
// `lifecycle_proof_subject_mismatch`, which still backs it up).
use glove_lifecycle::{Created, ParkedSession, TransitionLog};

fn mix<L: TransitionLog>(a: ParkedSession<Created>, b: ParkedSession<Created>, log: &mut L) {
    a.enter(|a| {
        b.enter(|b| {
            if let Ok(proof_for_a) = a.log_prepare(log) {
                let _ = b.prepare(proof_for_a);
            }
        })
    })
}

fn main() {}
